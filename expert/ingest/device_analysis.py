"""Per-device timeline analysis on format-neutral records: busy share, idle gaps and their causes, kernel classes,
top kernels, host<->device copies and exposed communication.

This is the one place a reader's records are turned into per-device figures (`analyse_device`). It is written
against `records.GpuActivity` only, so the shared trace analysis (issue 14's `expert/ingest/timeline.py`, with kernel
classes from `knowledge_base/kernels.yaml`) can replace it for every reader at once: swap `analyse_device` and
`classify_kernel` below, keeping the `DeviceTimeline` fields the readers turn into facts.

Idle time is split as Holistic Trace Analysis does (and as the Kineto reader does): a gap is *host wait* when the
runtime call that launched the activity ending the gap began after the gap began (the GPU waited for the host to
launch work), *kernel wait* when it is shorter than `kernel_wait_us` (back-to-back launch latency), else *other*; the
part of any gap that overlaps a DataLoader span is *data wait*. The trailing gap of a window is *other*.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._samples import Stat
from .intervals import Interval, total
from .records import KERNEL, MEMCPY, MEMSET, GpuActivity

KERNEL_WAIT_US = 0.03
"""HTA's default consecutive-kernel delay (30 ns): shorter gaps are launch latency between back-to-back kernels."""

CLASSES = ("gemm", "conv", "attention", "elementwise", "reduction", "communication", "memcpy", "memset", "triton",
           "other")
"""Kernel class ids (the names issue 14 fixes for `time_breakdown.classes`)."""

# Interim kernel-name patterns, first match wins. The shared analysis keeps them as data (knowledge_base/kernels.yaml);
# until it lands only `communication` feeds facts (comm_frac, comm_time_s, comm_overlap_frac); the other classes are
# the per-device breakdown shown in notes and in `DeviceTimeline.time_breakdown()`.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple((cls, re.compile(rx, re.IGNORECASE)) for cls, rx in (
    ("communication", r"nccl|rccl"),
    ("attention", r"flash|fmha|attention|sdpa|_mha_|mha_fwd|mha_bwd"),
    ("conv", r"conv(?!ert)|implicit_?gemm|winograd|dgrad|wgrad|fprop"),
    ("gemm", r"gemm|nvjet|cublas|cutlass|xmma|matmul|Cijk_|gemv|wgmma"),
    ("triton", r"^triton_|\btriton"),
    ("reduction", r"reduce|reduction|norm|softmax|\bsum\b|\bmean\b|argmax|topk|scan"),
    ("elementwise", r"elementwise|vectorized|unrolled|activation|relu|gelu|silu|sigmoid|tanh|dropout|\bfill|copy|"
                    r"cat|index|gather|scatter"),
))


def classify_kernel(name: str) -> str:
    """The class id of a kernel name (interim table; see the module docstring)."""
    for cls, rx in _PATTERNS:
        if rx.search(name):
            return cls
    return "other"


_TEMPLATE = re.compile(r"[<(]")


def short_name(name: str) -> str:
    """A kernel name without its return type, template arguments and parameter list, for display."""
    text = name[5:] if name.startswith("void ") else name
    cut = _TEMPLATE.search(text)
    return (text[: cut.start()] if cut and cut.start() > 0 else text).strip() or name


