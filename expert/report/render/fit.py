"""Tables and cells of the terminal views that lose nothing on a narrow terminal.

rich shrinks a table that does not fit by narrowing its wrapping columns, widest first, and as a last resort every
column alike: a `no_wrap` column of numbers is then cut to "0.…", and a wrapping column's `min_width` is given back
after the shrinking, which widens the table past the terminal's edge, where the console cuts it. `FitTable` shrinks
the wrapping columns only, widest first, never below their `min_width` (or one character where they have none), and
leaves a `no_wrap` column whole. `Bar` is a share bar that takes the room left (up to its full width), and
`ShortName` a name that, where it must be cut, keeps the part that tells it from the other names of its table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.table import Table

ELLIPSIS = "…"
BAR_WIDTH = 30
_BAR_MIN = 4


class FitTable(Table):
    """A rich Table whose `no_wrap` columns stay whole and whose wrapping columns keep their `min_width` when the
    terminal is too narrow for the table (see the module doc). A table that fits renders exactly as rich lays it
    out; one whose whole columns and minimums do not fit either falls back to rich's own layout."""

    def _calculate_column_widths(self, console: Console, options: ConsoleOptions) -> list[int]:
        widths = super()._calculate_column_widths(console, options)
        try:
            return self._fitted(console, options, widths)
        except (AttributeError, TypeError):  # rich's private helpers changed: its own layout, which cuts, not a crash
            return widths

    def _fitted(self, console: Console, options: ConsoleOptions, widths: list[int]) -> list[int]:
        """The widths of the module doc, from rich's private measurements (`_measure_column`, `_get_padding_width`:
        rich 13 and 14)."""
        available = options.max_width
        measured = [self._measure_column(console, options, column) for column in self.columns]
        natural = [m.maximum for m in measured]
        if self.expand or sum(natural) <= available:
            return widths
        whole, hard = [], []  # the width that keeps a column's longest word whole; the least it may have
        for column, m in zip(self.columns, measured, strict=True):
            if column.no_wrap or column.width is not None:
                whole.append(m.maximum)
                hard.append(m.maximum)
            else:
                least = min(m.maximum, self._get_padding_width(column._index) + (column.min_width or 1))
                whole.append(max(least, m.minimum))
                hard.append(least)
        floors = _floors(whole, hard, available)
        if sum(widths) <= available and all(w >= f for w, f in zip(widths, floors, strict=True)):
            return widths  # rich's own layout loses nothing
        fitted = fit_widths(natural, floors, available)
        return widths if fitted is None else fitted


def _floors(whole: Sequence[int], hard: Sequence[int], available: int) -> list[int]:
    """The floors to shrink to: each column's `whole` width where they all fit, else the longest words cut first (the
    widest `whole` floors brought down to a common cap, never below `hard`), as few as the width needs."""
    for cap in range(max(whole, default=0), -1, -1):
        floors = [max(h, min(w, cap)) for w, h in zip(whole, hard, strict=True)]
        if sum(floors) <= available:
            break
    else:
        return list(hard)
    room = available - sum(floors)  # what is left keeps whole the columns that need the least of it
    for i in sorted(range(len(floors)), key=lambda i: whole[i] - floors[i]):
        if 0 < whole[i] - floors[i] <= room:
            room -= whole[i] - floors[i]
            floors[i] = whole[i]
    return floors


def fit_widths(natural: Sequence[int], floors: Sequence[int], available: int) -> list[int] | None:
    """Column widths that add up to at most `available`: each column's natural width, the widest narrowed first (one
    character at a time, so that columns of equal width shrink alike), none below its floor. None when the floors
    alone do not fit."""
    if sum(floors) > available:
        return None
    widths = list(natural)
    excess = sum(widths) - available
    while excess > 0:
        index = max((i for i, w in enumerate(widths) if w > floors[i]), key=lambda i: widths[i])
        widths[index] -= 1
        excess -= 1
    return widths


