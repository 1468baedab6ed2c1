"""A GPU timeline read like a performance engineer reads it, from plain records of any profiler format.

Entry point (a reader fills a `Timeline`, chooses the window, then analyses it)::

    tl = Timeline()
    main = tl.thread(pid, tid)
    tl.add_gpu("volta_sgemm_128x64_nn", start_us, dur_us, device=0, stream=7, correlation=12, kind="kernel")
    tl.add_runtime("cudaLaunchKernel", start_us, dur_us, correlation=12, thread=main, external_id=5)
    tl.add_op("aten::mm", start_us, dur_us, thread=main, external_id=5, shapes=OpShapes.of(dims, types))
    tl.add_span("nn.Module: Linear_0", start_us, dur_us, thread=main)   # python functions, user annotations
    tl.add_loader(start_us, end_us)                                     # DataLoader __next__ spans
    tl.finish()
    windows = [(s, e) for _, s, e in step_windows(tl, steps, devices)] or steady_window(tl, t0, t1, devices,
                                                                                     kb.kernels).windows
    result = analyse(tl, windows, devices, kb.kernels, roof=Roof(...))  # -> TimelineAnalysis
    result.add_facts(file_result, label=..., file=..., n_steps=...)     # the standard facts, with provenance
    result.breakdown                                                    # the TimeBreakdown (expert/breakdown.py)

Readers in a hurry may append to the `g_*`, `r_*`, `o_*` and `s_*` arrays directly (keeping each group the same
length) instead of calling `add_*`. Times are microseconds on the trace's own clock; ids are ints (-1 when unknown).
Runtime calls, operators and spans of one host thread must share its `thread` id: host coverage is judged on the
threads that launch GPU work. Thresholds and kernel-name patterns come from knowledge_base/kernels.yaml.

What it derives:

- kernel classes from knowledge_base/kernels.yaml (CUDA and ROCm names), GPU time and share per class, top-N kernels;
- the launching operator of each GPU activity (activity -> runtime call by correlation id -> operator by external
  id, or the innermost operator enclosing the call), top-N operators and (from `nn.Module:` python functions) modules;
- FLOPs and bytes of those operators from their recorded shapes (expert/ingest/opflops.py), hence arithmetic
  intensity, achieved TFLOP/s and the share of the roofline of the traced device, per operator, kernel and class;
- why the GPU idles: each idle gap of the window is input (a DataLoader span), a blocking call (the host sat in a
  synchronize/free/synchronous copy when the GPU ran dry, or during the gap), launch overhead (a short gap before a
  kernel the host launched after the GPU went idle, and the time the launching threads spend inside launch calls,
  named as Kineto or Nsight Systems names them: `classes.api_name`), host compute (a longer gap while the launching
  threads ran operators or python code that launch nothing), GPU-side waiting (the next work was already queued) or
  unattributed (no host event at all);
- the window: ProfilerStep-like spans extended to the end of the GPU work they launched, or without steps a steady
  state that leaves out initialisation, first-call warm-up and stretches with no events at all;
- graph replay (cudaGraphLaunch/hipGraphLaunch).

Every pass is a sort plus a linear sweep (prefix sums answer "how much of [a, b] is covered" in O(log n)), so the
cost grows as n log n in events, steps and devices.

Modules, by job: `model` (the Timeline and its launch match), `cover` (interval sets), `classes` (kernels.yaml
compiled), `windows` (step and steady-state windows, host activity), `analysis` (busy share, idle gaps by cause,
copies, communication), `breakdown` (classes, kernels, operators, modules, roofline), `operators` (operator lookups),
`roofline` (the device's roof and FLOP/byte accumulators), `result` (TimelineAnalysis and its facts).
"""

from __future__ import annotations

from .analysis import analyse
from .classes import Classifier
from .cover import Cover, intersect_all, subtract, union_columns
from .model import H2D, KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET, KINDS, PAGEABLE, PINNED, Timeline
from .result import DeviceIdle, TimelineAnalysis
from .roofline import Roof, roof_of
from .windows import SteadyWindow, steady_window, step_windows

__all__ = ["H2D", "KINDS", "KIND_KERNEL", "KIND_MEMCPY", "KIND_MEMSET", "PAGEABLE", "PINNED", "Classifier", "Cover",
           "DeviceIdle", "Roof", "SteadyWindow", "Timeline", "TimelineAnalysis", "analyse", "intersect_all",
           "roof_of", "steady_window", "step_windows", "subtract", "union_columns"]
