"""The nsys rows fed to the shared trace analysis: one device's activities, the runtime calls and NVTX ranges of the
processes that drive it, and their DataLoader spans, as the columnar `timeline.Timeline` the Kineto reader fills.

Mapping (nsys -> Timeline): kernels, memcpys and memsets -> GPU activities (host-to-device copies flagged pageable or
pinned from srcKind); CUPTI_ACTIVITY_KIND_RUNTIME -> runtime calls on their host thread (globalTid), matched to the
activities by correlation id within a process; NVTX ranges -> operators when emit_nvtx names them after an ATen
operator (`aten::mm, seq = 3, op_id = 5` -> `aten::mm`), else host spans (user annotations, as Kineto's
user_annotation events); DataLoader `__next__` ranges -> loader spans. A device is built and analysed at a time, so
memory holds one device's rows in arrays, never Python objects per row.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from ..intervals import Interval
from ..records import MEMCPY, GpuActivity
from ..timeline import H2D, PAGEABLE, PINNED, Timeline
from .rows import NsysExport
from .steps import ANNOTATION

_OPERATOR_PREFIXES = ("aten::",)
"""NVTX ranges emit_nvtx names after the operator that ran (the CPU operators of a Kineto trace)."""


def device_timeline(export: NsysExport, device: int, activities: Iterable[GpuActivity],
                    processes: Collection[int], loader: Sequence[Interval]) -> Timeline:
    """The Timeline of one device: `activities` (this device's, sorted by start), the runtime calls and NVTX ranges of
    `processes` (all of the export's when the export does not say which process ran what) and `loader` spans."""
    tl = Timeline()
    procs = {p for p in processes if p >= 0}
    several = len(procs) > 1  # correlation ids are per process: key them by (process, id)

    def key(corr: int, proc: int) -> int:
        return (proc << 32) | corr if several and 0 <= corr < (1 << 32) and 0 <= proc < (1 << 30) else corr

    add_gpu = tl.add_gpu
    for act in activities:
        flag = 0
        if act.kind == MEMCPY and act.copy_kind == "HtoD":
            flag = H2D | (PAGEABLE if act.pageable is True else PINNED if act.pageable is False else 0)
        add_gpu(act.name, act.start_us, act.dur_us, device=device, stream=act.stream,
                correlation=key(act.correlation, act.process), kind=act.kind, flag=flag)
    threads: dict[tuple[int, int], int] = {}
    for call in export.runtime_calls(processes=procs or None):
        th = threads.get((call.process, call.thread))
        if th is None:
            th = threads[(call.process, call.thread)] = tl.thread(call.process, call.thread)
        tl.add_runtime(call.name, call.start_us, call.dur_us, correlation=key(call.correlation, call.process),
                       thread=th)
    for rg in export.ranges(processes=procs or None, ordered=True):
        th = threads.get((rg.process, rg.thread))
        if th is None:
            th = threads[(rg.process, rg.thread)] = tl.thread(rg.process, rg.thread)
        if rg.name.startswith(_OPERATOR_PREFIXES):
            tl.add_op(ANNOTATION.sub("", rg.name), rg.start_us, rg.end_us - rg.start_us, thread=th)
        else:
            tl.add_span(rg.name, rg.start_us, rg.end_us - rg.start_us, thread=th)
    for start, end in loader:
        tl.add_loader(start, end)
    tl.finish()
    return tl
