"""PyTorch profiler (Kineto) Chrome traces: streamed with ijson or msgspec, reduced to facts and a time breakdown.

The trace is never held in memory: events are read one at a time and only the fields the analysis reads are kept,
in the columnar `timeline.Timeline` (GPU activities, runtime calls, CPU operators with their interned shapes, python
functions and annotations, DataLoader spans). The analysis itself is format-neutral (expert/ingest/timeline.py and
opflops.py); this module reads the format, chooses the window and adds what only a Kineto trace says.

- windows: each CPU `ProfilerStep#N` span, its end extended to the last GPU activity launched inside it and clipped
  so windows do not overlap (the TensorBoard plugin's device steps); without steps a steady-state window (from the
  first GPU activity, after first-call warm-up, stretches without events left out), or the --window given;
- step_time_s (mean window), its spread (step_time_cv), data_wait_s (DataLoader `__next__` time per step);
- gpu_util, the idle split (HTA's host/kernel wait, and input / launch / host compute / sync / unattributed), mean
  kernel time, copies, exposed communication, graph replay, kernel classes, top kernels and operators;
- FLOPs and bytes from the recorded shapes (record_shapes=True) or, failing that, the with_flops estimates;
  hardware from deviceProperties, num_workers from the DataLoader iterator, workload from backward/optimizer ops.
"""

from __future__ import annotations

import logging
import math
import time
import zlib
from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from gzip import BadGzipFile
from typing import Any

from ..breakdown import TraceWindow
from ..kb.knowledge import KnowledgeBase
from ._kineto_stream import NotFast, gc_paused, ijson_prefix
from ._result import FileResult
from ._source import Progress, Source
from .intervals import Interval, total, union
from .kineto_collect import _collect, _Collected
from .kineto_read import _HINT, _fast_batches, _from_dicts, _metadata, _Tap
from .timeline import Cover, analyse, roof_of, steady_window, step_windows
from .timeline.result import TIMELINE_FACTS

FACTS = ("step_time_s", "data_wait_s", "gpu_util", "gpu_idle_gap_frac", "host_wait_frac", "mean_kernel_us",
         "kernels_per_step", "pageable_copy_frac", "h2d_copy_frac", "comm_frac", "allreduce_comm_share", "comm_kinds",
         "flops", "achieved_tflops", "hardware", "num_workers", "workload", "launch_overhead_frac", "host_compute_frac",
         "host_dispatch_frac", "host_sync_frac", "unattributed_idle_frac", "idle_host_ops", "idle_dispatch_ops",
         "host_copy_frac", "uses_cuda_graphs", "applied_optimizations", "memory_bound_kernel_frac",
         "weight_kernel_frac", "top_kernel_class", "top_kernel_class_frac", "top_kernel_class_ops", "top_op",
         "top_op_frac", "top_op_pct_of_roof", "trace_kernels", "trace_steps", "trace_window_s", "step_time_cv",
         "bytes_moved", "arithmetic_intensity", "dtype", "device_frees_per_step")
"""The facts a Kineto trace can give."""

KERNEL_WAIT_US = 0.03
"""HTA's default consecutive-kernel delay (30 ns): shorter gaps are launch latency between back-to-back kernels."""

_NO_STEPS = "the trace has no ProfilerStep#N spans (profile with a schedule and call prof.step() every iteration)"
_NO_GPU = ("CPU-only trace: no kernel, memcpy or memset events "
           "(profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])")
# Sanity bounds on event times (Chrome traces count microseconds). Past 2**53 µs (the year 2255 since 1970) a double
# no longer holds a microsecond, so durations vanish; a trace spanning more than a week is not one profiling session.
_MAX_TS_US = float(2**53)
_MAX_SPAN_US = 7 * 24 * 3600 * 1e6
_log = logging.getLogger(__name__)


