"""PyTorch profiler (Kineto) Chrome traces: streamed with ijson, reduced to per-step facts.

The trace is never held in memory: events are read one at a time and only the few numbers the analysis needs are kept
in typed arrays (start, end, correlation, device of each GPU activity; start, end, correlation of each runtime call).

Derivations (per `ProfilerStep#N`, or over the whole trace when it has no step spans):

- step windows: each CPU `ProfilerStep#N` span, its end extended to the last GPU activity launched inside it and
  clipped so windows do not overlap (the TensorBoard plugin's device steps);
- step_time_s: mean window length; data_wait_s: DataLoader `__next__` time inside the windows per step;
- gpu_util: union of kernel, memcpy and memset intervals over the windows (per device, averaged over devices);
- idle time split as HTA does: a gap is *host wait* when the launch call of the activity after it began after the
  previous activity ended, *kernel wait* when it is shorter than `kernel_wait_us`, else *other*; the part of any
  gap that overlaps a DataLoader span is counted as data wait, not host wait;
- mean_kernel_us, kernels_per_step, host-to-device copy share and its pageable part, exposed NCCL/RCCL time,
  host synchronizations, and with_flops FLOPs per step.
"""

from __future__ import annotations

import gc
import json
import math
import re
import zlib
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from gzip import BadGzipFile
from typing import IO, Any

import msgspec

from ..kb.knowledge import KnowledgeBase
from ._result import FileResult
from ._samples import Stat
from ._source import Progress, Source
from .intervals import Interval, intersect, overlap, total, union

FACTS = ("step_time_s", "data_wait_s", "gpu_util", "gpu_idle_gap_frac", "host_wait_frac", "mean_kernel_us",
         "kernels_per_step", "pageable_copy_frac", "h2d_copy_frac", "comm_frac", "flops", "achieved_tflops",
         "hardware", "num_workers", "workload")
"""The facts a Kineto trace can give."""

KERNEL_WAIT_US = 0.03
"""HTA's default consecutive-kernel delay (30 ns): shorter gaps are launch latency between back-to-back kernels."""

_CPU, _ANNOTATION, _KERNEL, _MEMCPY, _MEMSET, _RUNTIME, _GPU_SYNC, _OTHER = range(8)
_CATEGORIES = {
    "cpu_op": _CPU, "operator": _CPU, "user_annotation": _ANNOTATION,
    "kernel": _KERNEL, "gpu_memcpy": _MEMCPY, "memcpy": _MEMCPY, "gpu_memset": _MEMSET, "memset": _MEMSET,
    "cuda_runtime": _RUNTIME, "runtime": _RUNTIME, "cuda_driver": _RUNTIME, "cuda_sync": _GPU_SYNC,
}
_GPU_KIND = {_KERNEL: 0, _MEMCPY: 1, _MEMSET: 2}
_H2D, _PAGEABLE, _PINNED, _COMM = 1, 2, 4, 8
_NO_STEPS = "the trace has no ProfilerStep#N spans (profile with a schedule and call prof.step() every iteration)"
_NO_GPU = ("CPU-only trace: no kernel, memcpy or memset events "
           "(profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])")
_META_KEYS = re.compile(rb'"(deviceProperties|distributedInfo|with_flops)"\s*:\s*')
_TAP_KEEP = 1 << 20
_HINT = "a PyTorch profiler trace from prof.export_chrome_trace() or tensorboard_trace_handler"


@dataclass
class _Collected:
    """The numbers kept from the event stream."""

    first: float = math.inf
    last: float = -math.inf
    events: int = 0
    complete: int = 0
    malformed: int = 0
    g_ts: array[float] = field(default_factory=lambda: array("d"))
    g_end: array[float] = field(default_factory=lambda: array("d"))
    g_corr: array[int] = field(default_factory=lambda: array("q"))
    g_dev: array[int] = field(default_factory=lambda: array("q"))
    g_kind: array[int] = field(default_factory=lambda: array("b"))
    g_flag: array[int] = field(default_factory=lambda: array("b"))
    r_corr: array[int] = field(default_factory=lambda: array("q"))
    r_ts: array[float] = field(default_factory=lambda: array("d"))
    sync_ts: array[float] = field(default_factory=lambda: array("d"))
    sync_end: array[float] = field(default_factory=lambda: array("d"))
    flops_ts: array[float] = field(default_factory=lambda: array("d"))
    flops: array[float] = field(default_factory=lambda: array("d"))
    steps: set[tuple[int, float, float]] = field(default_factory=set)
    loader: list[Interval] = field(default_factory=list)
    loader_iters: Counter[str] = field(default_factory=Counter)
    gpu_syncs: int = 0
    hip_calls: int = 0
    training_ops: int = 0
    categories: Counter[str] = field(default_factory=Counter)


