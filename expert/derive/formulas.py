"""Derived quantities: pure formulas (seed iron law, roofline, Table 5) and the pipeline that applies them.

Every derived value records its formula, the facts it used and the hardware figures (with their source), so it
becomes a node of the provenance graph. An observed value always wins over a derivation of the same fact.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from ..errors import ObservationError, Problem
from ..kb.knowledge import HardwareSpec, KnowledgeBase

Value = int | float | str

# ---- pure formulas --------------------------------------------------------------------------------------------


def ridge_point(peak_tflops: float, bandwidth_gbs: float) -> float:
    """Roofline ridge in FLOP/byte: R_peak / BW (H100 SXM bf16: 989.4e12 / 3.35e12 = 295.3)."""
    return peak_tflops * 1e12 / (bandwidth_gbs * 1e9)


def arithmetic_intensity(flops: float, bytes_moved: float) -> float:
    """FLOPs per byte moved."""
    return flops / bytes_moved


def decode_intensity(batch_size: int, bytes_per_weight: float) -> float:
    """LLM decode at short context: each weight (b bytes) is read once and used for 2 FLOPs per sequence: 2B/b."""
    return 2.0 * batch_size / bytes_per_weight


def io_overhead(data_wait_s: float, step_time_s: float) -> float:
    """Seed Table 5: data wait time / total step time."""
    return data_wait_s / step_time_s


def achieved_tflops(flops: float, step_time_s: float) -> float:
    """Achieved model TFLOP/s from FLOPs per step and step time."""
    return flops / step_time_s / 1e12


def mfu(achieved: float, peak_tflops: float) -> float:
    """Seed Table 5: achieved model FLOP/s / dense peak FLOP/s."""
    return achieved / peak_tflops


def compression_ratio(active_params: float, model_params: float) -> float:
    """Seed Table 5: active (effective) parameters / dense baseline parameters."""
    return active_params / model_params


def decode_bandwidth_gbs(tokens_per_s: float, batch_size: int, params: float, bytes_per_weight: float) -> float:
    """Achieved weight-streaming bandwidth of LLM decode: every step reads all weights once for the whole batch."""
    steps_per_s = tokens_per_s / batch_size
    return steps_per_s * params * bytes_per_weight / 1e9


def iron_law(
    t_input: float | None, t_data: float | None, t_compute: float | None, t_overhead: float | None
) -> tuple[float, float]:
    """Seed iron law: sequential T = input + D/BW + O/(R·η) + L; overlapped T >= input + max(D/BW, O/(R·η)) + L."""
    terms = [t for t in (t_input, t_data, t_compute, t_overhead) if t is not None]
    sequential = sum(terms)
    overlapped = (t_input or 0.0) + max(t_data or 0.0, t_compute or 0.0) + (t_overhead or 0.0)
    return sequential, overlapped


def amdahl_max_speedup(share: float) -> float:
    """Upper bound on the step speedup from removing a term that takes `share` of the step entirely."""
    return float("inf") if share >= 1.0 else 1.0 / (1.0 - share)


# ---- cluster scale: seed Table 6 and the C³ taxonomy --------------------------------------------------------------


def scaling_efficiency(per_gpu_throughput: float, single_gpu_throughput: float) -> float:
    """Per-GPU throughput on N GPUs over the throughput of one GPU alone (1.0 = linear scaling)."""
    return per_gpu_throughput / single_gpu_throughput


def ring_allreduce_bytes(gradient_bytes: float, ranks: int) -> float:
    """Bytes each rank sends (and receives) in a ring all-reduce of `gradient_bytes`: 2(N−1)/N × bytes."""
    return 2.0 * (ranks - 1) / ranks * gradient_bytes


def comm_term(bytes_per_rank: float, bandwidth_gbs: float) -> float:
    """Seconds to move `bytes_per_rank` at a per-direction bandwidth in GB/s (the communication term at full speed)."""
    return bytes_per_rank / (bandwidth_gbs * 1e9)


def exposed_comm(comm_time_s: float, overlap_frac: float) -> float:
    """Communication time not hidden behind compute."""
    return comm_time_s * (1.0 - overlap_frac)


def young_interval(delta_s: float, mtbf_s: float) -> float:
    """Young's optimal checkpoint interval √(2δM) (CACM 17(9), 1974)."""
    return math.sqrt(2.0 * delta_s * mtbf_s)


