"""Several devices (or processes) in one export as the ranks of a job: each device's per-step computation,
communication, overlap and collectives, in the `rank_trace.RankTrace` the Kineto multi-rank path builds, so the same
cross-rank analysis (`ranks.analyse`: the rank the others wait for, sync wait, compute and step-time skew) runs on
them. Activity classes follow knowledge_base/distributed.yaml (HTA): NCCL/RCCL kernels are communication,
Memcpy/Memset memory, synchronisation kernels neither, every other kernel computation. A device is a rank; its
number is the device id (an export does not record torch.distributed ranks).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence

from .._result import FileResult, JobResult, Measured
from ..distributed import catalog
from ..intervals import Interval, intersect, union
from ..rank_trace import COMM, COMPUTE, MEMORY, NOT_COMPUTE, RankTrace
from ..timeline import KIND_KERNEL, Cover, Timeline

CLUSTER_FACTS = ("slowest_rank", "sync_wait_s", "compute_skew", "step_time_skew")
"""The cross-device facts of an export with several devices."""
COMM_FACTS = ("comm_frac", "comm_time_s", "comm_overlap_frac")
"""Measured on the device the others wait for, as the Kineto multi-rank path does (its collectives hold the least
waiting, so they describe the transfers and not the waits)."""


def device_rank(tl: Timeline, device: int, windows: Sequence[Interval], steps: Sequence[int], *, path: str,
                name: str, label: str) -> RankTrace:
    """One device's figures per window (sorted, disjoint) as a RankTrace; `steps` are the windows' step numbers
    (empty: one window without steps)."""
    cat = catalog()
    by_name: dict[tuple[int, int], int] = {}
    compute_u, comm_u, every_u = _Merged(), _Merged(), _Merged()
    comm_events: list[tuple[float, float, int]] = []
    names = tl.names
    g_start, g_end, g_dev, g_name, g_kind = tl.g_start, tl.g_end, tl.g_dev, tl.g_name, tl.g_kind
    for i in range(len(g_start)):
        if g_dev[i] != device:
            continue
        key = (g_name[i], g_kind[i])
        cls = by_name.get(key)
        if cls is None:
            text = names[key[0]]
            cls = by_name[key] = (MEMORY if key[1] != KIND_KERNEL or cat.memory.search(text) else
                                  COMM if cat.comm.search(text) else
                                  NOT_COMPUTE if cat.not_compute.search(text) else COMPUTE)
        s, e = g_start[i], g_end[i]
        every_u.add(s, e)
        if cls == COMPUTE:
            compute_u.add(s, e)
        elif cls == COMM:
            comm_u.add(s, e)
            comm_events.append((s, e, key[0]))
    compute, comm = compute_u.result(), comm_u.result()
    ws = list(windows)
    out = RankTrace(path=path, name=name, rank=device, rank_from="device", mode="gpu", device=device,
                    start_us=ws[0][0] if ws else 0.0, end_us=ws[-1][1] if ws else 0.0, label=label,
                    steps=list(steps)[: len(ws)])
    out.window_us = [b - a for a, b in ws]
    out.busy_us = _per_window(every_u.result(), ws)
    out.compute_us = _per_window(compute, ws)
    out.comm_us = _per_window(comm, ws)
    out.overlap_us = _per_window(intersect(comm, compute), ws)
    starts = [w[0] for w in ws]
    out.collectives = [[] for _ in ws]
    kinds: dict[int, str] = {}
    for s, e, nid in sorted(comm_events):
        k = bisect_right(starts, s) - 1
        if k < 0 or s >= ws[k][1]:
            continue
        kind = kinds.get(nid)
        if kind is None:
            kind = kinds[nid] = cat.kind(names[nid])
        out.collectives[k].append((kind, e - s, -1.0, -1))  # nsys does not record collective sizes
    return out


class _Merged:
    """The union of intervals added in start order, merged as they come (memory: the merged intervals only); any
    out of order are kept aside and merged at the end."""

    def __init__(self) -> None:
        self.done: list[Interval] = []
        self.late: list[Interval] = []
        self.s = self.e = math.nan

    def add(self, s: float, e: float) -> None:
        if self.s != self.s:
            self.s, self.e = s, e
        elif s < self.s:
            self.late.append((s, e))
        elif s <= self.e:
            if e > self.e:
                self.e = e
        else:
            self.done.append((self.s, self.e))
            self.s, self.e = s, e

    def result(self) -> list[Interval]:
        out = self.done + ([(self.s, self.e)] if self.s == self.s else [])
        return union(out + self.late) if self.late else out


def _per_window(spans: list[Interval], windows: Sequence[Interval]) -> list[float]:
    cover = Cover(spans)
    return [cover.between(a, b) for a, b in windows]


NO_STEPS = ("without NVTX step ranges the devices' collectives cannot be matched step by step (name the range that "
            "marks one step with --step-range NAME)")


def job_facts(job: JobResult, into: FileResult, *, comm_too: bool, have_steps: bool) -> None:
    """Copy the job's cross-device facts (and, when `comm_too`, its communication facts, measured on the device the
    others wait for) onto the export's result, with the export as their source."""
    if not have_steps:
        for fact in CLUSTER_FACTS:
            into.missing(fact, NO_STEPS)
        return
    wanted = (*CLUSTER_FACTS, *(COMM_FACTS if comm_too else ()))
    for fact in wanted:
        m = job.result.measured.get(fact)
        if m is not None:
            detail = dict(m.detail)
            if "rank" in detail:
                detail["device"] = detail["rank"]
            into.measured[fact] = Measured(fact=fact, value=m.value, source=f"{into.format}:{into.name}",
                                           detail=detail)
            into.not_derived.pop(fact, None)
        elif fact in job.result.not_derived and fact not in into.measured:
            into.not_derived[fact] = job.result.not_derived[fact].replace("ProfilerStep", "NVTX step")
