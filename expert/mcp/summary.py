"""The text copies of tool results: a few lines in the command line's words, then the JSON.

MCP clients show an agent the text content; the structured content (validated against the tool's output schema)
carries the whole result. A report's text copy leaves out its largest parts by default (`evaluations`, `graph`,
`tables`: what `explain` reads), so one diagnosis does not fill an agent's context.
"""

from __future__ import annotations

import json
from typing import Any

from ..report.explain import gain_text
from ..report.model import Report

OMITTED = ("evaluations", "graph", "tables")
_NO_VERDICT = "No verdict: the evidence is insufficient to name a bottleneck (the expert never guesses)."


def compact_json(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def report_data(report: Report, detail: str) -> dict[str, Any]:
    """The report as JSON data: whole, or without OMITTED (the summary copy)."""
    return report.model_dump(mode="json", exclude=None if detail == "full" else set(OMITTED))


def verdict_lines(report: Report) -> list[str]:
    """The verdict and what to do, in the words of the terminal report and the Markdown postmortem."""
    lines: list[str] = []
    if report.bottleneck:
        lead = report.candidates[0]
        lines.append(f"Verdict: {report.bottleneck} ({report.verdict_title}; {lead.strength}, score {lead.score}; "
                     f"rules: {', '.join(lead.rules)})")
        others = report.candidates[1:]
        if others:
            lines.append("Also implicated (weaker or tied, ranked below the verdict): "
                         + ", ".join(f"{c.regime} ({c.strength}, score {c.score})" for c in others))
    else:
        lines.append(_NO_VERDICT)
        if report.candidates:
            lines.append("Hypotheses: " + ", ".join(f"{c.regime} ({c.strength}, score {c.score})"
                                                    for c in report.candidates))
    if report.axes:
        lines.append("D·A·M axes: " + ", ".join(f"{a.axis} {a.share:.0%}" for a in report.axes))
    if report.recommended:
        lines.append("Recommended: " + "; ".join(f"{r.id} ({gain_text(r.expected_gain)})" for r in report.recommended))
    if report.wasted:
        lines.append("Wasted effort for this bottleneck: " + "; ".join(f"{w.id} ({w.reason})" for w in report.wasted))
    if report.missing:
        lines.append("Missing facts that would settle undecided rules: " + ", ".join(m.fact for m in report.missing))
    if report.next_measurements:
        lines.append("Next measurements: " + "; ".join(f"{m.fact or m.axis} with {m.tool}"
                                                        for m in report.next_measurements))
    return lines


def report_text(report: Report, detail: str) -> str:
    note = ("" if detail == "full" else
            f"\n(The JSON below leaves out {', '.join(OMITTED)}; the structured result has the whole report. "
            "Pass `observations` or the structured report to explain.)")
    return "\n".join(verdict_lines(report)) + note
