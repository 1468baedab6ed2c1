"""Rich terminal view of a Report. Renders only: every decision is already in the report."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich import box
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ...breakdown import TimeBreakdown, TimeEntry
from ...observations.normalise import RankFigures
from ..model import Report
from . import _parts as shared
from .console import SafeConsole
from .fit import Bar, ByWidth, FitTable, longest, short_names

_BAND_STYLE = {"fail": "bold red", "marginal": "yellow", "pass": "green", "n/a": "dim"}
_SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
NARROW = 80  # the terminal columns below which a table of four text columns is laid out again, stacked
_SHORT_TERM = {"input": "input wait", "data": "D/BW", "compute": "O/(R·η)", "latency": "L_lat",
               "unexplained": "unexplained"}


def verdict_panel(report: Report) -> Panel:
    if report.bottleneck is None and report.state == "conflicting evidence":
        body = Text("CONFLICTING EVIDENCE: the inputs cannot all be right, so no verdict is named until they are "
                    "re-measured.", style="bold magenta")
        if report.candidates:
            body.append("\nHypotheses: " + ", ".join(f"{c.regime} ({c.strength})" for c in report.candidates),
                        style="magenta")
        title = "Verdict: withheld (conflicting evidence)"
    elif report.bottleneck is None:
        body = Text("No verdict: the evidence is insufficient to name a bottleneck (the expert never guesses).",
                    style="bold yellow")
        if report.candidates:
            body.append("\nHypotheses: " + ", ".join(f"{c.regime} ({c.strength})" for c in report.candidates),
                        style="yellow")
        title = "Verdict: undecided"
    else:
        lead = report.candidates[0]
        body = Text(f"{report.verdict_title} ", style="bold")
        body.append(f"[{lead.strength}, rules: {', '.join(lead.rules)}]", style="dim")
        others = [c for c in report.candidates[1:]]
        if others:
            body.append("\nAlso implicated: " + ", ".join(f"{c.regime} ({c.strength})" for c in others))
        title = f"Verdict: {report.bottleneck}"
    if report.axes:
        body.append("\nD·A·M axes: " + "  ".join(f"{a.axis} {a.share:.0%}" for a in report.axes))
    _limits_text(report, body)
    style = "magenta" if report.conflicts else "red" if report.bottleneck else "yellow"
    return Panel(body, title=Text(title), border_style=style, box=box.ROUNDED)


def _limits_text(report: Report, body: Text) -> None:
    """Conflicting and thin evidence in effect: what each did to the verdict and what would lift it."""
    for c in report.conflicts:
        effect = shared.limit_effect(c)
        values = ", ".join(f"{name} = {shared.value_text(value)}" for name, value in c.facts.items())
        body.append(f"\nConflicting evidence ({effect}): {c.title}", style="bold magenta")
        body.append(f" [{values}]" if values else "", style="magenta")
        body.append(f"\n  {c.message}\n  to settle it: {c.firmer}", style="magenta")
    for c in report.evidence_limits:
        effect = shared.limit_effect(c)
        body.append(f"\nThin evidence ({effect}): {c.title}. Firmer with: {c.firmer}", style="yellow")


def iron_law_table(report: Report) -> Table | None:
    law = report.iron_law
    if all(t.seconds is None for t in law.terms):
        return None
    rows: list[tuple[str, str, str, RenderableType]] = []
    for term in law.terms:
        name = _SHORT_TERM.get(term.term, term.label)
        if term.seconds is None:
            rows.append((name, "?", "?", Text("unknown", style="dim")))
            continue
        share = term.share or 0.0
        bar = Bar(share, "yellow" if term.term == "unexplained" else "magenta")
        rows.append((name, f"{term.seconds:.4g}", f"{share:.0%}" if term.share is not None else "?", bar))
    table = FitTable(title="Iron law: T = D/BW + O/(R·η) + L (+ input wait)", box=box.SIMPLE_HEAD,
                     title_justify="left")
    table.add_column("term", no_wrap=True)
    # the figures are never cut: a narrow terminal wraps the header and shortens the bar instead
    table.add_column("seconds", justify="right", min_width=longest((r[1] for r in rows), "seconds"))
    table.add_column("share of step", justify="right", min_width=longest((r[2] for r in rows), "share of step"))
    table.add_column("", min_width=len("unknown"))
    for row in rows:
        table.add_row(*row)
    table.caption = "; ".join(shared.iron_law_notes(law, "sequential"))
    return table


def cluster_table(report: Report) -> Table | None:
    cluster = report.cluster
    if cluster is None:
        return None
    facts = [(name, shared.value_text(value)) for name, value in shared.cluster_facts(cluster)]
    table = FitTable(title="Cluster (C³: computation, communication, coordination)", box=box.SIMPLE_HEAD,
                     title_justify="left")
    table.add_column("fact", no_wrap=True)
    table.add_column("value", justify="right", overflow="fold", min_width=longest(v for _, v in facts))
    for name, value in facts:
        table.add_row(name, Text(value))
    return table


RANK_COLUMNS = ("rank", "file", "step", "compute", "comm", "exposed", "idle", "overlap", "wait")
_RANK_NOTES = {  # shared.rank_notes keys in the terminal's words
    "straggler": "◀ straggler: rank {rank} (the others wait {wait} of each step inside collectives for it)",
    "no_straggler": "no straggler: the ranks wait {wait} of the step for one another",
    "slow_link": "slow link: every rank's collectives are slow",
    "link_not_slow": "link not slow: the transfers are mostly hidden or short",
    "exposed": "exposed communication {share} of the step",
    "skew": "step-time skew {skew}",
    "bus_bandwidth": "bus bandwidth {gbs} GB/s",
}


def rank_grid(title: str, ranks: Sequence[RankFigures], marked: int | None, mark_style: str,
              table_box: box.Box = box.SIMPLE_HEAD) -> Table:
    """The per-rank table (per step) with one rank marked ◀ (the straggler, or the slowest rank of an ingest)."""
    table = Table(title=title, box=table_box, title_justify="left", collapse_padding=True, pad_edge=False)
    for name in RANK_COLUMNS:
        table.add_column(name, justify="left" if name == "file" else "right", no_wrap=True,
                         overflow="ellipsis", min_width=8 if name == "file" else None)
    for r in ranks:
        hit = r.rank == marked
        table.add_row(f"{r.rank}{' ◀' if hit else ''}", Text(Path(r.file).name), *shared.rank_cells(r, ""),
                      style=mark_style if hit else None)
    return table


def ranks_table(report: Report) -> Table | None:
    """The job's ranks as their traces show them (per step), the straggler marked, and what tells it from a slow
    link."""
    cluster = report.cluster
    if cluster is None or not cluster.ranks:
        return None
    of = f" of {cluster.world_size}" if cluster.world_size else ""
    table = rank_grid(f"Ranks ({len(cluster.ranks)} traced{of}; per step)", cluster.ranks, cluster.straggler_rank,
                      "bold red")
    table.caption = "; ".join(_RANK_NOTES[key].format(**values) for key, values in shared.rank_notes(cluster))
    return table


def findings_table(report: Report) -> Table | None:
    if not report.findings:
        return None
    table = FitTable(title="Findings", box=box.SIMPLE_HEAD, title_justify="left", show_lines=False)
    table.add_column("severity", no_wrap=True)
    # the message wraps; the rule id on its own line under it, and the fact names of the evidence, stay whole
    table.add_column("finding", overflow="fold", min_width=longest(f.rule_id for f in report.findings))
    table.add_column("evidence", overflow="fold",
                     min_width=longest(word for f in report.findings for e in f.evidence for word in e.test.split()))
    for f in report.findings:
        evidence = "\n".join(e.test for e in f.evidence)
        finding = Text(f.message)  # rule text is printed as text: "[/x]" in a message is not rich markup
        finding.append(f"\n{f.rule_id}", style="dim")
        table.add_row(Text(f.severity, style=_SEVERITY_STYLE[f.severity]), finding, Text(evidence))
    return table


def optimizations_table(report: Report) -> Table | None:
    if not report.recommended and not report.wasted and not report.applied:
        return None
    table = FitTable(title="Recommended vs wasted", box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("optimization", overflow="fold")
    table.add_column("why", overflow="fold")
    table.add_column("max gain", justify="right", no_wrap=True)
    for i, rec in enumerate(report.recommended, 1):
        gain = f"≤ {rec.expected_gain.max_speedup:.2f}x" if rec.expected_gain else "unknown"
        why = Text(rec.why)
        why.append(f"\n{rec.how}", style="dim")
        table.add_row(str(i), Text(rec.title, style="green"), why, gain)
    for w in report.wasted:
        table.add_row("✗", Text(w.title, style="red strike"), Text(w.reason, style="red"), "wasted")
    for a in report.applied:
        table.add_row("✓", Text(a.title, style="dim"), Text(f"already applied ({a.source}): not recommended again",
                                                            style="dim"), "applied")
    return table


def scorecard_table(report: Report) -> Table:
    table = FitTable(title="D·A·M scorecard (seed Table 5)", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("axis", "metric", "value", "band", "bands"):
        table.add_column(col, no_wrap=col in ("axis", "value", "band"), overflow="fold")
    for row in report.scorecard:
        table.add_row(row.axis, Text(row.title), shared.percent_text(row.value),
                      Text(row.band, style=_BAND_STYLE[row.band]), Text(row.bands))
    return table


def measurements_table(report: Report) -> RenderableType | None:
    """The next measurements: fact, tool, how and why side by side; below 80 columns the tool, how and why stacked in
    one column beside the fact."""
    if not report.next_measurements:
        return None
    title = "Next measurements"
    table = FitTable(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("fact", "tool", "how", "why"):
        table.add_column(col, no_wrap=col == "fact", overflow="fold")
    narrow = FitTable(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    narrow.add_column("fact", no_wrap=True)
    narrow.add_column("tool · how · why", overflow="fold")
    for m in report.next_measurements:
        fact = m.fact or f"({m.axis} axis)"
        table.add_row(fact, Text(m.tool), Text(m.how), Text(m.why))
        stacked = Text(m.tool, style="bold")
        stacked.append(f"\n{m.how}")
        stacked.append(f"\n{m.why}", style="dim")
        narrow.add_row(fact, stacked)
    return ByWidth(NARROW, table, narrow)


def missing_table(report: Report, limit: int = 8) -> Table | None:
    if not report.missing:
        return None
    table = FitTable(title="Missing evidence (would sharpen or decide the diagnosis)", box=box.SIMPLE_HEAD,
                     title_justify="left")
    table.add_column("fact", no_wrap=True)
    table.add_column("question", overflow="fold")
    for m in report.missing[:limit]:
        table.add_row(m.fact, Text(m.question))
    if len(report.missing) > limit:
        table.caption = f"and {len(report.missing) - limit} more (see --format json)"
    return table


def resolution_notes(report: Report) -> Text | None:
    """The choices the expert made for the user while reading the input ("h100 -> h100-sxm (the most common ...)")."""
    notes = [str(obs.detail["note"]) for obs in report.observations.values()
             if "resolved_from" in obs.detail and "note" in obs.detail]
    return Text("\n".join(f"Assumed {note}" for note in notes), style="dim") if notes else None


def _pct(value: float | None) -> str:
    return shared.share_text(value, "")


def time_breakdown_section(report: Report) -> RenderableType | None:
    """Where the GPU time goes (profiler traces): kernel classes as bars, top kernels and operators with their share,
    arithmetic intensity and % of roof, and what the GPU idle time was."""
    return None if report.time_breakdown is None else time_breakdown_view(report.time_breakdown)


def time_breakdown_view(tb: TimeBreakdown) -> RenderableType:
    """The "where the time goes" section for one time breakdown (also shown by `dam ingest`)."""
    parts: list[RenderableType] = []
    head = Text(f"window: {tb.window.reason}", style="dim")
    if tb.roof is not None:
        head.append(f"\nroof: {shared.roof_text(tb.roof)}", style="dim")
    parts.append(head)
    if tb.classes:
        classes = FitTable(title=f"Where the GPU time goes ({tb.gpu_time_s:.4g} s of GPU activity, "
                                 f"{tb.kernels} kernels)", box=box.SIMPLE_HEAD, title_justify="left")
        # class names and figures are never cut: a narrow terminal shortens the bar and wraps the headers
        cells = [(c.class_, f"{c.share:.1%}", shared.number_text(c.arithmetic_intensity), _pct(c.pct_of_roof))
                 for c in tb.classes]
        classes.add_column("class", no_wrap=True)
        classes.add_column("share", justify="right", no_wrap=True)
        classes.add_column("", min_width=4)
        classes.add_column("FLOP/B", justify="right", min_width=longest((c[2] for c in cells), "FLOP/B"))
        classes.add_column("% of roof", justify="right", min_width=longest((c[3] for c in cells), "% of roof"))
        for c, (name, share, intensity, roof) in zip(tb.classes, cells, strict=True):
            # class names are an observation file's text where it carries a time breakdown: text, never markup
            classes.add_row(Text(name), share, Bar(c.share, "magenta" if c.memory_bound_by_nature else "cyan"),
                            intensity, roof)
        if tb.memory_bound_share is not None:
            classes.caption = f"memory-bound by nature (magenta): {tb.memory_bound_share:.0%} of GPU time"
        parts.append(classes)
    for title, entries in shared.top_lists(tb):
        parts.append(_top_table(title, entries[:8]))
    if tb.idle is not None:
        line = Text("GPU busy ", style="bold")
        line.append(shared.idle_text(tb.idle))
        host = shared.host_during_idle(tb)
        if host:
            line.append("\nwhile the GPU idled the host ran: " + ", ".join(f"{e.name} ({e.share:.0%})" for e in host),
                        style="dim")
        parts.append(line)
    if tb.totals is not None and tb.totals.flops:
        t = tb.totals
        parts.append(Text(f"shape-derived: {t.flops:.3g} FLOP, {t.bytes or 0:.3g} B, "
                          f"{shared.number_text(t.arithmetic_intensity)} FLOP/B, "
                          f"{shared.number_text(t.achieved_tflops)} TFLOP/s on the GPU, {_pct(t.pct_of_roof)} of roof "
                          f"(operators covering {_pct(tb.flops_coverage)} of launched GPU time)", style="dim"))
    for note in tb.notes:
        parts.append(Text(f"note: {note}", style="dim"))
    return Group(Text("Where the time goes", style="bold cyan"), *parts)


def _top_table(title: str, entries: Sequence[TimeEntry]) -> RenderableType:
    """A top-N list (kernels, operators, modules): the name takes the width the figures leave, and a long one is cut
    keeping what tells it from the others; below 80 columns each name has a line of its own, the figures under it."""
    cells = [(e.class_ or "", f"{e.share:.1%}", shared.number_text(e.arithmetic_intensity), _pct(e.pct_of_roof))
             for e in entries]
    names = short_names([e.name for e in entries])
    table = FitTable(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("name", min_width=12)
    table.add_column("class", no_wrap=True)
    table.add_column("share", justify="right", no_wrap=True)
    table.add_column("FLOP/B", justify="right", min_width=longest((c[2] for c in cells), "FLOP/B"))
    table.add_column("% of roof", justify="right", min_width=longest((c[3] for c in cells), "% of roof"))
    narrow = FitTable(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    narrow.add_column("name: class, share, FLOP/B, % of roof", overflow="fold")
    for name, (class_, share, intensity, roof) in zip(names, cells, strict=True):
        table.add_row(name, Text(class_), share, intensity, roof)
        figures = Text("  " + ", ".join(filter(None, (class_, share, intensity and f"{intensity} FLOP/B",
                                                      roof and f"{roof} of roof"))), style="dim")
        narrow.add_row(Group(name, figures))
    return ByWidth(NARROW, table, narrow)


def report_renderable(report: Report) -> RenderableType:
    parts: list[RenderableType] = [verdict_panel(report)]
    notes = resolution_notes(report)
    if notes is not None:
        parts.append(notes)
    sections = (iron_law_table(report), time_breakdown_section(report), cluster_table(report), ranks_table(report),
                findings_table(report), optimizations_table(report), scorecard_table(report),
                measurements_table(report), missing_table(report))
    for part in sections:
        if part is not None:
            parts.append(part)
    return Group(*parts)


def print_report(report: Report, console: Console | None = None) -> None:
    (console or SafeConsole()).print(report_renderable(report))
