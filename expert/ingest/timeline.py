"""A GPU timeline read like a performance engineer reads it, from plain records of any profiler format.

Entry point (a reader fills a `Timeline`, chooses the window, then analyses it)::

    tl = Timeline()
    main = tl.thread(pid, tid)
    tl.add_gpu("volta_sgemm_128x64_nn", start_us, dur_us, device=0, stream=7, correlation=12, kind="kernel")
    tl.add_runtime("cudaLaunchKernel", start_us, dur_us, correlation=12, thread=main, external_id=5)
    tl.add_op("aten::mm", start_us, dur_us, thread=main, external_id=5, shapes=OpShapes.of(dims, types))
    tl.add_span("nn.Module: Linear_0", start_us, dur_us, thread=main)   # python functions, user annotations
    tl.add_loader(start_us, end_us)                                     # DataLoader __next__ spans
    tl.finish()
    windows = [(s, e) for _, s, e in step_windows(tl, steps, devices)] or steady_window(tl, t0, t1, devices,
                                                                                     kb.kernels).windows
    result = analyse(tl, windows, devices, kb.kernels, roof=Roof(...))  # -> TimelineAnalysis
    result.add_facts(file_result, label=..., file=..., n_steps=...)     # the standard facts, with provenance
    result.breakdown                                                    # the TimeBreakdown (expert/breakdown.py)

Readers in a hurry may append to the `g_*`, `r_*`, `o_*` and `s_*` arrays directly (keeping each group the same
length) instead of calling `add_*`. Times are microseconds on the trace's own clock; ids are ints (-1 when unknown).
Runtime calls, operators and spans of one host thread must share its `thread` id: host coverage is judged on the
threads that launch GPU work. Thresholds and kernel-name patterns come from knowledge_base/kernels.yaml.

What it derives:

- kernel classes from knowledge_base/kernels.yaml (CUDA and ROCm names), GPU time and share per class, top-N kernels;
- the launching operator of each GPU activity (activity -> runtime call by correlation id -> operator by external
  id, or the innermost operator enclosing the call), top-N operators and (from `nn.Module:` python functions) modules;
- FLOPs and bytes of those operators from their recorded shapes (expert/ingest/opflops.py), hence arithmetic
  intensity, achieved TFLOP/s and the share of the roofline of the traced device, per operator, kernel and class;
- why the GPU idles: each idle gap of the window is input (a DataLoader span), a blocking call (the host sat in a
  synchronize/free/synchronous copy when the GPU ran dry, or during the gap), launch overhead (a short gap before a
  kernel the host launched after the GPU went idle), host compute (a longer gap while the launching threads ran
  operators or python code that launch nothing), GPU-side waiting (the next work was already queued) or unattributed
  (no host event at all);
- the window: ProfilerStep-like spans extended to the end of the GPU work they launched, or without steps a steady
  state that leaves out initialisation, first-call warm-up and stretches with no events at all;
- graph replay (cudaGraphLaunch/hipGraphLaunch).

Every pass is a sort plus a linear sweep (prefix sums answer "how much of [a, b] is covered" in O(log n)), so the
cost grows as n log n in events, steps and devices.
"""

from __future__ import annotations

import math
import re
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..breakdown import ClassShare, IdleShares, Roofline, RoofSpec, StepTime, TimeBreakdown, TimeEntry, TraceWindow
from .intervals import Interval, total, union
from .opflops import OpCost, OpCostModel, OpShapes

if TYPE_CHECKING:
    from ..kb.knowledge import KernelCatalog
    from ._result import FileResult

KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET = 0, 1, 2
KINDS = {"kernel": KIND_KERNEL, "memcpy": KIND_MEMCPY, "memset": KIND_MEMSET}
H2D, PAGEABLE, PINNED = 1, 2, 4
"""g_flag bits a reader sets on copies: host-to-device, and whether the host memory was pageable or pinned."""
_NAN = math.nan


def _new_d() -> array[float]:
    return array("d")


def _new_q() -> array[int]:
    return array("q")


@dataclass
class Timeline:
    """Plain event records, columnar. Names are interned (`name_id`); threads are interned (`thread`)."""

    names: list[str] = field(default_factory=list)
    # GPU activities
    g_start: array[float] = field(default_factory=_new_d)
    g_end: array[float] = field(default_factory=_new_d)
    g_dev: array[int] = field(default_factory=_new_q)
    g_stream: array[int] = field(default_factory=_new_q)
    g_corr: array[int] = field(default_factory=_new_q)
    g_kind: array[int] = field(default_factory=lambda: array("b"))
    g_flag: array[int] = field(default_factory=lambda: array("b"))
    g_name: array[int] = field(default_factory=_new_q)
    g_ext: array[int] = field(default_factory=_new_q)
    # host runtime / driver calls
    r_start: array[float] = field(default_factory=_new_d)
    r_end: array[float] = field(default_factory=_new_d)
    r_corr: array[int] = field(default_factory=_new_q)
    r_name: array[int] = field(default_factory=_new_q)
    r_thread: array[int] = field(default_factory=_new_q)
    r_ext: array[int] = field(default_factory=_new_q)
    # CPU operators
    o_start: array[float] = field(default_factory=_new_d)
    o_end: array[float] = field(default_factory=_new_d)
    o_thread: array[int] = field(default_factory=_new_q)
    o_ext: array[int] = field(default_factory=_new_q)
    o_name: array[int] = field(default_factory=_new_q)
    o_shape: array[int] = field(default_factory=_new_q)
    # other host spans: python functions, user annotations
    s_start: array[float] = field(default_factory=_new_d)
    s_end: array[float] = field(default_factory=_new_d)
    s_thread: array[int] = field(default_factory=_new_q)
    s_name: array[int] = field(default_factory=_new_q)
    loader: list[Interval] = field(default_factory=list)
    shapes: list[OpShapes | None] = field(default_factory=list)
    _name_ids: dict[str, int] = field(default_factory=dict)
    _thread_ids: dict[Hashable, int] = field(default_factory=dict)
    _shape_ids: dict[Hashable, int] = field(default_factory=dict)
    # filled by finish()
    launch: array[float] = field(default_factory=_new_d)  # start of the runtime call that launched each activity
    launcher: array[int] = field(default_factory=_new_q)  # index of that runtime call (-1: not in the trace)

    # -- building ----------------------------------------------------------------------------------------------------
    def name_id(self, name: str) -> int:
        ident = self._name_ids.get(name)
        if ident is None:
            ident = self._name_ids[name] = len(self.names)
            self.names.append(name)
        return ident

    def thread(self, *key: Hashable) -> int:
        """An int id for a thread, from whatever identifies it in the format (e.g. pid and tid)."""
        ident = self._thread_ids.get(key)
        if ident is None:
            ident = self._thread_ids[key] = len(self._thread_ids)
        return ident

    def shape_id(self, key: Hashable, make: Any) -> int:
        """The id of an interned shape signature; `make()` builds the OpShapes the first time `key` is seen."""
        ident = self._shape_ids.get(key)
        if ident is None:
            ident = self._shape_ids[key] = len(self.shapes)
            try:
                self.shapes.append(make())
            except (TypeError, ValueError):
                self.shapes[ident:] = [None]
        return ident

    def add_gpu(self, name: str, start_us: float, dur_us: float, *, device: int, stream: int = -1,
                correlation: int = -1, kind: str = "kernel", flag: int = 0, external_id: int = -1) -> None:
        self.g_start.append(start_us)
        self.g_end.append(start_us + dur_us)
        self.g_dev.append(device)
        self.g_stream.append(stream)
        self.g_corr.append(correlation)
        self.g_kind.append(KINDS[kind])
        self.g_flag.append(flag)
        self.g_name.append(self.name_id(name))
        self.g_ext.append(external_id)

    def add_runtime(self, name: str, start_us: float, dur_us: float, *, correlation: int = -1, thread: int = 0,
                    external_id: int = -1) -> None:
        self.r_start.append(start_us)
        self.r_end.append(start_us + dur_us)
        self.r_corr.append(correlation)
        self.r_name.append(self.name_id(name))
        self.r_thread.append(thread)
        self.r_ext.append(external_id)

    def add_op(self, name: str, start_us: float, dur_us: float, *, thread: int = 0, external_id: int = -1,
               shapes: OpShapes | None = None) -> None:
        self.o_start.append(start_us)
        self.o_end.append(start_us + dur_us)
        self.o_thread.append(thread)
        self.o_ext.append(external_id)
        self.o_name.append(self.name_id(name))
        if shapes is None:
            self.o_shape.append(-1)
        else:
            self.o_shape.append(self.shape_id((name, shapes), lambda: shapes))

    def add_span(self, name: str, start_us: float, dur_us: float, *, thread: int = 0) -> None:
        self.s_start.append(start_us)
        self.s_end.append(start_us + dur_us)
        self.s_thread.append(thread)
        self.s_name.append(self.name_id(name))

    def add_loader(self, start_us: float, end_us: float) -> None:
        self.loader.append((start_us, end_us))

    def finish(self) -> None:
        """Match every GPU activity to the runtime call that launched it (by correlation id)."""
        n = len(self.r_corr)
        order: Sequence[int] = range(n)
        corr = self.r_corr
        if any(corr[i] > corr[i + 1] for i in range(n - 1)):
            order = sorted(range(n), key=corr.__getitem__)
            corr = array("q", (self.r_corr[i] for i in order))
        launch = array("d", bytes(8 * len(self.g_corr)))
        launcher = array("q", bytes(8 * len(self.g_corr)))
        for i, k in enumerate(self.g_corr):
            j = bisect_left(corr, k) if k >= 0 else n
            if j < n and corr[j] == k:
                r = order[j]
                launch[i] = self.r_start[r]
                launcher[i] = r
            else:
                launch[i] = _NAN
                launcher[i] = -1
        self.launch, self.launcher = launch, launcher