@dataclass
class DeviceTimeline:
    """What one device did inside the analysis windows (times in microseconds)."""

    device: int
    window_us: float = 0.0
    busy_us: float = 0.0
    idle_data_us: float = 0.0
    idle_host_us: float = 0.0
    idle_kernel_us: float = 0.0
    idle_other_us: float = 0.0
    gaps: int = 0
    longest_gap_us: float = 0.0
    longest_gap_at_us: float = math.nan
    activities: int = 0
    kernels: Stat = field(default_factory=Stat)
    launches_matched: int = 0
    class_us: dict[str, float] = field(default_factory=dict)
    kernel_names: dict[str, list[float]] = field(default_factory=dict)
    """name -> [count, total_us] of kernels starting inside the windows."""
    h2d_us: float = 0.0
    d2h_us: float = 0.0
    h2d_bytes: int = 0
    d2h_bytes: int = 0
    h2d_copies: int = 0
    d2h_copies: int = 0
    h2d_pageable_us: float = 0.0
    h2d_pinned_us: float = 0.0
    h2d_unknown_us: float = 0.0
    d2h_pageable_us: float = 0.0
    d2h_pinned_us: float = 0.0
    comm_us: float = 0.0
    comm_exposed_us: float = 0.0
    comm_kernels: int = 0

    @property
    def idle_us(self) -> float:
        return max(0.0, self.window_us - self.busy_us)

    def share(self, us: float) -> float:
        """`us` over the window length, clamped to [0, 1]."""
        return min(1.0, max(0.0, us / self.window_us)) if self.window_us > 0 else 0.0

    def top_kernels(self, n: int = 10) -> list[dict[str, Any]]:
        """The n kernels with the most GPU time: {name, gpu_time_s, share, count} (share of kernel time)."""
        kernel_time = sum(t for _, t in self.kernel_names.values()) or 1.0
        ranked = sorted(self.kernel_names.items(), key=lambda kv: -kv[1][1])[:n]
        return [{"name": name, "gpu_time_s": t / 1e6, "share": t / kernel_time, "count": int(c)}
                for name, (c, t) in ranked]

    def time_breakdown(self, n: int = 10) -> dict[str, Any]:
        """{classes: [{class, gpu_time_s, share}], top_kernels: [...]}, shares of summed GPU activity time."""
        busy_sum = sum(self.class_us.values()) or 1.0
        classes = [{"class": c, "gpu_time_s": self.class_us[c] / 1e6, "share": self.class_us[c] / busy_sum}
                   for c in sorted(self.class_us, key=lambda c: -self.class_us[c])]
        return {"classes": classes, "top_kernels": self.top_kernels(n)}


_COMPUTE, _COMM, _H2D, _D2H = 1, 2, 4, 8


