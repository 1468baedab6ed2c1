"""The analysed window of a timeline: step spans extended to the end of the GPU work launched in them, or without
steps a steady state (from the first GPU activity, after first-call warm-up, without stretches with no event); and
the host activity of the launching threads that both the window and the idle analysis read."""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..intervals import Interval, union
from .cover import Cover, intersect_all, union_columns
from .model import KIND_KERNEL, Timeline

if TYPE_CHECKING:
    from ...kb.knowledge import KernelCatalog


def step_windows(tl: Timeline, steps: Sequence[tuple[int, float, float]],
                 devices: set[int] | None) -> list[tuple[int, float, float]]:
    """Step spans (number, start, end), sorted by start, each extended to the end of the GPU work launched in it and
    clipped so the windows do not overlap (the TensorBoard plugin's device steps): (number, start, end) per step."""
    starts = [s[1] for s in steps]
    ends = [s[2] for s in steps]
    ext = list(ends)
    for i, at in enumerate(tl.launch):
        if at != at or (devices is not None and tl.g_dev[i] not in devices):  # NaN: launch not found
            continue
        k = bisect_right(starts, at) - 1
        if k >= 0 and at < ends[k] and tl.g_end[i] > ext[k]:
            ext[k] = tl.g_end[i]
    windows: list[tuple[int, float, float]] = []
    prev = -math.inf
    for (number, start, _), end in zip(steps, ext, strict=True):
        start = max(start, prev)
        if end > start:
            windows.append((number, start, end))
            prev = end
    return windows


@dataclass
class SteadyWindow:
    windows: list[Interval]
    reason: str
    excluded_us: float


def fmt_s(us: float) -> str:
    return f"{us / 1e6:.3g} s"


def steady_window(tl: Timeline, first_us: float, last_us: float, devices: set[int] | None,
                  catalog: KernelCatalog) -> SteadyWindow:
    """Without step spans: from the first GPU activity (what precedes it is initialisation), after the last kernel run
    for the first time (first-call warm-up) when a steady tail remains, to the last GPU activity, leaving out stretches
    with no event at all."""
    settings = catalog.analysis
    acts = [i for i in range(len(tl.g_start)) if devices is None or tl.g_dev[i] in devices]
    if not acts:
        return SteadyWindow([(first_us, last_us)], f"whole trace, 0 s–{fmt_s(last_us - first_us)} (no GPU "
                            "activity and no ProfilerStep spans)", 0.0)
    acts.sort(key=tl.g_start.__getitem__)
    g0 = tl.g_start[acts[0]]
    g1 = max(tl.g_end[i] for i in acts)
    parts: list[str] = []
    start = g0
    if g0 - first_us > 0:
        init = [r for r in range(len(tl.r_start)) if tl.r_start[r] < g0]
        longest = max(init, key=lambda r: tl.r_end[r] - tl.r_start[r], default=None)
        what = (f"; longest call {tl.names[tl.r_name[longest]]} {fmt_s(tl.r_end[longest] - tl.r_start[longest])}"
                if longest is not None and tl.r_end[longest] - tl.r_start[longest] > 0.1 * (g0 - first_us) else "")
        parts.append(f"from the first GPU activity at {fmt_s(g0 - first_us)} (before it: initialisation, no GPU "
                     f"work{what})")
    kernels = [i for i in acts if tl.g_kind[i] == KIND_KERNEL]
    seen: set[int] = set()
    last_new = -1
    for pos, i in enumerate(kernels):
        if tl.g_name[i] not in seen:
            seen.add(tl.g_name[i])
            last_new = pos
    tail = len(kernels) - 1 - last_new
    if kernels and tail >= max(1, settings.warmup_min_tail_share * len(kernels)):
        cut = tl.g_end[kernels[last_new]]
        if cut > start:
            parts.append(f"after first-call warm-up (until {fmt_s(cut - first_us)}, the end of the last kernel run "
                         f"for the first time; {tail} of {len(kernels)} kernels repeat after it)")
            start = cut
    elif kernels:
        parts.append(f"no steady tail after first-call warm-up ({len(seen)} distinct kernels, the last new one "
                     f"{tail} kernels before the end), so the warm-up is kept")
    # stretches without any event (host or GPU) are outside the workload
    slack = settings.event_free_gap_us / 2  # gaps shorter than this cannot be an event-free stretch
    host = host_intervals(tl, launching_threads(tl), launch_free_spans=True, slack=slack)
    busy = union([*union_columns(tl.g_start, tl.g_end, acts, slack=slack), *host, *tl.loader])
    return window_without_quiet_stretches(busy, start, g1, first_us, parts, settings.event_free_gap_us)


