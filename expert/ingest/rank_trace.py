"""One rank's profiler trace, read for the multi-rank analysis: per step, computation, communication, its exposed part,
idle time, and the collectives in the order they ran.

The trace is streamed like `kineto.parse` does (typed msgspec batches in libkineto's layout, through the same
`_kineto_stream` reader, ijson for any other layout) and only a few numbers per event are kept. Definitions follow
Holistic Trace Analysis (HTA):

- GPU activity classes (knowledge_base/distributed.yaml): communication = NCCL/RCCL kernels, memory = Memcpy/Memset,
  computation = every other kernel except synchronisation kernels;
- per step window (the ProfilerStep span extended to the end of the GPU work it launched, as `kineto.parse`):
  busy = union of all activities, compute = union of computation kernels, comm = union of communication kernels,
  overlap = the part of comm during which a computation kernel runs, exposed = comm - overlap, idle = window - busy;
- the overlap ratio (HTA `get_comm_comp_overlap`) = overlap / comm; HTA's temporal breakdown = idle, compute and
  non-compute (busy - compute) over the window.

On a CPU-only trace (the gloo backend) the collectives are the backend's spans (`gloo:all_reduce` on its runloop
threads) and computation is CPU operator time on the other threads.
Each collective keeps its kind, its duration and, when the trace records it (NCCL kernel arguments "Collective name",
"In/Out msg nelems", "Group size", "dtype" in PyTorch >= 2.3, or record_shapes' "Input Dims" of a gloo span), its
size and group size.
"""

from __future__ import annotations

import json
import math
import re
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Literal

import msgspec

from ._kineto_stream import (
    Document,
    Event,
    NotFast,
    Tally,
    fast_batches,
    gc_paused,
    ijson_prefix,
    kept_events,
    step_number,
)
from ._source import Progress, Source
from .distributed import Catalog, catalog
from .intervals import Interval, intersect, union

Mode = Literal["gpu", "cpu"]
_KERNEL, _MEMORY, _RUNTIME, _CPU, _ANNOTATION, _OTHER = range(6)
_CATEGORIES = {
    "kernel": _KERNEL, "gpu_memcpy": _MEMORY, "memcpy": _MEMORY, "gpu_memset": _MEMORY, "memset": _MEMORY,
    "cuda_runtime": _RUNTIME, "runtime": _RUNTIME, "cuda_driver": _RUNTIME,
    "cpu_op": _CPU, "operator": _CPU, "user_annotation": _ANNOTATION,
}
COMPUTE, COMM, MEMORY, NOT_COMPUTE = 0, 1, 2, 3
"""GPU activity classes."""


# ---- what one rank gives ---------------------------------------------------------------------------------------
Collective = tuple[str, float, float, int]
"""(kind, duration in us, size in bytes or -1, group size or -1), in the order the collectives started."""