def analyse_device(device: int, activities: Iterable[GpuActivity], windows: Sequence[Interval], *,
                   data_spans: Sequence[Interval] = (), kernel_wait_us: float = KERNEL_WAIT_US) -> DeviceTimeline:
    """One pass over a device's activities, sorted by start: busy time, idle causes, classes, copies, exposed
    communication, all clipped to `windows` (sorted, disjoint). Activities are counted per kernel/class when they start
    inside a window. Memory: the activities running at once, the distinct kernel names, nothing per activity."""
    tl = DeviceTimeline(device=device, window_us=total(windows))
    if not windows:
        return tl
    nw = len(windows)
    w_end = windows[-1][1]
    state = {"wi": 0, "di": 0}
    counts = [0, 0, 0, 0, 0]  # any, compute, comm, h2d, d2h
    acc = {"busy": 0.0, "comm": 0.0, "exposed": 0.0, "h2d": 0.0, "d2h": 0.0}
    idle = {"data": 0.0, "host": 0.0, "kernel": 0.0, "other": 0.0}
    heap: list[tuple[float, int]] = []
    classes: dict[str, str] = {}
    class_us: dict[str, float] = {}
    names = tl.kernel_names

    def inside(a: float, b: float) -> list[Interval]:
        wi = state["wi"]
        while wi < nw and windows[wi][1] <= a:
            wi += 1
        state["wi"] = wi
        out: list[Interval] = []
        while wi < nw and windows[wi][0] < b:
            lo, hi = max(a, windows[wi][0]), min(b, windows[wi][1])
            if hi > lo:
                out.append((lo, hi))
            wi += 1
        return out

    w0, w1 = windows[0][0], windows[-1][1]

    def clipped(a: float, b: float) -> float:
        if nw == 1:
            return min(b, w1) - max(a, w0)
        return sum(hi - lo for lo, hi in inside(a, b))

    def segment(a: float, b: float) -> None:
        length = clipped(a, b)
        if length <= 0:
            return
        if counts[0]:
            acc["busy"] += length
        if counts[2]:
            acc["comm"] += length
            if not counts[1]:
                acc["exposed"] += length
        if counts[3]:
            acc["h2d"] += length
        if counts[4]:
            acc["d2h"] += length

    def gap(a: float, b: float, kind: str) -> None:
        if nw == 1 and not data_spans:
            length = min(b, w1) - max(a, w0)
            pieces = [(max(a, w0), min(b, w1))]
        else:
            pieces = inside(a, b)
            length = sum(hi - lo for lo, hi in pieces)
        if length <= 0:
            return
        tl.gaps += 1
        if length > tl.longest_gap_us:
            tl.longest_gap_us, tl.longest_gap_at_us = length, pieces[0][0]
        data = 0.0
        if data_spans:
            di = state["di"]
            while di < len(data_spans) and data_spans[di][1] <= a:
                di += 1
            state["di"] = di
            for lo, hi in pieces:
                k = di
                while k < len(data_spans) and data_spans[k][0] < hi:
                    data += max(0.0, min(hi, data_spans[k][1]) - max(lo, data_spans[k][0]))
                    k += 1
        idle["data"] += data
        idle[kind] += length - data

    t = windows[0][0]
    gap_start = t
    last_start = -math.inf
    wj = 0
    kernels = tl.kernels
    for act in activities:
        s = act.start_us
        if s < last_start:
            raise ValueError(f"device {device}: activities must be sorted by start ({s} after {last_start})")
        last_start = s
        e = s + act.dur_us
        while heap and heap[0][0] <= s:
            pe, fl = heapq.heappop(heap)
            if pe > t:
                segment(t, pe)
                t = pe
            _count(counts, fl, -1)
            if not counts[0]:
                gap_start = t
        if s > t:
            if counts[0]:
                segment(t, s)
            else:
                at = act.launch_us
                cause = ("host" if at == at and at > gap_start
                         else "kernel" if s - gap_start < kernel_wait_us else "other")
                gap(t, s, cause)
            t = s
        kind = act.kind
        flags = 0
        cls = classes.get(act.name) if kind == KERNEL else kind
        if cls is None:
            cls = classes[act.name] = classify_kernel(act.name)
        if cls == "communication":
            flags = _COMM
        else:
            flags = _COMPUTE
            if kind == MEMCPY:
                flags |= _H2D if act.copy_kind == "HtoD" else _D2H if act.copy_kind == "DtoH" else 0
        _count(counts, flags, 1)
        heapq.heappush(heap, (e, flags))
        while wj < nw and windows[wj][1] <= s:
            wj += 1
        if wj >= nw or s < windows[wj][0]:
            continue
        # -- per-activity figures, for activities starting inside a window --------------------------------------
        d = act.dur_us
        tl.activities += 1
        class_us[cls] = class_us.get(cls, 0.0) + d
        if act.launch_us == act.launch_us:
            tl.launches_matched += 1
        if kind == KERNEL:
            kernels.add(d)
            entry = names.get(act.name)
            if entry is None:
                names[act.name] = [1, d]
            else:
                entry[0] += 1
                entry[1] += d
            if flags & _COMM:
                tl.comm_kernels += 1
        elif kind == MEMCPY:
            if act.copy_kind == "HtoD":
                tl.h2d_copies += 1
                tl.h2d_bytes += act.bytes
                if act.pageable is True:
                    tl.h2d_pageable_us += d
                elif act.pageable is False:
                    tl.h2d_pinned_us += d
                else:
                    tl.h2d_unknown_us += d
            elif act.copy_kind == "DtoH":
                tl.d2h_copies += 1
                tl.d2h_bytes += act.bytes
                if act.pageable is True:
                    tl.d2h_pageable_us += d
                elif act.pageable is False:
                    tl.d2h_pinned_us += d
        elif kind != MEMSET:
            raise ValueError(f"unknown activity kind {kind!r}")
    while heap:
        pe, fl = heapq.heappop(heap)
        if pe > t:
            segment(t, pe)
            t = pe
        _count(counts, fl, -1)
        if not counts[0]:
            gap_start = t
    if t < w_end:
        gap(t, w_end, "other")
    tl.busy_us = acc["busy"]
    tl.comm_us, tl.comm_exposed_us = acc["comm"], acc["exposed"]
    tl.h2d_us, tl.d2h_us = acc["h2d"], acc["d2h"]
    tl.idle_data_us, tl.idle_host_us = idle["data"], idle["host"]
    tl.idle_kernel_us, tl.idle_other_us = idle["kernel"], idle["other"]
    tl.class_us = class_us
    return tl


def _count(counts: list[int], flags: int, step: int) -> None:
    counts[0] += step
    if flags & _COMPUTE:
        counts[1] += step
    if flags & _COMM:
        counts[2] += step
    if flags & _H2D:
        counts[3] += step
    if flags & _D2H:
        counts[4] += step
