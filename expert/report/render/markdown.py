"""A postmortem-ready Markdown document: verdict, evidence, iron law, why-chains, recommended vs wasted, provenance."""

from __future__ import annotations

import re
from pathlib import Path

from ..explain import gain_text, why
from ..model import Report
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


def _fmt(value: object) -> str:
    if value is None:
        return "?"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _pct(value: float | None) -> str:
    return "?" if value is None else f"{value:.1%}"


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
        effect = "verdict withheld" if c.effect == "withheld" else f"strength capped at {c.max_strength}"
        values = ", ".join(f"`{name}` = {_text(_fmt(value))}" for name, value in c.facts.items())
        lines.append(f"> **Conflicting evidence** ({effect}): {_text(c.title)} ({values}). {_text(c.message)} "
                     f"To settle it: {_text(c.firmer)}" + "".join(f"; `{m.fact}` with {_text(m.tool)} ({_text(m.how)})"
                                                              for m in c.remeasure) + ".")
        lines.append("")
    for c in report.evidence_limits:
        effect = "verdict withheld" if c.effect == "withheld" else f"strength capped at {c.max_strength}"
        lines += [f"> **Thin evidence** ({effect}): {_text(c.title)}. Firmer with: {_text(c.firmer)}.", ""]
    return lines


def _evidence(report: Report) -> list[str]:
    lines = ["## Evidence", "", "| fact | value | source |", "|---|---|---|"]
    for name, obs in report.observations.items():
        chosen = f"; assumed {obs.detail['note']}" if "resolved_from" in obs.detail and "note" in obs.detail else ""
        lines.append(f"| `{name}` | {_cell(_fmt(obs.value))} | {_cell(obs.source + chosen)} |")
    for name, d in report.derived.items():
        unit = f" {d.unit}" if d.unit else ""
        lines.append(f"| `{name}` | {_cell(_fmt(d.value) + unit)} | derived: {_cell(d.formula)} ({_cell(d.source)}) |")
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
    notes = []
    if law.step_time_s is not None:
        notes.append(f"measured step {law.step_time_s:.4g} s")
    if law.sequential_s is not None and law.overlapped_s is not None:
        notes.append(f"sequential sum {law.sequential_s:.4g} s, overlapped ≥ {law.overlapped_s:.4g} s")
    if law.efficiency_source:
        notes.append(law.efficiency_source)
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
    lines += [f"| {name} | {_cell(_fmt(value))} |" for name, value in report.cluster.model_dump().items()
              if value is not None and name != "ranks"]
    return [*lines, "", *_ranks(report)]