def parse(src: Source, kb: KnowledgeBase, *, steps: tuple[int | None, int | None] | None = None,
          window: tuple[float | None, float | None] | None = None, gpus: Sequence[int] | None = None,
          progress: Progress | None = None, kernel_wait_us: float = KERNEL_WAIT_US,
          engine: str = "auto", breakdown: bool = True, workers: int | None = None,
          parallel_min_bytes: int | None = None) -> FileResult:
    """Read a Kineto trace and derive the facts listed in `FACTS` (and `FileResult.time_breakdown`).

    engine: "auto" decodes libkineto's own layout in typed batches (msgspec) and falls back to "ijson" (any JSON
    layout, streamed) when the file is laid out otherwise or is malformed; "ijson" forces the general reader.
    breakdown: False skips the kernel classes, operators and shapes (what bench/bench_ingest.py compares against).
    workers: processes decoding byte ranges of an uncompressed file of at least `parallel_min_bytes` (default
    kineto_parallel.PARALLEL_MIN_BYTES, 100 MB) in libkineto's layout; None: $DAM_INGEST_WORKERS or the CPUs; 1: in
    this process. The result is the same either way (kineto_parallel.py).
    """
    result = FileResult(path=src.label, name=src.name, format="kineto")
    collected: _Collected | None = None
    meta: dict[str, Any] = {}
    read = 0
    started, cpu = time.perf_counter(), time.process_time()
    try:
        if engine == "auto" and src.path is not None:
            from . import kineto_parallel

            n = kineto_parallel.worker_count(src, workers, parallel_min_bytes)
            with gc_paused():
                parallel = kineto_parallel.read(src, n, progress=progress) if n > 1 else None
            if parallel is not None:
                collected, meta, read = parallel.collected, parallel.meta, parallel.bytes
        if collected is None and engine == "auto" and src.path is not None:
            collected = _Collected()
            try:
                with src.open(progress) as fh, gc_paused():
                    _collect(_fast_batches(fh, meta), collected)
                    read = int(meta.pop("_bytes", 0))
            except NotFast:
                collected, meta = None, {}
        if collected is None:
            collected = _Collected()
            with gc_paused():
                read = _read_with_ijson(src, collected, meta, progress)
            result.stats["reader"] = "ijson"
        else:
            result.stats["reader"] = "msgspec batches"
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        _log.debug("%s: events read in %.3f s (%.3f s of CPU in this process)", src.label, seconds, cpu,
                   extra={"read_s": seconds, "read_cpu_s": cpu})
    except OverflowError as exc:  # an id past 64 bits in the typed arrays (a 2**70 correlation id)
        raise src.problem("an event's correlation id, external id, device or stream number does not fit in 64 bits",
                          hint="ids in a profiler trace are 64-bit integers; the trace is corrupt") from exc
    result.stats.update(bytes=read, events=collected.events, complete_events=collected.complete,
                        gpu_activities=len(collected.tl.g_start), runtime_calls=len(collected.tl.r_start),
                        operators=len(collected.tl.o_start), shaped_operators=collected.shaped_ops)
    if collected.events == 0:
        raise src.problem("no trace events: expected a Chrome trace with a non-empty `traceEvents` array", hint=_HINT)
    if collected.complete == 0 or collected.first == math.inf:
        raise src.problem("no complete ('ph': 'X') events with numeric ts/dur in the trace", hint=_HINT)
    if not -_MAX_TS_US <= collected.first <= collected.last <= _MAX_TS_US \
            or collected.last - collected.first > _MAX_SPAN_US:
        raise src.problem(f"event times run from ts {collected.first:.6g} to {collected.last:.6g} µs: past 2**53 µs or "
                          f"over a week apart, durations cannot be measured", hint="ts and dur count microseconds")
    if collected.malformed:
        result.notes.append(f"{collected.malformed} events without a numeric ts/dur were skipped")
    _Analysis(src, kb, collected, meta, result, steps, window, gpus, kernel_wait_us).run(breakdown)
    _drop_implausible(result, kb)
    info = meta.get("distributedInfo")
    if isinstance(info, dict):  # the rank's place in a multi-GPU job (expert/ingest/ranks.py compares the ranks)
        result.stats.update({k: v for k in ("rank", "world_size", "backend")
                             if isinstance(v := info.get(k), (int, str)) and not isinstance(v, bool)})
    return result


