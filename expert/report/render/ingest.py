"""Rich terminal view of an IngestResult: the facts, where each came from, and what could not be derived."""

from __future__ import annotations

from rich import box
from rich.console import Console, Group
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

from ...ingest import IngestResult
from ...kb.knowledge import KnowledgeBase
from ._parts import seconds_text
from .fit import FitTable
from .terminal import NARROW, rank_grid, time_breakdown_view


def _value(name: str, value: object, kb: KnowledgeBase | None) -> str:
    spec = kb.facts.get(name) if kb is not None else None
    if isinstance(value, float):
        if spec is not None and spec.type == "fraction":
            return f"{value:.1%}"
        if spec is not None and spec.unit == "s" and value < 1:
            return f"{value * 1e3:.4g} ms"
        unit = f" {spec.unit}" if spec is not None and spec.unit else ""
        return f"{value:.4g}{unit}"
    return str(value)


def _range(detail: dict[str, int | float | str], name: str, kb: KnowledgeBase | None) -> str:
    if "min" in detail and "max" in detail:
        return f"{_value(name, detail['min'], kb)} – {_value(name, detail['max'], kb)}"
    return ""


def job_table(result: IngestResult) -> Table | None:
    """The ranks of a multi-GPU job as their traces show them (per step), the rank the others wait for marked."""
    job = result.job
    if job is None or not job.ranks:
        return None
    of = f" of {job.world_size}" if job.world_size else ""
    table = rank_grid(f"Ranks ({len(job.ranks)} traced{of}, {job.mode}; per step)", job.ranks, job.slowest_rank,
                      "bold", box.SIMPLE_HEAVY)
    parts = []
    if job.slowest_rank is not None and job.sync_wait_s is not None:
        parts.append(f"◀ rank {job.slowest_rank}, the one the others wait for "
                     f"({seconds_text(job.sync_wait_s, '')} per step inside collectives)")
    if job.compute_skew is not None:
        parts.append(f"its compute is {job.compute_skew:.0%} longer than the median rank's")
    if job.step_time_skew is not None:
        parts.append(f"step-time skew {job.step_time_skew:.1%}")
    if job.bus_bandwidth is not None:
        parts.append(f"bus bandwidth {job.bus_bandwidth:.3g} GB/s")
    table.caption = "; ".join(parts)
    return table


def print_ingest(result: IngestResult, console: Console, kb: KnowledgeBase | None = None) -> None:
    """Print the ingested facts, the facts that could not be derived (and why), notes and per-file statistics."""
    if kb is None:
        from ...ingest._kb import default_kb

        kb = default_kb()
    observed = result.observations.facts
    # the one source and the one window the facts have (where they name one) are said once, in the title; where
    # facts differ, each row says its own
    named = {"window": {str(obs.detail["window"]) for obs in observed.values() if obs.detail.get("window")},
             "source": {str(obs.source or "") for obs in observed.values()}}
    shared = {key: next(iter(values)) for key, values in named.items() if len(values) == 1 and len(observed) > 1}
    title = " · ".join(["Observations", *(f"{label} {escape(shared[key])}" for key, label in
                                          (("source", "from"), ("window", "window")) if shared.get(key))])
    facts = FitTable(title=title, box=box.SIMPLE_HEAVY, title_justify="left")
    # below 80 columns each fact is a line of its own, its range and where it came from indented under it (the whole
    # width: a column beside the fact names would leave too little to read); from 80 on, a long value (operator
    # names) wraps, so that there is still room beside it for where each came from
    narrow = console.width < NARROW
    if narrow:
        facts.add_column("fact: value, ← from", overflow="fold")
    else:
        facts.add_column("fact", no_wrap=True, style="bold")
        facts.add_column("value", overflow="fold", max_width=30)
        facts.add_column("← from", overflow="fold", min_width=24)
    for name, obs in observed.items():
        detail = dict(obs.detail)
        span = _range(detail, name, kb)
        # values, device names and file names come from the input: printed as text, never as rich markup
        parts = (detail.get("method"), None if "window" in shared else detail.get("window"),
                 None if "source" in shared else obs.source)
        source = escape(" · ".join(str(x) for x in parts if x))
        if narrow:
            under = "\n".join(filter(None, (escape(span) if span else "", f"← {source}" if source else "")))
            facts.add_row(Group(f"[bold]{escape(name)}[/bold]  {escape(_value(name, obs.value, kb))}",
                                Padding(f"[dim]{under}[/dim]", (0, 0, 0, 2))) if under else
                          f"[bold]{escape(name)}[/bold]  {escape(_value(name, obs.value, kb))}")
        else:
            value = escape(_value(name, obs.value, kb)) + (f"\n[dim]{escape(span)}[/dim]" if span else "")
            facts.add_row(f"[bold]{escape(name)}[/bold]", value, source)
    console.print(facts)
    ranks = job_table(result)
    if ranks is not None:
        console.print(ranks)
    if result.not_derived:
        missing = FitTable(title="Not derived", box=box.SIMPLE, title_justify="left")
        missing.add_column("fact", style="yellow", no_wrap=True)
        missing.add_column("why", overflow="fold")
        for name, reason in result.not_derived.items():
            missing.add_row(escape(name), escape(reason))
        console.print(missing)
    if result.time_breakdown is not None:
        console.print(time_breakdown_view(result.time_breakdown))
    for note in result.notes:
        console.print(f"[dim]note:[/dim] {escape(note)}")
    for f in result.files:
        stats = ", ".join(f"{k} {v}" for k, v in f.stats.items())
        console.print(f"[dim]{escape(f.name)} ({f.format}): {escape(stats)}[/dim]")
    console.print("[dim]save with --as yaml --output FILE, then: dam diagnose FILE "
                  "(or run dam diagnose --from FILE... directly)[/dim]")
