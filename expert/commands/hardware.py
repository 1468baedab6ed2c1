"""`dam hardware list|show ID`: the hardware catalog."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("hardware", help="the hardware catalog (dense peaks, bandwidth, ridge points)",
                       description="List the hardware catalog, or show one entry with its sources.")
    p.add_argument("action", choices=["list", "show"])
    p.add_argument("id", nargs="?", help="catalog id or device name (for show)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    import expert

    from ..errors import ObservationError, Problem

    kb = expert.default_expert().kb
    console = Console()
    if args.action == "list":
        table = Table(title="Hardware catalog (dense peaks; TFLOP/s, GB/s)")
        for col in ("id", "name", "bf16", "fp8", "fp32", "memory GB/s", "ridge bf16 FLOP/B"):
            table.add_column(col)
        for hw in kb.hardware.values():
            bf16 = hw.peak("bf16") or hw.peak("fp16")
            ridge = f"{bf16 * 1e12 / (hw.memory_bandwidth_gbs * 1e9):.0f}" if bf16 else "—"
            table.add_row(hw.id, hw.name, _opt(bf16), _opt(hw.peak("fp8")), _opt(hw.peak("fp32")),
                          f"{hw.memory_bandwidth_gbs:g}", ridge)
        console.print(table)
        return 0
    hw_id = kb.resolve_hardware(args.id or "")
    if hw_id is None:
        import difflib

        close = difflib.get_close_matches((args.id or "").casefold(), list(kb.hardware), n=3, cutoff=0.4)
        raise ObservationError([Problem(f"hardware {args.id}", "not in the catalog",
                                        f"did you mean {', '.join(close)}?" if close else "see dam hardware list")])
    hw = kb.hardware[hw_id]
    table = Table(title=f"{hw.id}: {hw.name}", show_header=False)
    table.add_column("field")
    table.add_column("value")
    for dtype, peak in hw.peak_tflops.items():
        table.add_row(f"dense {dtype} peak", f"{peak:g} TFLOP/s" if peak is not None else "not published")
    table.add_row("memory", f"{hw.memory_gb:g} GB {hw.memory_type}, {hw.memory_bandwidth_gbs:g} GB/s")
    if hw.host_link:
        table.add_row("host link", f"{hw.host_link} ({hw.host_link_gbs:g} GB/s bidirectional)")
    if hw.scale_up_link:
        table.add_row("scale-up link", hw.scale_up_link + (f" ({hw.scale_up_gbs:g} GB/s)" if hw.scale_up_gbs else ""))
    table.add_row("vendor headline is sparse", "yes (dense shown)" if hw.sparse_headline else "no")
    table.add_row("aliases", ", ".join(hw.aliases))
    table.add_row("source", hw.source)
    if hw.notes:
        table.add_row("notes", hw.notes)
    console.print(table)
    return 0


def _opt(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"