def _drop_implausible(result: FileResult, kb: KnowledgeBase) -> None:
    """A value outside its fact's range (a corrupt trace: zero-length windows, absurd shapes) is not derived, with
    the reason, rather than failing the whole ingest."""
    from ..observations.normalise import convert

    for name, m in list(result.measured.items()):
        spec = kb.facts.get(name)
        if spec is None:
            continue
        try:
            convert(spec, m.value, kb)
        except ValueError as exc:
            del result.measured[name]
            result.missing(name, f"the trace gives an implausible value ({exc}); its shapes or durations are off")


def _read_with_ijson(src: Source, collected: _Collected, meta: dict[str, Any], progress: Progress | None) -> int:
    """Stream the events with ijson; errors name the file and line. Returns the bytes read (decompressed)."""
    import ijson  # type: ignore[import-untyped]

    with src.open(progress) as fh:
        tap = _Tap(fh)
        try:
            _collect(_from_dicts(ijson.items(tap, ijson_prefix(fh), use_float=True)), collected)
        except ijson.JSONError as exc:
            line = tap.locate(str(exc))
            reason = str(exc).splitlines()[0] if str(exc) else "invalid JSON"
            if "premature EOF" in reason:
                reason = "the JSON ends early (truncated file?)"
            raise src.problem(f"not a valid JSON trace: {reason}", line=line, hint=_HINT) from exc
        except (EOFError, BadGzipFile, zlib.error) as exc:
            raise src.problem(f"compressed data is truncated or corrupt ({exc})",
                              line=tap.lines_before_last + tap.last.count(b"\n") + 1) from exc
        except UnicodeDecodeError as exc:
            raise src.problem("not UTF-8 text", line=tap.lines_before_last + 1) from exc
    meta.update(_metadata(tap))
    return tap.total


def _fmt_s(us: float) -> str:
    return f"{us / 1e6:.3g} s"