# ---- interval helpers ------------------------------------------------------------------------------------------------

class Cover:
    """A sorted disjoint interval list with prefix sums: covered length of [a, b] and membership in O(log n)."""

    def __init__(self, intervals: Sequence[Interval]) -> None:
        self.starts = [iv[0] for iv in intervals]
        self.ends = [iv[1] for iv in intervals]
        cum = [0.0]
        for s, e in intervals:
            cum.append(cum[-1] + e - s)
        self.cum = cum

    def upto(self, t: float) -> float:
        i = bisect_right(self.starts, t) - 1
        if i < 0:
            return 0.0
        return self.cum[i] + min(t, self.ends[i]) - self.starts[i]

    def between(self, a: float, b: float) -> float:
        return self.upto(b) - self.upto(a) if b > a else 0.0

    def contains(self, t: float) -> bool:
        i = bisect_right(self.starts, t) - 1
        return i >= 0 and t <= self.ends[i]

    def holds(self, a: float, b: float) -> bool:
        """[a, b] lies inside one interval."""
        i = bisect_right(self.starts, a) - 1
        return i >= 0 and b <= self.ends[i]

    def touches(self, a: float, b: float) -> bool:
        """Some interval meets [a, b] (one bisect: cheaper than `between` when only yes or no matters)."""
        i = bisect_left(self.ends, a)
        return i < len(self.ends) and self.starts[i] <= b

    @property
    def total(self) -> float:
        return self.cum[-1]


