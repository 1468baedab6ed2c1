"""The analysis of a timeline window: busy share per device, each idle gap split by cause (input, blocking call,
launch overhead, host compute, GPU-side wait, unattributed; HTA's host/kernel/other split), host-to-device copies,
exposed communication, launches and blocking calls, what the host ran during host-compute gaps, and the time
breakdown (`breakdown.py`): a `TimelineAnalysis`."""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ...breakdown import IdleShares, TimeEntry, TraceWindow
from ..intervals import Interval, total, union
from .breakdown import breakdown
from .classes import Classifier
from .cover import Cover, intersect_all, subtract, union_columns
from .model import H2D, KIND_KERNEL, PAGEABLE, PINNED, Timeline
from .operators import Nesting
from .result import DeviceIdle, TimelineAnalysis, record_dispatch, slow_launches
from .roofline import Roof, sig6
from .windows import host_intervals, launch_starts, launching_threads

if TYPE_CHECKING:
    from ...kb.catalogs import TorchTypes
    from ...kb.knowledge import KernelCatalog

_NAN = math.nan


def idle_means(accs: Sequence[DeviceIdle], span: float) -> dict[str, float]:
    """The devices' busy time and idle split as shares of the window (`span`), averaged over the devices."""

    def mean(attr: str) -> float:
        return float(sum(getattr(a, attr) for a in accs)) / len(accs) / span

    return {key: min(1.0, max(0.0, mean(attr))) for key, attr in (
        ("busy", "busy"), ("data", "data"), ("launch", "launch"), ("host", "host"), ("sync", "sync"),
        ("unattributed", "unattributed"), ("gpu_wait", "gpu_wait"), ("hta_host", "hta_host"),
        ("hta_kernel", "hta_kernel"), ("hta_other", "hta_other"), ("h2d", "h2d"), ("comm", "comm"))}


def idle_shares(idle: dict[str, float]) -> IdleShares:
    """The breakdown's idle shares from `idle_means`."""
    return IdleShares(busy=sig6(idle["busy"]), input=sig6(idle["data"]), launch=sig6(idle["launch"]),
                      host_compute=sig6(idle["host"]), sync=sig6(idle["sync"]),
                      unattributed=sig6(idle["unattributed"]), gpu_wait=sig6(idle["gpu_wait"]))


def _launches_within(starts: Sequence[float], a: float, b: float) -> bool:
    """Whether a launch call starts in [a, b] (`starts` sorted)."""
    k = bisect_left(starts, a)
    return k < len(starts) and starts[k] <= b


class CoverLike(Protocol):
    """What a gap split asks of an interval set: covered length of [a, b], membership, emptiness (a `Cover`, or a
    `streams.CoverCursor` queried at nondecreasing times)."""

    @property
    def nonempty(self) -> bool: ...

    def between(self, a: float, b: float) -> float: ...

    def contains(self, t: float) -> bool: ...


class IntervalSink(Protocol):
    def append(self, interval: Interval, /) -> None: ...


def split_gap(acc: DeviceIdle, a: float, b: float, at: float, has_next: bool, short: float, cov_w: Cover,
              cov_l: CoverLike, cov_s: CoverLike, cov_h: CoverLike, sync_point: CoverLike, launch_gap: float,
              host_gaps: IntervalSink, cov_k: CoverLike | None = None) -> None:
    """Split one idle gap [a, b) by cause into `acc`: before an activity launched at `at` (NaN: launch unknown) when
    `has_next`, else before the window's end; gaps with host compute in them are appended to `host_gaps`. `cov_k`:
    the launching threads inside launch calls (`Classifier.is_launch_call`), less input and blocking calls; in a
    longer gap that time is launch overhead too, and `cov_h` (the host activity) leaves it out."""
    inside = b - a if cov_w.holds(a, b) else cov_w.between(a, b)
    if inside <= 0:
        return
    data = min(inside, cov_l.between(a, b)) if cov_l.nonempty else 0.0
    rest = max(0.0, inside - data)
    acc.data += data
    if at == at and at > a:
        acc.hta_host += rest
    elif has_next and b - a < short:
        acc.hta_kernel += rest
    else:
        acc.hta_other += rest
    if has_next and at == at and at <= a:
        acc.gpu_wait += rest  # already queued: the GPU waited on something of its own
        return
    if sync_point.nonempty and sync_point.contains(a):
        acc.sync += rest  # the host blocked while the GPU drained, then had to refill the queue
        return
    sync = min(rest, cov_s.between(a, b)) if cov_s.nonempty else 0.0
    acc.sync += sync
    rest -= sync
    if has_next and b - a <= launch_gap:
        acc.launch += rest
        return
    if cov_k is not None and cov_k.nonempty:
        calls = min(rest, cov_k.between(a, b))  # the host sat in a launch call (a slow first launch, say)
        acc.launch += calls
        rest -= calls
    hostc = min(rest, cov_h.between(a, b))
    acc.host += hostc
    acc.unattributed += rest - hostc
    if hostc > 0:
        host_gaps.append((a, b))


