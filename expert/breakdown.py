"""Where the GPU time of a profiled window goes: the models `dam ingest` and the report carry as `time_breakdown`.

Produced by the trace readers (expert/ingest/timeline/ does the analysis; kineto.py and other readers fill it), kept
in observation files written by `dam ingest --as json|yaml`, and attached to `Report.time_breakdown`. Every number is
rounded once when it is made, so JSON round trips are exact. Times in the `window` are microseconds from the first
event of the trace (the same origin as `--window`, which takes seconds).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

CLASS_IDS = ("gemm", "conv", "attention", "elementwise", "reduction", "communication", "host_transfer", "memcpy",
             "memset", "triton", "other")
"""The kernel classes, in the order reports list them when shares tie."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True, defer_build=True)


class Roofline(_Model):
    """What a share of GPU time achieved against the roof of the traced device (present where shapes allow)."""

    flops: float | None = None
    bytes: float | None = None
    arithmetic_intensity: float | None = None  # FLOP per byte moved (bytes: each operand read once, result written)
    achieved_tflops: float | None = None  # flops over the GPU time of the kernels that did them
    pct_of_roof: float | None = None  # achieved over min(peak, intensity x bandwidth) for the op's dtype
    dtype: str | None = None  # the dtype of most of the FLOPs (the roof's dtype)


class ClassShare(Roofline):
    """GPU time of one kernel class."""

    class_: str = Field(alias="class")
    gpu_time_s: float
    share: float  # of all GPU activity time (kernels, copies, memsets) in the window
    count: int = 0
    memory_bound_by_nature: bool = False


class TimeEntry(Roofline):
    """One kernel, operator or module: its GPU time, share and launch count, with a roofline where shapes allow."""

    name: str
    gpu_time_s: float
    share: float
    count: int
    class_: str | None = Field(default=None, alias="class")  # kernel class (dominant class for an operator)


class TraceWindow(_Model):
    """The part of the trace the facts describe, and why it was chosen."""

    start_us: float
    end_us: float
    reason: str
    steps: int = 0  # ProfilerStep spans in it (0: no steps, a steady-state window)
    excluded_us: float = 0.0  # time inside [start, end] left out (stretches without any event)


class IdleShares(_Model):
    """The window's GPU time, split (shares of the window, averaged over the devices; they sum to 1)."""

    busy: float
    input: float  # DataLoader spans
    launch: float  # short gaps between kernels the host launched one by one
    host_compute: float  # CPU operators / python functions that launch nothing, running while the GPU idles
    sync: float  # blocking calls: synchronize, free, synchronous copies
    unattributed: float  # no host event at all (the host was outside the profiled code)
    gpu_wait: float  # the next work was already queued (a dependency on the GPU side)


class StepTime(_Model):
    number: int
    duration_s: float


class RoofSpec(_Model):
    """The roof the percentages are against: the traced device's dense peak for the dominant dtype."""

    hardware: str
    dtype: str
    peak_tflops: float
    peak_bandwidth_gbs: float
    ridge_flop_per_byte: float


class TimeBreakdown(_Model):
    """Where the GPU time of the window goes: kernel classes, top kernels, operators and modules, idle causes."""

    source: str
    window: TraceWindow
    devices: list[int] = []
    gpu_time_s: float = 0.0
    kernels: int = 0
    classes: list[ClassShare] = []
    memory_bound_share: float | None = None  # share of GPU time in classes memory-bound by nature
    top_kernels: list[TimeEntry] = []
    top_ops: list[TimeEntry] = []
    top_modules: list[TimeEntry] = []
    host_during_idle: list[TimeEntry] = []  # what the launching threads ran while the GPU idled (idle seconds, share)
    idle: IdleShares | None = None
    steps: list[StepTime] = []
    step_time_cv: float | None = None
    graph_launches: int = 0
    roof: RoofSpec | None = None
    totals: Roofline | None = None  # the window as a whole, over the operators whose shapes allow a count
    flops_coverage: float | None = None  # share of GPU time launched by operators with a FLOP/byte count
    notes: list[str] = []