def intersect_all(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """Intersection of two sorted disjoint lists (linear)."""
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if e > s:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """a minus b, both sorted and disjoint (linear)."""
    out: list[Interval] = []
    j = 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            out.append((cur, e))
    return out


def _union_arrays(starts: Sequence[float], ends: Sequence[float], keep: Iterable[int],
                  threads: Sequence[int] | None = None, slack: float = 0.0) -> list[Interval]:
    """Union of the intervals at the indices `keep`. Events of one thread arrive nested, in start order (children
    after their parent) or in end order (children first, as older profilers write them); a running span per thread
    absorbs both, and a parent that arrives after its children takes the finished children back, so only the
    top-level spans are sorted at the end: a million operators become a few thousand intervals. Gaps shorter than
    `slack` are filled (to find only the long stretches without events)."""
    running: dict[int, list[float]] = {}
    finished: dict[int, list[Interval]] = {}
    for i in keep:
        s, e = starts[i], ends[i]
        if e <= s:
            continue
        th = threads[i] if threads is not None else 0
        cur = running.get(th)
        if cur is None:
            running[th] = [s, e]
            finished[th] = []
        elif s <= cur[1] + slack and e >= cur[0] - slack:  # overlaps (nested, enclosing or partial): absorb
            if s < cur[0]:
                cur[0] = s
                done = finished[th]
                while done and done[-1][1] + slack >= s:  # an enclosing span arriving after its children
                    if done[-1][0] < cur[0]:
                        cur[0] = done[-1][0]
                    done.pop()
            if e > cur[1]:
                cur[1] = e
        elif s > cur[1]:
            finished[th].append((cur[0], cur[1]))
            cur[0], cur[1] = s, e
        else:  # entirely before the running span: out of order
            finished[th].append((s, e))
    out: list[Interval] = []
    for th, done in finished.items():
        out.extend(done)
        out.append((running[th][0], running[th][1]))
    return union(out)


# ---- the catalog, compiled ---------------------------------------------------------------------------------------

class _Classifier:
    """knowledge_base/kernels.yaml compiled: a class per GPU activity name and kind, roles of runtime call names."""

    def __init__(self, catalog: KernelCatalog) -> None:
        self.catalog = catalog
        self.classes = [(c.id, {KINDS[a] for a in c.activities},
                         re.compile("|".join(f"(?:{p})" for p in c.patterns), re.IGNORECASE))
                        for c in catalog.classes]
        self.memory_bound: dict[str, bool] = {c.id: c.memory_bound_by_nature for c in catalog.classes}
        self.blocking = re.compile("|".join(f"(?:{p})" for p in catalog.calls.blocking.patterns))
        self.graph = re.compile("|".join(f"(?:{p})" for p in catalog.calls.graph_launch.patterns))
        self.launch = re.compile("|".join(f"(?:{p})" for p in catalog.calls.launch.patterns))
        low = catalog.low_precision_gemm
        self.low_precision = re.compile("|".join(f"(?:{p})" for p in low.patterns), re.IGNORECASE) if low else None
        self._cache: dict[tuple[int, int], str] = {}

    def of(self, names: list[str], name: int, kind: int) -> str:
        key = (name, kind)
        found = self._cache.get(key)
        if found is None:
            text = names[name]
            found = next((cid for cid, kinds, rx in self.classes if kind in kinds and rx.search(text)), "other")
            self._cache[key] = found
        return found


@dataclass(frozen=True)
class Roof:
    """The traced device's roofline: dense peak TFLOP/s per dtype (None where the part has none) and bandwidth."""

    hardware: str
    peak_tflops: dict[str, float | None]
    bandwidth_gbs: float

    def peak(self, dtype: str | None) -> float | None:
        if dtype is None:
            return None
        key = {"uint8": "int8", "int8": "int8"}.get(dtype, dtype)
        value = self.peak_tflops.get(key)
        return float(value) if value else None

    def pct(self, flops: float, moved: float, seconds: float, dtype: str | None) -> float | None:
        """Achieved over attainable: bytes/s over bandwidth left of the ridge, FLOP/s over peak right of it."""
        peak = self.peak(dtype)
        if peak is None or seconds <= 0 or moved <= 0:
            return None
        ridge = peak * 1e12 / (self.bandwidth_gbs * 1e9)
        if flops / moved <= ridge:
            return moved / seconds / (self.bandwidth_gbs * 1e9)
        return flops / seconds / (peak * 1e12)


# ---- windows -----------------------------------------------------------------------------------------------------

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


def _fmt_s(us: float) -> str:
    return f"{us / 1e6:.3g} s"


def steady_window(tl: Timeline, first_us: float, last_us: float, devices: set[int] | None,
                  catalog: KernelCatalog) -> SteadyWindow:
    """Without step spans: from the first GPU activity (what precedes it is initialisation), after the last kernel run
    for the first time (first-call warm-up) when a steady tail remains, to the last GPU activity, leaving out stretches
    with no event at all."""
    settings = catalog.analysis
    acts = [i for i in range(len(tl.g_start)) if devices is None or tl.g_dev[i] in devices]
    if not acts:
        return SteadyWindow([(first_us, last_us)], f"whole trace, 0 s–{_fmt_s(last_us - first_us)} (no GPU "
                            "activity and no ProfilerStep spans)", 0.0)
    acts.sort(key=tl.g_start.__getitem__)
    g0 = tl.g_start[acts[0]]
    g1 = max(tl.g_end[i] for i in acts)
    parts: list[str] = []
    start = g0
    if g0 - first_us > 0:
        init = [r for r in range(len(tl.r_start)) if tl.r_start[r] < g0]
        longest = max(init, key=lambda r: tl.r_end[r] - tl.r_start[r], default=None)
        what = (f"; longest call {tl.names[tl.r_name[longest]]} {_fmt_s(tl.r_end[longest] - tl.r_start[longest])}"
                if longest is not None and tl.r_end[longest] - tl.r_start[longest] > 0.1 * (g0 - first_us) else "")
        parts.append(f"from the first GPU activity at {_fmt_s(g0 - first_us)} (before it: initialisation, no GPU "
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
            parts.append(f"after first-call warm-up (until {_fmt_s(cut - first_us)}, the end of the last kernel run "
                         f"for the first time; {tail} of {len(kernels)} kernels repeat after it)")
            start = cut
    elif kernels:
        parts.append(f"no steady tail after first-call warm-up ({len(seen)} distinct kernels, the last new one "
                     f"{tail} kernels before the end), so the warm-up is kept")
    # stretches without any event (host or GPU) are outside the workload
    slack = settings.event_free_gap_us / 2  # gaps shorter than this cannot be an event-free stretch
    host = _host_intervals(tl, _launching_threads(tl), launch_free_spans=True, slack=slack)
    busy = union([*_union_arrays(tl.g_start, tl.g_end, acts, slack=slack), *host, *tl.loader])
    inside = intersect_all(busy, [(start, g1)])
    windows: list[Interval] = []
    excluded = 0.0
    gaps = 0
    cur = seg_start = start
    for s, e in inside:
        if s - cur >= settings.event_free_gap_us:
            if cur > seg_start:
                windows.append((seg_start, cur))
            excluded += s - cur
            gaps += 1
            seg_start = s
        cur = max(cur, e)
    if g1 > seg_start:
        windows.append((seg_start, g1))
    if gaps:
        parts.append(f"{gaps} stretch{'es' if gaps > 1 else ''} with no event at all left out ({_fmt_s(excluded)}, "
                     f"each >= {settings.event_free_gap_us / 1e3:g} ms)")
    parts.append(f"to the last GPU activity at {_fmt_s(g1 - first_us)}")
    reason = "no ProfilerStep spans: steady-state window " + "; ".join(parts)
    return SteadyWindow(windows or [(start, g1)], reason, excluded)


def _launching_threads(tl: Timeline) -> set[int]:
    """Threads that launched GPU work (matched runtime calls); all threads with runtime calls, or all, otherwise."""
    matched = {tl.r_thread[r] for r in tl.launcher if r >= 0}
    if matched:
        return matched
    if len(tl.r_thread):
        return set(tl.r_thread)
    return set(tl.o_thread) | set(tl.s_thread)


def _launch_starts(tl: Timeline) -> dict[int, list[float]]:
    """Per thread, the sorted start times of the runtime calls that launched GPU work (or of every launch call)."""
    per: dict[int, list[float]] = {}
    matched = {r for r in tl.launcher if r >= 0}
    for r in (matched or range(len(tl.r_start))):
        per.setdefault(tl.r_thread[r], []).append(tl.r_start[r])
    for v in per.values():
        v.sort()
    return per


def _host_intervals(tl: Timeline, threads: set[int], *, launch_free_spans: bool,
                    blocking: set[int] | None = None, slack: float = 0.0) -> list[Interval]:
    """Union of host activity on `threads`: operators, runtime calls (less `blocking` names) and the spans (python
    functions, annotations) that launch no GPU work themselves; a span that launches is a caller whose own time is
    covered by what it calls."""
    ops = (i for i in range(len(tl.o_start)) if tl.o_thread[i] in threads)
    out = _union_arrays(tl.o_start, tl.o_end, ops, tl.o_thread, slack)
    inside = Cover(out)  # runtime calls run inside operators: only the few outside them add anything
    rts = (r for r in range(len(tl.r_start)) if tl.r_thread[r] in threads
           and (blocking is None or tl.r_name[r] not in blocking)
           and not inside.holds(tl.r_start[r], tl.r_end[r]))
    out = union([*out, *_union_arrays(tl.r_start, tl.r_end, rts, tl.r_thread, slack)])
    if launch_free_spans and len(tl.s_start):
        starts = _launch_starts(tl)
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
        out = union([*out, *_union_arrays(tl.s_start, tl.s_end, keep, tl.s_thread, slack)])
    return out


# ---- the analysis ------------------------------------------------------------------------------------------------

@dataclass
class DeviceIdle:
    busy: float = 0.0
    data: float = 0.0
    launch: float = 0.0
    host: float = 0.0
    sync: float = 0.0
    unattributed: float = 0.0
    gpu_wait: float = 0.0
    hta_host: float = 0.0
    hta_kernel: float = 0.0
    hta_other: float = 0.0
    h2d: float = 0.0
    comm: float = 0.0


@dataclass
class TimelineAnalysis:
    """The numbers of one analysed window (shares of the window, averaged over the devices with activity)."""

    span_us: float
    devices: list[int]
    activities: int
    idle: dict[str, float]
    kernels: int
    kernel_mean_us: float | None
    kernel_min_us: float | None
    kernel_max_us: float | None
    copies: dict[str, float]
    has_comm: bool
    has_runtime: bool
    launches_matched: float
    graph_launches: int
    blocking_calls: int
    blocking_share: float
    breakdown: TimeBreakdown
    facts: dict[str, Any] = field(default_factory=dict)  # the breakdown facts (top class, its ops, top op, ...)

    def _applied(self, r: FileResult, file: str) -> None:
        """applied_optimizations where the trace shows them: graph launches (cuda_graphs), and GEMM time mostly in
        16-bit or narrower tensor-core kernels (lower_precision, knowledge_base/kernels.yaml low_precision_gemm)."""
        applied: list[str] = []
        how: list[str] = []
        if self.graph_launches:
            applied.append("cuda_graphs")
            how.append(f"{self.graph_launches} cudaGraphLaunch/hipGraphLaunch calls (cuda_graphs)")
        gemm, low = float(self.facts.get("_gemm_us") or 0.0), float(self.facts.get("_low_precision_gemm_us") or 0.0)
        min_share = float(self.facts.get("_low_precision_min_share") or 1.0)
        if gemm > 0 and low / gemm >= min_share:
            applied.append("lower_precision")
            how.append(f"{low / gemm:.0%} of GEMM time in bf16/fp16/fp8 tensor-core kernels (lower_precision)")
        if applied:
            r.add("applied_optimizations", ", ".join(applied), method="; ".join(how), file=file)
        else:
            r.missing("applied_optimizations", "no graph launches, and no GEMM time mostly in 16-bit or narrower "
                      "tensor-core kernels")

    def add_facts(self, r: FileResult, *, label: str, file: str, n_steps: int) -> None:
        """The standard facts of a timeline, with provenance (method, window, devices, file), on a FileResult."""
        idle = self.idle
        devs = ",".join(map(str, self.devices))
        common: dict[str, Any] = {"window": label, "devices": devs, "file": file}
        if n_steps:
            common["samples"] = n_steps
        r.add("gpu_util", idle["busy"], method=f"union of {self.activities} kernel/memcpy/memset intervals over the "
              "window", **common)
        r.add("gpu_idle_gap_frac", 1.0 - idle["busy"] if idle["busy"] < 1 else 0.0,
              method="window time with no kernel, memcpy or memset running",
              idle_data_wait=round(idle["data"], 4), idle_host_wait=round(idle["hta_host"], 4),
              idle_kernel_wait=round(idle["hta_kernel"], 4), idle_other=round(idle["hta_other"], 4),
              idle_launch=round(idle["launch"], 4), idle_host_compute=round(idle["host"], 4),
              idle_sync=round(idle["sync"], 4), idle_unattributed=round(idle["unattributed"], 4),
              idle_gpu_wait=round(idle["gpu_wait"], 4), **common)
        if not self.has_runtime or self.launches_matched == 0:
            reason = ("GPU activities cannot be matched to their launch calls (no runtime events with correlation "
                      "ids)")
            r.missing("host_wait_frac", reason)
        else:
            r.add("host_wait_frac", idle["hta_host"], method="HTA idle breakdown: gaps whose next activity was "
                  "launched after the previous one ended, less the part overlapping DataLoader waits",
                  launches_matched=round(self.launches_matched, 4), **common)
        split = ("idle gaps split by what the host was doing: DataLoader spans are input; a blocking call "
                 "(synchronize, free, synchronous copy) in progress when the GPU ran dry, or during the gap, is sync; "
                 "a gap of at most {t:g} us before a kernel launched after the GPU went idle is launch overhead; a "
                 "longer one is host compute where operators or launch-free python functions ran on the launching "
                 "threads, and unattributed where nothing did")
        t = self.facts.get("_launch_gap_us", 50)
        method = split.format(t=t)
        for fact, key in (("launch_overhead_frac", "launch"), ("host_compute_frac", "host"),
                          ("host_sync_frac", "sync"), ("unattributed_idle_frac", "unattributed")):
            r.add(fact, min(1.0, max(0.0, idle[key])), method=method, gpu_wait=round(idle["gpu_wait"], 4), **common)
        if self.facts.get("idle_host_ops"):
            r.add("idle_host_ops", self.facts["idle_host_ops"], method="the innermost operator or launch-free python "
                  "function around each stretch of host work inside the host-compute idle gaps, most idle time first",
                  **common)
        else:
            r.missing("idle_host_ops", "no host-compute idle time in the window")
        if self.kernels:
            r.add("mean_kernel_us", max(self.kernel_mean_us or 0.0, 1e-3), method=f"mean duration of {self.kernels} "
                  "kernels", min=self.kernel_min_us, max=self.kernel_max_us, **common)
            if n_steps:
                r.add("kernels_per_step", round(self.kernels / n_steps),
                      method=f"{self.kernels} kernels over {n_steps} steps", **common)
        else:
            r.missing("mean_kernel_us", f"no kernels inside {label}")
            r.missing("kernels_per_step", f"no kernels inside {label}")
        r.add("trace_kernels", self.kernels, method="kernels starting inside the window", **common)
        r.add("h2d_copy_frac", idle["h2d"], method="union of host-to-device memcpy intervals over the window", **common)
        pageable, pinned, unknown = self.copies["pageable"], self.copies["pinned"], self.copies["unknown"]
        if pageable + pinned > 0:
            r.add("pageable_copy_frac", pageable / (pageable + pinned), method="Memcpy HtoD (Pageable -> Device) time "
                  "over all host-to-device copy time", copy_us=round(pageable + pinned, 3), **common)
        elif unknown > 0:
            r.missing("pageable_copy_frac", "the host-to-device copies do not say whether host memory was pinned "
                      "(e.g. ROCm names them Host -> Device)")
        else:
            r.missing("pageable_copy_frac", f"no host-to-device copies inside {label}")
        r.add("comm_frac", idle["comm"], method="NCCL/RCCL kernel time not overlapped by other GPU work"
              if self.has_comm else "no NCCL/RCCL kernels in the trace", **common)
        r.add("uses_cuda_graphs", "yes" if self.graph_launches else "no",
              method=f"{self.graph_launches} cudaGraphLaunch/hipGraphLaunch calls in the trace" if self.graph_launches
              else "no cudaGraphLaunch/hipGraphLaunch call in the trace", file=file)
        self._applied(r, file)
        bd = self.breakdown
        why = {"window": label, "file": file}
        if bd.classes:
            top = bd.classes[0]
            r.add("top_kernel_class", top.class_, method="kernel class (knowledge_base/kernels.yaml) with the most "
                  "GPU time", **why)
            r.add("top_kernel_class_frac", top.share, method=f"{top.class_} GPU time over all GPU activity time "
                  f"({bd.gpu_time_s:.4g} s)", **why)
            if self.facts.get("top_class_ops"):
                r.add("top_kernel_class_ops", self.facts["top_class_ops"], method=f"operators launching most "
                      f"{top.class_} GPU time (runtime call by correlation id, then the operator that made it)", **why)
            else:
                r.missing("top_kernel_class_ops", "the kernels cannot be traced back to operators (no runtime calls "
                          "or operators in the trace)")
        if bd.memory_bound_share is not None:
            r.add("memory_bound_kernel_frac", bd.memory_bound_share, method="GPU time in classes memory-bound by "
                  "nature (" + ", ".join(c.class_ for c in bd.classes if c.memory_bound_by_nature) + ")", **why)
        if bd.top_ops:
            op = bd.top_ops[0]
            r.add("top_op", op.name, method="operator with the most GPU time (kernels it launched)", **why)
            r.add("top_op_frac", op.share, method=f"{op.name} GPU time over all GPU activity time", **why)
            if op.pct_of_roof is not None:
                r.add("top_op_pct_of_roof", op.pct_of_roof, method=f"{op.name}: achieved over the roofline "
                      f"({bd.roof.hardware if bd.roof else '?'}, {op.dtype}) from its recorded shapes", **why)
            else:
                r.missing("top_op_pct_of_roof", f"{op.name}: no FLOP/byte count from its shapes, or no roof for the "
                          "hardware and dtype")
        else:
            for fact in ("top_op", "top_op_frac", "top_op_pct_of_roof"):
                r.missing(fact, "the kernels cannot be traced back to operators (no runtime calls or operators)")


def analyse(tl: Timeline, windows: list[Interval], devices: set[int] | None, catalog: KernelCatalog, *,
            roof: Roof | None = None, source: str = "", window: TraceWindow | None = None,
            steps: Sequence[tuple[int, float, float]] = (), kernel_wait_us: float = 0.03) -> TimelineAnalysis | None:
    """Analyse the GPU activity of `devices` (None: all) inside `windows` (sorted, disjoint); None when no device has
    any activity there. `steps` (number, start, end) are the step windows, for the per-step times."""
    return _Analyzer(tl, windows, devices, catalog, roof, kernel_wait_us).run(source, window, steps)


class _Analyzer:
    def __init__(self, tl: Timeline, windows: list[Interval], devices: set[int] | None, catalog: KernelCatalog,
                 roof: Roof | None, kernel_wait_us: float) -> None:
        self.tl, self.windows, self.devices, self.catalog, self.roof = tl, windows, devices, catalog, roof
        self.kernel_wait_us = kernel_wait_us
        self.cls = _Classifier(catalog)
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
        blocking_names = {i for i, nm in enumerate(names) if self.cls.blocking.search(nm)}
        r_blocking = [r for r in range(len(tl.r_start)) if tl.r_name[r] in blocking_names]
        threads = _launching_threads(tl)
        wl = self.windows
        loader = intersect_all(union(tl.loader), wl)
        sync_all = _union_arrays(tl.r_start, tl.r_end, (r for r in r_blocking if tl.r_thread[r] in threads))
        sync_w = intersect_all(subtract(sync_all, loader), wl)
        host = _host_intervals(tl, threads, launch_free_spans=True, blocking=blocking_names)
        host_w = intersect_all(subtract(subtract(host, loader), sync_all), wl)
        cov_w, cov_l, cov_s, cov_h, sync_point = Cover(wl), Cover(loader), Cover(sync_w), Cover(host_w), Cover(sync_all)
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
            acc = self._device(idx[k:j], classes, cov_w, cov_l, cov_s, cov_h, sync_point, launch_gap)
            if acc.busy > 0:
                per_dev.append((dev, acc))
            k = j
        if not per_dev:
            return None
        used = {d for d, _ in per_dev}
        span = self.span or 1.0

        def mean(attr: str) -> float:
            return float(sum(getattr(a, attr) for _, a in per_dev)) / len(per_dev) / span

        idle = {key: min(1.0, max(0.0, mean(attr))) for key, attr in (
            ("busy", "busy"), ("data", "data"), ("launch", "launch"), ("host", "host"), ("sync", "sync"),
            ("unattributed", "unattributed"), ("gpu_wait", "gpu_wait"), ("hta_host", "hta_host"),
            ("hta_kernel", "hta_kernel"), ("hta_other", "hta_other"), ("h2d", "h2d"), ("comm", "comm"))}
        in_w = [i for i in idx if tl.g_dev[i] in used and self.in_window(tl.g_start[i])]
        kernels = [tl.g_end[i] - tl.g_start[i] for i in in_w if tl.g_kind[i] == KIND_KERNEL]
        copies = {"pageable": 0.0, "pinned": 0.0, "unknown": 0.0}
        for i in in_w:
            flag = tl.g_flag[i]
            if flag & H2D:
                key = "pageable" if flag & PAGEABLE else "pinned" if flag & PINNED else "unknown"
                copies[key] += tl.g_end[i] - tl.g_start[i]
        graph_names = {i for i, nm in enumerate(names) if self.cls.graph.search(nm)}
        graph_launches = sum(1 for r in range(len(tl.r_name)) if tl.r_name[r] in graph_names)
        blocking_in = [r for r in r_blocking if self.in_window(tl.r_start[r])]
        blocked = Cover(intersect_all(_union_arrays(tl.r_start, tl.r_end, blocking_in), wl)).total
        matched = sum(1 for x in tl.launch if x == x)
        breakdown, facts = self._breakdown(in_w, classes, source, window, steps, sorted(used), graph_launches)
        facts["_launch_gap_us"] = launch_gap
        breakdown.host_during_idle, facts["idle_host_ops"] = self._host_during_idle(host_w, threads)
        breakdown.idle = IdleShares(busy=_r(idle["busy"]), input=_r(idle["data"]), launch=_r(idle["launch"]),
                                    host_compute=_r(idle["host"]), sync=_r(idle["sync"]),
                                    unattributed=_r(idle["unattributed"]), gpu_wait=_r(idle["gpu_wait"]))
        return TimelineAnalysis(
            span_us=self.span, devices=sorted(used), activities=len(in_w), idle=idle, kernels=len(kernels),
            kernel_mean_us=sum(kernels) / len(kernels) if kernels else None,
            kernel_min_us=min(kernels) if kernels else None, kernel_max_us=max(kernels) if kernels else None,
            copies=copies, has_comm=any(c == "communication" for c in classes), has_runtime=bool(len(tl.r_start)),
            launches_matched=matched / len(tl.launch) if len(tl.launch) else 0.0, graph_launches=graph_launches,
            blocking_calls=len(blocking_in), blocking_share=min(1.0, blocked / span), breakdown=breakdown,
            facts=facts)

    def _device(self, idx: list[int], classes: list[str], cov_w: Cover, cov_l: Cover, cov_s: Cover, cov_h: Cover,
                sync_point: Cover, launch_gap: float) -> DeviceIdle:
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
                self._gap(acc, prev, s, i, launch, short, cov_w, cov_l, cov_s, cov_h, sync_point, launch_gap)
            ms, me = s, e
        if me == me:
            acc.busy += cov_w.between(ms, me)
            if me > prev:
                prev = me
        if acc.busy <= 0:
            return acc
        if prev < w_hi:
            self._gap(acc, prev, w_hi, -1, launch, short, cov_w, cov_l, cov_s, cov_h, sync_point, launch_gap)
        # host-to-device copies and exposed communication on this device
        h2d = _union_arrays(g_start, g_end, (i for i in idx if tl.g_flag[i] & H2D))
        acc.h2d = Cover(intersect_all(h2d, self.windows)).total
        if any(classes[i] == "communication" for i in idx):
            comm_w = intersect_all(_union_arrays(g_start, g_end, (i for i in idx if classes[i] == "communication")),
                                   self.windows)
            compute = _union_arrays(g_start, g_end, (i for i in idx if classes[i] != "communication"))
            acc.comm = total(comm_w) - Cover(intersect_all(comm_w, compute)).total
        return acc

    def _gap(self, acc: DeviceIdle, a: float, b: float, nxt: int, launch: array[float], short: float, cov_w: Cover,
             cov_l: Cover, cov_s: Cover, cov_h: Cover, sync_point: Cover, launch_gap: float) -> None:
        """Split one idle gap [a, b) before activity `nxt` (-1: the window's end) by cause."""
        inside = b - a if cov_w.holds(a, b) else cov_w.between(a, b)
        if inside <= 0:
            return
        data = min(inside, cov_l.between(a, b)) if cov_l.starts else 0.0
        rest = max(0.0, inside - data)
        acc.data += data
        at = launch[nxt] if nxt >= 0 else _NAN
        if at == at and at > a:
            acc.hta_host += rest
        elif nxt >= 0 and b - a < short:
            acc.hta_kernel += rest
        else:
            acc.hta_other += rest
        if nxt >= 0 and at == at and at <= a:
            acc.gpu_wait += rest  # already queued: the GPU waited on something of its own
            return
        if sync_point.starts and sync_point.contains(a):
            acc.sync += rest  # the host blocked while the GPU drained, then had to refill the queue
            return
        sync = min(rest, cov_s.between(a, b)) if cov_s.starts else 0.0
        acc.sync += sync
        rest -= sync
        if nxt >= 0 and b - a <= launch_gap:
            acc.launch += rest
            return
        hostc = min(rest, cov_h.between(a, b))
        acc.host += hostc
        acc.unattributed += rest - hostc
        if hostc > 0:
            self.host_gaps.append((a, b))

    # -- where the GPU time goes -------------------------------------------------------------------------------------
    def _gemm_precision(self, per_kernel: dict[int, list[float]]) -> tuple[float, float]:
        """GEMM kernel time, and the part of it in kernels named as 16-bit or narrower tensor-core math
        (knowledge_base/kernels.yaml `low_precision_gemm`)."""
        names, low = self.tl.names, self.cls.low_precision
        gemm = lowp = 0.0
        for nm, (t, _, kind) in per_kernel.items():
            if self.cls.of(names, nm, int(kind)) != "gemm":
                continue
            gemm += t
            if low is not None and low.search(names[nm]):
                lowp += t
        return gemm, lowp

    def _breakdown(self, in_w: list[int], classes: list[str], source: str, window: TraceWindow | None,
                   steps: Sequence[tuple[int, float, float]], devices: list[int],
                   graph_launches: int) -> tuple[TimeBreakdown, dict[str, Any]]:
        tl, cat = self.tl, self.catalog
        top_n = cat.analysis.top_n
        names = tl.names
        model, sig_names, costs = self._op_costs()
        ops = _OpIndex(tl, costs)
        gpu_total = sum(tl.g_end[i] - tl.g_start[i] for i in in_w)
        per_class: dict[str, list[float]] = {}
        per_kernel: dict[int, list[float]] = {}  # name -> [time, count, kind]
        # per activity (columns, in the order of in_w): the operator that launched it, and the operator instance
        # whose FLOPs it carries (the launcher if costed, else its innermost costed ancestor)
        n_ops = len(tl.o_start)
        act_op = array("q")
        act_inst = array("q")
        inst_time = array("d", bytes(8 * n_ops))  # kernel time per instance
        children: dict[int, set[str]] = {}  # instance -> the launching operators inside it (when not itself)
        child_costs: dict[tuple[int, frozenset[str]], OpCost | None] = {}
        for i in in_w:
            act_op.append(ops.launcher(i))
        ops.prepare_claims(act_op)
        g_start, g_end, g_name, g_kind, o_name = tl.g_start, tl.g_end, tl.g_name, tl.g_kind, tl.o_name
        claim = ops.claim
        for k, i in enumerate(in_w):
            d = g_end[i] - g_start[i]
            c = classes[i]
            pc = per_class.get(c)
            if pc is None:
                pc = per_class[c] = [0.0, 0.0]
            pc[0] += d
            pc[1] += 1
            nm = g_name[i]
            pk = per_kernel.get(nm)
            if pk is None:
                pk = per_kernel[nm] = [0.0, 0.0, g_kind[i]]
            pk[0] += d
            pk[1] += 1
            op = act_op[k]
            inst = claim(op) if op >= 0 else -1
            act_inst.append(inst)
            if inst >= 0 and g_kind[i] == KIND_KERNEL:
                inst_time[inst] += d
                if inst != op:
                    children.setdefault(inst, set()).add(names[o_name[op]])
        # distribute each instance's FLOPs/bytes over its kernels by duration
        groups: dict[int, _Acc] = {}  # operator name id -> accumulator
        kern_roof: dict[int, _Acc] = {}
        class_roof: dict[str, _Acc] = {}
        totals = _Acc()
        counted = 0
        seen = bytearray(n_ops)  # operator instances already counted in their group
        group_count: dict[int, int] = {}
        class_groups: dict[str, dict[int, float]] = {}
        tf32: dict[int, bool] = {}  # kernel name id -> runs TF32 math (a tf32 kernel under fp32 inputs)
        o_shape = tl.o_shape
        for k, i in enumerate(in_w):
            op, inst = act_op[k], act_inst[k]
            d = g_end[i] - g_start[i]
            c = classes[i]
            if op >= 0:
                who = inst if inst >= 0 else op
                group = o_name[who]
                g = groups.get(group)
                if g is None:
                    g = groups[group] = _Acc()
                g.time += d
                g.cls[c] = g.cls.get(c, 0.0) + d
                if not seen[who]:
                    seen[who] = 1
                    group_count[group] = group_count.get(group, 0) + 1
                cg = class_groups.setdefault(c, {})
                cg[group] = cg.get(group, 0.0) + d
            if inst < 0 or g_kind[i] != KIND_KERNEL:
                continue
            group = o_name[inst]
            sid = o_shape[inst]
            cost = costs[sid] if sid >= 0 else None
            if cost is not None and inst in children:
                key = (sid, frozenset(children[inst]))
                if key not in child_costs:
                    shapes = tl.shapes[sid]
                    child_costs[key] = model.cost(sig_names[sid], shapes, key[1]) if shapes is not None else None
                cost = child_costs[key]
            if cost is None:
                continue
            dtype = cost.dtype
            nm = g_name[i]
            if dtype == "fp32":
                is_tf32 = tf32.get(nm)
                if is_tf32 is None:
                    is_tf32 = tf32[nm] = "tf32" in names[nm].lower()
                if is_tf32:
                    dtype = "tf32"
            share = d / inst_time[inst] if inst_time[inst] > 0 else 0.0
            f, b = cost.flops * share, cost.bytes * share
            kr = kern_roof.get(nm)
            if kr is None:
                kr = kern_roof[nm] = _Acc()
            groups[group].add(f, b, d, dtype)
            kr.add(f, b, d, dtype)
            counted += 1
        for nm, kr in kern_roof.items():  # a kernel name has one class: classes and totals sum their kernels
            c = self.cls.of(names, nm, int(per_kernel[nm][2]))
            cr = class_roof.get(c)
            if cr is None:
                cr = class_roof[c] = _Acc()
            cr.merge(kr)
            totals.merge(kr)
        roof = self.roof
        class_list = [ClassShare(class_=c, gpu_time_s=_r(t / 1e6), share=_r(t / gpu_total if gpu_total else 0.0),
                                 count=int(cnt), memory_bound_by_nature=self.cls.memory_bound.get(c, False),
                                 **class_roof.get(c, _Acc()).roofline(roof))
                      for c, (t, cnt) in per_class.items()]
        order: dict[str, int] = {c.id: k for k, c in enumerate(cat.classes)}
        class_list.sort(key=lambda x: (-x.gpu_time_s, order.get(x.class_, 99)))
        memory_share = (sum(t for c, (t, _) in per_class.items() if self.cls.memory_bound.get(c, False)) / gpu_total
                        if class_list and gpu_total else None)
        top_kernels = [TimeEntry(name=names[nm], gpu_time_s=_r(t / 1e6), share=_r(t / gpu_total if gpu_total else 0.0),
                                 count=int(cnt), class_=self.cls.of(names, nm, int(kind)),
                                 **kern_roof.get(nm, _Acc()).roofline(roof))
                       for nm, (t, cnt, kind) in sorted(per_kernel.items(), key=lambda kv: -kv[1][0])[:top_n]]
        top_ops = [TimeEntry(name=names[g], gpu_time_s=_r(acc.time / 1e6),
                             share=_r(acc.time / gpu_total if gpu_total else 0), count=group_count.get(g, 0),
                             class_=max(acc.cls, key=lambda c: acc.cls[c]), **acc.roofline(roof))
                   for g, acc in sorted(groups.items(), key=lambda kv: -kv[1].time)[:top_n]]
        modules = self._modules(in_w, act_op, gpu_total, top_n)
        step_times = [StepTime(number=num, duration_s=_r((e - s) / 1e6)) for num, s, e in steps]
        cv = None
        if len(step_times) >= 2:
            durs = [x.duration_s for x in step_times]
            mu = sum(durs) / len(durs)
            sd = math.sqrt(sum((x - mu) ** 2 for x in durs) / (len(durs) - 1))
            cv = _r(sd / mu) if mu > 0 else None
        roof_spec = None
        if roof is not None and totals.flops > 0:
            dtype = totals.dominant_dtype()
            peak = roof.peak(dtype)
            if peak is not None and dtype is not None:
                roof_spec = RoofSpec(hardware=roof.hardware, dtype=dtype, peak_tflops=peak,
                                     peak_bandwidth_gbs=roof.bandwidth_gbs,
                                     ridge_flop_per_byte=_r(peak * 1e12 / (roof.bandwidth_gbs * 1e9)))
        launched = sum(acc.time for acc in groups.values())
        coverage = sum(acc.ktime for acc in groups.values() if acc.flops > 0 or acc.bytes > 0)
        notes: list[str] = []
        if groups and counted == 0:
            notes.append("no launching operator has a FLOP/byte count from its shapes (record_shapes=True records "
                         "them)")
        if graph_launches:
            notes.append(f"{graph_launches} graph launches: the GPU replays captured CUDA/HIP graphs")
        bd = TimeBreakdown(
            source=source, window=window or TraceWindow(start_us=0.0, end_us=0.0, reason=""), devices=devices,
            gpu_time_s=_r(gpu_total / 1e6), kernels=sum(1 for i in in_w if tl.g_kind[i] == KIND_KERNEL),
            classes=class_list, memory_bound_share=_r(memory_share) if memory_share is not None else None,
            top_kernels=top_kernels, top_ops=top_ops, top_modules=modules, steps=step_times, step_time_cv=cv,
            graph_launches=graph_launches, roof=roof_spec,
            totals=Roofline(**totals.roofline(roof)) if totals.flops > 0 or totals.bytes > 0 else None,
            flops_coverage=_r(coverage / launched) if launched else None, notes=notes)
        facts: dict[str, Any] = {"window_flops": totals.flops, "window_bytes": totals.bytes,
                                 "dtype": totals.dominant_dtype() if totals.flops > 0 else None}
        facts["_gemm_us"], facts["_low_precision_gemm_us"] = self._gemm_precision(per_kernel)
        if cat.low_precision_gemm is not None:
            facts["_low_precision_min_share"] = cat.low_precision_gemm.min_share
        if class_list:
            top = class_list[0].class_
            ranked = sorted(class_groups.get(top, {}).items(), key=lambda kv: -kv[1])
            picked: list[str] = []
            covered = 0.0
            total_c = sum(t for _, t in ranked)
            for name_id, t in ranked[:3]:
                picked.append(names[name_id])
                covered += t
                if total_c and covered / total_c >= 0.6:
                    break
            if picked:
                facts["top_class_ops"] = (picked[0] if len(picked) == 1 else
                                          ", ".join(picked[:-1]) + " and " + picked[-1])
        return bd, facts

    def _host_during_idle(self, host_w: list[Interval], threads: set[int]) -> tuple[list[TimeEntry], str | None]:
        """What the launching threads ran while the GPU idled in host-compute gaps: each stretch of host activity in
        such a gap is credited to the innermost operator (or launch-free python function/annotation) around it."""
        tl = self.tl
        gaps = union(self.host_gaps)
        pieces = intersect_all(host_w, gaps)
        if not pieces:
            return [], None
        mids = [(a + b) / 2 for a, b in pieces]  # each piece is credited to what runs at its middle

        def around(starts: Sequence[float], ends: Sequence[float], thread: Sequence[int]) -> _Nesting:
            keep = []
            for i in range(len(starts)):
                k = bisect_left(mids, starts[i])
                if k < len(mids) and mids[k] <= ends[i] and thread[i] in threads:
                    keep.append(i)
            return _Nesting(starts, ends, thread, keep)

        ops = around(tl.o_start, tl.o_end, tl.o_thread)
        spans = around(tl.s_start, tl.s_end, tl.s_thread)
        calls = around(tl.r_start, tl.r_end, tl.r_thread)
        credit: dict[str, float] = {}
        count: dict[str, int] = {}
        for (a, b), mid in zip(pieces, mids, strict=True):
            best, best_start, best_name = -1, -math.inf, ""
            for th in threads:
                o = ops.innermost(th, mid, mid)
                if o >= 0 and tl.o_start[o] > best_start:
                    best, best_start, best_name = o, tl.o_start[o], tl.names[tl.o_name[o]]
                sp = spans.innermost(th, mid, mid)
                if sp >= 0 and tl.s_start[sp] > best_start:
                    best, best_start, best_name = sp, tl.s_start[sp], tl.names[tl.s_name[sp]]
            if best < 0:  # only a runtime call (outside any operator) was running
                found = next((c for th in threads if (c := calls.innermost(th, mid, mid)) >= 0), -1)
                best_name = tl.names[tl.r_name[found]] if found >= 0 else "runtime calls"
            credit[best_name] = credit.get(best_name, 0.0) + (b - a)
            count[best_name] = count.get(best_name, 0) + 1
        span = self.span or 1.0
        ranked = sorted(credit.items(), key=lambda kv: -kv[1])
        entries = [TimeEntry(name=name, gpu_time_s=_r(t / 1e6), share=_r(t / span), count=count[name])
                   for name, t in ranked[:self.catalog.analysis.top_n]]
        top = [name for name, _ in ranked[:3]]
        text = top[0] if len(top) == 1 else ", ".join(top[:-1]) + " and " + top[-1]
        return entries, text

    def _op_costs(self) -> tuple[OpCostModel, list[str], list[OpCost | None]]:
        tl = self.tl
        model = OpCostModel()
        sig_names = [""] * len(tl.shapes)
        for i in range(len(tl.o_shape)):
            sid = tl.o_shape[i]
            if sid >= 0 and not sig_names[sid]:
                sig_names[sid] = tl.names[tl.o_name[i]]
        for sid, shapes in enumerate(tl.shapes):
            if shapes is not None and sig_names[sid]:
                model.learn(sig_names[sid], shapes)
        return model, sig_names, [model.cost(sig_names[sid], shapes) if shapes is not None and sig_names[sid]
                                  else None for sid, shapes in enumerate(tl.shapes)]

    def _modules(self, in_w: list[int], act_op: array[int], gpu_total: float, top_n: int) -> list[TimeEntry]:
        """GPU time by the innermost `nn.Module:` python function around each launching operator (module type)."""
        tl = self.tl
        mods = [i for i in range(len(tl.s_start)) if tl.names[tl.s_name[i]].startswith("nn.Module: ")]
        if not mods:
            return []
        nest = _Nesting(tl.s_start, tl.s_end, tl.s_thread, mods)
        per: dict[str, list[float]] = {}
        seen: dict[str, set[int]] = {}
        for k, i in enumerate(in_w):
            op = act_op[k]
            if op < 0:
                continue
            m = nest.innermost(tl.o_thread[op], tl.o_start[op], tl.o_end[op])
            if m < 0:
                continue
            label = re.sub(r"_\d+$", "", tl.names[tl.s_name[m]][len("nn.Module: "):])
            acc = per.setdefault(label, [0.0])
            acc[0] += tl.g_end[i] - tl.g_start[i]
            seen.setdefault(label, set()).add(m)
        return [TimeEntry(name=f"nn.Module: {label}", gpu_time_s=_r(t[0] / 1e6),
                          share=_r(t[0] / gpu_total if gpu_total else 0.0), count=len(seen[label]))
                for label, t in sorted(per.items(), key=lambda kv: -kv[1][0])[:top_n]]


def _r(x: float) -> float:
    """Six significant digits: readable, and exact through JSON."""
    return float(f"{x:.6g}")


@dataclass
class _Acc:
    time: float = 0.0  # all GPU time
    ktime: float = 0.0  # kernel time that carries FLOPs/bytes
    flops: float = 0.0
    bytes: float = 0.0
    cls: dict[str, float] = field(default_factory=dict)
    dtypes: dict[str, float] = field(default_factory=dict)  # dtype -> flops (bytes when no flops)

    def add(self, f: float, b: float, d: float, dtype: str | None) -> None:
        self.flops += f
        self.bytes += b
        self.ktime += d
        if dtype is not None:
            self.dtypes[dtype] = self.dtypes.get(dtype, 0.0) + (f or b)

    def merge(self, other: _Acc) -> None:
        self.flops += other.flops
        self.bytes += other.bytes
        self.ktime += other.ktime
        for k, v in other.dtypes.items():
            self.dtypes[k] = self.dtypes.get(k, 0.0) + v

    def dominant_dtype(self) -> str | None:
        return max(self.dtypes, key=lambda k: self.dtypes[k]) if self.dtypes else None

    def roofline(self, roof: Roof | None) -> dict[str, Any]:
        if self.flops <= 0 and self.bytes <= 0:
            return {}
        seconds = self.ktime / 1e6
        out: dict[str, Any] = {"flops": _r(self.flops), "bytes": _r(self.bytes),
                               "arithmetic_intensity": _r(self.flops / self.bytes) if self.bytes > 0 else None,
                               "achieved_tflops": _r(self.flops / seconds / 1e12) if seconds > 0 else None}
        dtype = self.dominant_dtype()
        if roof is not None:
            pct = roof.pct(self.flops, self.bytes, seconds, dtype)
            out["pct_of_roof"] = _r(pct) if pct is not None else None
        if dtype is not None and "dtype" not in out:
            out["dtype"] = dtype
        return out


class _Nesting:
    """Spans of one kind nested per thread: the innermost span around [s, e], by a bisect and a walk up parents."""

    def __init__(self, starts: Sequence[float], ends: Sequence[float], threads: Sequence[int], keep: list[int]) -> None:
        order = sorted(keep, key=lambda i: (threads[i], starts[i], -ends[i]))
        self.starts, self.ends = starts, ends
        self.by_thread: dict[int, tuple[list[float], list[int], list[int]]] = {}
        stacks: dict[int, list[int]] = {}
        for i in order:
            th = threads[i]
            st, ids, parents = self.by_thread.setdefault(th, ([], [], []))
            stack = stacks.setdefault(th, [])
            while stack and ends[ids[stack[-1]]] < ends[i]:
                stack.pop()  # ended before i does: not an ancestor of i, nor of anything after it
            parents.append(stack[-1] if stack else -1)
            st.append(starts[i])
            ids.append(i)
            stack.append(len(ids) - 1)

    def innermost(self, thread: int, s: float, e: float) -> int:
        found = self.by_thread.get(thread)
        if found is None:
            return -1
        st, ids, parents = found
        k = bisect_right(st, s) - 1
        while k >= 0:
            i = ids[k]
            if self.starts[i] <= s and self.ends[i] >= e:
                return i
            k = parents[k]
        return -1


class _OpIndex:
    """Operator lookups: the operator that made a runtime call (external id, else the innermost enclosing operator)
    and the operator whose FLOPs a launcher's kernels carry (itself, else the innermost costed ancestor)."""

    def __init__(self, tl: Timeline, costs: list[OpCost | None]) -> None:
        self.tl = tl
        n = len(tl.o_ext)
        ext = tl.o_ext
        self.order: Sequence[int] = range(n)
        self.ext_sorted: Sequence[int] = ext
        self.slot: array[int] | None = None  # external id -> operator, when the ids are dense and unique
        top = max(ext, default=-1)
        if 0 <= top <= 2 * n + 100_000:  # dense ids, as profilers assign them
            slot = array("i" if n < (1 << 31) else "q", [-1]) * (top + 1)
            unique = True
            for i in range(n):
                x = ext[i]
                if x >= 0:
                    if slot[x] >= 0:
                        unique = False  # ids repeat (traces stitched together): look them up by time as well
                        break
                    slot[x] = i
            self.slot = slot if unique else None
        if self.slot is None and any(ext[i] > ext[i + 1] for i in range(n - 1)):
            packed = [ext[i] * (1 << 24) + i if ext[i] >= 0 else -1 for i in range(n)] if n < (1 << 24) else None
            if packed is not None and top < (1 << 38):
                packed.sort()  # in place: no second list
                self.order = array("q", (p & ((1 << 24) - 1) if p >= 0 else 0 for p in packed))
                self.ext_sorted = array("q", (p >> 24 if p >= 0 else -1 for p in packed))
                del packed
            else:
                self.order = array("q", sorted(range(n), key=ext.__getitem__))
                self.ext_sorted = array("q", (ext[i] for i in self.order))
        self.costed = bytearray(1 if sid >= 0 and costs[sid] is not None else 0 for sid in tl.o_shape)
        self._costed_nest: _Nesting | None = None
        self._all_nest: _Nesting | None = None
        self._claim: dict[int, int] = {}

    def launcher(self, act: int) -> int:
        """The operator behind GPU activity `act`, or -1."""
        tl = self.tl
        r = tl.launcher[act]
        ext = tl.r_ext[r] if r >= 0 else tl.g_ext[act]
        at = tl.r_start[r] if r >= 0 else tl.g_start[act]
        op = -1
        if ext >= 0 and self.slot is not None:
            op = self.slot[ext] if ext < len(self.slot) else -1
        elif ext >= 0 and len(self.ext_sorted):
            j = bisect_left(self.ext_sorted, ext)
            while j < len(self.ext_sorted) and self.ext_sorted[j] == ext:  # several only in stitched traces
                cand = self.order[j]
                if op < 0 or tl.o_start[cand] <= at <= tl.o_end[cand]:
                    op = cand
                    if tl.o_start[cand] <= at <= tl.o_end[cand]:
                        break
                j += 1
        if op < 0 and r >= 0 and len(tl.o_start):
            if self._all_nest is None:
                self._all_nest = _Nesting(tl.o_start, tl.o_end, tl.o_thread, list(range(len(tl.o_start))))
            op = self._all_nest.innermost(tl.r_thread[r], tl.r_start[r], tl.r_end[r])
        return op

    def prepare_claims(self, launchers: Iterable[int]) -> None:
        """Nest the costed operators that could be an ancestor of an uncosted launcher (they overlap one on the same
        thread): few, so the sort stays small."""
        tl = self.tl
        uncosted = bytearray(len(tl.o_start))
        for op in launchers:
            if op >= 0 and not self.costed[op]:
                uncosted[op] = 1
        by_thread: dict[int, list[Interval]] = {}
        for op in (i for i, flag in enumerate(uncosted) if flag):
            by_thread.setdefault(tl.o_thread[op], []).append((tl.o_start[op], tl.o_end[op]))
        covers = {th: Cover(union(ivs)) for th, ivs in by_thread.items()}
        keep = [i for i in range(len(tl.o_start)) if self.costed[i] and tl.o_thread[i] in covers
                and covers[tl.o_thread[i]].touches(tl.o_start[i], tl.o_end[i])] if covers else []
        self._costed_nest = _Nesting(tl.o_start, tl.o_end, tl.o_thread, keep)

    def claim(self, op: int) -> int:
        """The operator whose FLOP/byte count covers `op`'s kernels: `op` if costed, else its innermost costed
        ancestor on the same thread (among those `prepare_claims` kept), else -1."""
        if self.costed[op]:
            return op
        found = self._claim.get(op)
        if found is None:
            tl = self.tl
            if self._costed_nest is None:
                self.prepare_claims([op])
            assert self._costed_nest is not None
            found = self._costed_nest.innermost(tl.o_thread[op], tl.o_start[op], tl.o_end[op])
            self._claim[op] = found
        return found
