"""An Nsight Systems export's facts: each device's rows fed to the shared trace analysis (`timeline.analyse`, the
analysis Kineto traces get), the devices' figures averaged into the export's facts, and with several devices the
multi-rank comparison (`ranks.analyse`) across them.

Per device (`deviceId`): the windows are the NVTX step ranges of the process driving it, each extended to the end of
the GPU work launched inside it (`timeline.step_windows`), else `--window`, else the steady state
(`timeline.steady_window`: from the first GPU activity, after first-call warm-up, without stretches with no event);
then busy share, idle gaps and their causes, kernel classes, top kernels and operators, copies and exposed
communication come from `timeline.analyse`; communication overlap and time per step from the device's rank figures
(`cluster.device_rank`). Host synchronization comes from CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (else *Synchronize
runtime calls) into the file's stats; hardware from TARGET_INFO_GPU / TARGET_INFO_CUDA_DEVICE.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...breakdown import TraceWindow
from ...kb.knowledge import KernelCatalog, KnowledgeBase
from .._result import FileResult, JobResult, Measured, Scalar
from .._source import Progress, Source
from ..intervals import Interval, overlap, total, union
from ..rank_trace import RankTrace
from ..timeline.classes import Classifier
from ..timeline.result import TIMELINE_FACTS, TimelineAnalysis, slow_launch_note
from ..timeline.roofline import Roof, roof_of
from . import parallel
from .analysis_sweep import analyse_device
from .cluster import CLUSTER_FACTS, COMM_FACTS, job_facts
from .gpu_sweep import GpuSweep
from .host_sweep import HostSweep
from .rows import NsysExport, open_export
from .schema import (
    COPY_ENUM_T,
    CUDA_DEVICE_T,
    GPU_T,
    HOST_BLOCKING,
    KERNEL_T,
    MEMCPY_T,
    MEMSET_T,
    NVTX_T,
    RUNTIME_T,
    STRINGS_T,
    SYNC_T,
)
from .steps import NO_STEPS, NvtxSteps, StepList

KERNEL_WAIT_US = 0.03
"""HTA's default consecutive-kernel delay (30 ns): shorter gaps are launch latency between back-to-back kernels."""

GPU_FACTS = (*TIMELINE_FACTS, "comm_overlap_frac", "comm_time_s")

FACTS = ("step_time_s", "data_wait_s", "step_time_cv", "trace_steps", "trace_window_s", *GPU_FACTS, "hardware",
         "num_workers", "workload", *CLUSTER_FACTS)
"""The facts an Nsight Systems export can give."""

_UNSET = "not derived from this export"


@dataclass
class DeviceResult:
    """One device of an export: its windows, the shared analysis of them, its facts and its rank figures."""

    device: int
    windows: list[Interval]
    label: str
    n_steps: int
    analysis: TimelineAnalysis | None
    result: FileResult
    rank: RankTrace
    loader: list[Interval] = field(default_factory=list)
    """The DataLoader spans of the processes driving the device (input waits in the idle split)."""


@dataclass
class NsysAnalysis:
    """The facts of one export (`result`), the per-device analyses behind them and, with several devices, the
    multi-rank analysis across them (`job`)."""

    result: FileResult
    devices: dict[int, DeviceResult] = field(default_factory=dict)
    step_name: str | None = None
    job: JobResult | None = None

    @property
    def windows(self) -> dict[int, list[Interval]]:
        return {d: r.windows for d, r in self.devices.items()}


def parse(src: Source, kb: KnowledgeBase, *, steps: tuple[int | None, int | None] | None = None,
          window: tuple[float | None, float | None] | None = None, gpus: Sequence[int] | None = None,
          step_range: str | None = None, progress: Progress | None = None,
          kernel_wait_us: float = KERNEL_WAIT_US, workers: int | None = None) -> FileResult:
    """Read an Nsight Systems export and derive the facts listed in `FACTS`."""
    return analyse(src, kb, steps=steps, window=window, gpus=gpus, step_range=step_range, progress=progress,
                   kernel_wait_us=kernel_wait_us, workers=workers).result


