"""What the analysis of one window gives (`TimelineAnalysis`: idle split, kernels, copies, launches, the time
breakdown) and the standard facts it adds to a FileResult, with provenance."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...breakdown import TimeBreakdown
from ...kb.knowledge import KnowledgeBase
from .._kb import default_kb
from .classes import api_name

if TYPE_CHECKING:
    from .._result import FileResult


def _operators(fmt: str) -> str:
    """What an operator is in a trace of format `fmt`, in words."""
    return ("operator NVTX range (emit_nvtx's aten::mm, or another namespace::op)" if fmt == "nsys" else
            "operator (a cpu_op event)")


def _duration(us: float) -> str:
    return f"{us / 1e3:g} ms" if us >= 1000 else f"{us:g} us"


OneOffLaunches = tuple[int, str, float, float]
"""(how many, the longest one's name, its time inside the window, the threshold in us) of one-off launch calls."""


def record_dispatch(facts: dict[str, Any], idle_us: float, dispatch: dict[str, float], top_n: int) -> None:
    """Keep the host-compute idle time (`idle_us`) and its part inside the model's own GPU operators (`dispatch`:
    outermost operator name -> idle time inside it) in an analysis's facts, for `TimelineAnalysis._host_dispatch`."""
    facts["_host_idle_us"] = idle_us
    facts["_host_dispatch_us"] = sum(dispatch.values())
    facts["_host_dispatch_ops"] = sorted(dispatch.items(), key=lambda kv: -kv[1])[:top_n]


def slow_launches(calls: list[tuple[str, float]], min_us: float) -> OneOffLaunches | None:
    """The one-off launch calls (`min_us` or longer: kernels.yaml analysis.one_off_launch_min_us, given as (name,
    time inside the window)) that reach into the window, summed up; None when none does."""
    inside = [(t, name) for name, t in calls if t > 0]
    if not inside:
        return None
    t, name = max(inside, key=lambda x: (x[0], x[1]))
    return len(inside), name, t, min_us


def slow_launch_note(found: OneOffLaunches | None, label: str) -> str | None:
    """The note on the one-off launch calls inside the window (`slow_launches`)."""
    if found is None:
        return None
    count, name, t, min_us = found
    many = f"{count} launch calls of {_duration(min_us)} or more, the longest {name}" if count > 1 else f"{name}"
    return (f"{many} took {t / 1e3:.3g} ms inside {label}. A launch call this long is a one-off, usually a first "
            "launch loading the kernel's module (CUDA lazy loading, ROCm code objects), not the per-launch cost CUDA "
            "graphs or fusion remove: the GPU idle time it holds is counted as unattributed, not as launch overhead "
            "or host compute. Profile after warm-up (or with CUDA_MODULE_LOADING=EAGER) to see the steady state")


@dataclass
class DeviceIdle:
    busy: float = 0.0
    data: float = 0.0
    launch: float = 0.0
    host: float = 0.0
    sync: float = 0.0
    unattributed: float = 0.0
    gpu_wait: float = 0.0
    hta_host: float = 0.0
    hta_kernel: float = 0.0
    hta_other: float = 0.0
    h2d: float = 0.0
    comm: float = 0.0


TIMELINE_FACTS = ("gpu_util", "gpu_idle_gap_frac", "host_wait_frac", "mean_kernel_us", "kernels_per_step",
                  "pageable_copy_frac", "h2d_copy_frac", "comm_frac", "allreduce_comm_share", "comm_kinds",
                  "launch_overhead_frac", "host_compute_frac", "host_dispatch_frac", "host_sync_frac",
                  "unattributed_idle_frac", "idle_host_ops", "idle_dispatch_ops", "host_copy_frac", "uses_cuda_graphs",
                  "applied_optimizations", "memory_bound_kernel_frac", "weight_kernel_frac", "top_kernel_class",
                  "top_kernel_class_frac", "top_kernel_class_ops", "top_op", "top_op_frac", "top_op_pct_of_roof",
                  "trace_kernels", "device_frees_per_step")
"""The facts the shared trace analysis gives (`TimelineAnalysis.add_facts`), for both trace readers."""


@dataclass
class TimelineAnalysis:
    """The numbers of one analysed window (shares of the window, averaged over the devices with activity)."""

    span_us: float
    devices: list[int]
    activities: int
    idle: dict[str, float]
    kernels: int
    kernel_mean_us: float | None
    kernel_min_us: float | None
    kernel_max_us: float | None
    copies: dict[str, float]
    has_comm: bool
    has_runtime: bool
    launches_matched: float
    graph_launches: int
    blocking_calls: int
    blocking_share: float
    breakdown: TimeBreakdown
    facts: dict[str, Any] = field(default_factory=dict)  # the breakdown facts (top class, its ops, top op, ...)
    device_frees: int = 0  # blocking calls in the window that return device memory (Classifier.is_device_free)

    def _applied(self, r: FileResult, file: str, kb: KnowledgeBase) -> None:
        """applied_optimizations where the trace shows them: graph launches (cuda_graphs), GEMM time mostly in
        tensor-core kernels of the narrowest dense format the hardware has (lower_precision: see `_precision`), and
        memory-bound time mostly in compiler-fused kernels (kernel_fusion: kernels.yaml fused_memory_bound)."""
        applied: list[str] = []
        how: list[str] = []
        if self.graph_launches:
            applied.append("cuda_graphs")
            how.append(f"{self.graph_launches} cudaGraphLaunch/hipGraphLaunch calls (cuda_graphs)")
        precision, said = self._precision(r, kb)
        if precision:
            applied.append("lower_precision")
        if said:
            how.append(said)
        fused = float(self.facts.get("_fused_memory_bound_us") or 0.0)
        memory = float(self.facts.get("_memory_bound_us") or 0.0)
        if memory > 0 and fused / memory >= float(self.facts.get("_fused_min_share") or 1.0):
            applied.append("kernel_fusion")
            how.append(f"{fused / memory:.0%} of the memory-bound GPU time in compiler-fused pointwise and reduction "
                       "kernels (kernel_fusion)")
        if applied:
            r.add("applied_optimizations", ", ".join(applied), method="; ".join(how), file=file)
        else:
            r.missing("applied_optimizations", "; ".join(how) if how else "no graph launches, and no GEMM time "
                      "mostly in 16-bit or narrower tensor-core kernels")

    def _host_dispatch(self, r: FileResult, host_share: float, common: dict[str, Any]) -> None:
        """host_dispatch_frac: the part of host_compute_frac spent inside operators whose outermost operator launched
        GPU work (not copies): the CPU side of the model's own operators (`analysis._Analyzer._host_during_idle`)."""
        dispatch_us = self.facts.get("_host_dispatch_us")
        if dispatch_us is None:
            why = "this analysis does not split the host-compute idle time by the operators around it"
            r.missing("host_dispatch_frac", why)
            r.missing("idle_dispatch_ops", why)
            return
        idle_us = float(self.facts.get("_host_idle_us") or 0.0)
        share = min(1.0, max(0.0, host_share)) * float(dispatch_us) / idle_us if idle_us > 0 else 0.0
        ops: list[tuple[str, float]] = self.facts.get("_host_dispatch_ops") or []
        named = ", ".join(f"{name} {t / idle_us:.0%}" for name, t in ops[:4]) if idle_us > 0 else ""
        r.add("host_dispatch_frac", min(1.0, share), method="host-compute idle time inside operators whose outermost "
              "operator launched GPU work, copies left out: the CPU side of the model's own GPU operators (dispatch, "
              "argument checks, allocation, library heuristics), as a share of the window"
              + (f"; of the host-compute idle time: {named}" if named else ""), **common)
        if ops:
            top = [name for name, _ in ops[:3]]
            r.add("idle_dispatch_ops", top[0] if len(top) == 1 else ", ".join(top[:-1]) + " and " + top[-1],
                  method="the outermost operators that launched GPU work around the host-compute idle time inside "
                  "them, most idle time first", **common)
        else:
            r.missing("idle_dispatch_ops", "no host-compute idle time inside operators that launch GPU work")

    def _collectives(self, r: FileResult, why: dict[str, Any]) -> None:
        """allreduce_comm_share and comm_kinds: the communication kernels' GPU time by collective (kernels.yaml
        `collectives`), and the data-parallel kinds' share of it."""
        per: dict[str, float] | None = self.facts.get("_collectives_us")
        if per is None:
            return
        data_parallel = per.get("", 0.0)
        kinds = sorted(((k, t) for k, t in per.items() if k), key=lambda kv: -kv[1])
        total = sum(t for _, t in kinds)
        if total <= 0:
            for fact in ("allreduce_comm_share", "comm_kinds"):
                r.missing(fact, "no communication kernels in the window")
            return
        mix = ", ".join(f"{k} {t / total:.0%}" for k, t in kinds[:4])
        r.add("allreduce_comm_share", min(1.0, data_parallel / total), method="GPU time of all-reduce, "
              "reduce-scatter and all-gather kernels over all communication kernel time (knowledge_base/kernels.yaml "
              f"collectives): {mix}", **why)
        r.add("comm_kinds", mix, method="communication kernel time by collective, most first", **why)

    def _host_copies(self, r: FileResult, kb: KnowledgeBase, common: dict[str, Any]) -> None:
        """host_copy_frac: the host-compute idle time the launching threads spent in copy operators or calls
        (knowledge_base/kernels.yaml `calls.host_copy`), as a share of the window."""
        spec = kb.kernels.calls.host_copy if kb.kernels is not None else None
        if spec is None:
            return
        copy = re.compile("|".join(f"(?:{p})" for p in spec.patterns))
        copies = [e for e in self.breakdown.host_during_idle if copy.search(api_name(e.name))]
        names, share = [e.name for e in copies], sum(e.share for e in copies)
        r.add("host_copy_frac", min(1.0, share), method="host-compute idle time credited to copy operators or calls "
              f"({', '.join(names) if names else 'none among the operators credited'})", **common)

    def _precision(self, r: FileResult, kb: KnowledgeBase) -> tuple[bool, str]:
        """Whether the trace shows lower precision already applied, and why (empty when it shows no lower precision).

        GEMM time mostly in 16-bit or narrower tensor-core kernels (knowledge_base/kernels.yaml `low_precision_gemm`)
        counts only when the format holding most of it is the narrowest the hardware has: none of the formats
        units.yaml `lower` lists for it is in the part's peak_tflops (`UnitTable.narrower_format`, which
        derive/gain_bounds.py applies to the dtype fact). bf16 on an A100 (no fp8) is applied; bf16 on an H100 is
        not, fp8 is still open; fp8 is. Without the hardware, or a format the kernel names spell, nothing is marked,
        and the reason says so."""
        gemm, low = float(self.facts.get("_gemm_us") or 0.0), float(self.facts.get("_low_precision_gemm_us") or 0.0)
        min_share = float(self.facts.get("_low_precision_min_share") or 1.0)
        if not (gemm > 0 and low / gemm >= min_share):
            return False, ""
        seen = f"{low / gemm:.0%} of GEMM time in 16-bit or narrower tensor-core kernels"
        formats: dict[str, float] = self.facts.get("_gemm_format_us") or {}
        if not formats:
            return False, f"{seen}, in a format the kernel names do not spell: lower_precision not marked"
        fmt = max(formats, key=lambda f: formats[f])
        seen = f"{seen}, mostly {fmt} ({formats[fmt] / gemm:.0%})"
        m = r.measured.get("hardware")
        hw = kb.hardware.get(str(m.value)) if m is not None else None
        if hw is None:
            return False, (f"{seen}; the hardware is unknown, so whether it has a narrower format is too: "
                           "lower_precision not marked (give --set hardware=ID)")
        target = kb.units.narrower_format(fmt, hw)
        if target is not None:
            return False, f"{seen}; {hw.id} also has {target}: lower_precision not marked ({target} is still open)"
        return True, f"{seen}, the narrowest dense format {hw.id} has (lower_precision)"

    def add_facts(self, r: FileResult, *, label: str, file: str, n_steps: int, kb: KnowledgeBase | None = None) -> None:
        """The standard facts of a timeline, with provenance (method, window, devices, file), on a FileResult; `kb`
        (the bundled one when None) holds the hardware the trace's `hardware` fact names."""
        idle = self.idle
        devs = ",".join(map(str, self.devices))
        common: dict[str, Any] = {"window": label, "devices": devs, "file": file}
        if n_steps:
            common["samples"] = n_steps
        r.add("gpu_util", idle["busy"], method=f"union of {self.activities} kernel/memcpy/memset intervals over the "
              "window", **common)
        r.add("gpu_idle_gap_frac", 1.0 - idle["busy"] if idle["busy"] < 1 else 0.0,
              method="window time with no kernel, memcpy or memset running",
              idle_data_wait=round(idle["data"], 4), idle_host_wait=round(idle["hta_host"], 4),
              idle_kernel_wait=round(idle["hta_kernel"], 4), idle_other=round(idle["hta_other"], 4),
              idle_launch=round(idle["launch"], 4), idle_host_compute=round(idle["host"], 4),
              idle_sync=round(idle["sync"], 4), idle_unattributed=round(idle["unattributed"], 4),
              idle_gpu_wait=round(idle["gpu_wait"], 4), **common)
        if not self.has_runtime or self.launches_matched == 0:
            reason = ("GPU activities cannot be matched to their launch calls (no runtime events with correlation "
                      "ids)")
            r.missing("host_wait_frac", reason)
        else:
            r.add("host_wait_frac", idle["hta_host"], method="HTA idle breakdown: gaps whose next activity was "
                  "launched after the previous one ended, less the part overlapping DataLoader waits",
                  launches_matched=round(self.launches_matched, 4), **common)
        split = ("idle gaps split by what the host was doing: DataLoader spans are input; a blocking call "
                 "(synchronize, free, synchronous copy) in progress when the GPU ran dry, or during the gap, is sync; "
                 "a gap of at most {t:g} us before a kernel launched after the GPU went idle is launch overhead, and "
                 "so is the time the launching threads spend inside launch calls (cudaLaunchKernel and friends) in a "
                 "longer one, except a call of {o} or more (a one-off first launch: unattributed); the rest of a "
                 "longer gap is host compute where operators or launch-free python functions ran on the launching "
                 "threads, and unattributed where nothing did")
        method = split.format(t=self.facts["_launch_gap_us"], o=_duration(self.facts["_one_off_launch_us"]))
        for fact, key in (("launch_overhead_frac", "launch"), ("host_compute_frac", "host"),
                          ("host_sync_frac", "sync"), ("unattributed_idle_frac", "unattributed")):
            r.add(fact, min(1.0, max(0.0, idle[key])), method=method, gpu_wait=round(idle["gpu_wait"], 4), **common)
        note = slow_launch_note(self.facts.get("_slow_launch"), label)
        if note is not None:
            r.notes.append(note)
        self._host_dispatch(r, idle["host"], common)
        if self.facts.get("idle_host_ops"):
            r.add("idle_host_ops", self.facts["idle_host_ops"], method="the innermost operator or launch-free python "
                  "function around each stretch of host work inside the host-compute idle gaps, most idle time first",
                  **common)
        else:
            r.missing("idle_host_ops", "no host-compute idle time in the window")
        if self.kernels:
            r.add("mean_kernel_us", max(self.kernel_mean_us or 0.0, 1e-3), method=f"mean duration of {self.kernels} "
                  "kernels", min=self.kernel_min_us, max=self.kernel_max_us, **common)
            if n_steps:
                r.add("kernels_per_step", round(self.kernels / n_steps),
                      method=f"{self.kernels} kernels over {n_steps} steps", **common)
        else:
            r.missing("mean_kernel_us", f"no kernels inside {label}")
            r.missing("kernels_per_step", f"no kernels inside {label}")
        r.add("trace_kernels", self.kernels, method="kernels starting inside the window", **common)
        if not self.has_runtime:
            r.missing("device_frees_per_step", "the trace records no runtime calls, so no cudaFree/hipFree")
        elif not n_steps:
            r.missing("device_frees_per_step", f"no steps inside {label} to count the cudaFree/hipFree calls per")
        else:
            r.add("device_frees_per_step", self.device_frees / n_steps,
                  method=f"{self.device_frees} cudaFree/hipFree calls starting inside the window over {n_steps} steps "
                  "(kernels.yaml calls.device_free)", **common)
        r.add("h2d_copy_frac", idle["h2d"], method="union of host-to-device memcpy intervals over the window", **common)
        pageable, pinned, unknown = self.copies["pageable"], self.copies["pinned"], self.copies["unknown"]
        if pageable + pinned > 0:
            r.add("pageable_copy_frac", pageable / (pageable + pinned), method="Memcpy HtoD (Pageable -> Device) time "
                  "over all host-to-device copy time", copy_us=round(pageable + pinned, 3), **common)
        elif unknown > 0:
            r.missing("pageable_copy_frac", "the host-to-device copies do not say whether host memory was pinned "
                      "(e.g. ROCm names them Host -> Device)")
        else:
            r.missing("pageable_copy_frac", f"no host-to-device copies inside {label}")
        r.add("comm_frac", idle["comm"], method="NCCL/RCCL kernel time not overlapped by other GPU work"
              if self.has_comm else "no NCCL/RCCL kernels in the trace", **common)
        r.add("uses_cuda_graphs", "yes" if self.graph_launches else "no",
              method=f"{self.graph_launches} cudaGraphLaunch/hipGraphLaunch calls in the trace" if self.graph_launches
              else "no cudaGraphLaunch/hipGraphLaunch call in the trace", file=file)
        kb = kb if kb is not None else default_kb()
        self._applied(r, file, kb)
        bd = self.breakdown
        self._host_copies(r, kb, common)
        why = {"window": label, "file": file}
        if bd.classes:
            top = bd.classes[0]
            r.add("top_kernel_class", top.class_, method="kernel class (knowledge_base/kernels.yaml) with the most "
                  "GPU time", **why)
            r.add("top_kernel_class_frac", top.share, method=f"{top.class_} GPU time over all GPU activity time "
                  f"({bd.gpu_time_s:.4g} s)", **why)
            if self.facts.get("top_class_ops"):
                r.add("top_kernel_class_ops", self.facts["top_class_ops"], method=f"operators launching most "
                      f"{top.class_} GPU time (runtime call by correlation id, then the operator that made it)", **why)
            elif bd.top_ops:
                r.missing("top_kernel_class_ops", f"none of the {top.class_} kernels was launched inside an operator "
                          f"(their launch calls lie outside every {_operators(r.format)}; other classes' kernels have "
                          "operators)")
            else:
                r.missing("top_kernel_class_ops", self._no_operators(r.format))
        self._collectives(r, why)
        if bd.memory_bound_share is not None:
            fused = (" and compiler-fused pointwise and reduction kernels" if self.facts.get("_fused_memory_bound_us")
                     else "")
            r.add("memory_bound_kernel_frac", bd.memory_bound_share, method="GPU time in classes memory-bound by "
                  "nature (" + ", ".join(c.class_ for c in bd.classes if c.memory_bound_by_nature) + ")" + fused, **why)
        if self.facts.get("_weight_share") is not None:
            r.add("weight_kernel_frac", self.facts["_weight_share"], method="GPU time in classes whose kernels may "
                  "read the weights or the KV cache (" + ", ".join(self.facts["_weight_classes"]) + ")"
                  + (", less the compiler-fused pointwise and reduction kernels" if self.facts.get(
                      "_fused_memory_bound_us") else ""), **why)
        if bd.top_ops:
            op = bd.top_ops[0]
            r.add("top_op", op.name, method="operator with the most GPU time (kernels it launched)", **why)
            r.add("top_op_frac", op.share, method=f"{op.name} GPU time over all GPU activity time", **why)
            if op.pct_of_roof is not None:
                r.add("top_op_pct_of_roof", op.pct_of_roof, method=f"{op.name}: achieved over the roofline "
                      f"({bd.roof.hardware if bd.roof else '?'}, {op.dtype}) from its recorded shapes", **why)
            else:
                r.missing("top_op_pct_of_roof", f"{op.name}: no FLOP/byte count from its shapes, or no roof for the "
                          "hardware and dtype")
        else:
            for fact in ("top_op", "top_op_frac", "top_op_pct_of_roof"):
                r.missing(fact, self._no_operators(r.format))

    def _no_operators(self, fmt: str) -> str:
        """Why no kernel of the window could be traced back to the operator that launched it."""
        if not self.has_runtime:
            return ("the kernels cannot be traced back to operators: the trace has no runtime calls (the launch calls "
                    "that tie a kernel to its operator)")
        if self.launches_matched == 0:
            return ("the kernels cannot be traced back to operators: no kernel matches a runtime call by correlation "
                    "id")
        how = ("record it under torch.autograd.profiler.emit_nvtx()" if fmt == "nsys" else
               "record CPU activity too: activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]")
        return (f"the kernels cannot be traced back to operators: no launch call lies inside an {_operators(fmt)} "
                f"({how})")