class _Tap:
    """A file wrapper that keeps the head and tail of what passes through (for the top-level metadata) and counts
    lines (to place parse errors)."""

    def __init__(self, inner: IO[bytes]) -> None:
        self._inner = inner
        self.head = b""
        self.tail = b""
        self.last = b""
        self.lines_before_last = 0
        self.total = 0

    def read(self, n: int = -1) -> bytes:
        data = self._inner.read(n)
        if data:
            self.lines_before_last += self.last.count(b"\n")
            self.total += len(data)
            if len(self.head) < _TAP_KEEP:
                self.head += data[: _TAP_KEEP - len(self.head)]
            self.tail = (self.last + data)[-_TAP_KEEP:] if len(data) < _TAP_KEEP else data[-_TAP_KEEP:]
            self.last = data
        return data

    def locate(self, message: str) -> int:
        """The line of a yajl error, using the context snippet yajl prints above '(right here) ------^'."""
        lines = message.splitlines()
        for k, text in enumerate(lines):
            if "(right here)" in text and k > 0:
                context = lines[k - 1]
                caret = text.index("^")
                snippet = context.strip()
                if not snippet:
                    break
                offset_in_context = caret - (len(context) - len(context.lstrip()))
                window = self.tail.replace(b"\n", b" ").replace(b"\r", b" ").replace(b"\t", b" ")
                pos = window.rfind(snippet.encode("utf-8", "replace"))
                if pos >= 0:
                    at = min(len(self.tail), pos + max(offset_in_context, 0))
                    before_tail = self.lines_before_last + self.last.count(b"\n") - self.tail.count(b"\n")
                    return before_tail + self.tail[:at].count(b"\n") + 1
                break
        return self.lines_before_last + self.last.count(b"\n") + 1


class _Args(msgspec.Struct, gc=False):
    """The few event arguments the analysis reads; msgspec skips every other key without building it."""

    correlation: Any = None
    device: Any = None
    flops: Any = None


class _Event(msgspec.Struct, gc=False):
    """One trace event, reduced to the fields the analysis reads."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    pid: Any = None
    args: _Args | None = None


class _Document(msgspec.Struct):
    """A whole (small) trace document, or its head or tail cut at an event boundary."""

    traceEvents: list[_Event] = msgspec.field(default_factory=list)
    deviceProperties: Any = None
    distributedInfo: Any = None
    with_flops: Any = None


_SKIP = _Event()


def _from_dicts(items: Iterable[Any], batch: int = 8192) -> Iterator[list[_Event]]:
    """ijson's event dicts as batches of _Event (only complete events are converted; others are skipped cheaply)."""
    out: list[_Event] = []
    for ev in items:
        if type(ev) is not dict or ev.get("ph") != "X":
            out.append(_SKIP)
        else:
            a = ev.get("args")
            args = _Args(a.get("correlation"), a.get("device"), a.get("flops")) if type(a) is dict else None
            out.append(_Event("X", ev.get("cat"), ev.get("name"), ev.get("ts"), ev.get("dur"), ev.get("pid"), args))
        if len(out) >= batch:
            yield out
            out = []
    if out:
        yield out


class _NotFast(Exception):
    """The document is not in Kineto's own layout (or is malformed): read it with ijson instead."""


_BOUNDARY = b"\n  },\n  {"
_BLOCK = 1 << 20
_FAST_SEARCH_LIMIT = 16 << 20


