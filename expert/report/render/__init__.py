"""Exports of a Report: markdown postmortem, mermaid, dot, graphml, json (node-link, lossless) and offline html.

>>> import expert
>>> from expert.report.render import export
>>> text = export(expert.diagnose({"gpu_util": 0.45, "data_wait_s": 0.12, "step_time_s": 0.3}), "mermaid")
>>> text.splitlines()[0]
'flowchart LR'
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

from ...errors import ObservationError, Problem, write_output
from ..model import Report

Format = Literal["markdown", "mermaid", "dot", "graphml", "json", "html"]
FORMATS: tuple[str, ...] = get_args(Format)
SUFFIX = {"markdown": ".md", "mermaid": ".mmd", "dot": ".dot", "graphml": ".graphml", "json": ".json",
          "html": ".html"}


def export(report: Report, fmt: str) -> str:
    """The report in one export format, as text."""
    if fmt == "markdown":
        from .markdown import postmortem

        return postmortem(report)
    if fmt == "html":
        from .html import to_html

        return to_html(report)
    from . import graph

    writers = {"mermaid": graph.to_mermaid, "dot": graph.to_dot, "graphml": graph.to_graphml, "json": graph.to_json}
    if fmt not in writers:
        raise ObservationError([Problem(f"export format {fmt!r}", "unknown", f"one of: {', '.join(FORMATS)}")])
    return writers[fmt](report)


def write(report: Report, fmt: str, path: str | Path) -> Path:
    """Write an export to a file (UTF-8); returns the path."""
    return write_output(path, export(report, fmt), option="")


def load(path: str | Path) -> Report:
    """Read a saved report: a JSON export (`--export json`) or a plain report (`dam diagnose --format json`)."""
    from .graph import load_json

    source = Path(path)
    if not source.is_file():
        raise ObservationError([Problem(str(source), "no such file",
                                        "save a report with `dam diagnose ... --format json --output report.json`")],
                               title="cannot read the report")
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ObservationError([Problem(str(source), "cannot be read as UTF-8 text")],
                               title="cannot read the report") from exc
    return load_json(text, str(source))


__all__ = ["FORMATS", "SUFFIX", "Format", "export", "load", "write"]