def daly_interval(delta_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum: √(2δM)·[1 + ⅓√(δ/2M) + (δ/2M)/9] − δ for δ < 2M, else M (FGCS 22, 2006)."""
    if delta_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = delta_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * delta_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta_s


def coordination_loss(delta_s: float, interval_s: float, mtbf_s: float, restart_s: float = 0.0) -> float:
    """Time lost per unit of useful time (first order): checkpoints δ/τ + expected rework τ/2M + restarts R/M."""
    return delta_s / interval_s + interval_s / (2.0 * mtbf_s) + restart_s / mtbf_s


def lost_share(loss: float) -> float:
    """Share of wall time lost, from time lost per unit of useful time: x / (1 + x)."""
    return loss / (1.0 + loss)


# ---- the derivation pipeline ------------------------------------------------------------------------------------


@dataclass
class DerivedValue:
    """A derived quantity with the recipe that produced it.

    A plain dataclass (pydantic validates and serialises it inside the Report): every diagnosis makes a dozen.
    """

    name: str
    value: float
    formula: str
    inputs: dict[str, Value]
    source: str
    unit: str | None = None
    constants: dict[str, Value] = field(default_factory=dict)
    note: str | None = None


@dataclass(frozen=True)
class _Result:
    value: float
    constants: dict[str, Value] = field(default_factory=dict)
    note: str | None = None


Facts = Mapping[str, Value]


@dataclass(frozen=True)
class Derivation:
    """One way to compute `output` from `inputs` (all must be known)."""

    output: str
    inputs: tuple[str, ...]
    formula: str
    source: str
    compute: Callable[[Facts, KnowledgeBase], _Result | None]
    gated: bool = False  # the formula may decline (give no value) on its inputs: LLM decode only, a link the GPU has
    needs: frozenset[str] = field(init=False, repr=False, compare=False)  # `inputs` as a set, for the hot loop

    def __post_init__(self) -> None:
        object.__setattr__(self, "needs", frozenset(self.inputs))


def _hw(f: Facts, kb: KnowledgeBase) -> HardwareSpec:
    return kb.hardware[str(f["hardware"])]


def _num(f: Facts, name: str) -> float:
    return float(f[name])


def _clamp_fraction(value: float, what: str) -> _Result:
    if value > 1.0:
        return _Result(1.0, note=f"{what} came out at {value:.2f} (> 1); clamped to 1 - check the inputs")
    return _Result(max(0.0, value))


def _peak(f: Facts, kb: KnowledgeBase) -> _Result | None:
    hw, dtype = _hw(f, kb), str(f["dtype"])
    peak = hw.peak(dtype)
    if peak is None:
        return None
    return _Result(peak, {f"{hw.id} dense {dtype} peak (TFLOP/s)": peak, "source": hw.source})


def _bandwidth(f: Facts, kb: KnowledgeBase) -> _Result | None:
    hw = _hw(f, kb)
    if hw.memory_bandwidth_gbs is None:  # the vendor publishes none (hardware.yaml null)
        return None
    figures: dict[str, Value] = {f"{hw.id} memory bandwidth (GB/s)": hw.memory_bandwidth_gbs, "source": hw.source}
    return _Result(hw.memory_bandwidth_gbs, figures)


def _is_decode(f: Facts) -> bool:
    return f.get("phase") == "decode" and f.get("workload", "inference") == "inference"


def _decode_params(f: Facts) -> float:
    return _num(f, "active_params") if "active_params" in f else _num(f, "model_params")


def _decode_bw_util(f: Facts, kb: KnowledgeBase) -> _Result | None:
    if not _is_decode(f) or ("model_params" not in f and "active_params" not in f):
        return None
    b = kb.dtype_bytes(str(f["dtype"]))
    achieved = decode_bandwidth_gbs(_num(f, "tokens_per_s"), int(_num(f, "batch_size")), _decode_params(f), b)
    result = _clamp_fraction(achieved / _num(f, "peak_bandwidth"), "derived bandwidth utilization")
    return _Result(result.value, {"bytes per weight": b, "achieved GB/s": round(achieved, 1)}, result.note)


def _decode_bw_ratio(f: Facts, kb: KnowledgeBase) -> _Result | None:
    if not _is_decode(f):
        return None
    b = kb.dtype_bytes(str(f["dtype"]))
    achieved = decode_bandwidth_gbs(_num(f, "tokens_per_s"), int(_num(f, "batch_size")), _decode_params(f), b)
    return _Result(achieved / _num(f, "peak_bandwidth"), {"bytes per weight": b, "achieved GB/s": round(achieved, 1)})


def _decode_ai(f: Facts, kb: KnowledgeBase) -> _Result | None:
    if not _is_decode(f):
        return None
    b = kb.dtype_bytes(str(f["dtype"]))
    return _Result(decode_intensity(int(_num(f, "batch_size")), b), {"bytes per weight": b},
                   "short-context approximation: KV-cache reads would lower it further")


def _term_share(name: str) -> Callable[[Facts, KnowledgeBase], _Result | None]:
    def share(f: Facts, kb: KnowledgeBase) -> _Result | None:
        return _Result(min(1.0, _num(f, name) / _num(f, "step_time_s")))

    return share


def _scaling(value: float) -> _Result:
    if value > 1.0:
        return _Result(1.0, note=f"scaling efficiency came out at {value:.2f} (superlinear, e.g. per-GPU data now fits "
                       "in cache or memory); clamped to 1")
    return _Result(max(0.0, value))


_HARDWARE_LINKS = {"nvlink": ("scale_up_link", "scale_up_gbs", "nvlink"),
                   "pcie": ("host_link", "host_link_gbs", "pcie")}


def _hardware_link(f: Facts, kb: KnowledgeBase) -> _Result | None:
    """The hardware's own NVLink or PCIe figure (hardware.yaml quotes bidirectional totals; halved per direction)."""
    kind = str(f["interconnect"])
    if kind not in _HARDWARE_LINKS:
        return None
    hw = _hw(f, kb)
    name_field, gbs_field, marker = _HARDWARE_LINKS[kind]
    name, total = getattr(hw, name_field), getattr(hw, gbs_field)
    if not name or total is None or marker not in str(name).casefold():
        return None
    return _Result(total / 2.0, {f"{hw.id} {name} (GB/s, bidirectional)": total, "source": hw.source})


def _catalog_link(f: Facts, kb: KnowledgeBase) -> _Result | None:
    link = kb.default_interconnect(str(f["interconnect"]))
    if link is None:
        return None
    return _Result(link.per_direction_gbs, {f"{link.name} (GB/s per direction)": link.per_direction_gbs,
                                            "source": link.source}, link.notes)


def _mtbf_s(f: Facts) -> float:
    return _num(f, "mtbf_h") * 3600.0


def _coordination(interval: str, with_restart: bool) -> Callable[[Facts, KnowledgeBase], _Result | None]:
    def overhead(f: Facts, kb: KnowledgeBase) -> _Result | None:
        restart = _num(f, "restart_time_s") if with_restart else 0.0
        loss = coordination_loss(_num(f, "checkpoint_write_s"), _num(f, interval), _mtbf_s(f), restart)
        return _Result(lost_share(loss), {"time lost per unit of useful time (x)": round(loss, 6)})

    return overhead


_SEED_IRON = "seed, iron law T = D/BW + O/(R_peak·η) + L_lat"
_C3_SCALING = "seed C³ (C1 computation adds scaling-efficiency loss); scaling efficiency = per-GPU throughput N vs 1"
_C3_COMM = "seed Table 6 and C³ (C2 communication: the communication wall)"
_C3_COORD = "seed Table 6 (reliability wall, cluster MTBF) and C³ (C3 coordination)"
_NCCL = "NCCL ring all-reduce moves 2(N−1)/N × bytes per rank (nccl-tests doc/PERFORMANCE.md, bus bandwidth)"
_YOUNG = "Young 1974, CACM 17(9), https://doi.org/10.1145/361147.361115"
_DALY = "Daly 2006, FGCS 22, https://doi.org/10.1016/j.future.2004.11.016"
_ROOFLINE = "seed, arithmetic-intensity boundary (ridge R_peak/BW); Williams et al. 2009 roofline"

DERIVATIONS: tuple[Derivation, ...] = (
    Derivation("peak_tflops", ("hardware", "dtype"), "catalog dense peak for (hardware, dtype)",
               "knowledge_base/hardware.yaml", _peak, gated=True),
    Derivation("peak_bandwidth", ("hardware",), "catalog peak memory bandwidth",
               "knowledge_base/hardware.yaml", _bandwidth, gated=True),
    Derivation("ridge_point", ("peak_tflops", "peak_bandwidth"), "R_peak / BW", _ROOFLINE,
               lambda f, kb: _Result(ridge_point(_num(f, "peak_tflops"), _num(f, "peak_bandwidth")))),
    Derivation("arithmetic_intensity", ("flops", "bytes_moved"), "flops / bytes_moved", _ROOFLINE,
               lambda f, kb: _Result(arithmetic_intensity(_num(f, "flops"), _num(f, "bytes_moved")))),
    Derivation("arithmetic_intensity", ("phase", "batch_size", "dtype"),
               "2 · batch_size / bytes_per_weight (LLM decode)",
               "domain.md §B, LLM decode: I ≈ 2B/b_w at short context", _decode_ai, gated=True),
    Derivation("intensity_to_ridge", ("arithmetic_intensity", "ridge_point"), "arithmetic_intensity / ridge_point",
               _ROOFLINE, lambda f, kb: _Result(_num(f, "arithmetic_intensity") / _num(f, "ridge_point"))),
    Derivation("achieved_tflops", ("flops", "step_time_s"), "flops / step_time_s / 1e12", "seed Table 5 (MFU)",
               lambda f, kb: _Result(achieved_tflops(_num(f, "flops"), _num(f, "step_time_s")))),
    Derivation("flops_to_peak", ("achieved_tflops", "peak_tflops"), "achieved_tflops / peak_tflops (unclamped)",
               "roofline: no kernel exceeds the dense peak",
               lambda f, kb: _Result(_num(f, "achieved_tflops") / _num(f, "peak_tflops"))),
    Derivation("mfu", ("achieved_tflops", "peak_tflops"), "achieved_tflops / peak_tflops (dense)", "seed Table 5 (MFU)",
               lambda f, kb: _clamp_fraction(mfu(_num(f, "achieved_tflops"), _num(f, "peak_tflops")), "MFU")),
    Derivation("io_overhead", ("data_wait_s", "step_time_s"), "data_wait_s / step_time_s",
               "seed Table 5 (I/O overhead)",
               lambda f, kb: _Result(io_overhead(_num(f, "data_wait_s"), _num(f, "step_time_s")))),
    Derivation("compression_ratio", ("active_params", "model_params"), "active_params / model_params",
               "seed Table 5 (compression/sparsity ratio)",
               lambda f, kb: _Result(compression_ratio(_num(f, "active_params"), _num(f, "model_params")))),
    Derivation("mem_bw_util", ("achieved_bandwidth", "peak_bandwidth"), "achieved_bandwidth / peak_bandwidth",
               "DCGM DRAM_ACTIVE definition (achieved / peak DRAM bandwidth)",
               lambda f, kb: _clamp_fraction(_num(f, "achieved_bandwidth") / _num(f, "peak_bandwidth"),
                                             "bandwidth utilization")),
    Derivation("mem_bw_util", ("phase", "tokens_per_s", "batch_size", "model_params", "dtype", "peak_bandwidth"),
               "(tokens_per_s / batch_size) · params · bytes_per_weight / peak_bandwidth",
               "domain.md §B, LLM decode bytes per step and MBU (Databricks)", _decode_bw_util, gated=True),
    Derivation("bandwidth_to_peak", ("achieved_bandwidth", "peak_bandwidth"), "achieved_bandwidth / peak_bandwidth",
               "roofline: no step exceeds the peak memory bandwidth",
               lambda f, kb: _Result(_num(f, "achieved_bandwidth") / _num(f, "peak_bandwidth"))),
    Derivation("bandwidth_to_peak", ("phase", "tokens_per_s", "batch_size", "model_params", "dtype", "peak_bandwidth"),
               "(tokens_per_s / batch_size) · params · bytes_per_weight / peak_bandwidth (unclamped)",
               "domain.md §B, LLM decode bytes per step", _decode_bw_ratio, gated=True),
    Derivation("launch_gap_frac", ("gpu_idle_gap_frac", "io_overhead"), "max(0, gpu_idle_gap_frac − io_overhead)",
               "seed screening signals (timeline gaps not explained by data wait)",
               lambda f, kb: _Result(max(0.0, _num(f, "gpu_idle_gap_frac") - _num(f, "io_overhead")))),
    Derivation("latency_over_target", ("latency_ms", "latency_target_ms"), "latency_ms / latency_target_ms",
               "service-level objective", lambda f, kb: _Result(_num(f, "latency_ms") / _num(f, "latency_target_ms"))),
    Derivation("overlap_headroom", ("data_wait_s", "gpu_util", "step_time_s"),
               "min(data_wait_s, gpu_util · step_time_s) / step_time_s", "seed Table 2 (overlap turns sum into max)",
               lambda f, kb: _Result(min(_num(f, "data_wait_s"), _num(f, "gpu_util") * _num(f, "step_time_s"))
                                     / _num(f, "step_time_s"))),
    # iron-law terms
    Derivation("t_input_s", ("data_wait_s",), "data_wait_s", _SEED_IRON, lambda f, kb: _Result(_num(f, "data_wait_s"))),
    Derivation("t_data_s", ("bytes_moved", "peak_bandwidth"), "bytes_moved / BW", _SEED_IRON,
               lambda f, kb: _Result(_num(f, "bytes_moved") / (_num(f, "peak_bandwidth") * 1e9))),
    Derivation("t_data_s", ("mem_bw_util", "step_time_s"), "mem_bw_util · step_time_s (achieved-bandwidth share)",
               _SEED_IRON, lambda f, kb: _Result(_num(f, "mem_bw_util") * _num(f, "step_time_s"))),
    Derivation("t_compute_s", ("flops", "peak_tflops"), "flops / (R_peak · η), η = 1", _SEED_IRON,
               lambda f, kb: _Result(_num(f, "flops") / (_num(f, "peak_tflops") * 1e12))),
    Derivation("t_compute_s", ("mfu", "step_time_s"), "mfu · step_time_s (useful-compute share)", _SEED_IRON,
               lambda f, kb: _Result(_num(f, "mfu") * _num(f, "step_time_s"))),
    Derivation("t_overhead_s", ("host_wait_frac", "step_time_s"), "host_wait_frac · step_time_s", _SEED_IRON,
               lambda f, kb: _Result(_num(f, "host_wait_frac") * _num(f, "step_time_s"))),
    Derivation("t_overhead_s", ("launch_gap_frac", "step_time_s"), "launch_gap_frac · step_time_s", _SEED_IRON,
               lambda f, kb: _Result(_num(f, "launch_gap_frac") * _num(f, "step_time_s"))),
    Derivation("t_sequential_s", ("t_data_s", "t_compute_s"), "t_input + D/BW + O/(R·η) + L (known terms)", _SEED_IRON,
               lambda f, kb: _Result(iron_law(*_terms(f))[0])),
    Derivation("t_overlapped_s", ("t_data_s", "t_compute_s"), "t_input + max(D/BW, O/(R·η)) + L", _SEED_IRON,
               lambda f, kb: _Result(iron_law(*_terms(f))[1])),
    Derivation("share_input", ("t_input_s", "step_time_s"), "t_input_s / step_time_s", _SEED_IRON,
               _term_share("t_input_s")),
    Derivation("share_data", ("t_data_s", "step_time_s"), "t_data_s / step_time_s", _SEED_IRON,
               _term_share("t_data_s")),
    Derivation("share_compute", ("t_compute_s", "step_time_s"), "t_compute_s / step_time_s", _SEED_IRON,
               _term_share("t_compute_s")),
    Derivation("share_overhead", ("t_overhead_s", "step_time_s"), "t_overhead_s / step_time_s", _SEED_IRON,
               _term_share("t_overhead_s")),
    # cluster scale (seed Table 6, C³): computation, communication, coordination
    Derivation("per_gpu_throughput", ("cluster_throughput", "num_gpus"), "cluster_throughput / num_gpus", _C3_SCALING,
               lambda f, kb: _Result(_num(f, "cluster_throughput") / _num(f, "num_gpus"))),
    Derivation("scaling_efficiency", ("per_gpu_throughput", "single_gpu_throughput"),
               "per_gpu_throughput / single_gpu_throughput", _C3_SCALING,
               lambda f, kb: _scaling(scaling_efficiency(_num(f, "per_gpu_throughput"),
                                                         _num(f, "single_gpu_throughput")))),
    Derivation("scaling_efficiency", ("single_gpu_step_time_s", "step_time_s"),
               "single_gpu_step_time_s / step_time_s (weak scaling: same per-GPU batch)", _C3_SCALING,
               lambda f, kb: _scaling(_num(f, "single_gpu_step_time_s") / _num(f, "step_time_s"))),
    Derivation("effective_gpus", ("num_gpus", "scaling_efficiency"), "num_gpus × scaling_efficiency", _C3_SCALING,
               lambda f, kb: _Result(_num(f, "num_gpus") * _num(f, "scaling_efficiency"))),
    Derivation("exposed_comm_s", ("comm_time_s", "comm_overlap_frac"), "comm_time_s × (1 − comm_overlap_frac)",
               _C3_COMM,
               lambda f, kb: _Result(exposed_comm(_num(f, "comm_time_s"), _num(f, "comm_overlap_frac")))),
    Derivation("comm_frac", ("exposed_comm_s", "step_time_s"), "exposed_comm_s / step_time_s", _C3_COMM,
               lambda f, kb: _clamp_fraction(_num(f, "exposed_comm_s") / _num(f, "step_time_s"),
                                             "exposed communication share")),
    Derivation("interconnect_bandwidth", ("interconnect", "hardware"),
               "the hardware's own link (hardware.yaml, bidirectional total) / 2", "knowledge_base/hardware.yaml",
               _hardware_link, gated=True),
    Derivation("interconnect_bandwidth", ("interconnect",), "catalog default per-direction bandwidth of the link kind",
               "knowledge_base/interconnects.yaml", _catalog_link, gated=True),
    Derivation("allreduce_bytes", ("gradient_bytes", "num_gpus"), "2(N − 1)/N × gradient_bytes (ring all-reduce)",
               _NCCL,
               lambda f, kb: None if _num(f, "num_gpus") < 2
               else _Result(ring_allreduce_bytes(_num(f, "gradient_bytes"), int(_num(f, "num_gpus"))))),
    Derivation("t_comm_s", ("allreduce_bytes", "interconnect_bandwidth"), "allreduce_bytes / interconnect_bandwidth",
               f"{_NCCL}; seed Table 6 (communication wall)",
               lambda f, kb: _Result(comm_term(_num(f, "allreduce_bytes"), _num(f, "interconnect_bandwidth")))),
    Derivation("comm_term_share", ("t_comm_s", "step_time_s"), "t_comm_s / step_time_s", _C3_COMM,
               lambda f, kb: _Result(_num(f, "t_comm_s") / _num(f, "step_time_s"))),
    Derivation("bus_bandwidth", ("allreduce_bytes", "comm_time_s"), "allreduce_bytes / comm_time_s", _NCCL,
               lambda f, kb: None if _num(f, "comm_time_s") <= 0
               else _Result(_num(f, "allreduce_bytes") / _num(f, "comm_time_s") / 1e9)),
    Derivation("bus_bw_util", ("bus_bandwidth", "interconnect_bandwidth"), "bus_bandwidth / interconnect_bandwidth",
               _NCCL,
               lambda f, kb: _clamp_fraction(_num(f, "bus_bandwidth") / _num(f, "interconnect_bandwidth"),
                                             "bus bandwidth utilization")),
    Derivation("sync_wait_frac", ("sync_wait_s", "step_time_s"), "sync_wait_s / step_time_s", _C3_COORD,
               lambda f, kb: _clamp_fraction(_num(f, "sync_wait_s") / _num(f, "step_time_s"), "straggler wait share")),
    Derivation("mtbf_h", ("failures_per_day",), "24 h / failures_per_day", _C3_COORD,
               lambda f, kb: None if _num(f, "failures_per_day") <= 0 else _Result(24.0 / _num(f, "failures_per_day"))),
    Derivation("mtbf_h", ("node_mtbf_h", "num_nodes"), "node_mtbf_h / num_nodes (independent node failures)", _C3_COORD,
               lambda f, kb: _Result(_num(f, "node_mtbf_h") / _num(f, "num_nodes"))),
    Derivation("young_interval_s", ("checkpoint_write_s", "mtbf_h"), "√(2·δ·M), δ = checkpoint_write_s, M = mtbf_h",
               _YOUNG,
               lambda f, kb: _Result(young_interval(_num(f, "checkpoint_write_s"), _mtbf_s(f)))),
    Derivation("daly_interval_s", ("checkpoint_write_s", "mtbf_h"),
               "√(2δM)·[1 + ⅓·√(δ/2M) + (δ/2M)/9] − δ for δ < 2M, else M", _DALY,
               lambda f, kb: _Result(daly_interval(_num(f, "checkpoint_write_s"), _mtbf_s(f)))),
    Derivation("checkpoint_interval_ratio", ("checkpoint_interval_s", "daly_interval_s"),
               "checkpoint_interval_s / daly_interval_s", _DALY,
               lambda f, kb: _Result(_num(f, "checkpoint_interval_s") / _num(f, "daly_interval_s"))),
    Derivation("coordination_overhead", ("checkpoint_write_s", "checkpoint_interval_s", "mtbf_h", "restart_time_s"),
               "x / (1 + x), x = δ/τ + τ/2M + R/M", f"{_YOUNG}; {_DALY}", _coordination("checkpoint_interval_s", True)),
    Derivation("coordination_overhead", ("checkpoint_write_s", "checkpoint_interval_s", "mtbf_h"),
               "x / (1 + x), x = δ/τ + τ/2M (restart time unknown)", f"{_YOUNG}; {_DALY}",
               _coordination("checkpoint_interval_s", False)),
    Derivation("optimal_coordination_overhead", ("checkpoint_write_s", "daly_interval_s", "mtbf_h", "restart_time_s"),
               "x / (1 + x), x = δ/τ* + τ*/2M + R/M at Daly's τ*", f"{_YOUNG}; {_DALY}",
               _coordination("daly_interval_s", True)),
    Derivation("optimal_coordination_overhead", ("checkpoint_write_s", "daly_interval_s", "mtbf_h"),
               "x / (1 + x), x = δ/τ* + τ*/2M at Daly's τ* (restart time unknown)", f"{_YOUNG}; {_DALY}",
               _coordination("daly_interval_s", False)),
    Derivation("excess_coordination_overhead", ("coordination_overhead", "optimal_coordination_overhead"),
               "max(0, coordination_overhead − optimal_coordination_overhead)", _DALY,
               lambda f, kb: _Result(max(0.0, _num(f, "coordination_overhead")
                                         - _num(f, "optimal_coordination_overhead")))),
)

_OPTIONAL_TERMS = ("t_input_s", "t_overhead_s")


def _terms(f: Facts) -> tuple[float | None, float | None, float | None, float | None]:
    def get(name: str) -> float | None:
        return _num(f, name) if name in f else None

    return get("t_input_s"), get("t_data_s"), get("t_compute_s"), get("t_overhead_s")


def _used_inputs(d: Derivation, facts: Facts) -> dict[str, Value]:
    used = {name: facts[name] for name in d.inputs}
    if d.output in ("t_sequential_s", "t_overlapped_s"):
        used.update({name: facts[name] for name in _OPTIONAL_TERMS if name in facts})
    return used


def check_consistency(facts: Facts) -> None:
    """Cross-fact checks the vocabulary's per-fact ranges cannot express."""
    problems: list[Problem] = []
    if "data_wait_s" in facts and "step_time_s" in facts and _num(facts, "data_wait_s") > _num(facts, "step_time_s"):
        problems.append(Problem("data_wait_s", f"{facts['data_wait_s']} s is longer than step_time_s "
                                f"({facts['step_time_s']} s)", "the wait is part of the step, so it cannot exceed it"))
    if "active_params" in facts and "model_params" in facts and (
        _num(facts, "active_params") > _num(facts, "model_params")
    ):
        problems.append(Problem("active_params", "is larger than model_params",
                                "active parameters are a subset of the model"))
    if problems:
        raise ObservationError(problems, title="the observations contradict each other")


def derive(observed: Facts, kb: KnowledgeBase) -> dict[str, DerivedValue]:
    """Apply every derivation whose inputs are known, in order; observed facts are never overwritten."""
    check_consistency(observed)
    facts: dict[str, Value] = dict(observed)
    out: dict[str, DerivedValue] = {}
    for d in DERIVATIONS:
        if d.output in facts or not facts.keys() >= d.needs:
            continue
        result = d.compute(facts, kb)
        if result is None:
            continue
        spec = kb.facts.get(d.output)
        out[d.output] = DerivedValue(
            name=d.output, value=result.value, unit=spec.unit if spec else None, formula=d.formula,
            inputs=_used_inputs(d, facts), constants=result.constants, source=d.source, note=result.note,
        )
        facts[d.output] = result.value
    return out


def askable_inputs(name: str, kb: KnowledgeBase) -> list[str]:
    """The facts a user could supply to settle `name`: itself if askable, else the inputs of its derivations."""
    cache: dict[str, list[str]] = kb.memo.setdefault("askable_inputs", {})
    if name not in cache:
        cache[name] = _askable_inputs(name, kb)
    return cache[name]


def _askable_inputs(name: str, kb: KnowledgeBase) -> list[str]:
    spec = kb.facts.get(name)
    if spec is not None and spec.askable:
        return [name]
    out: list[str] = []
    for d in DERIVATIONS:
        if d.output == name:
            for inp in d.inputs:
                for leaf in askable_inputs(inp, kb):
                    if leaf not in out:
                        out.append(leaf)
    return out


class ReadTracking(Mapping[str, Value]):
    """A read-only view of the facts that records every name looked up (through [], get or in). `overrides` replace
    facts (a None there removes one) without copying the facts."""

    def __init__(self, facts: Mapping[str, Value], overrides: Mapping[str, Value | None] | None = None) -> None:
        self._facts = facts
        self._overrides = overrides or {}
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Value:
        self.read.add(key)
        if key in self._overrides:
            value = self._overrides[key]
            if value is None:
                raise KeyError(key)
            return value
        return self._facts[key]

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        self.read.add(key)
        if key in self._overrides:
            return self._overrides[key] is not None
        return key in self._facts

    def __iter__(self) -> Iterator[str]:
        added = [k for k, v in self._overrides.items() if v is not None and k not in self._facts]
        return iter([*(k for k in self._facts if self._overrides.get(k, 0) is not None), *added])

    def __len__(self) -> int:
        return sum(1 for _ in self)


def could_apply(d: Derivation, facts: Mapping[str, Value], kb: KnowledgeBase,
                can_supply: Callable[[str], bool] | None = None) -> bool:
    """Whether the formula could still produce a value: it does, or it waits for a missing input, or some answer to
    the missing choice facts its gate reads (`phase`, `workload`) would let it through. Every combination of their
    choices (or leaving them out) is tried; a missing number the gate reads counts as able to open it.
    `can_supply(name)`: whether a fact could still be given or change (default: whether it is missing)."""
    keys: list[str] = []
    for _ in range(3):
        options = [[None, *(kb.facts[k].choices or [])] for k in keys]
        found: set[str] = set()
        for combo in itertools.islice(itertools.product(*options), 256):
            view = ReadTracking(facts, dict(zip(keys, combo, strict=True)))
            try:
                if d.compute(view, kb) is not None:
                    return True
            except (KeyError, ArithmeticError, ValueError, TypeError):
                return True  # past the gate, waiting for an input that is still missing
            for name in view.read:
                supplied = can_supply(name) if can_supply is not None else name not in facts
                if name in keys or not supplied:
                    continue
                spec = kb.facts.get(name)
                if spec is None or spec.type != "enum":
                    return True
                found.add(name)
        if not found:
            return False
        keys += sorted(found)
    return True


def askable_inputs_given(name: str, facts: Mapping[str, Value], kb: KnowledgeBase,
                         memo: dict[str, list[str]] | None = None) -> list[str]:
    """`askable_inputs`, leaving out the inputs already known and the ways to `name` that the known facts rule out
    (`could_apply`): no LLM-decode formula for a training job. `memo` caches answers for these same facts."""
    memo = {} if memo is None else memo
    if name in memo:
        return memo[name]
    if not _gated_below(name, kb):  # no formula on the way can decline: the cached inputs, less the known ones
        memo[name] = [leaf for leaf in askable_inputs(name, kb) if leaf not in facts]
        return memo[name]
    memo[name] = []  # guards against cycles
    spec = kb.facts.get(name)
    if spec is not None and spec.askable:
        memo[name] = [name]
        return memo[name]
    out: list[str] = []
    for d in DERIVATIONS:
        if d.output == name and (not d.gated or could_apply(d, facts, kb)):
            for inp in d.inputs:
                for leaf in askable_inputs_given(inp, facts, kb, memo) if inp not in facts else []:
                    if leaf not in out:
                        out.append(leaf)
    memo[name] = out
    return out


def _gated_below(name: str, kb: KnowledgeBase) -> bool:
    """Whether some formula on the way from the askable facts to `name` is `gated` (cached per knowledge base)."""
    cache: dict[str, bool] = kb.memo.setdefault("gated_below", {})
    if name not in cache:
        cache[name] = False  # guards against cycles
        cache[name] = any(d.gated or any(_gated_below(i, kb) for i in d.inputs)
                          for d in DERIVATIONS if d.output == name)
    return cache[name]

