"""What the renderers share: the words and numbers of a section, formatted once; the terminal, Markdown and HTML
renderers wrap them in their own markup. Nothing here decides: every decision is already in the report."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...breakdown import IdleShares, RoofSpec, TimeBreakdown, TimeEntry
from ...observations.normalise import RankFigures
from ..model import UNEXPLAINED_TERM, ClusterSection, EvidenceLimit, IronLaw

# ---- values ---------------------------------------------------------------------------------------------------------


def value_text(value: object) -> str:
    """A fact value: floats to 4 significant digits, None as "?"."""
    if value is None:
        return "?"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def seconds_text(value: float | None, space: str = " ") -> str:
    """A duration in ms below a second, else in s ("?" when unknown); `space` goes between number and unit."""
    if value is None:
        return "?"
    return f"{value * 1e3:.3g}{space}ms" if value < 1 else f"{value:.3g}{space}s"


def share_text(value: float | None, missing: str = "?") -> str:
    """A share as a whole percentage."""
    return missing if value is None else f"{value:.0%}"


def percent_text(value: float | None) -> str:
    """A share to one decimal ("?" when unknown): scorecard values."""
    return "?" if value is None else f"{value:.1%}"


def number_text(value: float | None) -> str:
    """A measured number to 3 significant digits, blank when unknown (table cells of the time breakdown)."""
    return "" if value is None else f"{value:.3g}"


# ---- verdict --------------------------------------------------------------------------------------------------------


def limit_effect(limit: EvidenceLimit) -> str:
    """What a conflict or thin evidence did to the verdict."""
    return "verdict withheld" if limit.effect == "withheld" else f"strength capped at {limit.max_strength}"


# ---- iron law -------------------------------------------------------------------------------------------------------


def iron_law_notes(law: IronLaw, sequential: str = "sequential sum", efficiency: bool = True) -> list[str]:
    """What the iron-law table says beyond its terms: the measured step, the sequential and overlapped sums (the
    first called `sequential`), that the known terms overlap where their shares add up past 100 % (the unexplained
    line reads 0 then), and (with `efficiency`) where the efficiency came from."""
    notes = []
    if law.step_time_s is not None:
        notes.append(f"measured step {law.step_time_s:.4g} s")
    if law.sequential_s is not None and law.overlapped_s is not None:
        notes.append(f"{sequential} {law.sequential_s:.4g} s, overlapped ≥ {law.overlapped_s:.4g} s")
    known = [t.seconds for t in law.terms if t.term != UNEXPLAINED_TERM and t.seconds is not None]
    step = law.step_time_s
    if step and len(known) > 1 and sum(known) > step * 1.005:  # the shares add up past 100 %
        total = sum(known)
        notes.append(f"the known terms add up to {total / step:.0%} of the step: at least {total - step:.4g} s of "
                     "them run at the same time (or were measured over other windows), so none is unexplained")
    if efficiency and law.efficiency_source:
        notes.append(law.efficiency_source)
    return notes


# ---- cluster and ranks ----------------------------------------------------------------------------------------------


def cluster_facts(cluster: ClusterSection) -> list[tuple[str, Any]]:
    """The cluster summary's known figures, in field order (the per-rank rows apart)."""
    return [(name, value) for name, value in cluster.model_dump().items() if value is not None and name != "ranks"]


def rank_cells(rank: RankFigures, space: str = " ") -> list[str]:
    """One rank's measured columns: step, compute, comm, exposed comm, idle, overlap, waits."""
    return [seconds_text(rank.step_time_s, space), seconds_text(rank.compute_s, space),
            seconds_text(rank.comm_s, space), share_text(rank.exposed_comm_frac), share_text(rank.idle_frac),
            share_text(rank.comm_overlap_frac), seconds_text(rank.sync_wait_s, space)]


