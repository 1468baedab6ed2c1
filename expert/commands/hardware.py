"""`dam hardware list|show ID`: the hardware catalog (and the entries of a --hardware-file)."""

from __future__ import annotations

import argparse
from typing import Any

from ._common import add_hardware_file_option, make_expert

EPILOG = """\
examples:
  dam hardware list
  dam hardware show h100                  a family name: shows the variant it resolves to (h100-sxm)
  dam hardware show "NVIDIA A10G"         nvidia-smi's name works too
  dam hardware list --hardware-file my_gpu.yaml   the catalog plus your own entries
  dam hardware list --mig                 the MIG slices (Multi-Instance GPU profiles) instead of whole parts
  dam hardware show "NVIDIA A100-SXM4-40GB MIG 1g.5gb"   a MIG slice, as torch.cuda.get_device_name prints it

peaks are dense (never the 2:4-sparse headline); "—" means the vendor publishes no figure, "n/a" that the part has
no such format (the V100 has no bf16). A --hardware-file holds entries of the catalog's schema
(knowledge_base/hardware.yaml; JSON Schema: dam schema hardware).
"""


def register(sub: Any) -> None:
    p = sub.add_parser("hardware", help="the hardware catalog (dense peaks, bandwidth, ridge points)",
                       description="List the hardware catalog, or show one entry with its sources.", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["list", "show"])
    p.add_argument("id", nargs="?", help="catalog id, alias, device name or family name (for show)")
    p.add_argument("--mig", action="store_true",
                   help="list the MIG slices (each Multi-Instance GPU profile of a part) instead of whole parts")
    add_hardware_file_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..errors import ObservationError, Problem
    from ..report.render.console import SafeConsole as Console

    if args.action == "show" and not (args.id or "").strip():  # a usage error: said before the catalog loads
        raise ObservationError([Problem("ID", "dam hardware show needs the hardware to show",
                                        "give a catalog id, alias, device name or family name, e.g. dam hardware "
                                        "show h100-sxm; dam hardware list gives every id")],
                               title="missing argument")
    kb = make_expert(args).kb
    console = Console()
    if args.action == "list":
        # ids alone below NAMES_FROM columns (the caption says so), and a tighter table below 80
        console.print(catalog_table(kb, with_names=console.width >= NAMES_FROM, compact=console.width < 80,
                                    mig=args.mig))
        return 0
    found = kb.hardware_resolution(args.id)
    if found is None:
        close = kb.close_hardware(args.id, cutoff=0.4)
        raise ObservationError([Problem(f"hardware {args.id}", "not in the catalog",
                                        f"did you mean {', '.join(close)}?" if close else "see dam hardware list")],
                               title="unknown hardware")
    if found.note:
        from rich.text import Text

        console.print(Text(found.note, style="dim"))  # it quotes what the user typed
    console.print(entry_table(kb, kb.hardware[found.id]))
    return 0


NAMES_FROM = 100  # the terminal columns from which `dam hardware list` has room for each entry's name