def longest(values: Iterable[str], *headers: str) -> int:
    """The `min_width` of a column whose values are never cut: its longest value, and the longest word of its
    header (the header wraps between words, a value never)."""
    words = [word for header in headers for word in header.split()]
    return max((len(v) for v in [*values, *words]), default=1)


class Bar:
    """A share bar: `share` of it filled, `BAR_WIDTH` characters wide where the table has the room, narrower (down to
    `_BAR_MIN`) where it has not."""

    def __init__(self, share: float, style: str, width: int = BAR_WIDTH) -> None:
        self.share = min(max(share, 0.0), 1.0)
        self.style = style
        self.width = width

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(min(_BAR_MIN, self.width), self.width).with_maximum(options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(1, min(self.width, options.max_width))
        filled = round(self.share * width)
        yield Segment("█" * filled, console.get_style(self.style))
        yield Segment("░" * (width - filled), Style(dim=True))
        yield Segment.line()


def differ_at(names: Sequence[str]) -> list[int]:
    """For each name, the index of its first character that tells it from the most alike other name of the list (its
    length where another name starts with it, 0 where it is alone)."""
    out = []
    for i, name in enumerate(names):
        common = 0
        for j, other in enumerate(names):
            if i != j and other != name:
                common = max(common, _common_prefix(name, other))
        out.append(min(common, len(name)))
    return out


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


_BOUNDARIES = " <>,:"


def cut_name(name: str, width: int, differ: int = 0) -> str:
    """`name` in at most `width` characters, keeping its character at index `differ` (the first that tells it from
    the other names shown with it): the whole name where it fits; its start where that reaches `differ`; else its
    start, "…", and the part from the word that holds `differ` on ("void at::native::vectorized_…AddFunctor<float>,
    at::…")."""
    if len(name) <= width:
        return name
    if width <= 1:
        return name[:width]
    if differ <= width - 2:  # the start shows the difference
        return name[:width - 1] + ELLIPSIS
    head = max(1, (width - 2) // 2)
    if differ >= len(name):  # another name starts with this one: where it ends tells them apart
        head = max(1, (width - 1) // 3)
        return name[:head] + ELLIPSIS + name[len(name) - (width - 1 - head):]
    start = differ
    while start > head and differ - start < 16 and name[start - 1] not in _BOUNDARIES:
        start -= 1  # back to the start of the word that differs
    rest = name[start:]
    room = width - head - 1
    if len(rest) <= room:  # the part that differs reaches the end: the start takes what is left
        return name[:width - 1 - len(rest)] + ELLIPSIS + rest
    room -= 1  # the part is cut too: "…" after it
    if differ - start >= room:  # keep the differing character inside the part
        start = differ - room // 2
    return name[:head] + ELLIPSIS + name[start:start + room] + ELLIPSIS


class ShortName:
    """A name cell (a kernel's, an operator's) that takes the width its column has and, cut, stays distinct from the
    other names of its table (`cut_name`)."""

    def __init__(self, name: str, differ: int, min_width: int = 20, style: str = "") -> None:
        self.name = name
        self.differ = differ
        self.min_width = min_width
        self.style = style

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(min(self.min_width, len(self.name)), max(1, len(self.name))).with_maximum(
            options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        text = cut_name(self.name, options.max_width, self.differ)
        yield Segment(text, console.get_style(self.style) if self.style else None)
        yield Segment.line()


def short_names(names: Sequence[str], min_width: int = 20) -> list[ShortName]:
    """The cells of a name column: each name with the index that tells it from the others."""
    return [ShortName(name, differ, min_width) for name, differ in zip(names, differ_at(names), strict=True)]


class ByWidth:
    """`wide` where the width there is reaches `columns`, else `narrow` (a table laid out again for a narrow
    terminal, its text columns stacked in one)."""

    def __init__(self, columns: int, wide: RenderableType, narrow: RenderableType) -> None:
        self.columns = columns
        self.wide = wide
        self.narrow = narrow

    def pick(self, width: int) -> RenderableType:
        return self.wide if width >= self.columns else self.narrow

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.pick(options.max_width))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.pick(options.max_width)
