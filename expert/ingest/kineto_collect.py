"""One pass over a Kineto trace's events: what the analysis needs, kept in the columns of `timeline.Timeline` (GPU
activities, runtime calls, CPU operators with their interned shapes, python functions and annotations, DataLoader
spans), plus the few Kineto-only counts (ProfilerStep spans, with_flops estimates, syncs, training operators)."""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import msgspec

from ._kineto_stream import Tally, kept_events, step_number
from .opflops import KNOWN_OPS, OpShapes
from .timeline import H2D, PAGEABLE, PINNED, Timeline

if TYPE_CHECKING:
    from .kineto_read import _Event

_CPU, _ANNOTATION, _PYTHON, _KERNEL, _MEMCPY, _MEMSET, _RUNTIME, _GPU_SYNC, _OTHER = range(9)
_CATEGORIES = {
    "cpu_op": _CPU, "operator": _CPU, "user_annotation": _ANNOTATION, "python_function": _PYTHON,
    "kernel": _KERNEL, "gpu_memcpy": _MEMCPY, "memcpy": _MEMCPY, "gpu_memset": _MEMSET, "memset": _MEMSET,
    "cuda_runtime": _RUNTIME, "runtime": _RUNTIME, "cuda_driver": _RUNTIME, "cuda_sync": _GPU_SYNC,
}
_GPU_KIND = {_KERNEL: 0, _MEMCPY: 1, _MEMSET: 2}


@dataclass
class _Collected(Tally):
    """What is kept from the event stream: the counts, the timeline, and the few Kineto-only facts."""

    tl: Timeline = field(default_factory=Timeline)
    flops_ts: array[float] = field(default_factory=lambda: array("d"))
    flops: array[float] = field(default_factory=lambda: array("d"))
    steps: set[tuple[int, float, float]] = field(default_factory=set)
    loader_iters: Counter[str] = field(default_factory=Counter)
    gpu_syncs: int = 0
    hip_calls: int = 0
    training_ops: int = 0
    shaped_ops: int = 0
    categories: Counter[str] = field(default_factory=Counter)


def _shapes(dims: bytes, types: bytes, concrete: bytes) -> OpShapes:
    decode = msgspec.json.decode
    return OpShapes.of(decode(dims), decode(types), decode(concrete) if concrete else None)