class _Analysis:
    """Turns collected events into facts (and the time breakdown) on a FileResult."""

    def __init__(self, src: Source, kb: KnowledgeBase, c: _Collected, meta: dict[str, Any], result: FileResult,
                 steps: tuple[int | None, int | None] | None, window: tuple[float | None, float | None] | None,
                 gpus: Sequence[int] | None, kernel_wait_us: float) -> None:
        self.src, self.kb, self.c, self.meta, self.r = src, kb, c, meta, result
        self.step_range, self.time_window, self.gpus = steps, window, gpus
        self.kernel_wait_us = kernel_wait_us
        self.windows: list[Interval] = []
        self._starts: list[float] = []
        self.n_steps = 0
        self.label = ""

    # -- windows ---------------------------------------------------------------------------------------------------
    def _select_steps(self) -> list[tuple[int, float, float]]:
        c = self.c
        steps = sorted(c.steps, key=lambda s: (s[1], s[0]))
        if not steps:
            if self.step_range is not None:
                raise self.src.problem(f"--steps: {_NO_STEPS}", hint="use --window START:END (seconds) instead")
            return []
        available = [s[0] for s in steps]
        if self.step_range is not None:
            lo, hi = self.step_range
            steps = [s for s in steps if (lo is None or s[0] >= lo) and (hi is None or s[0] <= hi)]
        if self.time_window is not None:
            a, b = self.time_window
            t0 = c.first
            steps = [s for s in steps if (a is None or s[1] >= t0 + a * 1e6) and (b is None or s[1] <= t0 + b * 1e6)]
        if not steps:
            shown = ", ".join(f"#{n}" for n in available[:20]) + (" ..." if len(available) > 20 else "")
            raise self.src.problem(f"no ProfilerStep spans in the selected range (the trace has {shown})",
                                   hint="pick steps the trace has, e.g. --steps " + f"{available[0]}:{available[-1]}")
        return steps

    # -- main ------------------------------------------------------------------------------------------------------
    def run(self, breakdown: bool = True) -> None:
        c, r, tl = self.c, self.r, self.c.tl
        for fact in FACTS:
            r.missing(fact, "not derived from this trace")
        steps = self._select_steps()
        tl.finish()
        all_devices = sorted(set(tl.g_dev))
        devices = set(all_devices) if not self.gpus else set(all_devices) & set(self.gpus)
        if self.gpus and not devices and all_devices:
            raise self.src.problem(f"--gpu {','.join(map(str, self.gpus))}: the trace has GPU activity on devices "
                                   f"{', '.join(map(str, all_devices))} only")
        numbered: list[tuple[int, float, float]] = []
        excluded = 0.0
        if steps:
            numbered = step_windows(tl, steps, devices)
            if not numbered:
                raise self.src.problem(f"all {len(steps)} ProfilerStep spans have zero length (dur 0): the trace "
                                       f"cannot be split into steps", hint="profile at least one whole step")
            windows = [(a, b) for _, a, b in numbered]
            n_steps = len(numbered)
            label = (f"ProfilerStep#{numbered[0][0]}–#{numbered[-1][0]} ({n_steps} steps)" if n_steps > 1
                     else f"ProfilerStep#{numbered[0][0]} (1 step)")
            reason = f"{label}: each step span extended to the end of the GPU work it launched"
        elif self.time_window is not None:
            lo, hi = c.first, c.last
            a, b = self.time_window
            lo = max(lo, c.first + a * 1e6) if a is not None else lo
            hi = min(hi, c.first + b * 1e6) if b is not None else hi
            if hi <= lo:
                raise self.src.problem(f"--window is outside the trace, which lasts {_fmt_s(c.last - c.first)}")
            windows = [(lo, hi)]
            n_steps = 0
            label = f"--window {_fmt_s(lo - c.first)}–{_fmt_s(hi - c.first)} (no ProfilerStep spans)"
            reason = f"the window given ({label})"
        else:
            steady = steady_window(tl, c.first, c.last, devices or None, self.src.kernel_catalog(self.kb))
            windows, reason, excluded = steady.windows, steady.reason, steady.excluded_us
            n_steps = 0
            label = (f"steady state {_fmt_s(windows[0][0] - c.first)}–{_fmt_s(windows[-1][1] - c.first)} "
                     "(no ProfilerStep spans)")
        if not steps:
            for fact in ("step_time_s", "data_wait_s", "kernels_per_step", "flops", "bytes_moved", "step_time_cv",
                         "achieved_tflops"):
                r.missing(fact, _NO_STEPS)
        self.windows, self.n_steps, self.label = windows, n_steps, label
        self._starts = [w[0] for w in windows]
        span = total(windows)
        r.stats.update(window=label, window_s=round(span / 1e6, 6))
        r.add("trace_steps", n_steps, method="ProfilerStep spans in the window" if n_steps else
              "no ProfilerStep spans: a steady-state window", window=label, file=self.src.label)
        r.add("trace_window_s", span / 1e6, method="length of the analysed window", window=label,
              file=self.src.label)
        self._steps_and_data(numbered, windows)
        self._num_workers()
        self._hardware(devices)
        if c.hip_calls:
            r.notes.append(f"ROCm trace ({c.hip_calls} hip* runtime calls)")
        trace_window = TraceWindow(start_us=round(windows[0][0] - c.first, 3),
                                   end_us=round(windows[-1][1] - c.first, 3), reason=reason, steps=n_steps,
                                   excluded_us=round(excluded, 3))
        analysis = None
        if not len(tl.g_start):
            why = _NO_GPU if not len(tl.r_start) else (
                f"no kernel, memcpy or memset records although the trace has {len(tl.r_start)} runtime calls "
                "(GPU activity was not recorded, e.g. a CUPTI-counter trace)")
            for fact in TIMELINE_FACTS:
                r.missing(fact, why)
        else:
            analysis = analyse(tl, windows, devices or None, self.src.kernel_catalog(self.kb),
                               roof=roof_of(self.kb, self.r.measured), source=self.src.name, window=trace_window,
                               steps=numbered, kernel_wait_us=self.kernel_wait_us,
                               torch_types=self.kb.units.torch_types())
            if analysis is None:
                for fact in TIMELINE_FACTS:
                    r.missing(fact, f"no GPU activity inside {label}")
            else:
                analysis.add_facts(r, label=label, file=self.src.label, n_steps=n_steps, kb=self.kb)
                self._syncs(analysis)
                if breakdown:
                    r.time_breakdown = analysis.breakdown
        self._flops(span, analysis)
        self._workload()

    def _steps_and_data(self, steps: list[tuple[int, float, float]], windows: list[Interval]) -> None:
        c, r, n = self.c, self.r, self.n_steps
        if not n:
            return
        per_step = [e - s for s, e in windows]
        r.add("step_time_s", total(windows) / n / 1e6, method="mean step window: ProfilerStep span extended to the "
              "end of the GPU work it launched", window=self.label, samples=n,
              min=round(min(per_step) / 1e6, 6), max=round(max(per_step) / 1e6, 6), file=self.src.label)
        if n >= 2:
            mean = sum(per_step) / n
            sd = math.sqrt(sum((x - mean) ** 2 for x in per_step) / (n - 1))
            r.add("step_time_cv", sd / mean if mean > 0 else 0.0, method="sample standard deviation of the step "
                  "windows over their mean", window=self.label, samples=n, file=self.src.label)
            rest = sorted(per_step[1:])
            median = rest[len(rest) // 2]
            if n >= 3 and per_step[0] > 3 * median:
                r.notes.append(f"ProfilerStep#{steps[0][0]} takes {per_step[0] / median:.1f}x the median of the "
                               f"others (first-call warm-up?); --steps {steps[1][0]}: leaves it out")
        else:
            r.missing("step_time_cv", "a single step has no spread")
        if not c.tl.loader:
            r.missing("data_wait_s", "the trace has no DataLoader __next__ spans (the input pipeline is not a torch "
                      "DataLoader, or it ran outside the profiled steps)")
            return
        loader = Cover(union(c.tl.loader))
        waits = [loader.between(a, b) for a, b in windows]
        iters = ", ".join(sorted(c.loader_iters))
        r.add("data_wait_s", sum(waits) / n / 1e6, method=f"DataLoader __next__ time ({iters}) inside the step "
              "windows, per step", window=self.label, samples=n, min=round(min(waits) / 1e6, 6),
              max=round(max(waits) / 1e6, 6), share_of_step=round(sum(waits) / total(windows), 4), file=self.src.label)

    def _num_workers(self) -> None:
        c, r = self.c, self.r
        iters = ", ".join(sorted(c.loader_iters))
        if not c.loader_iters:
            r.missing("num_workers", "the trace has no DataLoader __next__ spans")
        elif set(c.loader_iters) == {"_SingleProcessDataLoaderIter"}:
            r.add("num_workers", 0, method="the DataLoader iterator is _SingleProcessDataLoaderIter (num_workers=0)",
                  file=self.src.label)
        else:
            r.missing("num_workers", f"the DataLoader uses {iters}; the trace does not record how many workers")

    def _hardware(self, devices: set[int]) -> None:
        r = self.r
        props = self.meta.get("deviceProperties")
        if not props:
            r.missing("hardware", "the trace has no deviceProperties (a CPU-only trace, or an old profiler); "
                      "give --set hardware=ID (dam hardware list)")
            return
        chosen = [p for p in props if p.get("id") in devices] or list(props)
        names = [str(p.get("name", "")) for p in chosen if p.get("name")]
        if not names:
            r.missing("hardware", "deviceProperties carry no device name")
            return
        r.add_hardware(Counter(names), self.kb, what="device name", file=self.src.label,
                       method="deviceProperties.name mapped through the hardware catalog's aliases",
                       several="the trace lists several device models")

    def _in_windows(self, t: float) -> bool:
        k = bisect_right(self._starts, t) - 1
        return k >= 0 and t < self.windows[k][1]

    def _flops(self, span: float, analysis: Any) -> None:
        """FLOPs and bytes from the recorded shapes of the launching operators; else the with_flops estimates."""
        c, r = self.c, self.r
        in_window = self._in_windows
        with_flops = sum(f for t, f in zip(c.flops_ts, c.flops, strict=True) if in_window(t)) if c.flops else 0.0
        facts = analysis.facts if analysis is not None else {}
        flops, moved = facts.get("window_flops", 0.0), facts.get("window_bytes", 0.0)
        common: dict[str, Any] = {"window": self.label, "file": self.src.label}
        if analysis is not None and analysis.breakdown.flops_coverage is not None:
            common["coverage"] = analysis.breakdown.flops_coverage
        if with_flops:
            common["with_flops_estimate"] = with_flops / (self.n_steps or 1)
        coverage = analysis.breakdown.flops_coverage if analysis is not None else None
        least = self.src.kernel_catalog(self.kb).analysis.min_shape_coverage if coverage is not None else 0.0
        if flops > 0 and moved > 0 and coverage is not None and coverage < least:
            reason = (f"the operators with FLOP/byte counts from their shapes launched only {coverage:.0%} of the "
                      f"window's GPU time (at least {least:.0%} needed: kernels.yaml analysis.min_shape_coverage); "
                      "their sums would be a lower bound of the job's by an unknown factor")
            for fact in ("flops", "bytes_moved", "arithmetic_intensity", "achieved_tflops"):
                r.missing(fact, reason)
            dtype = facts.get("dtype")
            if dtype in self.kb.units.dtypes:
                r.add("dtype", dtype, method="dtype of the operators with the most FLOPs (Input type)", **common)
            return
        if flops > 0 and moved > 0:
            shapes = ("FLOPs and bytes of the operators that launched the window's kernels, from their recorded "
                      "shapes (expert/ingest/opflops.py); bytes count each operand once")
            r.add("arithmetic_intensity", flops / moved, method=shapes + "; an upper bound of the real intensity",
                  **common)
            r.add("achieved_tflops", flops / (span / 1e6) / 1e12, method="shape-derived FLOPs over the window",
                  **common)
            if self.n_steps:
                r.add("flops", flops / self.n_steps, method=shapes + ", per step", samples=self.n_steps, **common)
                r.add("bytes_moved", moved / self.n_steps, method=shapes + ", per step", samples=self.n_steps,
                      **common)
            dtype = facts.get("dtype")
            if dtype in self.kb.units.dtypes:  # a compute format (units.yaml `dtypes`), not an index or mask type
                r.add("dtype", dtype, method="dtype of the operators with the most FLOPs (Input type)", **common)
            else:
                r.missing("dtype", f"the operators with the most FLOPs compute in {dtype or 'an unknown type'}")
            return
        if not c.shaped_ops:
            reason = "the trace was recorded without record_shapes=True (no Input Dims)"
        elif analysis is None:
            reason = "no GPU kernels to attribute the operators' FLOPs to"
        else:
            reason = "no operator that launched the window's kernels has a FLOP/byte count from its shapes"
        for fact in ("bytes_moved", "arithmetic_intensity", "dtype"):
            r.missing(fact, reason)
        if not c.flops:
            flag = self.meta.get("with_flops")
            why = ("no operator in the trace carries a FLOP estimate" if flag in (1, "1", True)
                   else "the trace was recorded without with_flops=True")
            r.missing("flops", f"{reason}; {why}")
            r.missing("achieved_tflops", f"{reason}; {why}")
            return
        if not self.n_steps:
            return
        if with_flops <= 0:
            r.missing("flops", f"no operator with a FLOP estimate inside {self.label}")
            r.missing("achieved_tflops", f"no operator with a FLOP estimate inside {self.label}")
            return
        note = "sum of the profiler's with_flops estimates (matmul/conv/elementwise ops it knows) per step"
        r.add("flops", with_flops / self.n_steps, method=note, window=self.label, samples=self.n_steps,
              file=self.src.label)
        r.add("achieved_tflops", with_flops / (span / 1e6) / 1e12, method="with_flops FLOPs over step time",
              window=self.label, file=self.src.label)

    def _syncs(self, analysis: Any) -> None:
        """Host synchronize calls are reported in the file's stats (the idle split carries their cost)."""
        r = self.r
        calls, share = analysis.blocking_calls, analysis.blocking_share
        r.stats["host_sync_calls"] = calls
        if self.n_steps:
            r.stats["host_syncs_per_step"] = round(calls / self.n_steps, 2)
        r.stats["host_sync_share"] = round(share, 4)
        if self.c.gpu_syncs:
            r.stats["gpu_sync_events"] = self.c.gpu_syncs
        if calls:
            r.notes.append(f"{calls} blocking host calls (synchronize, free, synchronous copies) inside {self.label}, "
                           f"blocking the host {share:.1%} of the time")

    def _workload(self) -> None:
        if self.c.training_ops:
            self.r.add("workload", "training", method=f"{self.c.training_ops} backward/optimizer operators in the "
                       "trace", file=self.src.label)
        else:
            self.r.missing("workload", "no backward or optimizer operators in the trace; it may be inference or a "
                           "forward-only window")