def catalog_table(kb: Any, with_names: bool = True, compact: bool = False, mig: bool = False) -> Any:
    """The catalog as a rich table: one row per entry, dense peaks, memory and the bf16 ridge point; `compact`
    (a terminal under 80 columns) draws no borders, so that every figure still fits whole at 60. The whole parts,
    or with `mig` their MIG slices."""
    from rich import box
    from rich.text import Text

    from ..kb.mig import mig_profile
    from ..report.render.fit import FitTable

    caption = ("ridge: bf16 (else fp16) peak over bandwidth, FLOP/byte · — no published figure · n/a no such format "
               "· dam hardware show ID: every format, links, sources")
    slices = sum(1 for hw in kb.hardware.values() if hw.mig_of is not None)
    if slices and not mig:
        caption += f" · {slices} MIG slices: dam hardware list --mig"
    if not with_names:
        caption += f" · names from {NAMES_FROM} columns on (dam hardware show ID gives them)"
    style: dict[str, Any] = ({"box": box.SIMPLE_HEAD, "show_edge": False, "pad_edge": False, "collapse_padding": True}
                             if compact else {})
    if mig:
        caption += (" · a slice's id: PART-mig-PROFILE with - for . (a100-40gb-mig-1g-5gb); its device name works "
                    "too (NVIDIA A100-SXM4-40GB MIG 1g.5gb)")
    title = ("MIG slices (dense peaks in TFLOP/s; bandwidth in GB/s)" if mig
             else "Hardware catalog (dense peaks in TFLOP/s; memory in GB and GB/s)")
    table = FitTable(title=title, caption=caption, **style)
    if mig:  # the part and the profile: narrower than the slice's id, so that every figure fits at 60 columns
        table.add_column("part", no_wrap=True)
        table.add_column("profile", no_wrap=True)
    else:
        table.add_column("id", no_wrap=True)
    if with_names:
        table.add_column("name", ratio=1, overflow="fold")
    # a slice's memory is in its profile's name (1g.5gb) and its fp32 rate in `dam hardware show`
    figures = ("bf16", "fp8", "GB/s", "ridge") if mig else ("bf16", "fp8", "fp32", "memory", "GB/s", "ridge")
    for col in figures:
        # a figure is never cut: on a narrow terminal "80 HBM3" and "125 (fp16)" wrap between their words instead
        table.add_column(col, justify="right", no_wrap=col not in ("bf16", "memory"), overflow="fold")
    for hw in kb.hardware.values():
        if (hw.mig_of is not None) != mig:
            continue
        half = "bf16" if "bf16" in hw.peak_tflops else "fp16"
        peak = hw.peak(half)
        bw = hw.memory_bandwidth_gbs
        ridge = f"{peak * 1e12 / (bw * 1e9):.0f}" if peak and bw else "—"
        bf16 = _peak(hw, half) + (" (fp16)" if half == "fp16" and "fp16" in hw.peak_tflops else "")
        # the memory type is a --hardware-file's text too
        memory = f"{hw.memory_gb:g} {hw.memory_type or ''}".strip() if hw.memory_gb is not None else "—"
        name = [Text(hw.name)] if with_names else []  # a --hardware-file's text is printed as text, never markup
        if mig:
            table.add_row(Text(hw.mig_of), Text(mig_profile(hw)), *name, bf16, _peak(hw, "fp8"), _opt(bw), ridge)
        else:
            table.add_row(Text(hw.id), *name, bf16, _peak(hw, "fp8"), _peak(hw, "fp32"), Text(memory), _opt(bw), ridge)
    return table


def entry_table(kb: Any, hw: Any) -> Any:
    """One entry as a rich table: every dtype, memory, links, sparsity, aliases, source and notes (each value printed
    as text: a --hardware-file's "[/x]" is not rich markup)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(f"{hw.id}: {hw.name}"), show_header=False)
    table.add_column("field")
    table.add_column("value", overflow="fold")  # a long source URL wraps, never truncated

    def row(field: str, value: str) -> None:
        table.add_row(field, Text(value))

    for dtype in kb.units.dtypes:
        row(f"dense {dtype} peak", _peak_text(hw, dtype))
    row("memory", ", ".join(filter(None, (
        f"{hw.memory_gb:g} GB" if hw.memory_gb is not None else "size not published", hw.memory_type,
        f"{hw.memory_bandwidth_gbs:g} GB/s" if hw.memory_bandwidth_gbs is not None else "bandwidth not published"))))
    if hw.host_link:
        row("host link", hw.host_link + _link_gbs(hw.host_link_gbs))
    if hw.scale_up_link:
        row("scale-up link", hw.scale_up_link + _link_gbs(hw.scale_up_gbs))
    row("vendor headline is sparse", "yes (dense shown: half of it)" if hw.sparse_headline else "no")
    row("aliases", ", ".join(hw.aliases) or "—")
    if hw.mig_of is not None:
        row("MIG slice of", hw.mig_of)
    families = [name for name, f in kb.hardware_families.items() if f.default == hw.id]
    if families:
        row("default of family", ", ".join(families))
    row("source", hw.source)
    if hw.notes:
        row("notes", hw.notes)
    return table


def _peak(hw: Any, dtype: str) -> str:
    if dtype not in hw.peak_tflops:
        return "n/a"
    return _opt(hw.peak(dtype))


def _peak_text(hw: Any, dtype: str) -> str:
    if dtype not in hw.peak_tflops:
        return "no such format on this part"
    peak = hw.peak(dtype)
    unit = "TOPS" if dtype == "int8" else "TFLOP/s"
    return f"{peak:g} {unit}" if peak is not None else "not published by the vendor"


def _link_gbs(gbs: float | None) -> str:
    return f" ({gbs:g} GB/s bidirectional)" if gbs is not None else " (bandwidth not published)"


def _opt(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"