def _collect(batches: Iterable[list[_Event]], c: _Collected) -> None:
    """One pass over the events; keeps only what the analysis needs, in the timeline's columns."""
    tl = c.tl
    steps, loader, loader_iters = c.steps, tl.loader, c.loader_iters
    g_start, g_end, g_corr, g_dev, g_kind, g_flag = tl.g_start, tl.g_end, tl.g_corr, tl.g_dev, tl.g_kind, tl.g_flag
    g_stream, g_name, g_ext = tl.g_stream, tl.g_name, tl.g_ext
    r_start, r_end, r_corr, r_name, r_thread, r_ext = tl.r_start, tl.r_end, tl.r_corr, tl.r_name, tl.r_thread, tl.r_ext
    o_start, o_end, o_thread, o_ext, o_name = tl.o_start, tl.o_end, tl.o_thread, tl.o_ext, tl.o_name
    o_shape = tl.o_shape
    s_start, s_end, s_thread, s_name = tl.s_start, tl.s_end, tl.s_thread, tl.s_name
    name_id, thread_of, shape_id = tl.name_id, tl.thread, tl.shape_id
    name_ids = tl._name_ids
    shape_ids = tl._shape_ids
    threads: dict[tuple[Any, Any], int] = {}
    for kind, ev, ts, end, name in kept_events(batches, _CATEGORIES, _OTHER, c):
        args = ev.args
        if kind <= _PYTHON:
            key = (ev.pid, ev.tid)
            try:
                thread = threads[key]
            except KeyError:
                thread = threads[key] = thread_of(str(ev.pid), str(ev.tid))
            except TypeError:  # an unhashable pid/tid (a malformed trace): named by its text
                thread = thread_of(str(ev.pid), str(ev.tid))
            if name.startswith("ProfilerStep#"):
                number = step_number(name)
                if number is not None:
                    steps.add((number, float(ts), float(end)))
                continue
            if name.startswith(("enumerate(DataLoader)#", "enumerate(DataPipe)#")) and name.endswith("__next__"):
                loader.append((float(ts), float(end)))
                loader_iters[name[name.index("#") + 1:-9]] += 1
                continue
            if name.startswith(("autograd::engine::evaluate_function", "Optimizer.step#")):
                c.training_ops += 1
            if kind != _CPU:
                s_start.append(ts)
                s_end.append(end)
                s_thread.append(thread)
                nid = name_ids.get(name)
                s_name.append(nid if nid is not None else name_id(name))
                continue
            ext = -1
            sig = -1
            if args is not None:
                ext = args.external_id
                if type(ext) is not int:
                    ext = args.external_id_old
                    if type(ext) is not int:
                        ext = -1
                flop = args.flops
                if flop and (type(flop) is int or type(flop) is float):
                    c.flops_ts.append(ts)
                    c.flops.append(flop)
                dims = args.dims
                if dims and name in KNOWN_OPS:  # only operators with a FLOP/byte formula need their shapes
                    dims_b, types_b, conc_b = bytes(dims), bytes(args.types), bytes(args.concrete)
                    sig_key = (name, dims_b, types_b, conc_b)
                    sig = shape_ids.get(sig_key, -1)
                    if sig < 0:
                        sig = shape_id(sig_key, partial(_shapes, dims_b, types_b, conc_b))
                    c.shaped_ops += 1
            o_start.append(ts)
            o_end.append(end)
            o_thread.append(thread)
            o_ext.append(ext)
            nid = name_ids.get(name)
            o_name.append(nid if nid is not None else name_id(name))
            o_shape.append(sig)
        elif kind == _RUNTIME:
            rcorr: Any = -1
            rext: Any = -1
            if args is not None:
                rcorr = args.correlation
                if type(rcorr) is not int:
                    rcorr = -1
                rext = args.external_id
                if type(rext) is not int:
                    rext = args.external_id_old
                    if type(rext) is not int:
                        rext = -1
            key = (ev.pid, ev.tid)
            try:
                thread = threads[key]
            except KeyError:
                thread = threads[key] = thread_of(str(ev.pid), str(ev.tid))
            except TypeError:  # an unhashable pid/tid (a malformed trace): named by its text
                thread = thread_of(str(ev.pid), str(ev.tid))
            r_start.append(ts)
            r_end.append(end)
            r_corr.append(rcorr)
            nid = name_ids.get(name)
            r_name.append(nid if nid is not None else name_id(name))
            r_thread.append(thread)
            r_ext.append(rext)
            if name.startswith("hip"):
                c.hip_calls += 1
        elif kind == _GPU_SYNC:
            c.gpu_syncs += 1
        else:
            corr = dev = stream = ext2 = None
            if args is not None:
                corr = args.correlation
                dev = args.device
                stream = args.stream
                ext2 = args.external_id if args.external_id is not None else args.external_id_old
            if dev is None:
                dev = ev.pid
            flag = 0
            if kind == _MEMCPY and "HtoD" in name:
                flag = H2D | (PAGEABLE if "Pageable" in name else PINNED if "Pinned" in name else 0)
            g_start.append(ts)
            g_end.append(end)
            g_corr.append(corr if type(corr) is int else -1)
            g_dev.append(dev if type(dev) is int else -1)
            g_stream.append(stream if type(stream) is int else -1)
            g_kind.append(_GPU_KIND[kind])
            g_flag.append(flag)
            nid = name_ids.get(name)
            g_name.append(nid if nid is not None else name_id(name))
            g_ext.append(ext2 if type(ext2) is int else -1)