def _fast_batches(fh: IO[bytes], meta: dict[str, Any]) -> Iterator[list[_Event]]:
    """Events of a trace in libkineto's layout (one event per indented block), decoded a few megabytes at a time.

    JSON strings cannot hold raw newlines, so the text between two `\\n  },\\n  {` boundaries is a run of whole
    events; each run is decoded as one typed list, which also validates the cut. Anything unexpected raises _NotFast.
    """
    as_list = msgspec.json.Decoder(list[_Event])
    as_doc = msgspec.json.Decoder(_Document)
    buf = b""
    first = True
    try:
        while True:
            chunk = fh.read(_BLOCK)
            if not chunk:
                break
            meta["_bytes"] = meta.get("_bytes", 0) + len(chunk)
            buf += chunk
            cut = buf.rfind(_BOUNDARY)
            if cut < 0:
                if len(buf) > _FAST_SEARCH_LIMIT:
                    raise _NotFast("no event boundaries")
                continue
            piece, buf = buf[:cut], buf[cut + len(_BOUNDARY):]
            if first:
                doc = as_doc.decode(piece + b"\n  }]}")
                _keep_meta(doc, meta)
                yield doc.traceEvents
                first = False
            else:
                yield as_list.decode(b"[{" + piece + b"\n  }]")
        doc = as_doc.decode(buf if first else b'{"traceEvents":[{' + buf)
    except (msgspec.DecodeError, EOFError, BadGzipFile, zlib.error, OSError) as exc:
        raise _NotFast(str(exc)) from exc
    _keep_meta(doc, meta)
    yield doc.traceEvents


def _keep_meta(doc: _Document, meta: dict[str, Any]) -> None:
    for key in ("deviceProperties", "distributedInfo", "with_flops"):
        value = getattr(doc, key)
        if value is not None and key not in meta:
            if key == "deviceProperties" and not (isinstance(value, list) and all(isinstance(d, dict) for d in value)):
                continue
            meta[key] = value


def _collect(batches: Iterable[list[_Event]], c: _Collected) -> None:
    """One pass over the events; keeps only what the analysis needs."""
    kinds: dict[Any, int] = {}
    steps, loader, loader_iters = c.steps, c.loader, c.loader_iters
    g_ts, g_end, g_corr, g_dev, g_kind, g_flag = c.g_ts, c.g_end, c.g_corr, c.g_dev, c.g_kind, c.g_flag
    r_corr, r_ts = c.r_corr, c.r_ts
    first, last = c.first, c.last
    count = complete = malformed = 0
    for ev in (ev for batch in batches for ev in batch):
        count += 1
        if ev.ph != "X":
            continue
        cat = ev.cat
        try:
            kind = kinds[cat]
        except KeyError:
            kind = _CATEGORIES.get(cat.lower(), _OTHER) if isinstance(cat, str) else _OTHER
            kinds[cat] = kind
        except TypeError:
            kind = _OTHER
        complete += 1
        if kind == _OTHER:
            continue
        ts = ev.ts
        dur = ev.dur
        bad_ts = type(ts) is not float and type(ts) is not int
        if bad_ts or (type(dur) is not float and type(dur) is not int) or dur < 0:
            malformed += 1
            continue
        end = ts + dur
        if ts < first:
            first = ts
        if end > last:
            last = end
        name = ev.name
        if type(name) is not str:
            name = ""
        args = ev.args
        if kind <= _ANNOTATION:
            if name.startswith("ProfilerStep#"):
                number = name[13:]
                if number.isdigit():
                    steps.add((int(number), float(ts), float(end)))
            elif name.startswith(("enumerate(DataLoader)#", "enumerate(DataPipe)#")) and name.endswith("__next__"):
                loader.append((float(ts), float(end)))
                loader_iters[name[name.index("#") + 1:-9]] += 1
            elif name.startswith(("autograd::engine::evaluate_function", "Optimizer.step#")):
                c.training_ops += 1
            if kind == _CPU and args is not None:
                flop = args.flops
                if flop and (type(flop) is int or type(flop) is float):
                    c.flops_ts.append(ts)
                    c.flops.append(flop)
        elif kind == _RUNTIME:
            corr = args.correlation if args is not None else None
            if type(corr) is int:
                r_corr.append(corr)
                r_ts.append(ts)
            if "Synchronize" in name:
                c.sync_ts.append(ts)
                c.sync_end.append(end)
            if name.startswith("hip"):
                c.hip_calls += 1
        elif kind == _GPU_SYNC:
            c.gpu_syncs += 1
        else:
            corr = dev = None
            if args is not None:
                corr = args.correlation
                dev = args.device
            if dev is None:
                dev = ev.pid
            flag = 0
            if kind == _MEMCPY:
                if "HtoD" in name:
                    flag = _H2D | (_PAGEABLE if "Pageable" in name else _PINNED if "Pinned" in name else 0)
            elif kind == _KERNEL and ("nccl" in name or "rccl" in name):
                flag = _COMM
            g_ts.append(ts)
            g_end.append(end)
            g_corr.append(corr if type(corr) is int else -1)
            g_dev.append(dev if type(dev) is int else -1)
            g_kind.append(_GPU_KIND[kind])
            g_flag.append(flag)
    c.first, c.last = first, last
    c.events += count
    c.complete += complete
    c.malformed += malformed