def analyse(src: Source, kb: KnowledgeBase, *, steps: tuple[int | None, int | None] | None = None,
            window: tuple[float | None, float | None] | None = None, gpus: Sequence[int] | None = None,
            step_range: str | None = None, progress: Progress | None = None,
            kernel_wait_us: float = KERNEL_WAIT_US, workers: int | None = None) -> NsysAnalysis:
    """`parse`, keeping the per-device analyses and the cross-device (multi-rank) analysis. workers: processes to
    sweep the devices in (`parallel.lanes`: by default the CPUs, for an export of a million rows or more)."""
    result = FileResult(path=src.label, name=src.name, format="nsys")
    with open_export(src, progress) as (export, notes):
        result.notes.extend(notes)
        run = _Analysis(export, src, kb, result, steps, window, gpus, step_range, kernel_wait_us, progress)
        run.workers = workers
        run.run()
        if progress is not None and src.size:
            progress(src.size, src.size)
    step_name = run.nvtx.step_name if run.nvtx is not None else None
    return NsysAnalysis(result, run.per_device, step_name, run.job)


def _fmt_s(us: float) -> str:
    return f"{us / 1e6:.3g} s"


class _Analysis:
    """Turns an export's record streams into facts on a FileResult."""

    def __init__(self, export: NsysExport, src: Source, kb: KnowledgeBase, result: FileResult,
                 steps: tuple[int | None, int | None] | None, window: tuple[float | None, float | None] | None,
                 gpus: Sequence[int] | None, step_range: str | None, kernel_wait_us: float,
                 progress: Progress | None) -> None:
        self.x, self.src, self.kb, self.r = export, src, kb, result
        self.step_numbers, self.time_window, self.gpus = steps, window, gpus
        self.step_range, self.kernel_wait_us, self.progress = step_range, kernel_wait_us, progress
        self.per_device: dict[int, DeviceResult] = {}
        self.devices: dict[int, set[int]] = {}
        self.loader_by_proc: dict[int, list[Interval]] = defaultdict(list)
        self.first = self.last = 0.0
        self.label = "whole export"
        self.nvtx: NvtxSteps | None = None
        self.job: JobResult | None = None
        self.workers: int | None = None
        self.device_notes: dict[int, list[str]] = defaultdict(list)

    def device_state(self) -> dict[str, Any]:
        """What sweeping one device needs beyond the export and the knowledge base (for a worker process)."""
        assert self.nvtx is not None
        return {"options": (self.step_numbers, self.time_window, self.gpus, self.step_range, self.kernel_wait_us),
                "first": self.first, "last": self.last, "devices": self.devices,
                "loader_by_proc": dict(self.loader_by_proc),
                "nvtx": (self.nvtx.step_name, self.nvtx.numbers, self.nvtx.no_steps_reason)}

    @classmethod
    def for_device(cls, path: Path, label: str, name: str, kb: KnowledgeBase, state: dict[str, Any]) -> _Analysis:
        """The analysis of `device_state()` on its own connection to the export (in a worker process)."""
        src = Source(path)
        src.label, src.name = label, name
        steps, window, gpus, step_range, kernel_wait_us = state["options"]
        export = NsysExport(path, label)
        run = cls(export, src, kb, FileResult(path=label, name=name, format="nsys"), steps, window, gpus, step_range,
                  kernel_wait_us, None)
        run.first, run.last, run.devices = state["first"], state["last"], state["devices"]
        run.loader_by_proc.update(state["loader_by_proc"])
        run.nvtx = NvtxSteps(export, src, step_range=step_range, step_numbers=steps, time_window=window,
                             first_us=run.first)
        run.nvtx.step_name, run.nvtx.numbers, run.nvtx.no_steps_reason = state["nvtx"]
        return run

    @property
    def device_windows(self) -> dict[int, list[Interval]]:
        return {d: r.windows for d, r in self.per_device.items()}

    def run(self) -> None:
        x, r = self.x, self.r
        for fact in FACTS:
            r.missing(fact, _UNSET)
        version = x.meta.get("EXPORT_PRODUCT_VERSION")
        counts = x.counts()
        r.stats.update(reader="sqlite3 cursors", bytes=self.src.size or 0)
        if version:
            r.stats["nsys_version"] = version
        r.stats.update(counts)
        self._schema_notes()
        extent = x.extent()
        devices = x.device_processes()
        self.first, self.last = extent if extent is not None else (0.0, 0.0)
        self.nvtx = NvtxSteps(x, self.src, step_range=self.step_range, step_numbers=self.step_numbers,
                              time_window=self.time_window, first_us=self.first)
        gpu_rows = sum(counts.get(k, 0) for k in ("kernels", "memcpys", "memsets"))
        if extent is None or not devices or gpu_rows == 0:
            reason = ("the export has no CUPTI kernel, memcpy or memset records (profile with nsys profile -t cuda)"
                      if not x.activity_tables() else "the export's kernel, memcpy and memset tables are empty")
            for fact in (*GPU_FACTS, *CLUSTER_FACTS, "step_time_cv", "trace_steps", "trace_window_s"):
                r.missing(fact, reason)
            self._hardware(set())
            self._loader_and_workload()
            if extent is None:
                for fact in ("step_time_s", "data_wait_s"):
                    r.missing(fact, reason)
                return
            steps_by_proc = self._steps()
            if steps_by_proc:  # CPU-only: the step ranges themselves
                self._step_time({p: [(s, e) for _, s, e in v] for p, v in steps_by_proc.items()})
            else:
                for fact in ("step_time_s", "data_wait_s"):
                    r.missing(fact, self.nvtx.no_steps_reason)
            return
        chosen = set(devices)
        if self.gpus:
            chosen &= set(self.gpus)
            if not chosen:
                raise self.src.problem(f"--gpu {','.join(map(str, self.gpus))}: the export has GPU activity on "
                                       f"devices {', '.join(map(str, sorted(devices)))} only")
        self.devices = {d: devices[d] for d in sorted(chosen)}
        self._hardware(chosen)
        steps_by_proc = self._steps()
        self._loader_and_workload()
        self._analyse_devices(steps_by_proc)
        self._facts()
        self._syncs()
        self._cluster()
        label = self.label
        for fact, reason in list(r.not_derived.items()):
            if reason == _UNSET:
                r.not_derived[fact] = f"no GPU activity inside {label} to derive it from"

    # -- schema ----------------------------------------------------------------------------------------------------
    def _schema_notes(self) -> None:
        x, r = self.x, self.r
        absent = [t for t in (KERNEL_T, MEMCPY_T, MEMSET_T, RUNTIME_T, SYNC_T, NVTX_T, STRINGS_T) if t not in x.tables]
        if absent:
            r.notes.append("the export has no " + ", ".join(absent) + " table" + ("s" if len(absent) > 1 else "")
                           + " (not traced, or an older nsys); derived without them")
        if x.missing_columns:
            text = "; ".join(f"{t}: {', '.join(cols)}" for t, cols in x.missing_columns.items())
            version = x.meta.get("EXPORT_PRODUCT_VERSION", "version unknown")
            r.notes.append(f"columns missing from this export (nsys {version}): {text}; derived without them")
        if x.has(MEMCPY_T) and not x.has(COPY_ENUM_T):
            r.notes.append(f"no {COPY_ENUM_T} table: memcpy kinds read with CUPTI's numbering")

    # -- steps -----------------------------------------------------------------------------------------------------
    def _steps(self) -> dict[int, StepList]:
        assert self.nvtx is not None
        steps = self.nvtx.by_process()
        self.r.notes.extend(self.nvtx.notes)
        loader = self.nvtx.scan()[1]
        for rg in loader:
            if rg.name.endswith("__next__"):
                self.loader_by_proc[rg.process].append((rg.start_us, rg.end_us))
        return steps

    def _whole_window(self) -> Interval:
        lo, hi = self.first, self.last
        if self.time_window is not None:
            a, b = self.time_window
            lo = max(lo, self.first + a * 1e6) if a is not None else lo
            hi = min(hi, self.first + b * 1e6) if b is not None else hi
            if hi <= lo:
                raise self.src.problem(f"--window is outside the export, which lasts {_fmt_s(self.last - self.first)}")
        return lo, hi

    def _step_time(self, windows: dict[int, list[Interval]]) -> None:
        assert self.nvtx is not None
        per_step = [e - s for w in windows.values() for s, e in w]
        if not per_step:
            return
        n = round(sum(len(w) for w in windows.values()) / len(windows))
        self.r.add("step_time_s", sum(per_step) / len(per_step) / 1e6,
                   method=f"mean step window: NVTX range {self.nvtx.step_name!r} extended to the end of the GPU work "
                   "it launched", window=self.label, samples=n, min=round(min(per_step) / 1e6, 6),
                   max=round(max(per_step) / 1e6, 6), devices=",".join(map(str, sorted(windows))),
                   file=self.src.label)
        self._data_wait(windows)

    def _data_wait(self, windows: dict[int, list[Interval]]) -> None:
        r = self.r
        if not any(self.loader_by_proc.values()):
            r.missing("data_wait_s", "the export has no DataLoader __next__ NVTX ranges (profile with "
                      "torch.autograd.profiler.emit_nvtx(), or the input pipeline is not a torch DataLoader)")
            return
        waits = [overlap(self._loader_spans(dev), [w]) for dev, ws in windows.items() for w in ws]
        span = sum(total(ws) for ws in windows.values())
        if not waits:
            return
        r.add("data_wait_s", sum(waits) / len(waits) / 1e6, method="DataLoader __next__ NVTX time inside the step "
              "windows, per step", samples=len(waits), min=round(min(waits) / 1e6, 6), max=round(max(waits) / 1e6, 6),
              share_of_step=round(sum(waits) / span, 4) if span else None, file=self.src.label)

    def _loader_and_workload(self) -> None:
        assert self.nvtx is not None
        r = self.r
        _, loader, training = self.nvtx.scan()
        iters = Counter(rg.name[rg.name.index("#") + 1:-9] for rg in loader if rg.name.endswith("__next__"))
        if not iters:
            r.missing("num_workers", "the export has no DataLoader __next__ NVTX ranges")
        elif set(iters) == {"_SingleProcessDataLoaderIter"}:
            r.add("num_workers", 0, method="the DataLoader iterator is _SingleProcessDataLoaderIter (num_workers=0)",
                  file=self.src.label)
        else:
            r.missing("num_workers", f"the DataLoader uses {', '.join(sorted(iters))}; the export does not record "
                      "how many workers")
        if training:
            r.add("workload", "training", method=f"{training} backward/optimizer NVTX ranges in the export",
                  file=self.src.label)
        else:
            r.missing("workload", "no backward or optimizer NVTX ranges in the export; it may be inference, or "
                      "profiled without torch.autograd.profiler.emit_nvtx()")

    # -- devices ---------------------------------------------------------------------------------------------------
    def _analyse_devices(self, steps_by_proc: dict[int, StepList]) -> None:
        """Sweep the chosen devices, one at a time, through the shared analysis (rows streamed, never held)."""
        catalog, roof = self.src.kernel_catalog(self.kb), roof_of(self.kb, self.r.measured)
        cls = Classifier(catalog)
        acts = sum(int(self.r.stats.get(k, 0)) for k in ("kernels", "memcpys", "memsets"))
        host = sum(int(self.r.stats.get(k, 0)) for k in ("runtime_calls", "nvtx_events"))
        tick = _ticker(self.progress, self.src.size or 0, 2 * acts + host)  # two passes over the activities
        devices = sorted(self.devices)
        n = parallel.lanes(len(devices), acts + host, self.workers)
        if n > 1:
            swept = parallel.sweep_devices(self, devices, n, steps_by_proc, catalog, roof, cls, tick)
        else:
            swept = {dev: self._device(dev, steps_by_proc, catalog, roof, cls, tick) for dev in devices}
        for dev in devices:
            self.per_device[dev] = swept[dev]
            self.r.notes.extend(self.device_notes.get(dev, []))
        done = sorted(self.per_device.items())
        labels = [t.label for _, t in done if t.n_steps] or [t.label for _, t in done]
        self.label = labels[0] if labels else self.label  # the first device's (with steps, when some have them)
        span = sum(total(d.windows) for d in self.per_device.values()) / max(1, len(self.per_device))
        self.r.stats.update(window=self.label, window_s=round(span / 1e6, 6))

    def sweep_device(self, dev: int, steps_by_proc: dict[int, StepList], roof: Roof | None,
                     tick: Callable[[int], None] | None, catalog: KernelCatalog | None = None,
                     cls: Classifier | None = None) -> DeviceResult:
        """One device swept through the shared analysis (its notes in `device_notes`)."""
        catalog = catalog or self.src.kernel_catalog(self.kb)
        return self._device(dev, steps_by_proc, catalog, roof, cls or Classifier(catalog), tick)

    def _device(self, dev: int, steps_by_proc: dict[int, StepList], catalog: KernelCatalog, roof: Roof | None,
                cls: Classifier, tick: Callable[[int], None] | None) -> DeviceResult:
        assert self.nvtx is not None
        procs = self.devices.get(dev, set())
        loader = self._loader_spans(dev)
        host = HostSweep(self.x, dev, procs, cls)
        host.sweep(catalog.analysis.event_free_gap_us / 2, catalog.analysis.one_off_launch_min_us, tick)
        gpu = GpuSweep(self.x, host, dev, catalog, cls, loader, self.kernel_wait_us, tick)
        candidates = [p for p in procs if p in steps_by_proc] or (list(steps_by_proc) if len(steps_by_proc) == 1
                                                                  else [])
        lst = steps_by_proc[max(candidates, key=lambda p: len(steps_by_proc[p]))] if candidates else []
        with self.x.guard():
            gpu.scan_windows(lst)
        numbered: list[tuple[int, float, float]] = []
        excluded = 0.0
        name = self.nvtx.step_name
        if candidates:
            numbered = [(self.nvtx.numbers[k], a, b) for k, a, b in gpu.step_windows(lst)]
        if numbered:
            windows = [(a, b) for _, a, b in numbered]
            n = len(numbered)
            label = (f"NVTX {name!r} #{numbered[0][0]}–#{numbered[-1][0]} ({n} steps)" if n > 1
                     else f"NVTX {name!r} #{numbered[0][0]} (1 step)")
            reason = f"{label}: each NVTX range extended to the end of the GPU work it launched"
        else:
            n = 0
            if steps_by_proc:
                self.device_notes[dev].append(f"device {dev}: none of its processes has the step ranges")
            if self.time_window is not None:
                windows = [self._whole_window()]
                label = (f"--window {_fmt_s(windows[0][0] - self.first)}–{_fmt_s(windows[0][1] - self.first)} "
                         "(no NVTX step ranges)")
                reason = f"the window given ({label})"
            else:
                steady = gpu.steady_window(self.first, self.last)
                windows, excluded = steady.windows, steady.excluded_us
                reason = steady.reason.replace("no ProfilerStep spans", "no NVTX step ranges")
                label = (f"steady state {_fmt_s(windows[0][0] - self.first)}–{_fmt_s(windows[-1][1] - self.first)} "
                         "(no NVTX step ranges)")
        trace_window = TraceWindow(start_us=round(windows[0][0] - self.first, 3),
                                   end_us=round(windows[-1][1] - self.first, 3), reason=reason, steps=n,
                                   excluded_us=round(excluded, 3))
        result = FileResult(path=self.src.label, name=self.src.name, format="nsys")
        with self.x.guard():  # the sweeps iterate SQLite cursors: a read error mid-way is located too
            analysis, rank = analyse_device(gpu, windows, roof=roof, source=self.src.name, window=trace_window,
                                            steps=numbered, rank_steps=[k for k, _, _ in numbered],
                                            path=f"{self.src.label}:device{dev}",
                                            name=f"{self.src.name} device {dev}", label=label)
        if analysis is None:
            for fact in GPU_FACTS:
                result.missing(fact, f"no GPU activity inside {label}")
        else:
            analysis.add_facts(result, label=label, file=self.src.label, n_steps=n, kb=self.kb)
            if "pageable_copy_frac" in result.not_derived and analysis.copies["unknown"] > 0:
                result.missing("pageable_copy_frac", "the host-to-device copies do not say whether host memory was "
                               f"pinned (no srcKind column in {MEMCPY_T})")
        self._window_facts(result, windows, label, n)
        self._comm(result, rank, label, n)
        return DeviceResult(dev, windows, label, n, analysis, result, rank, loader)

    def _window_facts(self, result: FileResult, windows: list[Interval], label: str, n: int) -> None:
        """The window's size and, with steps, their spread (as a Kineto trace gives them)."""
        common: dict[str, Any] = {"window": label, "file": self.src.label}
        result.add("trace_steps", n, method="NVTX step ranges in the window" if n else "no NVTX step ranges: a "
                   "steady-state window", **common)
        result.add("trace_window_s", total(windows) / 1e6, method="length of the analysed window", **common)
        if n >= 2:
            per_step = [b - a for a, b in windows]
            mean = sum(per_step) / n
            sd = math.sqrt(sum((x - mean) ** 2 for x in per_step) / (n - 1))
            result.add("step_time_cv", sd / mean if mean > 0 else 0.0, method="sample standard deviation of the step "
                       "windows over their mean", samples=n, **common)
        elif n == 1:
            result.missing("step_time_cv", "a single step has no spread")
        else:
            assert self.nvtx is not None
            result.missing("step_time_cv", self.nvtx.no_steps_reason)

    @staticmethod
    def _comm(result: FileResult, rank: RankTrace, label: str, n_steps: int) -> None:
        """Communication overlap and time per step, from the device's rank figures (HTA's definitions)."""
        comm, over = rank.total("comm_us"), rank.total("overlap_us")
        if comm <= 0:
            result.missing("comm_overlap_frac", "no NCCL/RCCL kernels in the export")
            result.missing("comm_time_s", "no NCCL/RCCL kernels in the export")
            return
        common: dict[str, Any] = {"window": label, "devices": str(rank.device), "file": result.path}
        comm_kernels = sum(len(c) for c in rank.collectives)
        result.add("comm_overlap_frac", over / comm, method="Holistic Trace Analysis's overlap: NCCL/RCCL kernel time "
                   "during which computation kernels run, over all NCCL/RCCL kernel time", comm_kernels=comm_kernels,
                   **common)
        if n_steps:
            result.add("comm_time_s", comm / n_steps / 1e6, method="union of NCCL/RCCL kernel intervals per step, "
                       "overlapped or not", samples=n_steps, **common)
        else:
            result.missing("comm_time_s", NO_STEPS)

    def _loader_spans(self, dev: int) -> list[Interval]:
        """The DataLoader spans of the processes that drive a device (all of them when processes are unknown)."""
        procs = self.devices.get(dev, set())
        spans = [iv for p in procs for iv in self.loader_by_proc.get(p, [])]
        if not spans and (not procs or set(self.loader_by_proc) <= {-1}):
            spans = [iv for v in self.loader_by_proc.values() for iv in v]
        return union(spans)

    # -- the export's facts ------------------------------------------------------------------------------------------
    def _facts(self) -> None:
        r = self.r
        assert self.nvtx is not None
        used = {d: t for d, t in self.per_device.items() if t.analysis is not None}
        if not used:
            for fact in GPU_FACTS:
                r.missing(fact, f"no GPU activity inside {self.label}")
        parts = [t.result for _, t in sorted(used.items())] or [t.result for _, t in sorted(self.per_device.items())]
        _combine(parts, r, ",".join(map(str, sorted(used))))
        stepped = {d: t.windows for d, t in self.per_device.items() if t.n_steps}
        if stepped:
            self._step_time(stepped)
        else:
            reason = self.nvtx.no_steps_reason
            for fact in ("step_time_s", "kernels_per_step", "comm_time_s", "data_wait_s"):
                r.missing(fact, reason)
        if len(self.devices) > 1 or len({p for ps in self.devices.values() for p in ps}) > 1:
            procs = {p for ps in self.devices.values() for p in ps}
            r.notes.append(f"{len(used)} devices" + (f" in {len(procs)} processes" if procs else "")
                           + " in this export; the facts are their mean (per-device figures below)")
        for dev, t in sorted(self.per_device.items()):
            if t.analysis is not None:
                r.notes.append(_device_note(dev, t.analysis))
                slow = slow_launch_note(t.analysis.facts.get("_slow_launch"), t.label)
                if slow is not None:
                    r.notes.append(f"device {dev}: {slow}" if len(self.per_device) > 1 else slow)
        first_analysis = used[min(used)].analysis if used else None
        if first_analysis is not None:
            r.time_breakdown = first_analysis.breakdown
            if len(used) > 1:
                r.notes.append(f"the time breakdown is device {min(used)}'s")

    def _syncs(self) -> None:
        """Host synchronization: SYNCHRONIZATION records (host-blocking kinds), else *Synchronize runtime calls."""
        x, res = self.x, self.r
        per_device: dict[int, list[Interval]] = defaultdict(list)
        windows = self.device_windows
        calls = 0
        source = SYNC_T
        if x.has(SYNC_T):
            for sp in x.sync_spans():
                if sp.kind in HOST_BLOCKING and sp.device in windows:
                    per_device[sp.device].append((sp.start_us, sp.start_us + sp.dur_us))
        elif x.has(RUNTIME_T):
            source = f"*Synchronize calls in {RUNTIME_T}"
            spans = [(c.start_us, c.start_us + c.dur_us) for c in x.runtime_calls("%Synchronize%")]
            for dev in windows:
                per_device[dev] = spans
        else:
            return
        shares: list[float] = []
        for dev, ws in windows.items():
            spans = [iv for iv in per_device.get(dev, []) if _in(ws, iv[0])]
            calls += len(spans)
            span = total(ws)
            shares.append(min(1.0, overlap(union(spans), ws) / span) if span else 0.0)
        if not shares:
            return
        share = sum(shares) / len(shares)
        res.stats["host_sync_calls"] = calls
        n = min((t.n_steps for t in self.per_device.values()), default=0)
        if n:
            res.stats["host_syncs_per_step"] = round(calls / len(shares) / n, 2)
        res.stats["host_sync_share"] = round(share, 4)
        if calls:
            res.notes.append(f"{calls} host synchronizations ({source}) inside {self.label}, blocking the host "
                             f"{share:.1%} of the time")

    def _cluster(self) -> None:
        """With several devices: the multi-rank analysis across them (a device is a rank)."""
        from .. import ranks

        r = self.r
        used = [t for _, t in sorted(self.per_device.items()) if t.analysis is not None]
        if len(used) < 2:
            for fact in CLUSTER_FACTS:
                r.missing(fact, "one device in the export: nothing to compare it with (several devices, or the "
                          "exports of every rank, give the cross-rank figures)")
            return
        job = ranks.analyse([t.rank for t in used], [t.result for t in used])
        job.result.notes.insert(0, "the ranks are the export's devices (device id as rank number)")
        job_facts(job, r, comm_too=job.slowest_rank is not None, have_steps=any(t.n_steps for t in used))
        if job.slowest_rank is not None:
            r.notes.append(f"communication facts ({', '.join(COMM_FACTS)}) are device {job.slowest_rank}'s, the one "
                           "the others wait for (its collectives hold the least waiting)")
        r.notes.extend(n for n in job.result.notes if n.startswith("waits for"))
        self.job = job

    def _hardware(self, devices: set[int]) -> None:
        r = self.r
        names = self.x.gpu_names()
        if not names:
            r.missing("hardware", f"the export has no {GPU_T} / {CUDA_DEVICE_T} device names (an export without "
                      "device tables, e.g. trimmed or from an older nsys); give --set hardware=ID (dam hardware list)")
            return
        chosen = [names[d] for d in sorted(devices) if d in names] or list(names.values())
        r.add_hardware(Counter(chosen), self.kb, what="device name", file=self.src.label,
                       method=f"{GPU_T}.name mapped through the hardware catalog's aliases",
                       several="the export lists several device models")