def launching_threads(tl: Timeline) -> set[int]:
    """Threads that launched GPU work (matched runtime calls); all threads with runtime calls, or all, otherwise."""
    matched = {tl.r_thread[r] for r in tl.launcher if r >= 0}
    if matched:
        return matched
    if len(tl.r_thread):
        return set(tl.r_thread)
    return set(tl.o_thread) | set(tl.s_thread)


def launch_starts(tl: Timeline) -> dict[int, list[float]]:
    """Per thread, the sorted start times of the runtime calls that launched GPU work (or of every launch call)."""
    per: dict[int, list[float]] = {}
    matched = {r for r in tl.launcher if r >= 0}
    for r in (matched or range(len(tl.r_start))):
        per.setdefault(tl.r_thread[r], []).append(tl.r_start[r])
    for v in per.values():
        v.sort()
    return per


def host_intervals(tl: Timeline, threads: set[int], *, launch_free_spans: bool,
                    blocking: set[int] | None = None, slack: float = 0.0) -> list[Interval]:
    """Union of host activity on `threads`: operators, runtime calls (less `blocking` names) and the spans (python
    functions, annotations) that launch no GPU work themselves; a span that launches is a caller whose own time is
    covered by what it calls."""
    ops = (i for i in range(len(tl.o_start)) if tl.o_thread[i] in threads)
    out = union_columns(tl.o_start, tl.o_end, ops, tl.o_thread, slack)
    inside = Cover(out)  # runtime calls run inside operators: only the few outside them add anything
    rts = (r for r in range(len(tl.r_start)) if tl.r_thread[r] in threads
           and (blocking is None or tl.r_name[r] not in blocking)
           and not inside.holds(tl.r_start[r], tl.r_end[r]))
    out = union([*out, *union_columns(tl.r_start, tl.r_end, rts, tl.r_thread, slack)])
    if launch_free_spans and len(tl.s_start):
        starts = launch_starts(tl)
        keep = []
        for i in range(len(tl.s_start)):
            th = tl.s_thread[i]
            if th not in threads:
                continue
            lst = starts.get(th, [])
            k = bisect_left(lst, tl.s_start[i])
            if k < len(lst) and lst[k] < tl.s_end[i]:
                continue  # launches GPU work: a caller
            keep.append(i)
        out = union([*out, *union_columns(tl.s_start, tl.s_end, keep, tl.s_thread, slack)])
    return out


def window_without_quiet_stretches(busy: list[Interval], start: float, g1: float, first_us: float, parts: list[str],
                                   gap_us: float) -> SteadyWindow:
    """The steady-state window from `start` to the last GPU activity `g1`, without the stretches of at least `gap_us`
    (the catalog's event_free_gap_us) in which nothing at all (`busy`: host or GPU) happens; `parts`, the reasons so
    far, gains what was left out. Shared by the in-memory timeline and the streamed nsys sweep."""
    inside = intersect_all(busy, [(start, g1)])
    windows: list[Interval] = []
    excluded = 0.0
    gaps = 0
    cur = seg_start = start
    for s, e in inside:
        if s - cur >= gap_us:
            if cur > seg_start:
                windows.append((seg_start, cur))
            excluded += s - cur
            gaps += 1
            seg_start = s
        cur = max(cur, e)
    if g1 > seg_start:
        windows.append((seg_start, g1))
    if gaps:
        parts.append(f"{gaps} stretch{'es' if gaps > 1 else ''} with no event at all left out ({fmt_s(excluded)}, "
                     f"each >= {gap_us / 1e3:g} ms)")
    parts.append(f"to the last GPU activity at {fmt_s(g1 - first_us)}")
    reason = "no ProfilerStep spans: steady-state window " + "; ".join(parts)
    return SteadyWindow(windows or [(start, g1)], reason, excluded)
