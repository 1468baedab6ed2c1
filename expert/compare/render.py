"""A Comparison for people: a rich terminal view and Markdown for a pull-request comment. Renders only: every
decision is already in the Comparison."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..kb.knowledge import KnowledgeBase
from ..observations.normalise import format_value
from ..report.render.console import NARROW_COLUMNS, SafeConsole
from .model import BreakdownDelta, Comparison, FactChange, Gate, NamedDelta, Prediction, Side

_TOP = 10


def _value(kb: KnowledgeBase | None, name: str, value: object) -> str:
    if value is None:
        return "—"
    return format_value(kb.facts.get(name) if kb is not None else None, value)


def _change(fc: FactChange) -> str:
    if fc.change is not None:
        return f"{fc.change:+.1%}"
    if fc.before is not None and fc.after is not None and fc.before != fc.after:
        return "changed" if fc.delta is None else f"{fc.delta:+.4g}"
    return ""


def _verdict(side: Side) -> str:
    if side.bottleneck is None:
        return "no verdict (insufficient evidence)"
    axes = ", ".join(f"{a.axis} {a.share:.0%}" for a in side.axes)
    return f"{side.bottleneck} ({side.verdict_title})" + (f"; axes {axes}" if axes else "")


def _seconds(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value * 1e3:.4g} ms" if value < 1 else f"{value:.4g} s"


def headline(c: Comparison) -> str:
    """One line: the step time before and after, and the speed-up."""
    step = c.fact("step_time_s")
    if c.speedup is None or step is None:
        return "step time: not known on both sides"
    word = "faster" if c.speedup > 1 else "slower" if c.speedup < 1 else "the same"
    factor = c.speedup if c.speedup >= 1 else 1 / c.speedup
    noise = "beyond its noise" if step.significant else "within its noise"
    text = (f"step time {_seconds(c.before.step_time_s)} → {_seconds(c.after.step_time_s)}: {factor:.2f}× {word} "
            f"({noise})")
    if c.before.mfu is not None and c.after.mfu is not None:
        text += f"; MFU {c.before.mfu:.1%} → {c.after.mfu:.1%}"
    return text


def _moved(c: Comparison) -> list[FactChange]:
    return [f for f in c.facts if f.significant]


def _split(c: Comparison) -> tuple[list[FactChange], list[FactChange]]:
    """(observed facts that moved, derived ones that moved)."""
    moved = _moved(c)
    return [f for f in moved if not f.derived], [f for f in moved if f.derived]


def _brief(fc: FactChange) -> str:
    return f"{fc.name} {_change(fc)}".strip()


def _bound(value: float | None) -> str:
    return "?" if value is None else f"≤ {value:.2f}×"


def _measured(p: Prediction) -> tuple[str, str | None]:
    """(the measured speed-up, what it says against the bound): beyond the bound is said as such, never as a share
    of the predicted gain above 100 % (the JSON's `within_bound` and `text` say the same)."""
    value = p.measured_speedup
    if value is None:
        return "?", None
    if value < 1:
        return f"{value:.2f}×", "slower"
    if p.within_bound is False:
        return f"{value:.2f}×", "beyond the bound"
    if p.realised is not None:
        return f"{value:.2f}×", f"{p.realised:.0%} of it"
    return f"{value:.2f}×", None


def _measured_text(p: Prediction) -> str:
    value, says = _measured(p)
    return value if says is None else f"{value} ({says})"


def gate_outcomes(gate: Gate) -> list[tuple[str | None, str, bool]]:
    """Every --fail-if condition with its outcome: (condition, why, failed). `gate.failed` holds the reasons of the
    conditions that failed, in the order of `gate.conditions`, each starting with the condition's text; a reason
    that names none of them (a hand-written Comparison) comes last, with condition None."""
    pending = list(gate.failed)
    out: list[tuple[str | None, str, bool]] = []
    for condition in gate.conditions:
        reason = pending[0] if pending else None
        if reason is not None and reason.startswith(f"{condition}: "):
            out.append((condition, reason[len(condition) + 2:], True))
            pending.pop(0)
        elif reason is not None and reason == condition:
            out.append((condition, "", True))
            pending.pop(0)
        else:
            out.append((condition, "does not hold", False))
    out.extend((None, reason, True) for reason in pending)
    return out


def _gate_summary(gate: Gate) -> tuple[str, str]:
    """("passed" or "failed", how many conditions failed of how many)."""
    outcomes = gate_outcomes(gate)
    total = len(outcomes)
    word = "condition" if total == 1 else "conditions"
    if gate.passed:
        return "passed", f"{total} {word}"
    return "failed", f"{sum(failed for _, _, failed in outcomes)} of {total} {word}"


# ---- terminal ---------------------------------------------------------------------------------------------------


def renderable(c: Comparison, kb: KnowledgeBase | None = None, width: int | None = None) -> RenderableType:
    """The whole comparison as one rich renderable; for a terminal `width` columns wide (None: wide), where below
    110 columns how each fact was judged goes under its name. Numbers are never cut: the numeric columns keep their
    width and the text columns (names, evidence) wrap."""
    narrow = width is not None and width < NARROW_COLUMNS
    parts: list[RenderableType] = []
    body = Text()
    body.append("before ", style="bold")
    body.append(f"{c.before.source} ({c.before.kind}): {_verdict(c.before)}\n")
    body.append("after  ", style="bold")
    body.append(f"{c.after.source} ({c.after.kind}): {_verdict(c.after)}\n")
    style = "green" if (c.speedup or 1) > 1 else "red" if (c.speedup or 1) < 1 else ""
    body.append(headline(c), style=f"bold {style}".strip())
    if c.verdict_changed:
        body.append(f"\nverdict changed: {c.before.bottleneck or 'none'} → {c.after.bottleneck or 'none'}",
                    style="yellow")
    parts.append(Panel(body, title="dam compare: before → after", box=box.ROUNDED, border_style="cyan"))
    if c.gate.conditions or c.gate.failed:
        parts.append(_gate_panel(c.gate))
    observed, derived = _split(c)
    if observed:
        parts.append(_facts_table(observed, derived, kb, width))
    elif derived:
        parts.append(Text("derived quantities that moved: " + ", ".join(_brief(f) for f in derived)))
    if c.findings_new or c.findings_cleared:
        table = Table(title="Findings", box=box.SIMPLE_HEAD, title_justify="left")
        table.add_column("")
        table.add_column("finding")
        table.add_column("severity")
        for word, style, refs in (("new", "red", c.findings_new), ("cleared", "green", c.findings_cleared)):
            for ref in refs:
                finding = Text(ref.title)  # a custom rule's or a saved report's text: never rich markup
                finding.append(f" ({ref.id})", style="dim")
                table.add_row(Text(word, style=style), finding, Text(ref.severity))
        parts.append(table)
    if c.predictions:
        parts.append(_predictions_table(c.predictions, narrow))
    parts.extend(_breakdown_tables(c.breakdown_delta))
    quiet = len(c.facts) - len(observed) - len(derived)
    notes = [*c.notes, *c.breakdown_delta.notes]
    if quiet:
        notes.append(f"{quiet} other facts did not move beyond their noise or are known on one side only "
                     "(--format json lists every fact)")
    if notes:
        parts.append(Text("\n".join(f"note: {n}" for n in notes), style="dim"))
    return Group(*parts)


def _gate_panel(gate: Gate) -> Panel:
    """Every condition with its outcome: ✓ did not hold, ✗ held or could not be evaluated."""
    word, counts = _gate_summary(gate)
    body = Text(f"{word} ({counts})", style="bold green" if gate.passed else "bold red")
    for condition, why, failed in gate_outcomes(gate):
        line = why if condition is None else f"{condition}: {why}" if why else condition
        body.append(f"\n{'✗' if failed else '✓'} {line}", style="bold red" if failed else "green")
    return Panel(body, title="regression gate", box=box.ROUNDED, border_style="green" if gate.passed else "red")


# a SIMPLE_HEAD table: one column of padding each side of a cell, one between columns, one at each edge
def _table_width(content: Sequence[int]) -> int:
    return sum(content) + 2 * len(content) + len(content) - 1 + 2


def _longest(texts: Sequence[str]) -> int:
    return max((cell_len(line) for text in texts for line in text.splitlines()), default=0)


_VALUE_WIDTH = 15  # a value that is text (operator names) wraps at this width; a number never does


def _value_width(values: Sequence[tuple[object, str]], header: str = "", prefix: str = "") -> int:
    """The width of a column of (raw value, shown) pairs: the widest number whole, text wrapped at _VALUE_WIDTH."""
    numbers = [prefix + shown for raw, shown in values if not isinstance(raw, str)]
    texts = [prefix + shown for raw, shown in values if isinstance(raw, str)]
    return max(len(header), _longest(numbers), min(_longest(texts), _VALUE_WIDTH + len(prefix)))


def _facts_table(observed: Sequence[FactChange], derived: Sequence[FactChange], kb: KnowledgeBase | None,
                 width: int | None) -> Table:
    """The facts that moved. Wide: fact, before, after, change and how it was judged. Narrow: how it was judged goes
    under the name; where before and after do not fit beside the name either, they go one above the other, in one
    column. Fact names, numbers and changes are never cut."""
    befores = [(f.before, _value(kb, f.name, f.before)) for f in observed]
    afters = [(f.after, _value(kb, f.name, f.after)) for f in observed]
    changes = [_change(f) for f in observed]
    name_width = max(_longest([f.name for f in observed]), len("fact"))
    change_width = max(_longest(changes), len("change"))
    table = Table(title="Facts that moved beyond their noise", box=box.SIMPLE_HEAD, title_justify="left")
    if derived:
        table.caption = "derived: " + ", ".join(_brief(f) for f in derived)
    # values can be text from the inputs (operator names, a saved report's values): Text, never markup
    rows = list(zip(observed, befores, afters, changes, strict=True))
    if width is None or width >= NARROW_COLUMNS:
        # fact names are what a reader looks up or gates on (--fail-if): never cut
        table.add_column("fact", no_wrap=True)
        table.add_column("before", justify="right", overflow="fold", max_width=_value_width(befores, "before"))
        table.add_column("after", justify="right", overflow="fold", max_width=_value_width(afters, "after"))
        table.add_column("change", justify="right", no_wrap=True)
        table.add_column("how judged", overflow="fold")  # the widest text: it gives way first
        for f, (_, before), (_, after), change in rows:
            table.add_row(Text(f.name), Text(before), Text(after), change, Text(f.basis, style="dim"))
        return table
    # every column but the fact's has a fixed width: rich shrinks no number, and the fact column takes what is left
    before_width, after_width = _value_width(befores, "before"), _value_width(afters, "after")
    beside = width - _table_width([0, before_width, after_width, change_width])
    stacked = beside < name_width
    if stacked:
        values_width = max(_value_width(befores), _value_width(afters, prefix="→ "), len("before"))
        # narrower still, the names fold rather than any number
        table.add_column("fact (how judged)", overflow="fold",
                         width=max(8, width - _table_width([0, values_width, change_width])))
        table.add_column("before → after", justify="right", overflow="fold", width=values_width)
    else:
        table.add_column("fact (how judged)", overflow="fold", width=beside)
        table.add_column("before", justify="right", overflow="fold", width=before_width)
        table.add_column("after", justify="right", overflow="fold", width=after_width)
    table.add_column("change", justify="right", no_wrap=True, width=change_width)
    for f, (_, before), (_, after), change in rows:
        name = Text(f.name)
        name.append(f"\n  {f.basis}", style="dim")
        values = [Text(f"{before}\n→ {after}")] if stacked else [Text(before), Text(after)]
        table.add_row(name, *values, change)
    return table


def _predictions_table(predictions: Sequence[Prediction], narrow: bool) -> Table:
    table = Table(title="Did the change do what the before report predicted?", box=box.SIMPLE_HEAD,
                  title_justify="left")
    table.add_column("recommendation: what moved", overflow="fold")  # the text gives way, ids fold: never cut
    table.add_column("predicted", justify="right", no_wrap=True)
    table.add_column("measured", justify="right", no_wrap=True)
    for p in predictions:
        cell = Text(f"{p.id} ({p.match})", style="bold green" if p.match == "matches" else "bold")
        cell.append("\n" + "; ".join(p.evidence), style="dim")
        value, says = _measured(p)
        measured = Text(value)
        if says is not None:
            style = "bold yellow" if p.within_bound is False else "red" if says == "slower" else ""
            measured.append(f"\n{says}" if narrow else f" ({says})", style=style)
        table.add_row(cell, _bound(p.predicted_max_speedup), measured)
    return table


def _breakdown_tables(delta: BreakdownDelta) -> list[RenderableType]:
    """Kernel classes, top kernels and top operators: the numbers keep their width (never cut), names fold."""
    if not (delta.classes or delta.top_kernels or delta.top_ops):
        return []
    unit = "GPU s per step" if delta.basis == "per step" else "GPU s over the window"
    out: list[RenderableType] = []
    if delta.classes:
        table = Table(title=f"Where GPU time went ({unit})", box=box.SIMPLE_HEAD, title_justify="left")
        table.add_column("kernel class", overflow="fold")
        for col in ("before", "after", "Δ"):
            table.add_column(col, justify="right", no_wrap=True)
        table.add_column("share before → after", justify="right")  # wraps at the arrow, never inside a number
        for row in delta.classes:
            table.add_row(Text(row.class_), _num(row.before_s), _num(row.after_s), _signed(row.delta_s),
                          f"{_pct(row.before_share)} → {_pct(row.after_share)}")
        out.append(table)
    for title, rows in (("Top kernels", delta.top_kernels), ("Top operators", delta.top_ops)):
        if not rows:
            continue
        table = Table(title=f"{title}: largest changes ({unit})", box=box.SIMPLE_HEAD, title_justify="left")
        table.add_column("name", overflow="fold")
        for col in ("before", "after", "Δ"):
            table.add_column(col, justify="right", no_wrap=True)
        for r in rows[:_TOP]:
            table.add_row(Text(_short(r.name)), _num(r.before_s), _num(r.after_s), _signed(r.delta_s))
        out.append(table)
    return out


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"


def _signed(value: float | None) -> str:
    return "—" if value is None else f"{value:+.4g}"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _short(name: str, width: int = 80) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def print_comparison(c: Comparison, console: Console | None = None, kb: KnowledgeBase | None = None) -> None:
    console = console or SafeConsole()
    console.print(renderable(c, kb, console.width))



# ---- markdown ---------------------------------------------------------------------------------------------------


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", "<br>")


def markdown(c: Comparison, kb: KnowledgeBase | None = None, title: str = "dam compare: before → after") -> str:
    """The comparison as Markdown, sized for a pull-request comment (every fact in a collapsed section)."""
    lines = [f"### {title}", ""]
    if c.gate.conditions or c.gate.failed:
        word, counts = _gate_summary(c.gate)
        lines += [f"**Gate: {word}** ({counts})", ""]
        for condition, why, failed in gate_outcomes(c.gate):
            mark = "❌" if failed else "✅"
            lines.append(f"- {mark} {_cell(why)}" if condition is None else
                         f"- {mark} `{condition}`" + (f": {_cell(why)}" if why else ""))
        lines.append("")
    lines += [f"**{headline(c)}**", "",
              "| | source | verdict |", "|---|---|---|",
              f"| before | {_cell(c.before.source)} ({c.before.kind}) | {_cell(_verdict(c.before))} |",
              f"| after | {_cell(c.after.source)} ({c.after.kind}) | {_cell(_verdict(c.after))} |", ""]
    observed, derived = _split(c)
    if observed:
        lines += ["#### Facts that moved beyond their noise", "", "| fact | before | after | change |",
                  "|---|---:|---:|---:|"]
        lines += [f"| `{f.name}` | {_cell(_value(kb, f.name, f.before))} | {_cell(_value(kb, f.name, f.after))} | "
                  f"{_cell(_change(f))} |" for f in observed]
        lines.append("")
    if derived:
        lines += ["Derived: " + ", ".join(f"`{f.name}` {_cell(_change(f))}" for f in derived), ""]
    if c.findings_new or c.findings_cleared:
        lines += ["#### Findings", ""]
        lines += [f"- new: **{_cell(f.title)}** (`{f.id}`, {f.severity})" for f in c.findings_new]
        lines += [f"- cleared: ~~{_cell(f.title)}~~ (`{f.id}`)" for f in c.findings_cleared]
        lines.append("")
    if c.predictions:
        lines += ["#### Did the change do what the before report predicted?", "",
                  "| recommendation | looks like it | predicted | measured | evidence |", "|---|---|---:|---:|---|"]
        lines += [f"| `{p.id}` | {'**matches**' if p.match == 'matches' else p.match} | "
                  f"{_bound(p.predicted_max_speedup)} | {_measured_text(p)} | "
                  f"{_cell('; '.join(p.evidence))} |" for p in c.predictions]
        lines.append("")
    lines += _breakdown_markdown(c.breakdown_delta)
    notes = [*c.notes, *c.breakdown_delta.notes]
    if notes:
        lines += [f"> {_cell(n)}" for n in notes] + [""]
    lines += ["<details><summary>Every fact, and how its noise was judged</summary>", "",
              "| fact | before | after | change | beyond noise | how judged |", "|---|---:|---:|---:|:-:|---|"]
    lines += [f"| `{f.name}` | {_cell(_value(kb, f.name, f.before))} | {_cell(_value(kb, f.name, f.after))} | "
              f"{_cell(_change(f))} | {'yes' if f.significant else ''} | {_cell(f.basis)} |" for f in c.facts]
    lines += ["", "</details>", "", "_Compared by dam-expert (`dam compare A B --format json` for tools)._", ""]
    return "\n".join(lines)


def _breakdown_markdown(delta: BreakdownDelta) -> list[str]:
    if not (delta.classes or delta.top_kernels or delta.top_ops):
        return []
    unit = "GPU s per step" if delta.basis == "per step" else "GPU s over the window"
    lines = [f"#### Where GPU time went ({unit})", ""]
    if delta.classes:
        lines += ["| kernel class | before | after | Δ | share before → after |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {r.class_} | {_num(r.before_s)} | {_num(r.after_s)} | {_signed(r.delta_s)} | "
                  f"{_pct(r.before_share)} → {_pct(r.after_share)} |" for r in delta.classes]
        lines.append("")
    for title, rows in (("Top kernels", delta.top_kernels), ("Top operators", delta.top_ops)):
        if rows:
            lines += _named_markdown(title, rows)
    return lines


def _named_markdown(title: str, rows: Sequence[NamedDelta]) -> list[str]:
    lines = [f"{title} (largest changes):", "", "| name | before | after | Δ |", "|---|---:|---:|---:|"]
    lines += [f"| `{_cell(_short(r.name))}` | {_num(r.before_s)} | {_num(r.after_s)} | {_signed(r.delta_s)} |"
              for r in rows[:_TOP]]
    return [*lines, ""]