def _metadata(tap: _Tap) -> dict[str, Any]:
    """Top-level keys other than traceEvents, found in the first or last megabyte of the document."""
    found: dict[str, Any] = {}
    decoder = json.JSONDecoder()
    for blob in (tap.head, tap.tail):
        text = blob.decode("utf-8", "replace")
        for match in _META_KEYS.finditer(blob):
            key = match.group(1).decode()
            if key in found:
                continue
            start = len(blob[: match.end()].decode("utf-8", "replace"))
            try:
                value, _ = decoder.raw_decode(text, start)
            except ValueError:
                continue
            if key == "deviceProperties" and not (isinstance(value, list) and all(isinstance(d, dict) for d in value)):
                continue
            found[key] = value
    return found


def parse(src: Source, kb: KnowledgeBase, *, steps: tuple[int | None, int | None] | None = None,
          window: tuple[float | None, float | None] | None = None, gpus: Sequence[int] | None = None,
          progress: Progress | None = None, kernel_wait_us: float = KERNEL_WAIT_US,
          engine: str = "auto") -> FileResult:
    """Read a Kineto trace and derive the facts listed in `FACTS`.

    engine: "auto" decodes libkineto's own layout in typed batches (msgspec) and falls back to "ijson" (any JSON
    layout, streamed) when the file is laid out otherwise or is malformed; "ijson" forces the general reader.
    """
    result = FileResult(path=src.label, name=src.name, format="kineto")
    collected: _Collected | None = None
    meta: dict[str, Any] = {}
    read = 0
    if engine == "auto" and src.path is not None:
        collected = _Collected()
        try:
            with src.open(progress) as fh, _gc_paused():
                _collect(_fast_batches(fh, meta), collected)
                read = int(meta.pop("_bytes", 0))
        except _NotFast:
            collected, meta = None, {}
    if collected is None:
        collected = _Collected()
        with _gc_paused():
            read = _read_with_ijson(src, collected, meta, progress)
        result.stats["reader"] = "ijson"
    else:
        result.stats["reader"] = "msgspec batches"
    result.stats.update(bytes=read, events=collected.events, complete_events=collected.complete,
                        gpu_activities=len(collected.g_ts), runtime_calls=len(collected.r_ts))
    if collected.events == 0:
        raise src.problem("no trace events: expected a Chrome trace with a non-empty `traceEvents` array", hint=_HINT)
    if collected.complete == 0 or collected.first == math.inf:
        raise src.problem("no complete ('ph': 'X') events with numeric ts/dur in the trace", hint=_HINT)
    if collected.malformed:
        result.notes.append(f"{collected.malformed} events without a numeric ts/dur were skipped")
    _Analysis(src, kb, collected, meta, result, steps, window, gpus, kernel_wait_us).run()
    info = meta.get("distributedInfo")
    if isinstance(info, dict):  # the rank's place in a multi-GPU job (expert/ingest/ranks.py compares the ranks)
        result.stats.update({k: v for k in ("rank", "world_size", "backend")
                             if isinstance(v := info.get(k), (int, str)) and not isinstance(v, bool)})
    return result


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while millions of short-lived, acyclic event objects are made (it would
    otherwise rescan them many times over); the previous state is restored."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _read_with_ijson(src: Source, collected: _Collected, meta: dict[str, Any], progress: Progress | None) -> int:
    """Stream the events with ijson; errors name the file and line. Returns the bytes read (decompressed)."""
    import ijson  # type: ignore[import-untyped]

    with src.open(progress) as fh:
        tap = _Tap(fh)
        try:
            peek = getattr(fh, "peek", None)
            start = peek(64).lstrip(b" \t\r\n\xef\xbb\xbf")[:1] if peek is not None else b"{"
            prefix = "item" if start == b"[" else "traceEvents.item"
            _collect(_from_dicts(ijson.items(tap, prefix, use_float=True)), collected)
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
    """Turns collected events into facts on a FileResult."""

    def __init__(self, src: Source, kb: KnowledgeBase, c: _Collected, meta: dict[str, Any], result: FileResult,
                 steps: tuple[int | None, int | None] | None, window: tuple[float | None, float | None] | None,
                 gpus: Sequence[int] | None, kernel_wait_us: float) -> None:
        self.src, self.kb, self.c, self.meta, self.r = src, kb, c, meta, result
        self.step_range, self.time_window, self.gpus = steps, window, gpus
        self.kernel_wait_us = kernel_wait_us
        self.launch = array("d")
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

    def _launch_times(self) -> None:
        """Start of the runtime call that launched each GPU activity (NaN when it is not in the trace)."""
        c = self.c
        n = len(c.r_corr)
        corr, ts = c.r_corr, c.r_ts
        if any(corr[i] > corr[i + 1] for i in range(n - 1)):
            order = sorted(range(n), key=corr.__getitem__)
            corr = array("q", (c.r_corr[i] for i in order))
            ts = array("d", (c.r_ts[i] for i in order))
            del order
        nan = math.nan
        launch = array("d", bytes(8 * len(c.g_corr)))
        for i, k in enumerate(c.g_corr):
            j = bisect_left(corr, k)
            launch[i] = ts[j] if j < n and corr[j] == k and k >= 0 else nan
        self.launch = launch

    def _device_windows(self, steps: list[tuple[int, float, float]], devices: set[int]) -> list[Interval]:
        """CPU step spans, each extended to the end of the GPU work launched in it, made non-overlapping."""
        c = self.c
        starts = [s[1] for s in steps]
        ends = [s[2] for s in steps]
        ext = list(ends)
        for i, at in enumerate(self.launch):
            if at != at or c.g_dev[i] not in devices:  # NaN: launch not found
                continue
            k = bisect_right(starts, at) - 1
            if k >= 0 and at < ends[k] and c.g_end[i] > ext[k]:
                ext[k] = c.g_end[i]
        windows: list[Interval] = []
        prev = -math.inf
        for start, end in zip(starts, ext, strict=True):
            start = max(start, prev)
            if end > start:
                windows.append((start, end))
                prev = end
        return windows

    # -- main ------------------------------------------------------------------------------------------------------
    def run(self) -> None:
        c, r = self.c, self.r
        for fact in FACTS:
            r.missing(fact, "not derived from this trace")
        steps = self._select_steps()
        self._launch_times()
        all_devices = sorted(set(c.g_dev))
        devices = set(all_devices) if not self.gpus else set(all_devices) & set(self.gpus)
        if self.gpus and not devices and all_devices:
            raise self.src.problem(f"--gpu {','.join(map(str, self.gpus))}: the trace has GPU activity on devices "
                                   f"{', '.join(map(str, all_devices))} only")
        if steps:
            windows = self._device_windows(steps, devices)
            n_steps = len(steps)
            label = (f"ProfilerStep#{steps[0][0]}–#{steps[-1][0]} ({n_steps} steps)" if n_steps > 1
                     else f"ProfilerStep#{steps[0][0]} (1 step)")
        else:
            lo, hi = c.first, c.last
            if self.time_window is not None:
                a, b = self.time_window
                lo = max(lo, c.first + a * 1e6) if a is not None else lo
                hi = min(hi, c.first + b * 1e6) if b is not None else hi
                if hi <= lo:
                    raise self.src.problem(f"--window is outside the trace, which lasts {_fmt_s(c.last - c.first)}")
            windows = [(lo, hi)]
            n_steps = 0
            label = f"whole trace, {_fmt_s(lo - c.first)}–{_fmt_s(hi - c.first)} (no ProfilerStep spans)"
            for fact in ("step_time_s", "data_wait_s", "kernels_per_step", "flops", "achieved_tflops"):
                r.missing(fact, _NO_STEPS)
        self.windows, self.n_steps, self.label = windows, n_steps, label
        self._starts = [w[0] for w in windows]
        span = total(windows)
        r.stats.update(window=label, window_s=round(span / 1e6, 6))
        self._steps_and_data(steps, windows)
        self._num_workers()
        self._hardware(devices)
        if c.hip_calls:
            r.notes.append(f"ROCm trace ({c.hip_calls} hip* runtime calls)")
        if not c.g_ts:
            reason = _NO_GPU if not c.r_ts else (
                f"no kernel, memcpy or memset records although the trace has {len(c.r_ts)} runtime calls "
                "(GPU activity was not recorded, e.g. a CUPTI-counter trace)")
            for fact in ("gpu_util", "gpu_idle_gap_frac", "host_wait_frac", "mean_kernel_us", "kernels_per_step",
                         "pageable_copy_frac", "h2d_copy_frac", "comm_frac"):
                r.missing(fact, reason)
        else:
            self._gpu(sorted(devices), windows, span)
        self._flops(windows, span)
        self._syncs(windows, span)
        self._workload()

    def _steps_and_data(self, steps: list[tuple[int, float, float]], windows: list[Interval]) -> None:
        c, r, n = self.c, self.r, self.n_steps
        if not n:
            return
        per_step = [e - s for s, e in windows]
        r.add("step_time_s", total(windows) / n / 1e6, method="mean step window: ProfilerStep span extended to the "
              "end of the GPU work it launched", window=self.label, samples=n,
              min=round(min(per_step) / 1e6, 6), max=round(max(per_step) / 1e6, 6), file=self.src.label)
        if not c.loader:
            r.missing("data_wait_s", "the trace has no DataLoader __next__ spans (the input pipeline is not a torch "
                      "DataLoader, or it ran outside the profiled steps)")
            return
        loader = union(c.loader)
        waits = [overlap(loader, [w]) for w in windows]
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

    def _gpu(self, devices: list[int], windows: list[Interval], span: float) -> None:
        c, r = self.c, self.r
        in_window = self._in_windows
        fractions: dict[str, list[float]] = {k: [] for k in ("busy", "idle", "host", "kernel", "data", "other",
                                                             "h2d", "comm")}
        loader = union(c.loader)
        used_devices: list[int] = []
        launches_found = sum(1 for x in self.launch if x == x)
        ops_in_windows = 0
        has_comm = any(f & _COMM for f in c.g_flag)
        for dev in devices:
            idx = [i for i in range(len(c.g_ts)) if c.g_dev[i] == dev]
            idx.sort(key=c.g_ts.__getitem__)
            m_start, m_end, m_first = array("d"), array("d"), array("q")
            for i in idx:
                s, e = c.g_ts[i], c.g_end[i]
                if m_end and s <= m_end[-1]:
                    if e > m_end[-1]:
                        m_end[-1] = e
                else:
                    m_start.append(s)
                    m_end.append(e)
                    m_first.append(i)
            acc = self._sweep(m_start, m_end, m_first, windows, loader)
            if acc["busy"] <= 0:
                continue
            used_devices.append(dev)
            ops_in_windows += sum(1 for i in idx if in_window(c.g_ts[i]))
            idle = span - acc["busy"]
            other = max(0.0, idle - acc["data"] - acc["host"] - acc["kernel"])
            h2d = union((c.g_ts[i], c.g_end[i]) for i in idx if c.g_flag[i] & _H2D)
            exposed = 0.0
            if has_comm:
                comm_w = intersect(union((c.g_ts[i], c.g_end[i]) for i in idx if c.g_flag[i] & _COMM), windows)
                compute = union((c.g_ts[i], c.g_end[i]) for i in idx if not c.g_flag[i] & _COMM)
                exposed = total(comm_w) - overlap(comm_w, compute)
                del compute
            del idx, m_start, m_end, m_first
            for key, value in (("busy", acc["busy"]), ("idle", idle), ("host", acc["host"]),
                               ("kernel", acc["kernel"]), ("data", acc["data"]), ("other", other),
                               ("h2d", overlap(h2d, windows)), ("comm", exposed)):
                fractions[key].append(min(1.0, max(0.0, value / span)))
        if not used_devices:
            for fact in ("gpu_util", "gpu_idle_gap_frac", "host_wait_frac", "mean_kernel_us", "kernels_per_step",
                         "pageable_copy_frac", "h2d_copy_frac", "comm_frac"):
                r.missing(fact, f"no GPU activity inside {self.label}")
            return

        def mean(key: str) -> float:
            return sum(fractions[key]) / len(fractions[key])

        devs = ",".join(map(str, used_devices))
        common: dict[str, Any] = {"window": self.label, "devices": devs, "file": self.src.label}
        if self.n_steps:
            common["samples"] = self.n_steps
        r.add("gpu_util", mean("busy"), method=f"union of {ops_in_windows} kernel/memcpy/memset intervals over the "
              "window", **common)
        r.add("gpu_idle_gap_frac", mean("idle"), method="window time with no kernel, memcpy or memset running",
              idle_data_wait=round(mean("data"), 4), idle_host_wait=round(mean("host"), 4),
              idle_kernel_wait=round(mean("kernel"), 4), idle_other=round(mean("other"), 4), **common)
        if not c.r_corr or launches_found == 0:
            r.missing("host_wait_frac", "GPU activities cannot be matched to their launch calls (no runtime events "
                      "with correlation ids)")
        else:
            r.add("host_wait_frac", mean("host"), method="HTA idle breakdown: gaps whose next activity was launched "
                  "after the previous one ended, less the part overlapping DataLoader waits",
                  launches_matched=round(launches_found / len(self.launch), 4), **common)
        kernels = Stat()
        for i in range(len(c.g_ts)):
            if c.g_kind[i] == 0 and c.g_dev[i] in used_devices and in_window(c.g_ts[i]):
                kernels.add(c.g_end[i] - c.g_ts[i])
        if kernels.count:
            r.add("mean_kernel_us", max(kernels.mean, 1e-3), method=f"mean duration of {kernels.count} kernels",
                  min=kernels.lo, max=kernels.hi, **common)
            if self.n_steps:
                r.add("kernels_per_step", round(kernels.count / self.n_steps),
                      method=f"{kernels.count} kernels over {self.n_steps} steps", **common)
        else:
            r.missing("mean_kernel_us", f"no kernels inside {self.label}")
            r.missing("kernels_per_step", f"no kernels inside {self.label}")
        r.add("h2d_copy_frac", mean("h2d"), method="union of host-to-device memcpy intervals over the window",
              **common)
        pageable = pinned = unknown = 0.0
        for i in range(len(c.g_ts)):
            flag = c.g_flag[i]
            if flag & _H2D and c.g_dev[i] in used_devices and in_window(c.g_ts[i]):
                d = c.g_end[i] - c.g_ts[i]
                if flag & _PAGEABLE:
                    pageable += d
                elif flag & _PINNED:
                    pinned += d
                else:
                    unknown += d
        if pageable + pinned > 0:
            r.add("pageable_copy_frac", pageable / (pageable + pinned), method="Memcpy HtoD (Pageable -> Device) time "
                  "over all host-to-device copy time", copy_us=round(pageable + pinned, 3), **common)
        elif unknown > 0:
            r.missing("pageable_copy_frac", "the host-to-device copies do not say whether host memory was pinned "
                      "(e.g. ROCm names them Host -> Device)")
        else:
            r.missing("pageable_copy_frac", f"no host-to-device copies inside {self.label}")
        r.add("comm_frac", mean("comm"), method="NCCL/RCCL kernel time not overlapped by other GPU work"
              if has_comm else "no NCCL/RCCL kernels in the trace", **common)

    def _sweep(self, starts: array[float], ends: array[float], firsts: array[int], windows: list[Interval],
               loader: list[Interval]) -> dict[str, float]:
        """Busy time inside the windows, and the idle gaps split (HTA's rules) into data, host, kernel wait.

        One pass over the merged busy intervals; a gap is host wait when the activity that ends it was launched
        after the gap began, kernel wait when shorter than kernel_wait_us; any part overlapping a DataLoader span
        is data wait instead."""
        acc = {"busy": 0.0, "data": 0.0, "host": 0.0, "kernel": 0.0, "other": 0.0}
        w_starts = self._starts
        l_starts = [iv[0] for iv in loader]

        def account(a: float, b: float, kind: str) -> None:
            k = max(bisect_right(w_starts, a) - 1, 0)
            while k < len(windows) and windows[k][0] < b:
                lo, hi = max(a, windows[k][0]), min(b, windows[k][1])
                if hi > lo:
                    data = 0.0
                    m = max(bisect_right(l_starts, lo) - 1, 0)
                    while m < len(loader) and loader[m][0] < hi:
                        data += max(0.0, min(hi, loader[m][1]) - max(lo, loader[m][0]))
                        m += 1
                    acc["data"] += data
                    acc[kind] += hi - lo - data
                k += 1

        for j in range(len(starts)):
            lo, hi = starts[j], ends[j]
            k = max(bisect_right(w_starts, lo) - 1, 0)
            while k < len(windows) and windows[k][0] < hi:
                acc["busy"] += max(0.0, min(hi, windows[k][1]) - max(lo, windows[k][0]))
                k += 1
        prev = windows[0][0]
        launch, short = self.launch, self.kernel_wait_us
        for j in range(len(starts)):
            s = starts[j]
            if s > prev:
                at = launch[firsts[j]]
                kind = "host" if at == at and at > prev else "kernel" if s - prev < short else "other"
                account(prev, s, kind)
            if ends[j] > prev:
                prev = ends[j]
        if prev < windows[-1][1]:
            account(prev, windows[-1][1], "other")
        return acc

    def _in_windows(self, t: float) -> bool:
        k = bisect_right(self._starts, t) - 1
        return k >= 0 and t < self.windows[k][1]

    def _flops(self, windows: list[Interval], span: float) -> None:
        c, r = self.c, self.r
        if not c.flops:
            flag = self.meta.get("with_flops")
            reason = ("no operator in the trace carries a FLOP estimate" if flag in (1, "1", True)
                      else "the trace was recorded without with_flops=True")
            r.missing("flops", reason)
            r.missing("achieved_tflops", reason)
            return
        if not self.n_steps:
            return
        in_window = self._in_windows
        flops = sum(f for t, f in zip(c.flops_ts, c.flops, strict=True) if in_window(t))
        if flops <= 0:
            r.missing("flops", f"no operator with a FLOP estimate inside {self.label}")
            r.missing("achieved_tflops", f"no operator with a FLOP estimate inside {self.label}")
            return
        note = "sum of the profiler's with_flops estimates (matmul/conv/elementwise ops it knows) per step"
        r.add("flops", flops / self.n_steps, method=note, window=self.label, samples=self.n_steps, file=self.src.label)
        r.add("achieved_tflops", flops / (span / 1e6) / 1e12, method="with_flops FLOPs over step time",
              window=self.label, file=self.src.label)

    def _syncs(self, windows: list[Interval], span: float) -> None:
        """Host synchronize calls are reported in the file's stats (the vocabulary has no fact for them)."""
        c, r = self.c, self.r
        if not c.r_ts:
            return
        in_window = self._in_windows
        calls = [(s, e) for s, e in zip(c.sync_ts, c.sync_end, strict=True) if in_window(s)]
        blocked = overlap(union(calls), windows)
        r.stats["host_sync_calls"] = len(calls)
        if self.n_steps:
            r.stats["host_syncs_per_step"] = round(len(calls) / self.n_steps, 2)
        r.stats["host_sync_share"] = round(min(1.0, blocked / span), 4)
        if c.gpu_syncs:
            r.stats["gpu_sync_events"] = c.gpu_syncs
        if calls:
            r.notes.append(f"{len(calls)} host synchronize calls (cuda/hip*Synchronize) inside {self.label}, blocking "
                           f"the host {min(1.0, blocked / span):.1%} of the time")

    def _workload(self) -> None:
        if self.c.training_ops:
            self.r.add("workload", "training", method=f"{self.c.training_ops} backward/optimizer operators in the "
                       "trace", file=self.src.label)
        else:
            self.r.missing("workload", "no backward or optimizer operators in the trace; it may be inference or a "
                           "forward-only window")