def _ranks(report: Report) -> list[str]:
    """The job's ranks as their traces show them (per step), the straggler marked."""
    cluster = report.cluster
    if cluster is None or not cluster.ranks:
        return []

    def sec(value: float | None) -> str:
        return "?" if value is None else (f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s")

    def share(value: float | None) -> str:
        return "?" if value is None else f"{value:.0%}"

    of = f" of {cluster.world_size}" if cluster.world_size else ""
    lines = [f"### Ranks ({len(cluster.ranks)} traced{of}; per step)", ""]
    if cluster.straggler_rank is not None:
        lines.append(f"- **Straggler: rank {cluster.straggler_rank}**: the other ranks wait "
                     f"{share(cluster.sync_wait_frac)} of each step inside collectives for it.")
    elif len(cluster.ranks) > 1 and cluster.sync_wait_frac is not None:
        lines.append(f"- No straggler: the ranks wait {share(cluster.sync_wait_frac)} of the step for one another.")
    if cluster.slow_link is not None:
        lines.append("- Slow link: collectives are slow on every rank." if cluster.slow_link
                     else "- The link is not slow: the transfers are short or hidden behind compute.")
    if cluster.comm_frac is not None:
        lines.append(f"- Exposed communication: {share(cluster.comm_frac)} of the step.")
    if cluster.step_time_skew is not None:
        lines.append(f"- Step-time skew (slowest rank over the median): {cluster.step_time_skew:.1%}.")
    lines += ["", "| rank | file | step | compute | comm | exposed comm | idle | overlap | waits |",
              "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in cluster.ranks:
        mark = " **straggler**" if r.rank == cluster.straggler_rank else ""
        lines.append(f"| {r.rank}{mark} | {_cell(Path(r.file).name)} | {sec(r.step_time_s)} | {sec(r.compute_s)} | "
                     f"{sec(r.comm_s)} | {share(r.exposed_comm_frac)} | {share(r.idle_frac)} | "
                     f"{share(r.comm_overlap_frac)} | {sec(r.sync_wait_s)} |")
    return [*lines, ""]


def _scorecard(report: Report) -> list[str]:
    lines = ["## Scorecard (seed Table 5)", "", "| axis | metric | value | band | bands |", "|---|---|---|---|---|"]
    for row in report.scorecard:
        lines.append(f"| {row.axis} | {_cell(row.title)} | {_pct(row.value)} | {row.band} | {_cell(row.bands)} |")
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

    def num(v: float | None) -> str:
        return "" if v is None else f"{v:.3g}"

    def pct(v: float | None) -> str:
        return "" if v is None else f"{v:.0%}"

    lines = ["## Where the time goes", "", f"Window: {_cell(tb.window.reason)}.", ""]
    if tb.roof is not None:
        lines += [f"Roof: {tb.roof.hardware} {tb.roof.dtype}, {tb.roof.peak_tflops:g} TFLOP/s, "
                  f"{tb.roof.peak_bandwidth_gbs:g} GB/s (ridge {tb.roof.ridge_flop_per_byte:.3g} FLOP/B).", ""]
    if tb.classes:
        lines += [f"{tb.gpu_time_s:.4g} s of GPU activity, {tb.kernels} kernels"
                  + (f"; {tb.memory_bound_share:.0%} in classes memory-bound by nature" if tb.memory_bound_share
                     is not None else "") + ".", "",
                  "| kernel class | share | | FLOP/B | % of roof |", "|---|---:|---|---:|---:|"]
        for c in tb.classes:
            bar = "█" * round(c.share * 20) or "▏"
            lines.append(f"| {c.class_}{' (memory-bound)' if c.memory_bound_by_nature else ''} | {c.share:.1%} | "
                         f"`{bar}` | {num(c.arithmetic_intensity)} | {pct(c.pct_of_roof)} |")
        lines.append("")
    for title, entries in (("Top kernels", tb.top_kernels), ("Top operators (by the kernels they launched)",
                                                            tb.top_ops), ("Top modules", tb.top_modules)):
        if not entries:
            continue
        lines += [f"**{title}**", "", "| name | class | share | count | FLOP/B | % of roof |",
                  "|---|---|---:|---:|---:|---:|"]
        lines += [f"| `{_cell(e.name[:120])}` | {e.class_ or ''} | {e.share:.1%} | {e.count} | "
                  f"{num(e.arithmetic_intensity)} | {pct(e.pct_of_roof)} |" for e in entries]
        lines.append("")
    if tb.idle is not None:
        i = tb.idle
        lines += [f"GPU busy {i.busy:.0%}; idle: input {i.input:.0%}, launch overhead {i.launch:.0%}, host compute "
                  f"{i.host_compute:.0%}, blocking syncs {i.sync:.0%}, no host event {i.unattributed:.0%}, GPU-side "
                  f"waits {i.gpu_wait:.0%}."]
        if tb.host_during_idle and i.host_compute >= 0.02:
            lines.append("While the GPU idled the host ran: " + ", ".join(
                f"`{_cell(e.name)}` ({e.share:.0%} of the window)" for e in tb.host_during_idle[:4]) + ".")
        lines.append("")
    lines += [f"_Note: {_cell(n)}_" for n in tb.notes]
    return [*lines, ""] if tb.notes else lines
