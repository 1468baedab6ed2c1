"""The nsys rows fed to the shared trace analysis: one device's activities, the runtime calls and NVTX ranges of the
processes that drive it, and their DataLoader spans, as the columnar `timeline.Timeline` the Kineto reader fills.

Mapping (nsys -> Timeline): kernels, memcpys and memsets -> GPU activities (host-to-device copies flagged pageable or
pinned from srcKind); CUPTI_ACTIVITY_KIND_RUNTIME -> runtime calls on their host thread (globalTid), matched to the
activities by correlation id within a process; NVTX ranges -> operators when emit_nvtx names them after an ATen or
other dispatcher operator (`aten::mm, seq = 3, op_id = 5` -> `aten::mm`; `flash_attn::_flash_attn_forward, op_id = 7`;
names.is_operator_range), else host spans (user annotations, as Kineto's
user_annotation events); DataLoader `__next__` ranges -> loader spans.

The export's facts come from the streaming sweeps (host_sweep, gpu_sweep, analysis_sweep), which hold no rows; this
in-memory timeline of the same rows is their reference: tests/test_nsys_stream.py checks that both give the same
numbers, and bench/bench_nsys.py --in-memory measures it as the before/after baseline.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from ..intervals import Interval
from ..records import KERNEL, MEMCPY, MEMSET, GpuActivity
from ..timeline import H2D, KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET, PAGEABLE, PINNED, Timeline
from .names import is_operator_range
from .rows import NsysExport


def device_timeline(export: NsysExport, device: int, activities: Iterable[GpuActivity],
                    processes: Collection[int], loader: Sequence[Interval]) -> Timeline:
    """The Timeline of one device: `activities` (this device's, sorted by start), the runtime calls and NVTX ranges of
    `processes` (all of the export's when the export does not say which process ran what) and `loader` spans."""
    tl = Timeline()
    procs = {p for p in processes if p >= 0}
    several = len(procs) > 1  # correlation ids are per process: key them by (process, id)

    def key(corr: int, proc: int) -> int:
        return (proc << 32) | corr if several and 0 <= corr < (1 << 32) and 0 <= proc < (1 << 30) else corr

    # appended to the columns directly (the Timeline's fast path): a million rows cost seconds, not tens of them
    name_id, thread = tl.name_id, tl.thread
    g_start, g_end, g_dev, g_stream, g_corr = tl.g_start, tl.g_end, tl.g_dev, tl.g_stream, tl.g_corr
    g_kind, g_flag, g_name, g_ext = tl.g_kind, tl.g_flag, tl.g_name, tl.g_ext
    kinds = {KERNEL: KIND_KERNEL, MEMCPY: KIND_MEMCPY, MEMSET: KIND_MEMSET}
    for act in activities:
        flag = 0
        if act.kind == MEMCPY and act.copy_kind == "HtoD":
            flag = H2D | (PAGEABLE if act.pageable is True else PINNED if act.pageable is False else 0)
        g_start.append(act.start_us)
        g_end.append(act.start_us + act.dur_us)
        g_dev.append(device)
        g_stream.append(act.stream)
        g_corr.append(key(act.correlation, act.process) if several else act.correlation)
        g_kind.append(kinds[act.kind])
        g_flag.append(flag)
        g_name.append(name_id(act.name))
        g_ext.append(-1)
    threads: dict[tuple[int, int], int] = {}
    r_start, r_end, r_corr, r_name, r_thread, r_ext = tl.r_start, tl.r_end, tl.r_corr, tl.r_name, tl.r_thread, tl.r_ext
    for call in export.runtime_calls(processes=procs or None):
        th = threads.get((call.process, call.thread))
        if th is None:
            th = threads[(call.process, call.thread)] = thread(call.process, call.thread)
        r_start.append(call.start_us)
        r_end.append(call.start_us + call.dur_us)
        r_corr.append(key(call.correlation, call.process) if several else call.correlation)
        r_name.append(name_id(call.name))
        r_thread.append(th)
        r_ext.append(-1)
    o_start, o_end, o_thread, o_ext, o_name, o_shape = tl.o_start, tl.o_end, tl.o_thread, tl.o_ext, tl.o_name, \
        tl.o_shape
    s_start, s_end, s_thread, s_name = tl.s_start, tl.s_end, tl.s_thread, tl.s_name
    for rg in export.ranges(processes=procs or None, ordered=True):
        th = threads.get((rg.process, rg.thread))
        if th is None:
            th = threads[(rg.process, rg.thread)] = thread(rg.process, rg.thread)
        name = rg.name
        if is_operator_range(name):
            o_start.append(rg.start_us)
            o_end.append(rg.end_us)
            o_thread.append(th)
            o_ext.append(-1)
            o_name.append(name_id(name.split(",", 1)[0]))  # emit_nvtx's ", seq = N, op_id = N" dropped
            o_shape.append(-1)
        else:
            s_start.append(rg.start_us)
            s_end.append(rg.end_us)
            s_thread.append(th)
            s_name.append(name_id(name))
    for start, end in loader:
        tl.add_loader(start, end)
    tl.finish()
    return tl