def _combine(parts: list[FileResult], into: FileResult, devices: str) -> None:
    """The devices' facts as the export's: numbers averaged (min/max details widened), categories the most common;
    a fact measured on no device keeps the first device's reason."""
    if len(parts) == 1:
        for fact, m in parts[0].measured.items():
            into.measured[fact] = m
            into.not_derived.pop(fact, None)
    else:
        for fact in sorted({f for p in parts for f in p.measured}):
            have = [p.measured[fact] for p in parts if fact in p.measured]
            values = [m.value for m in have]
            detail: dict[str, Scalar] = dict(have[0].detail)
            value: Scalar
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                mean = sum(float(v) for v in values) / len(values)
                value = round(mean) if all(isinstance(v, int) for v in values) else mean
                for k in detail:
                    got = [m.detail.get(k) for m in have]
                    nums = [float(g) for g in got if isinstance(g, (int, float)) and not isinstance(g, bool)]
                    if len(nums) != len(got) or k in ("samples",):
                        continue
                    detail[k] = (min(nums) if k == "min" else max(nums) if k == "max"
                                 else round(sum(nums) / len(nums), 6))
                how = f"mean of {len(have)} devices"
            else:
                counts = Counter(values)
                value = max(counts, key=lambda v: (counts[v], str(v)))
                how = f"most common of {len(have)} devices"
            if len(have) > 1:
                detail["method"] = f"{detail.get('method', '')}; {how}"
            detail["devices"] = devices if len(have) == len(parts) else ",".join(
                str(p.measured[fact].detail.get("devices", "?")) for p in parts if fact in p.measured)
            into.measured[fact] = Measured(fact=fact, value=value, source=have[0].source, detail=detail)
            into.not_derived.pop(fact, None)
    for p in parts:
        for fact, reason in p.not_derived.items():
            if fact not in into.measured and into.not_derived.get(fact, _UNSET) == _UNSET:
                into.not_derived[fact] = reason


