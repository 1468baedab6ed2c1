"""Rich terminal view of an IngestResult: the facts, where each came from, and what could not be derived."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from ..ingest import IngestResult
from ..knowledge import KnowledgeBase


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


def print_ingest(result: IngestResult, console: Console, kb: KnowledgeBase | None = None) -> None:
    """Print the ingested facts, the facts that could not be derived (and why), notes and per-file statistics."""
    if kb is None:
        from ..ingest import _default_kb

        kb = _default_kb()
    facts = Table(title="Observations", box=box.SIMPLE_HEAVY, title_justify="left")
    facts.add_column("fact", no_wrap=True, style="bold")
    facts.add_column("value", no_wrap=True)
    facts.add_column("← from", overflow="fold")
    for name, obs in result.observations.facts.items():
        detail = dict(obs.detail)
        span = _range(detail, name, kb)
        value = _value(name, obs.value, kb) + (f"\n[dim]{span}[/dim]" if span else "")
        how = " · ".join(str(x) for x in (detail.get("method"), detail.get("window"), obs.source) if x)
        facts.add_row(name, value, how)
    console.print(facts)
    if result.not_derived:
        missing = Table(title="Not derived", box=box.SIMPLE, title_justify="left")
        missing.add_column("fact", style="yellow")
        missing.add_column("why", overflow="fold")
        for name, reason in result.not_derived.items():
            missing.add_row(name, reason)
        console.print(missing)
    if result.time_breakdown is not None:
        from .terminal import time_breakdown_view

        console.print(time_breakdown_view(result.time_breakdown))
    for note in result.notes:
        console.print(f"[dim]note:[/dim] {note}")
    for f in result.files:
        stats = ", ".join(f"{k} {v}" for k, v in f.stats.items())
        console.print(f"[dim]{f.name} ({f.format}): {stats}[/dim]")
    console.print("[dim]save with --as yaml --output FILE, then: dam diagnose FILE "
                  "(or run dam diagnose --from FILE... directly)[/dim]")