@dataclass
class RankTrace:
    """The figures of one rank's trace the multi-rank analysis compares (times in microseconds, per window)."""

    path: str
    name: str
    rank: int | None = None
    rank_from: str = ""  # "distributedInfo" or "file name"
    world_size: int | None = None
    backend: str | None = None
    host: str | None = None
    pg_sizes: dict[str, int] = field(default_factory=dict)
    mode: Mode = "gpu"
    device: int | None = None
    start_us: float = 0.0  # absolute (baseTimeNanoseconds added when the trace has it), for telling captures apart
    end_us: float = 0.0
    label: str = ""
    steps: list[int] = field(default_factory=list)  # ProfilerStep numbers; empty: one whole-trace window
    window_us: list[float] = field(default_factory=list)
    busy_us: list[float] = field(default_factory=list)
    compute_us: list[float] = field(default_factory=list)
    comm_us: list[float] = field(default_factory=list)
    overlap_us: list[float] = field(default_factory=list)
    collectives: list[list[Collective]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def has_steps(self) -> bool:
        return bool(self.steps)

    def total(self, name: str) -> float:
        values: list[float] = getattr(self, name)
        return float(sum(values))


# ---- reading ---------------------------------------------------------------------------------------------------------
class _Args(msgspec.Struct, gc=False):
    correlation: Any = None
    device: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    collective: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    group_size: Any = msgspec.field(default=None, name="Group size")
    dtype: Any = None
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")


_Event = Event[_Args]
_Document = Document[_Args]


_META = ("distributedInfo", "host_name", "baseTimeNanoseconds")


@dataclass
class _Collected(Tally):
    steps: set[tuple[int, float, float]] = field(default_factory=set)
    r_corr: array[int] = field(default_factory=lambda: array("q"))
    r_ts: array[float] = field(default_factory=lambda: array("d"))
    g_ts: array[float] = field(default_factory=lambda: array("d"))
    g_end: array[float] = field(default_factory=lambda: array("d"))
    g_corr: array[int] = field(default_factory=lambda: array("q"))
    g_dev: array[int] = field(default_factory=lambda: array("q"))
    g_cls: array[int] = field(default_factory=lambda: array("b"))
    g_coll: array[int] = field(default_factory=lambda: array("q"))  # index into colls, -1 for non-collectives
    g_ext: array[int] = field(default_factory=lambda: array("q"))  # External id of collectives, -1 otherwise
    colls: list[tuple[str, float, int]] = field(default_factory=list)  # (kind, bytes or -1, group or -1)
    ext_meta: dict[int, tuple[str, float, int]] = field(default_factory=dict)
    c_ts: array[float] = field(default_factory=lambda: array("d"))
    c_end: array[float] = field(default_factory=lambda: array("d"))
    c_coll: array[int] = field(default_factory=lambda: array("q"))
    c_tids: set[int] = field(default_factory=set)  # thread codes (see `tids`) of the collective spans
    o_ts: array[float] = field(default_factory=lambda: array("d"))
    o_end: array[float] = field(default_factory=lambda: array("d"))
    o_tid: array[int] = field(default_factory=lambda: array("q"))
    tids: dict[Any, int] = field(default_factory=dict)  # thread id (int or str) -> small code
    keep_cpu: bool = True


_AS_LIST = msgspec.json.Decoder(list[_Event])
_AS_DOC = msgspec.json.Decoder(_Document)


def _batches_fast(fh: IO[bytes], meta: dict[str, Any]) -> Iterator[list[_Event]]:
    """Events in libkineto's layout, decoded a megabyte at a time (`_kineto_stream.fast_batches`)."""

    def opened(doc: _Document) -> list[_Event]:
        _keep_meta(doc, meta)
        return doc.traceEvents

    return fast_batches(fh, _AS_LIST, _AS_DOC, opened)


def _keep_meta(doc: _Document, meta: dict[str, Any]) -> None:
    for key in _META:
        value = getattr(doc, key)
        if value is not None and key not in meta:
            meta[key] = value


def _batches_ijson(fh: IO[bytes]) -> Iterator[list[_Event]]:
    """Events of any JSON layout, streamed with ijson."""
    import ijson  # type: ignore[import-untyped]

    batch: list[_Event] = []
    for ev in ijson.items(fh, ijson_prefix(fh), use_float=True):
        batch.append(_from_dict(ev))
        if len(batch) >= 8192:
            yield batch
            batch = []
    if batch:
        yield batch


def _from_dict(ev: Any) -> _Event:
    if type(ev) is not dict:
        return Event()
    a = ev.get("args")
    args = None
    if type(a) is dict:
        dims = a.get("Input Dims")
        types = a.get("Input type")
        args = _Args(a.get("correlation"), a.get("device"), a.get("External id"), a.get("Collective name"),
                     a.get("In msg nelems"), a.get("Out msg nelems"), a.get("Group size"), a.get("dtype"),
                     msgspec.Raw(msgspec.json.encode(dims)) if dims is not None else msgspec.Raw(b""),
                     msgspec.Raw(msgspec.json.encode(types)) if types is not None else msgspec.Raw(b""))
    return Event(ev.get("ph"), ev.get("cat"), ev.get("name"), ev.get("ts"), ev.get("dur"), ev.get("pid"),
                 ev.get("tid"), args)


def _number(x: Any) -> float | None:
    return float(x) if (type(x) is int or type(x) is float) and x >= 0 else None


def _size_meta(cat: Catalog, kind: str, args: _Args) -> tuple[str, float, int]:
    """(kind, size in bytes or -1, group size or -1) from NCCL kernel / record_param_comms arguments."""
    elem = cat.element_bytes(args.dtype)
    nelems = [n for n in (_number(args.in_nelems), _number(args.out_nelems)) if n is not None]
    size = max(nelems) * elem if elem is not None and nelems else -1.0
    group = args.group_size if type(args.group_size) is int and args.group_size > 0 else -1
    return kind, size, group


def _span_size(cat: Catalog, args: _Args | None) -> float:
    """Bytes of a CPU collective span from record_shapes' Input Dims and Input type (-1 when not recorded)."""
    if args is None or not bytes(args.input_dims):
        return -1.0
    try:
        dims = msgspec.json.decode(args.input_dims)
        types = msgspec.json.decode(args.input_type) if bytes(args.input_type) else []
    except msgspec.DecodeError:
        return -1.0
    total = 0.0
    for i, shape in enumerate(dims if isinstance(dims, list) else []):
        elem = cat.element_bytes(types[i]) if isinstance(types, list) and i < len(types) else None
        if not isinstance(shape, list) or elem is None or not all(type(d) is int for d in shape):
            return -1.0
        total += math.prod(shape) * elem
    return total if total > 0 else -1.0


def _collect(batches: Iterable[list[_Event]], c: _Collected, cat: Catalog) -> None:
    """One pass over the events, keeping what the rank figures need."""
    cpu_prefixes = tuple(cat.data.cpu_collective_prefixes)
    comm_ops = tuple(cat.data.cpu_comm_ops)
    comm_re, memory_re, not_compute_re = cat.comm, cat.memory, cat.not_compute
    for kind, ev, ts, end, name in kept_events(batches, _CATEGORIES, _OTHER, c):
        args = ev.args
        if kind == _RUNTIME:
            corr = args.correlation if args is not None else None
            if type(corr) is int:
                c.r_corr.append(corr)
                c.r_ts.append(ts)
        elif kind <= _MEMORY:
            if kind == _MEMORY or memory_re.search(name):
                cls = MEMORY
            elif comm_re.search(name):
                cls = COMM
            elif not_compute_re.search(name):
                cls = NOT_COMPUTE
            else:
                cls = COMPUTE
            corr = args.correlation if args is not None else None
            dev = args.device if args is not None else None
            if dev is None:
                dev = ev.pid
            coll, ext = -1, -1
            if cls == COMM:
                coll = len(c.colls)
                if args is not None and isinstance(args.collective, str):
                    c.colls.append(_size_meta(cat, cat.kind(args.collective), args))
                else:
                    c.colls.append((cat.kind(name), -1.0, -1))
                    if args is not None and type(args.external_id) is int:
                        ext = args.external_id
            c.g_ts.append(ts)
            c.g_end.append(end)
            c.g_corr.append(corr if type(corr) is int else -1)
            c.g_dev.append(dev if type(dev) is int else -1)
            c.g_cls.append(cls)
            c.g_coll.append(coll)
            c.g_ext.append(ext)
            if c.keep_cpu:  # a GPU trace: CPU operator time is not needed
                c.keep_cpu = False
                del c.o_ts[:], c.o_end[:], c.o_tid[:]
        else:
            if name.startswith("ProfilerStep#"):
                number = step_number(name)
                if number is not None:
                    c.steps.add((number, float(ts), float(end)))
                continue
            if args is not None and isinstance(args.collective, str) and type(args.external_id) is int:
                c.ext_meta[args.external_id] = _size_meta(cat, cat.kind(args.collective), args)
            if name.startswith(cpu_prefixes):
                c.c_ts.append(ts)
                c.c_end.append(end)
                c.c_coll.append(len(c.colls))
                c.c_tids.add(c.tids.setdefault(ev.tid, len(c.tids)))
                c.colls.append((cat.kind(name.split(":", 1)[1]), _span_size(cat, args), -1))
            elif kind == _CPU and c.keep_cpu and not name.startswith(comm_ops):
                c.o_ts.append(ts)
                c.o_end.append(end)
                c.o_tid.append(c.tids.setdefault(ev.tid, len(c.tids)))


def read(src: Source, *, steps: tuple[int | None, int | None] | None = None,
         window: tuple[float | None, float | None] | None = None, gpus: Sequence[int] | None = None,
         progress: Progress | None = None) -> RankTrace:
    """Read one rank's trace and reduce it to per-window figures (see the module docstring)."""
    cat = catalog()
    meta: dict[str, Any] = {}
    c: _Collected | None = None
    with gc_paused():
        if src.path is not None:
            c = _Collected()
            try:
                with src.open(progress) as fh:
                    _collect(_batches_fast(fh, meta), c, cat)
            except NotFast:
                c, meta = None, {}
        if c is None:
            c = _Collected()
            meta = head_info(src)
            try:
                with src.open(progress) as fh:
                    _collect(_batches_ijson(fh), c, cat)
            except Exception as exc:  # malformed input: kineto.parse reads the same file and names the line
                raise src.problem(f"not a readable trace ({str(exc).splitlines()[0] if str(exc) else exc})") from exc
    return _Analysis(src, c, meta, cat, steps, window, gpus).run()


def head_info(src: Source) -> dict[str, Any]:
    """distributedInfo, host_name and baseTimeNanoseconds from the first bytes of a trace (libkineto writes them
    before the events), cheaply, for grouping files before they are read."""
    text = src.head().decode("utf-8", "replace")
    found: dict[str, Any] = {}
    decoder = json.JSONDecoder()
    for key in _META:
        match = re.search(r'"' + key + r'"\s*:\s*', text)
        if match:
            try:
                found[key], _ = decoder.raw_decode(text, match.end())
            except ValueError:
                continue
    return found


def _int(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


class _Analysis:
    def __init__(self, src: Source, c: _Collected, meta: dict[str, Any], cat: Catalog,
                 steps: tuple[int | None, int | None] | None, window: tuple[float | None, float | None] | None,
                 gpus: Sequence[int] | None) -> None:
        self.src, self.c, self.meta, self.cat = src, c, meta, cat
        self.step_range, self.time_window, self.gpus = steps, window, gpus
        self.out = RankTrace(path=src.label, name=src.name)

    def run(self) -> RankTrace:
        c, out = self.c, self.out
        self._identity()
        if c.first == math.inf:
            out.notes.append("no complete events with numeric ts/dur")
            return out
        base = self.meta.get("baseTimeNanoseconds")
        offset = base / 1000.0 if type(base) is int and c.first < 1e14 else 0.0  # ts relative to baseTime
        out.start_us, out.end_us = c.first + offset, c.last + offset
        self._resolve_collectives()
        devices = sorted({d for d in c.g_dev})
        if self.gpus:
            devices = [d for d in devices if d in set(self.gpus)]
        out.mode = "gpu" if devices else "cpu"
        steps = self._steps()
        if out.mode == "gpu":
            device = self._device(devices)
            out.device = device
            idx = [i for i in range(len(c.g_ts)) if c.g_dev[i] == device]
            windows = self._windows_gpu(steps, device) if steps else self._whole()
            spans = {cls: union((c.g_ts[i], c.g_end[i]) for i in idx if c.g_cls[i] == cls)
                     for cls in (COMPUTE, COMM)}
            busy = union((c.g_ts[i], c.g_end[i]) for i in idx)
            comm_events = sorted((c.g_ts[i], c.g_end[i], c.g_coll[i]) for i in idx if c.g_cls[i] == COMM)
        else:
            windows = [(s[1], s[2]) for s in steps] if steps else self._whole()
            windows = _disjoint(windows)
            comm_events = sorted(zip(c.c_ts, c.c_end, c.c_coll, strict=True))
            spans = {COMM: union((s, e) for s, e, _ in comm_events),
                     COMPUTE: union((c.o_ts[i], c.o_end[i]) for i in range(len(c.o_ts))
                                    if c.o_tid[i] not in c.c_tids)}
            busy = union([*spans[COMM], *spans[COMPUTE]])
            if comm_events:
                out.notes.append("CPU-only trace: collectives are the backend's spans (gloo), computation is CPU "
                                 "operator time on the other threads")
        if steps:
            out.steps = [s[0] for s in steps][: len(windows)]
        out.window_us = [e - s for s, e in windows]
        out.busy_us = _per_window(busy, windows)
        out.compute_us = _per_window(spans[COMPUTE], windows)
        out.comm_us = _per_window(spans[COMM], windows)
        out.overlap_us = _per_window(intersect(spans[COMM], spans[COMPUTE]), windows)
        out.collectives = self._collectives(comm_events, windows)
        n = len(windows)
        out.label = (f"ProfilerStep#{out.steps[0]}–#{out.steps[-1]} ({n} steps)" if n > 1 and out.steps
                     else f"ProfilerStep#{out.steps[0]} (1 step)" if out.steps
                     else "whole trace (no ProfilerStep spans)")
        return out

    def _identity(self) -> None:
        out, info = self.out, self.meta.get("distributedInfo")
        if isinstance(info, dict):
            out.rank = _int(info.get("rank"))
            out.world_size = _int(info.get("world_size"))
            out.backend = info.get("backend") if isinstance(info.get("backend"), str) else None
            for pg in info.get("pg_config") or []:
                if isinstance(pg, dict) and isinstance(pg.get("pg_name"), str) and _int(pg.get("pg_size")):
                    out.pg_sizes[pg["pg_name"]] = int(pg["pg_size"])
            if out.rank is not None:
                out.rank_from = "distributedInfo"
        if out.rank is None:
            out.rank = self.cat.rank_from_name(out.name)
            if out.rank is not None:
                out.rank_from = "file name"
        host = self.meta.get("host_name")
        out.host = host if isinstance(host, str) and host else None

    def _resolve_collectives(self) -> None:
        """Sizes of NCCL kernels without arguments from the record_param_comms operator with their External id."""
        c = self.c
        if not c.ext_meta:
            return
        for i, ext in enumerate(c.g_ext):
            if ext >= 0 and ext in c.ext_meta:
                c.colls[c.g_coll[i]] = c.ext_meta[ext]

    def _steps(self) -> list[tuple[int, float, float]]:
        c = self.c
        steps = sorted(c.steps, key=lambda s: (s[1], s[0]))
        if self.step_range is not None:
            lo, hi = self.step_range
            steps = [s for s in steps if (lo is None or s[0] >= lo) and (hi is None or s[0] <= hi)]
        if self.time_window is not None:
            a, b = self.time_window
            steps = [s for s in steps if (a is None or s[1] >= c.first + a * 1e6)
                     and (b is None or s[1] <= c.first + b * 1e6)]
        return steps

    def _whole(self) -> list[Interval]:
        c = self.c
        lo, hi = c.first, c.last
        if self.time_window is not None:
            a, b = self.time_window
            lo = max(lo, c.first + a * 1e6) if a is not None else lo
            hi = min(hi, c.first + b * 1e6) if b is not None else hi
        return [(lo, hi)] if hi > lo else []

    def _device(self, devices: list[int]) -> int:
        c = self.c
        busy = dict.fromkeys(devices, 0.0)
        for i in range(len(c.g_ts)):
            if c.g_dev[i] in busy:
                busy[c.g_dev[i]] += c.g_end[i] - c.g_ts[i]
        device = max(devices, key=lambda d: (busy[d], -d))
        if len(devices) > 1:
            self.out.notes.append(f"GPU activity on devices {', '.join(map(str, devices))}: the rank's figures use "
                                  f"device {device}, the busiest")
        return device

    def _windows_gpu(self, steps: list[tuple[int, float, float]], device: int) -> list[Interval]:
        """Step spans extended to the end of the GPU work launched inside them, made disjoint (as kineto.parse)."""
        c = self.c
        n = len(c.r_corr)
        order = sorted(range(n), key=c.r_corr.__getitem__)
        corr = [c.r_corr[i] for i in order]
        rts = [c.r_ts[i] for i in order]
        starts = [s[1] for s in steps]
        ends = [s[2] for s in steps]
        ext = list(ends)
        for i in range(len(c.g_ts)):
            k = c.g_corr[i]
            if c.g_dev[i] != device or k < 0:
                continue
            j = bisect_left(corr, k)
            if j >= n or corr[j] != k:
                continue
            at = rts[j]
            s = bisect_right(starts, at) - 1
            if s >= 0 and at < ends[s] and c.g_end[i] > ext[s]:
                ext[s] = c.g_end[i]
        return _disjoint(list(zip(starts, ext, strict=True)))

    def _collectives(self, events: list[tuple[float, float, int]], windows: list[Interval]) -> list[list[Collective]]:
        out: list[list[Collective]] = [[] for _ in windows]
        starts = [w[0] for w in windows]
        for s, e, k in events:
            w = bisect_right(starts, s) - 1
            if w < 0 or s >= windows[w][1]:
                continue
            kind, size, group = self.c.colls[k] if k >= 0 else ("unknown", -1.0, -1)
            out[w].append((kind, e - s, size, group))
        return out


def _disjoint(windows: list[Interval]) -> list[Interval]:
    out: list[Interval] = []
    prev = -math.inf
    for start, end in windows:
        start = max(start, prev)
        if end > start:
            out.append((start, end))
            prev = end
    return out


def _per_window(spans: list[Interval], windows: list[Interval]) -> list[float]:
    """Length of the (sorted, disjoint) spans inside each (sorted, disjoint) window."""
    out = [0.0] * len(windows)
    starts = [w[0] for w in windows]
    for s, e in spans:
        k = max(bisect_right(starts, s) - 1, 0)
        while k < len(windows) and windows[k][0] < e:
            lo, hi = max(s, windows[k][0]), min(e, windows[k][1])
            if hi > lo:
                out[k] += hi - lo
            k += 1
    return out
