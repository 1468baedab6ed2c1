"""Markdown view of a Report (readable in a postmortem; renders on GitHub/GitLab)."""

from __future__ import annotations

from ..report import Report


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", "<br>")


def _fmt(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def render(report: Report) -> str:
    lines: list[str] = ["# D·A·M diagnosis", ""]
    if report.bottleneck:
        lead = report.candidates[0]
        lines.append(f"**Verdict: {report.verdict_title}** ({lead.strength}; rules: {', '.join(lead.rules)})")
    else:
        lines.append("**Verdict: undecided** — the evidence is insufficient to name a bottleneck.")
    if report.axes:
        lines.append("")
        lines.append("D·A·M axes: " + ", ".join(f"{a.axis} {a.share:.0%}" for a in report.axes))
    lines += ["", "## Evidence", "", "| fact | value | source |", "|---|---|---|"]
    for name, obs in report.observations.items():
        lines.append(f"| {name} | {_cell(_fmt(obs.value))} | {_cell(obs.source)} |")
    for name, d in report.derived.items():
        lines.append(f"| {name} | {_cell(_fmt(d.value))} | derived: {_cell(d.formula)} |")
    law = report.iron_law
    if any(t.seconds is not None for t in law.terms):
        lines += ["", "## Iron law", "", "| term | seconds | share |", "|---|---|---|"]
        for t in law.terms:
            sec = "?" if t.seconds is None else f"{t.seconds:.4g}"
            share = "?" if t.share is None else f"{t.share:.0%}"
            lines.append(f"| {_cell(t.label)} | {sec} | {share} |")
    if report.cluster is not None:
        lines += ["", "## Cluster (C³)", "", "| fact | value |", "|---|---|"]
        for name, value in report.cluster.model_dump().items():
            if value is not None:
                lines.append(f"| {name} | {_cell(_fmt(value))} |")
    if report.findings:
        lines += ["", "## Findings", ""]
        for f in report.findings:
            lines.append(f"- **{f.severity}** {f.message} (`{f.rule_id}`; {f.source})")
            for e in f.evidence:
                lines.append(f"  - {e.test}")
    lines += ["", "## Recommended", ""]
    if report.recommended:
        for i, r in enumerate(report.recommended, 1):
            g = r.expected_gain
            gain = f" — at most {g.max_speedup:.2f}x ({g.assumptions})" if g else ""
            lines.append(f"{i}. **{r.title}** (`{r.id}`): {r.why}. {r.how}{gain}")
    else:
        lines.append("Nothing yet: no rule concluded an optimization on this evidence.")
    if report.wasted:
        lines += ["", "## Wasted", ""]
        for w in report.wasted:
            lines.append(f"- ~~{w.title}~~ (`{w.id}`): {w.reason}")
    lines += ["", "## Scorecard", "", "| axis | metric | value | band | bands |", "|---|---|---|---|---|"]
    for row in report.scorecard:
        value = "?" if row.value is None else f"{row.value:.1%}"
        lines.append(f"| {row.axis} | {row.title} | {value} | {row.band} | {_cell(row.bands)} |")
    if report.next_measurements:
        lines += ["", "## Next measurements", ""]
        for m in report.next_measurements:
            lines.append(f"- **{m.fact or m.axis + ' axis'}** with {m.tool}: `{m.how}` — {m.why}")
    if report.missing:
        lines += ["", "## Missing evidence", ""]
        for item in report.missing:
            lines.append(f"- `{item.fact}`: {item.question}")
    lines.append("")
    return "\n".join(lines)
