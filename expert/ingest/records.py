"""Format-neutral profiler records: what a trace reader hands to the timeline analysis.

A reader (today `nsys`) turns its own rows into these plain tuples, in microseconds, one at a time, and its adapter
appends them to the shared trace analysis's columnar `timeline.Timeline` (expert/ingest/nsys/adapter.py), which never
sees a file format. They are NamedTuples: cheap to build by the million from database rows, and readable by field
name.
"""

from __future__ import annotations

from typing import NamedTuple

KERNEL, MEMCPY, MEMSET = "kernel", "memcpy", "memset"
"""`GpuActivity.kind` values."""

COPY_KINDS = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "other")
"""`GpuActivity.copy_kind` values for memcpy records (Kineto's spelling, as in `Memcpy HtoD (Pageable -> Device)`)."""


class GpuActivity(NamedTuple):
    """One kernel, memcpy or memset on a device's timeline."""

    kind: str
    """"kernel", "memcpy" or "memset"."""
    name: str
    """Kernel name (demangled when the source has it); for copies `Memcpy HtoD (Pageable -> Device)` as Kineto names
    them; `Memset (Device)` for memsets."""
    start_us: float
    dur_us: float
    device: int
    stream: int
    """-1 when unknown."""
    correlation: int
    """Correlation id shared with the runtime call that launched it; -1 when unknown."""
    process: int
    """Process key of the launching process (comparable with `RuntimeCall.process`); -1 when unknown."""
    launch_us: float
    """Start of the runtime call that launched it, joined by correlation id in the reader; NaN when not found."""
    copy_kind: str = ""
    """memcpy only: one of COPY_KINDS."""
    bytes: int = 0
    pageable: bool | None = None
    """memcpy only: True when the host side is pageable memory, False when pinned, None when unknown or no host side."""


class RuntimeCall(NamedTuple):
    """One CUDA runtime or driver API call on a host thread."""

    name: str
    start_us: float
    dur_us: float
    correlation: int
    process: int
    thread: int


class SyncSpan(NamedTuple):
    """Host time blocked in a synchronization (stream, event, context/device synchronize)."""

    kind: str
    """"stream", "event", "context", "stream_wait" (GPU-side, the host is not blocked) or "unknown"."""
    start_us: float
    dur_us: float
    device: int
    stream: int
    process: int


class Range(NamedTuple):
    """One annotated CPU range (NVTX push/pop or start/end)."""

    name: str
    start_us: float
    end_us: float
    process: int
    thread: int
