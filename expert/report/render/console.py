"""The one rich Console every terminal view prints through: user text is text, never terminal control.

Strings from observation files, rules, traces and saved reports can hold ANSI escape sequences (`\\x1b[2J` clears the
screen, `\\x1b]0;...\\a` retitles the window). rich passes them through; this console writes each text segment's control
characters as visible escapes (`\\x1b`) before its own styling is applied, so rich's colours still work.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.segment import Segment

from ...errors import printable

# Terminal columns below which a wide table of the terminal views (`dam rules list`, `dam compare`) moves its longest
# text column under the row's name instead of beside it
NARROW_COLUMNS = 110


class SafeConsole(Console):
    """A rich Console that prints control characters in text as visible escapes (issue 21), and no emoji for
    `:name:` codes (a kernel name's "c10::cd::" stays as written; it also spares loading rich's emoji table)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("emoji", False)
        super().__init__(*args, **kwargs)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        segments = list(buffer)
        if printable(text := "".join([s.text for s in segments if not s.control])) is text:
            return super()._render_buffer(segments)  # nothing to escape: one look at the text, not one per segment
        return super()._render_buffer(
            s if s.control else Segment(printable(s.text), s.style, s.control) for s in segments)

    def export_text(self, *, clear: bool = True, styles: bool = False) -> str:
        text = super().export_text(clear=clear, styles=styles)
        return text if styles else printable(text)


def console(**kwargs: Any) -> SafeConsole:
    """A SafeConsole with the given rich Console options."""
    return SafeConsole(**kwargs)