def analyse(tl: Timeline, windows: list[Interval], devices: set[int] | None, catalog: KernelCatalog, *,
            roof: Roof | None = None, source: str = "", window: TraceWindow | None = None,
            steps: Sequence[tuple[int, float, float]] = (), kernel_wait_us: float = 0.03,
            torch_types: TorchTypes | None = None) -> TimelineAnalysis | None:
    """Analyse the GPU activity of `devices` (None: all) inside `windows` (sorted, disjoint); None when no device has
    any activity there. `steps` (number, start, end) are the step windows, for the per-step times; `torch_types` the
    element types of operator inputs (`kb.units.torch_types()`; None: the bundled knowledge base's)."""
    return _Analyzer(tl, windows, devices, catalog, roof, kernel_wait_us, torch_types).run(source, window, steps)


class _Analyzer:
    def __init__(self, tl: Timeline, windows: list[Interval], devices: set[int] | None, catalog: KernelCatalog,
                 roof: Roof | None, kernel_wait_us: float, torch_types: TorchTypes | None = None) -> None:
        self.tl, self.windows, self.devices, self.catalog, self.roof = tl, windows, devices, catalog, roof
        self.torch_types = torch_types
        self.kernel_wait_us = kernel_wait_us
        self.cls = Classifier(catalog)
        self.span = total(windows)
        self.w_starts = [w[0] for w in windows]
        self.host_gaps: list[Interval] = []  # idle gaps (any device) with host compute in them

    def in_window(self, t: float) -> bool:
        k = bisect_right(self.w_starts, t) - 1
        return k >= 0 and t < self.windows[k][1]

    def run(self, source: str, window: TraceWindow | None,
            steps: Sequence[tuple[int, float, float]]) -> TimelineAnalysis | None:
        tl = self.tl
        n = len(tl.g_start)
        idx = [i for i in range(n) if self.devices is None or tl.g_dev[i] in self.devices]
        idx.sort(key=tl.g_start.__getitem__)
        idx.sort(key=tl.g_dev.__getitem__)  # stable: grouped by device, by start within a device
        names = tl.names
        blocking_names = {i for i, nm in enumerate(names) if self.cls.is_blocking(nm)}
        r_blocking = [r for r in range(len(tl.r_start)) if tl.r_name[r] in blocking_names]
        threads = launching_threads(tl)
        wl = self.windows
        loader = intersect_all(union(tl.loader), wl)
        sync_all = union_columns(tl.r_start, tl.r_end, (r for r in r_blocking if tl.r_thread[r] in threads))
        sync_w = intersect_all(subtract(sync_all, loader), wl)
        host = host_intervals(tl, threads, launch_free_spans=True, blocking=blocking_names)
        # the launching threads inside launch calls: launch overhead wherever the GPU idles (inside the host activity);
        # a launch call of analysis.one_off_launch_min_us (kernels.yaml) or more is a one-off (a first launch loading
        # its module), neither launch overhead nor host compute: its idle time is unattributed, and a note names it
        launch_names = {i for i, nm in enumerate(names) if self.cls.is_launch_call(nm)}
        calls = [r for r in range(len(tl.r_start)) if tl.r_name[r] in launch_names and tl.r_thread[r] in threads]
        one_off_us = self.catalog.analysis.one_off_launch_min_us
        in_launch = union_columns(tl.r_start, tl.r_end, (r for r in calls
                                                         if tl.r_end[r] - tl.r_start[r] < one_off_us))
        one_off = union_columns(tl.r_start, tl.r_end, (r for r in calls
                                                       if tl.r_end[r] - tl.r_start[r] >= one_off_us))
        launch_w = intersect_all(subtract(subtract(in_launch, loader), sync_all), wl)
        host_w = intersect_all(subtract(subtract(subtract(subtract(host, loader), sync_all), in_launch), one_off), wl)
        cov_w, cov_l, cov_s, cov_h, sync_point = Cover(wl), Cover(loader), Cover(sync_w), Cover(host_w), Cover(sync_all)
        cov_k = Cover(launch_w)
        launch_gap = self.catalog.analysis.launch_gap_max_us
        per_dev: list[tuple[int, DeviceIdle]] = []
        of, g_name, g_kind = self.cls.of, tl.g_name, tl.g_kind
        classes = [of(names, g_name[i], g_kind[i]) for i in range(n)]
        k = 0
        while k < len(idx):
            dev = tl.g_dev[idx[k]]
            j = k
            while j < len(idx) and tl.g_dev[idx[j]] == dev:
                j += 1
            acc = self._device(idx[k:j], classes, cov_w, cov_l, cov_s, cov_h, sync_point, launch_gap, cov_k)
            if acc.busy > 0:
                per_dev.append((dev, acc))
            k = j
        if not per_dev:
            return None
        used = {d for d, _ in per_dev}
        span = self.span or 1.0
        idle = idle_means([a for _, a in per_dev], span)
        in_w = [i for i in idx if tl.g_dev[i] in used and self.in_window(tl.g_start[i])]
        kernels = [tl.g_end[i] - tl.g_start[i] for i in in_w if tl.g_kind[i] == KIND_KERNEL]
        copies = {"pageable": 0.0, "pinned": 0.0, "unknown": 0.0}
        for i in in_w:
            flag = tl.g_flag[i]
            if flag & H2D:
                key = "pageable" if flag & PAGEABLE else "pinned" if flag & PINNED else "unknown"
                copies[key] += tl.g_end[i] - tl.g_start[i]
        graph_names = {i for i, nm in enumerate(names) if self.cls.is_graph_launch(nm)}
        graph_launches = sum(1 for r in range(len(tl.r_name)) if tl.r_name[r] in graph_names)
        blocking_in = [r for r in r_blocking if self.in_window(tl.r_start[r])]
        free_names = {i for i in blocking_names if self.cls.is_device_free(names[i])}
        blocked = Cover(intersect_all(union_columns(tl.r_start, tl.r_end, blocking_in), wl)).total
        slow = [(tl.names[tl.r_name[r]], cov_w.between(tl.r_start[r], tl.r_end[r])) for r in calls
                if tl.r_end[r] - tl.r_start[r] >= one_off_us]
        matched = sum(1 for x in tl.launch if x == x)
        time_breakdown, facts = breakdown(tl, self.cls, self.catalog, self.roof, in_w, classes, source, window, steps,
                                          sorted(used), graph_launches, self.torch_types)
        facts["_launch_gap_us"] = launch_gap
        facts["_one_off_launch_us"] = one_off_us
        facts["_slow_launch"] = slow_launches(slow, one_off_us)
        time_breakdown.host_during_idle, facts["idle_host_ops"] = self._host_during_idle(host_w, threads, facts)
        time_breakdown.idle = idle_shares(idle)
        return TimelineAnalysis(
            span_us=self.span, devices=sorted(used), activities=len(in_w), idle=idle, kernels=len(kernels),
            kernel_mean_us=sum(kernels) / len(kernels) if kernels else None,
            kernel_min_us=min(kernels) if kernels else None, kernel_max_us=max(kernels) if kernels else None,
            copies=copies, has_comm=any(c == "communication" for c in classes), has_runtime=bool(len(tl.r_start)),
            launches_matched=matched / len(tl.launch) if len(tl.launch) else 0.0, graph_launches=graph_launches,
            blocking_calls=len(blocking_in), blocking_share=min(1.0, blocked / span), breakdown=time_breakdown,
            facts=facts, device_frees=sum(1 for r in blocking_in if tl.r_name[r] in free_names))

    def _device(self, idx: list[int], classes: list[str], cov_w: Cover, cov_l: Cover, cov_s: Cover, cov_h: Cover,
                sync_point: Cover, launch_gap: float, cov_k: Cover) -> DeviceIdle:
        """One device: busy time in the windows, and each idle gap split (see the module docstring). One pass over
        the activities sorted by start: a gap is the stretch before an activity that starts after everything so far
        has ended, and that activity is the one whose launch decides the gap."""
        tl, acc = self.tl, DeviceIdle()
        if not idx or not self.windows:
            return acc
        launch, short = tl.launch, self.kernel_wait_us
        w_lo, w_hi = self.windows[0][0], self.windows[-1][1]
        g_start, g_end = tl.g_start, tl.g_end
        prev = w_lo  # the end of the GPU work so far (or the window start)
        ms = me = math.nan  # the merged busy interval being built
        for i in idx:
            s, e = g_start[i], g_end[i]
            if me == me and s <= me:
                if e > me:
                    me = e
                continue
            if me == me:
                acc.busy += cov_w.between(ms, me)
                if me > prev:
                    prev = me
            if s > prev:
                split_gap(acc, prev, s, launch[i], True, short, cov_w, cov_l, cov_s, cov_h, sync_point, launch_gap,
                          self.host_gaps, cov_k)
            ms, me = s, e
        if me == me:
            acc.busy += cov_w.between(ms, me)
            if me > prev:
                prev = me
        if acc.busy <= 0:
            return acc
        if prev < w_hi:
            split_gap(acc, prev, w_hi, _NAN, False, short, cov_w, cov_l, cov_s, cov_h, sync_point, launch_gap,
                      self.host_gaps, cov_k)
        # host-to-device copies and exposed communication on this device
        h2d = union_columns(g_start, g_end, (i for i in idx if tl.g_flag[i] & H2D))
        acc.h2d = Cover(intersect_all(h2d, self.windows)).total
        if any(classes[i] == "communication" for i in idx):
            comm_w = intersect_all(union_columns(g_start, g_end, (i for i in idx if classes[i] == "communication")),
                                   self.windows)
            compute = union_columns(g_start, g_end, (i for i in idx if classes[i] != "communication"))
            acc.comm = total(comm_w) - Cover(intersect_all(comm_w, compute)).total
        return acc

    def _host_during_idle(self, host_w: list[Interval], threads: set[int],
                          facts: dict[str, Any]) -> tuple[list[TimeEntry], str | None]:
        """What the launching threads ran while the GPU idled in host-compute gaps: each stretch of host activity in
        such a gap is credited to the innermost operator (or launch-free python function/annotation) around it.

        The stretches inside an operator whose outermost enclosing operator launched GPU work, neither of them a copy
        (kernels.yaml `calls.host_copy`), are the CPU side of the model's own GPU operators (dispatch, argument checks,
        allocation, library heuristics): their time goes to `facts["_host_dispatch_us"]`, and those outermost
        operators, most time first, to `facts["_host_dispatch_ops"]`. A stretch in CPU-only work (an operator tree
        that launches nothing, a python function) is not."""
        tl = self.tl
        facts["_host_dispatch_us"] = 0.0
        gaps = union(self.host_gaps)
        pieces = intersect_all(host_w, gaps)
        if not pieces:
            return [], None
        mids = [(a + b) / 2 for a, b in pieces]  # each piece is credited to what runs at its middle

        def around(starts: Sequence[float], ends: Sequence[float], thread: Sequence[int]) -> Nesting:
            keep = []
            for i in range(len(starts)):
                k = bisect_left(mids, starts[i])
                if k < len(mids) and mids[k] <= ends[i] and thread[i] in threads:
                    keep.append(i)
            return Nesting(starts, ends, thread, keep)

        ops = around(tl.o_start, tl.o_end, tl.o_thread)
        spans = around(tl.s_start, tl.s_end, tl.s_thread)
        calls = around(tl.r_start, tl.r_end, tl.r_thread)
        launches = launch_starts(tl)
        credit: dict[str, float] = {}
        count: dict[str, int] = {}
        dispatch: dict[str, float] = {}
        for (a, b), mid in zip(pieces, mids, strict=True):
            best, best_start, best_name = -1, -math.inf, ""
            outer = -1  # the outermost operator around the stretch, on the thread of its innermost one
            for th in threads:
                o = ops.innermost(th, mid, mid)
                if o >= 0 and tl.o_start[o] > best_start:
                    best, best_start, best_name = o, tl.o_start[o], tl.names[tl.o_name[o]]
                    outer = ops.outermost(th, o)
                sp = spans.innermost(th, mid, mid)
                if sp >= 0 and tl.s_start[sp] > best_start:
                    best, best_start, best_name = sp, tl.s_start[sp], tl.names[tl.s_name[sp]]
            if best < 0:  # only a runtime call (outside any operator) was running
                found = next((c for th in threads if (c := calls.innermost(th, mid, mid)) >= 0), -1)
                best_name = tl.names[tl.r_name[found]] if found >= 0 else "runtime calls"
            credit[best_name] = credit.get(best_name, 0.0) + (b - a)
            count[best_name] = count.get(best_name, 0) + 1
            if outer >= 0 and _launches_within(launches.get(tl.o_thread[outer], ()), tl.o_start[outer],
                                               tl.o_end[outer]):
                name = tl.names[tl.o_name[outer]]
                if not (self.cls.is_host_copy(name) or self.cls.is_host_copy(best_name)):
                    dispatch[name] = dispatch.get(name, 0.0) + (b - a)
        record_dispatch(facts, sum(b - a for a, b in pieces), dispatch, self.catalog.analysis.top_n)
        span = self.span or 1.0
        ranked = sorted(credit.items(), key=lambda kv: -kv[1])
        entries = [TimeEntry(name=name, gpu_time_s=sig6(t / 1e6), share=sig6(t / span), count=count[name])
                   for name, t in ranked[:self.catalog.analysis.top_n]]
        top = [name for name, _ in ranked[:3]]
        text = top[0] if len(top) == 1 else ", ".join(top[:-1]) + " and " + top[-1]
        return entries, text