def _ticker(progress: Progress | None, size: int, rows: int) -> Callable[[int], None] | None:
    """A tick(rows done) that calls progress(bytes, size) in proportion to the rows swept (about `rows` in all)."""
    if progress is None or not size or not rows:
        return None
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        progress(min(size, size * done // rows), size)

    return tick


def _in(windows: list[Interval], t: float) -> bool:
    return any(a <= t < b for a, b in windows)


def short_name(name: str) -> str:
    """A kernel name without its return type, template arguments and parameter list, for display."""
    text = name[5:] if name.startswith("void ") else name
    cut = min((i for i in (text.find("<"), text.find("(")) if i > 0), default=-1)
    return (text[:cut] if cut > 0 else text).strip() or name


def _device_note(dev: int, a: TimelineAnalysis) -> str:
    """One line per device: busy, idle causes, copies, communication, classes and top kernels."""
    idle, bd = a.idle, a.breakdown
    parts = [f"device {dev}: busy {idle['busy']:.1%} of {a.span_us / 1e3:.4g} ms",
             f"idle {max(0.0, 1 - idle['busy']):.1%} (input {idle['data']:.1%}, launch {idle['launch']:.1%}, host "
             f"compute {idle['host']:.1%}, sync {idle['sync']:.1%}, GPU-side wait {idle['gpu_wait']:.1%}, "
             f"unattributed {idle['unattributed']:.1%})"]
    if idle["h2d"] > 0:
        parts.append(f"H2D copies {idle['h2d']:.1%}")
    if a.has_comm:
        parts.append(f"NCCL exposed {idle['comm']:.1%}")
    if bd.classes:
        parts.append("classes " + ", ".join(f"{c.class_} {c.share:.0%}" for c in bd.classes[:5]))
    if bd.top_kernels:
        parts.append("top kernels " + ", ".join(f"{short_name(k.name)} {k.share:.1%} ×{k.count}"
                                                for k in bd.top_kernels[:5]))
    return "; ".join(parts)