def rank_notes(cluster: ClusterSection) -> list[tuple[str, dict[str, str]]]:
    """What the rank table says beyond its rows, as (key, values) for a renderer's own phrasing: `straggler`
    (rank, wait), `no_straggler` (wait), `slow_link` or `link_not_slow`, `exposed` (share), `skew`, `bus_bandwidth`
    (GB/s). Rendered from `RANK_PROSE` (Markdown, HTML) or the terminal's terser words."""
    notes: list[tuple[str, dict[str, str]]] = []
    if cluster.straggler_rank is not None:
        notes.append(("straggler", {"rank": str(cluster.straggler_rank), "wait": share_text(cluster.sync_wait_frac)}))
    elif len(cluster.ranks) > 1 and cluster.sync_wait_frac is not None:
        notes.append(("no_straggler", {"wait": share_text(cluster.sync_wait_frac)}))
    if cluster.slow_link is not None:
        notes.append(("slow_link" if cluster.slow_link else "link_not_slow", {}))
    if cluster.comm_frac is not None:
        notes.append(("exposed", {"share": share_text(cluster.comm_frac)}))
    if cluster.step_time_skew is not None:
        notes.append(("skew", {"skew": f"{cluster.step_time_skew:.1%}"}))
    if cluster.bus_bandwidth is not None:
        notes.append(("bus_bandwidth", {"gbs": f"{cluster.bus_bandwidth:.3g}"}))
    return notes


RANK_PROSE: dict[str, tuple[str, str]] = {  # key -> (the lead a document sets in bold, the rest); "" for no lead
    "straggler": ("Straggler: rank {rank}", ": the other ranks wait {wait} of each step inside collectives for it."),
    "no_straggler": ("", "No straggler: the ranks wait {wait} of the step for one another."),
    "slow_link": ("", "Slow link: collectives are slow on every rank."),
    "link_not_slow": ("", "The link is not slow: the transfers are short or hidden behind compute."),
    "exposed": ("", "Exposed communication: {share} of the step."),
    "skew": ("", "Step-time skew (slowest rank over the median): {skew}."),
}
RANK_HEADERS = ("rank", "file", "step", "compute", "comm", "exposed comm", "idle", "overlap", "waits")


def rank_prose(cluster: ClusterSection, bold: Callable[[str], str]) -> list[tuple[str, str]]:
    """(key, sentence) of every rank note a document shows (`RANK_PROSE`), its lead wrapped by `bold`."""
    out = []
    for key, values in rank_notes(cluster):
        if key in RANK_PROSE:
            lead, rest = RANK_PROSE[key]
            out.append((key, (bold(lead.format(**values)) if lead else "") + rest.format(**values)))
    return out


# ---- where the time goes --------------------------------------------------------------------------------------------


def roof_text(roof: RoofSpec, escape: Callable[[str], str] = str) -> str:
    """The roof the shares are read against: "h100-sxm bf16, 989 TFLOP/s, 3350 GB/s (ridge 295 FLOP/B)"."""
    return (f"{escape(roof.hardware)} {escape(roof.dtype)}, {roof.peak_tflops:g} TFLOP/s, "
            f"{roof.peak_bandwidth_gbs:g} GB/s (ridge {roof.ridge_flop_per_byte:.3g} FLOP/B)")


def idle_text(idle: IdleShares) -> str:
    """The idle split after "GPU busy ": "45%; idle: input 30%, launch overhead 5%, ..."."""
    return (f"{idle.busy:.0%}; idle: input {idle.input:.0%}, launch overhead {idle.launch:.0%}, host compute "
            f"{idle.host_compute:.0%}, blocking syncs {idle.sync:.0%}, no host event {idle.unattributed:.0%}, "
            f"GPU-side waits {idle.gpu_wait:.0%}")


def top_lists(tb: TimeBreakdown) -> list[tuple[str, Sequence[TimeEntry]]]:
    """The non-empty top-N lists of a time breakdown with their titles: kernels, operators, modules."""
    lists = (("Top kernels", tb.top_kernels), ("Top operators (by the kernels they launched)", tb.top_ops),
             ("Top modules", tb.top_modules))
    return [(title, entries) for title, entries in lists if entries]


def host_during_idle(tb: TimeBreakdown) -> list[TimeEntry]:
    """What the host ran while the GPU idled, when host compute is a visible part of the idle time (the first 4)."""
    if tb.idle is None or not tb.host_during_idle or tb.idle.host_compute < 0.02:
        return []
    return list(tb.host_during_idle[:4])
