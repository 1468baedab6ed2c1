"""The timeline model: plain event records of any profiler format, columnar (GPU activities, runtime calls, CPU
operators, host spans, DataLoader spans), with interned names and threads, and the launch match by correlation id."""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..intervals import Interval
from ..opflops import OpShapes

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

