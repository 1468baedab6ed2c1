"""A postmortem-ready Markdown document: verdict, evidence, iron law, why-chains, recommended vs wasted, provenance."""

from __future__ import annotations

import re
from pathlib import Path

from ..explain import gain_text, why
from ..model import Report
from . import _parts as shared
from .graph import to_mermaid

_TAG = re.compile(r"<(?=[A-Za-z/!?])")


def _text(text: object) -> str:
    """Text from the report as Markdown prose, with anything that could open an HTML tag escaped: rule files,
    traces and observation files can put any string here (a `<script>` in a rule message stays text on every
    renderer), while "x < 2" reads as written."""
    return _TAG.sub("&lt;", str(text))


def _fenced(text: str, info: str = "") -> list[str]:
    """A code block whose fence is longer than any backtick run inside, so the content cannot close it early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + info, text.rstrip("\n"), fence]


def _cell(text: object) -> str:
    return _text(text).replace("|", "\\|").replace("\n", "<br>")


def postmortem(report: Report, title: str | None = None) -> str:
    """The whole report as Markdown, with the provenance graph as a Mermaid diagram (renders on GitHub/GitLab)."""
    lines = [f"# {_text(title or 'Postmortem: why the job was slow (D·A·M diagnosis)')}", ""]
    lines += _verdict(report)
    lines += _evidence(report)
    lines += _iron_law(report)
    lines += _time_breakdown(report)
    lines += _cluster(report)
    lines += _findings(report)
    lines += _optimizations(report)
    lines += _scorecard(report)
    lines += _measurements(report)
    lines += ["## Provenance", "",
              "Observations (left) through derived quantities and rules to conclusions (right).", "",
              "```mermaid", to_mermaid(report).rstrip("\n"), "```", "",
              f"_Diagnosed by dam-expert ({report.engine} engine); `dam explain REPORT.json --why ID` / `--why-not ID` "
              "answers follow-up questions._", ""]
    return "\n".join(lines)


def _verdict(report: Report) -> list[str]:
    lines = ["## Verdict", ""]
    if report.bottleneck:
        lead = report.candidates[0]
        lines.append(f"**{report.verdict_title}** (`{report.bottleneck}`, {lead.strength}; rules: "
                     f"{', '.join(f'`{r}`' for r in lead.rules)})")
    elif report.state == "conflicting evidence":
        lines.append("**Conflicting evidence**: the inputs cannot all be right, so no verdict is named until they are "
                     "re-measured (the expert never guesses).")
    else:
        lines.append("**Undecided**: the evidence is insufficient to name a bottleneck (the expert never guesses).")
    others = report.candidates[1:] if report.bottleneck else report.candidates
    if others:
        lines += ["", "Other hypotheses: " + ", ".join(f"{c.title} ({c.strength}, score {c.score})" for c in others)]
    if report.axes:
        lines += ["", "D·A·M axes: " + ", ".join(f"{a.axis} {a.share:.0%}" for a in report.axes)]
    return [*lines, "", *_limits(report)]


def _limits(report: Report) -> list[str]:
    """Conflicting and thin evidence in effect: the values that disagree, the effect, what to re-measure."""
    lines: list[str] = []
    for c in report.conflicts:
        effect = shared.limit_effect(c)
        values = ", ".join(f"`{name}` = {_text(shared.value_text(value))}" for name, value in c.facts.items())
        lines.append(f"> **Conflicting evidence** ({effect}): {_text(c.title)} ({values}). {_text(c.message)} "
                     f"To settle it: {_text(c.firmer)}" + "".join(f"; `{m.fact}` with {_text(m.tool)} ({_text(m.how)})"
                                                              for m in c.remeasure) + ".")
        lines.append("")
    for c in report.evidence_limits:
        effect = shared.limit_effect(c)
        lines += [f"> **Thin evidence** ({effect}): {_text(c.title)}. Firmer with: {_text(c.firmer)}.", ""]
    return lines


def _evidence(report: Report) -> list[str]:
    lines = ["## Evidence", "", "| fact | value | source |", "|---|---|---|"]
    for name, obs in report.observations.items():
        chosen = f"; assumed {obs.detail['note']}" if "resolved_from" in obs.detail and "note" in obs.detail else ""
        lines.append(f"| `{name}` | {_cell(shared.value_text(obs.value))} | {_cell(obs.source + chosen)} |")
    for name, d in report.derived.items():
        unit = f" {d.unit}" if d.unit else ""
        lines.append(f"| `{name}` | {_cell(shared.value_text(d.value) + unit)} | derived: {_cell(d.formula)} "
                     f"({_cell(d.source)}) |")
    return [*lines, ""]


def _iron_law(report: Report) -> list[str]:
    law = report.iron_law
    lines = ["## Iron-law breakdown", ""]
    if all(t.seconds is None for t in law.terms):
        return [*lines, "No term of the iron law is known on this evidence.", ""]
    lines += ["| term | seconds | share of step |", "|---|---|---|"]
    for t in law.terms:
        seconds = "unknown" if t.seconds is None else f"{t.seconds:.4g}"
        share = "unknown" if t.share is None else f"{t.share:.0%}"
        lines.append(f"| {_cell(t.label)} | {seconds} | {share} |")
    notes = shared.iron_law_notes(law)
    if notes:
        lines += ["", "; ".join(notes).capitalize() + "."]
    return [*lines, ""]


def _findings(report: Report) -> list[str]:
    lines = ["## Findings", ""]
    if not report.findings:
        return [*lines, "No finding on this evidence.", ""]
    for f in report.findings:
        lines += [f"### {f.severity}: {_text(f.title)}", "", _text(f.message), "",
                  f"Rule `{f.rule_id}` — {_text(f.source)}", "", "Why (from the observations to the finding):", "",
                  *_fenced(why(report, f"finding:{f.id}").text(), "text"), ""]
    return lines


def _optimizations(report: Report) -> list[str]:
    lines = ["## Recommended", ""]
    if report.recommended:
        lines += ["| # | optimization | why | expected gain (upper bound) |", "|---|---|---|---|"]
        for i, r in enumerate(report.recommended, 1):
            lines.append(f"| {i} | **{_cell(r.title)}** (`{r.id}`, {r.axis} axis, shrinks {r.shrinks})<br>"
                         f"{_cell(r.how)} | {_cell(r.why)} | {_cell(gain_text(r.expected_gain))} |")
    else:
        lines.append("Nothing yet: no rule concluded an optimization on this evidence.")
    lines += ["", "## Wasted effort", ""]
    if report.wasted:
        lines += ["| optimization | why it would not help | decided by |", "|---|---|---|"]
        for w in report.wasted:
            lines.append(f"| ~~{_cell(w.title)}~~ (`{w.id}`) | {_cell(w.reason)} | "
                         f"{', '.join(f'`{r}`' for r in w.rules)} |")
    else:
        lines.append("Nothing is ruled out on this evidence.")
    if report.applied:
        lines += ["", "## Already applied", "", "| optimization | given by | would have been proposed by |",
                  "|---|---|---|"]
        for a in report.applied:
            lines.append(f"| {_cell(a.title)} (`{a.id}`) | {_cell(a.source)} | "
                         f"{', '.join(f'`{r}`' for r in a.rules) or '—'} |")
    return [*lines, ""]


def _cluster(report: Report) -> list[str]:
    if report.cluster is None:
        return []
    lines = ["## Cluster (C³: computation, communication, coordination)", "", "| fact | value |", "|---|---|"]
    lines += [f"| {name} | {_cell(shared.value_text(value))} |" for name, value in shared.cluster_facts(report.cluster)]
    return [*lines, "", *_ranks(report)]


def _ranks(report: Report) -> list[str]:
    """The job's ranks as their traces show them (per step), the straggler marked."""
    cluster = report.cluster
    if cluster is None or not cluster.ranks:
        return []

    of = f" of {cluster.world_size}" if cluster.world_size else ""
    lines = [f"### Ranks ({len(cluster.ranks)} traced{of}; per step)", ""]
    lines += [f"- {sentence}" for _, sentence in shared.rank_prose(cluster, lambda lead: f"**{lead}**")]
    lines += ["", "| " + " | ".join(shared.RANK_HEADERS) + " |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in cluster.ranks:
        mark = " **straggler**" if r.rank == cluster.straggler_rank else ""
        lines.append("| " + " | ".join([f"{r.rank}{mark}", _cell(Path(r.file).name), *shared.rank_cells(r)]) + " |")
    return [*lines, ""]


def _scorecard(report: Report) -> list[str]:
    lines = ["## Scorecard (seed Table 5)", "", "| axis | metric | value | band | bands |", "|---|---|---|---|---|"]
    for row in report.scorecard:
        lines.append(f"| {row.axis} | {_cell(row.title)} | {shared.percent_text(row.value)} | {row.band} | "
                     f"{_cell(row.bands)} |")
    return [*lines, ""]


def _measurements(report: Report) -> list[str]:
    lines = ["## Next measurements", ""]
    if not report.next_measurements:
        lines.append("None suggested.")
    for m in report.next_measurements:
        lines.append(f"- **{m.fact or m.axis + ' axis'}** with {_text(m.tool)}: `{m.how}` — {_text(m.why)}")
    if report.missing:
        lines += ["", "Missing evidence (would sharpen or decide the diagnosis):", ""]
        lines += [f"- `{item.fact}`: {_text(item.question)} ({_text(item.why)})" for item in report.missing]
    return [*lines, ""]


def _time_breakdown(report: Report) -> list[str]:
    """Where the GPU time goes (profiler traces): class shares as text bars, top kernels and operators."""
    tb = report.time_breakdown
    if tb is None:
        return []

    lines = ["## Where the time goes", "", f"Window: {_cell(tb.window.reason)}.", ""]
    if tb.roof is not None:
        lines += [f"Roof: {shared.roof_text(tb.roof)}.", ""]
    if tb.classes:
        lines += [f"{tb.gpu_time_s:.4g} s of GPU activity, {tb.kernels} kernels"
                  + (f"; {tb.memory_bound_share:.0%} in classes memory-bound by nature" if tb.memory_bound_share
                     is not None else "") + ".", "",
                  "| kernel class | share | | FLOP/B | % of roof |", "|---|---:|---|---:|---:|"]
        for c in tb.classes:
            bar = "█" * round(c.share * 20) or "▏"
            lines.append(f"| {c.class_}{' (memory-bound)' if c.memory_bound_by_nature else ''} | {c.share:.1%} | "
                         f"`{bar}` | {shared.number_text(c.arithmetic_intensity)} | "
                         f"{shared.share_text(c.pct_of_roof, '')} |")
        lines.append("")
    for title, entries in shared.top_lists(tb):
        lines += [f"**{title}**", "", "| name | class | share | count | FLOP/B | % of roof |",
                  "|---|---|---:|---:|---:|---:|"]
        lines += [f"| `{_cell(e.name[:120])}` | {e.class_ or ''} | {e.share:.1%} | {e.count} | "
                  f"{shared.number_text(e.arithmetic_intensity)} | {shared.share_text(e.pct_of_roof, '')} |"
                  for e in entries]
        lines.append("")
    if tb.idle is not None:
        lines += [f"GPU busy {shared.idle_text(tb.idle)}."]
        host = shared.host_during_idle(tb)
        if host:
            lines.append("While the GPU idled the host ran: " + ", ".join(
                f"`{_cell(e.name)}` ({e.share:.0%} of the window)" for e in host) + ".")
        lines.append("")
    lines += [f"_Note: {_cell(n)}_" for n in tb.notes]
    return [*lines, ""] if tb.notes else lines
