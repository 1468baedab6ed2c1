"""Consistency margins: derived readings of pairs of facts that physically must agree (MFU and achieved FLOP/s,
DRAM utilization and bytes per step, DRAM and kernel time, busy and idle shares, tensor and SM activity);
rules/conflicts.yaml and rules/contradictions.yaml judge them, `expert.derive.consistency` holds the arithmetic."""

from __future__ import annotations

from . import consistency
from .derivation import Derivation, Gate, Result, all_of, fact_test, num

SOME_ACHIEVED = Gate("some achieved FLOP/s to compare the MFU with", fact_test("flops_to_peak", gt=0))
_CONFLICT_MFU = ("seed Table 5 (MFU = achieved FLOP/s over the dense peak); "
                 "PaLM, Chowdhery et al. 2022, App. B (MFU vs HFU)")
_CONFLICT_BW = "DCGM DRAM_ACTIVE definition (achieved / peak DRAM bandwidth); Nsight Compute dram__bytes per step"
_CONFLICT_ROOF = ("roofline (Williams, Waterman, Patterson 2009): FLOP/s = intensity × bytes/s, and neither exceeds "
                  "its peak; DCGM DRAM_ACTIVE (achieved over peak DRAM bandwidth)")
_CONFLICT_IDLE = ("NVML utilization.gpu (a kernel was running) and the trace's idle share (nothing running) "
                  "exclude each other")
_CONFLICT_PIPES = ("DCGM profiling metrics: PIPE_TENSOR_ACTIVE counts cycles of resident warps, "
                   "so it cannot exceed SM_ACTIVE")
_CONFLICT_DRAM_BUSY = ("DCGM profiling metrics (DRAM_ACTIVE: cycles the device memory interface sends or receives) and "
                      "NVML utilization.gpu (a kernel was running): without a kernel only the copy engines move device "
                      "memory, at the host link's or NVLink's speed")
_CONFLICT_WAIT = "seed Table 5 (I/O overhead) and screening signal 1: an exposed data wait leaves the GPU idle"
_CONFLICT_NODES = "every node of a GPU job holds at least one GPU"
_PER_GPU_RATE = ("definition of tokens_per_s (the whole job's tokens per second; MFU divides it by num_gpus): a rate "
                 "read off one GPU's log makes the MFU num_gpus times too small")
# tokens_per_s given, not computed from the global batch and the step time (then it is the whole job's by definition)
GIVEN_TOKEN_RATE = Gate("several GPUs, and tokens_per_s given rather than derived from tokens_per_step",
                        all_of([fact_test("num_gpus", ge=2), fact_test("tokens_per_step", known=False)]))

# ---- consistency margins: pairs of facts that physically must agree (rules/conflicts.yaml judges them) ----------
CONSISTENCY_MARGINS: tuple[Derivation, ...] = (
    Derivation("mfu_to_achieved", ("mfu", "flops_to_peak"), "mfu / (achieved_tflops / peak_tflops)",
               _CONFLICT_MFU, lambda f, kb: Result(consistency.ratio_of_readings(
                   num(f, "mfu"), num(f, "flops_to_peak"))), gate=SOME_ACHIEVED),
    Derivation("bytes_bw_util", ("bytes_moved", "step_time_s", "peak_bandwidth"),
               "bytes_moved / step_time_s / peak_bandwidth (unclamped)", _CONFLICT_BW,
               lambda f, kb: Result(consistency.bytes_bandwidth_util(
                   num(f, "bytes_moved"), num(f, "step_time_s"), num(f, "peak_bandwidth")))),
    Derivation("bandwidth_to_peak", ("bytes_bw_util",), "bytes_moved / step_time_s / peak_bandwidth (unclamped)",
               "roofline: no step exceeds the peak memory bandwidth",
               lambda f, kb: Result(num(f, "bytes_bw_util"))),
    Derivation("mem_bw_to_bytes", ("mem_bw_util", "bytes_bw_util"), "mem_bw_util / bytes_bw_util",
               _CONFLICT_BW, lambda f, kb: Result(consistency.ratio_of_readings(
                   num(f, "mem_bw_util"), num(f, "bytes_bw_util")))),
    Derivation("dram_implied_flops_to_peak", ("intensity_to_ridge", "mem_bw_util"),
               "intensity_to_ridge × mem_bw_util (the FLOP rate that intensity at that DRAM rate needs, over the peak)",
               _CONFLICT_ROOF, lambda f, kb: Result(num(f, "intensity_to_ridge") * num(f, "mem_bw_util"))),
    Derivation("busy_idle_excess", ("gpu_util", "gpu_idle_gap_frac"), "gpu_util + gpu_idle_gap_frac − 1",
               _CONFLICT_IDLE, lambda f, kb: Result(consistency.busy_idle_excess(
                   num(f, "gpu_util"), num(f, "gpu_idle_gap_frac")))),
    Derivation("tensor_over_sm", ("tensor_active", "sm_active"), "tensor_active − sm_active", _CONFLICT_PIPES,
               lambda f, kb: Result(consistency.excess(num(f, "tensor_active"), num(f, "sm_active")))),
    Derivation("dram_over_busy", ("mem_bw_util", "gpu_util"), "mem_bw_util − gpu_util", _CONFLICT_DRAM_BUSY,
               lambda f, kb: Result(consistency.excess(num(f, "mem_bw_util"), num(f, "gpu_util")))),
    Derivation("wait_over_idle", ("io_overhead", "gpu_idle_gap_frac"), "io_overhead − gpu_idle_gap_frac",
               _CONFLICT_WAIT, lambda f, kb: Result(consistency.excess(
                   num(f, "io_overhead"), num(f, "gpu_idle_gap_frac")))),
    Derivation("gpus_per_node", ("num_gpus", "num_nodes"), "num_gpus / num_nodes", _CONFLICT_NODES,
               lambda f, kb: Result(consistency.per_node(num(f, "num_gpus"), num(f, "num_nodes")))),
    Derivation("mfu_if_tokens_per_gpu", ("mfu", "tokens_per_s", "num_gpus"),
               "mfu · num_gpus (the MFU were tokens_per_s one GPU's rate, not the whole job's)", _PER_GPU_RATE,
               lambda f, kb: Result(num(f, "mfu") * num(f, "num_gpus")), gate=GIVEN_TOKEN_RATE),
)
