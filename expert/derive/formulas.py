"""Derived quantities, the pure part: the formulas (seed iron law, roofline, Table 5, C³), the record of one
derived value, and the cross-fact consistency check.

Every function here is a plain function of numbers (or of a fact mapping, for `check_consistency`), unit-testable
on its own. Which formula applies when, and on which facts, is declared in `expert.derive.registry`; the one walker
that applies them is `expert.derive.graph`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import ObservationError, Problem

Value = int | float | str
Facts = Mapping[str, Value]

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


def prefill_intensity(tokens: int, bytes_per_weight: float, active_share: float = 1.0) -> float:
    """LLM prefill: each weight (b bytes) is read once per forward and used for 2 FLOPs per token of every prompt in
    it: 2T/b; for a mixture of experts, times the active share of the parameters (every expert read, as a prompt of
    a few hundred tokens routes to them all). Weights only: the activations and KV cache it writes add bytes."""
    return 2.0 * tokens * active_share / bytes_per_weight


def io_overhead(data_wait_s: float, step_time_s: float) -> float:
    """Seed Table 5: data wait time / total step time."""
    return data_wait_s / step_time_s


def share_of_idle(io_overhead: float, idle: float) -> float:
    """The data wait over the GPU's idle share of the step (a wait of 5 % with the GPU idle 70 %: 0.07); an idle share
    under 1 % counts as 1 % (a wait with no idle time at all overlapped GPU work: rules/conflicts.yaml)."""
    return io_overhead / max(idle, 0.01)


def dispatch_share(host_dispatch_frac: float, host_compute_frac: float) -> float:
    """The part of the host-compute idle time spent inside the model's own GPU operators (0 with no host time)."""
    return min(1.0, host_dispatch_frac / host_compute_frac) if host_compute_frac > 0 else 0.0


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


# ---- LLM training and serving, memory capacity (issue 13) ---------------------------------------------------------


def training_flops_per_token(params: float, num_layers: int | None = None, hidden_size: int | None = None,
                             seq_len: int | None = None, trainable: float | None = None) -> float:
    """Model FLOPs per trained token: 6·N (forward 2·N, backward 4·N; Kaplan et al. 2020), plus the attention term
    12·L·H·Q·T = 12·L·hidden_size·seq_len when the shape is given (PaLM, Chowdhery et al. 2022, appendix B).
    With `trainable` parameters given (LoRA and other adapters), frozen weights get no weight gradient: the backward
    is 2·N for the gradients of the activations plus 2·trainable for those of the weights (Narayanan et al. 2021: the
    backward doubles the forward because it computes both), 4·N + 2·trainable in all (7B with 40M adapters: 4.01·N)."""
    attention = 0.0
    if num_layers is not None and hidden_size is not None and seq_len is not None:
        attention = 12.0 * num_layers * hidden_size * seq_len
    weight_grads = params if trainable is None else min(trainable, params)
    return 4.0 * params + 2.0 * weight_grads + attention


def inference_flops_per_token(params: float) -> float:
    """Model FLOPs per token of a forward pass (prefill or decode): 2·N, one multiply-add per parameter."""
    return 2.0 * params


def per_gpu_tflops(flops_per_token: float, tokens_per_s: float, num_gpus: int) -> float:
    """Achieved model TFLOP/s per GPU: FLOPs per token x the job's tokens/s, spread over its GPUs."""
    return flops_per_token * tokens_per_s / num_gpus / 1e12


def kv_cache_bytes(num_layers: int, num_kv_heads: int, head_dim: int, context_len: int, bytes_per_element: float,
                   sequences: int = 1) -> float:
    """KV cache of `sequences` sequences: 2 (K and V) · layers · KV heads · head dim · context tokens · bytes."""
    return 2.0 * num_layers * num_kv_heads * head_dim * context_len * bytes_per_element * sequences


def decode_bytes_per_token(params: float, bytes_per_weight: float, kv_bytes: float, batch_size: int) -> float:
    """Device-memory bytes per decoded token: one step reads every weight once and the whole batch's KV cache, and
    yields one token per sequence."""
    return (params * bytes_per_weight + kv_bytes) / batch_size


def model_state_bytes(params: float, sharding_degree: int, bytes_per_param: float) -> float:
    """Model states per GPU: bytes per parameter (knowledge_base/memory.yaml: 16 under mixed-precision Adam, ZeRO
    §3.1; 4 with the optimizer offloaded) x parameters, over the GPUs the states are sharded across (ZeRO-3 / FSDP
    full sharding divides all of them)."""
    return params * bytes_per_param / sharding_degree


def pipeline_bubble(stages: int, micro_batches: float) -> float:
    """Share of a step a pipeline stage idles while the pipeline fills and drains: (p − 1) / (m + p − 1)."""
    return (stages - 1) / (micro_batches + stages - 1)


def activation_bytes(seq_len: int, batch_size: int, hidden_size: int, num_layers: int, coefficient: float) -> float:
    """Activation memory kept for backward without recomputation: coefficient·s·b·h bytes per layer
    (knowledge_base/memory.yaml: 34, Korthikanti et al. 2022 eq. 1 with fused attention), b the micro-batch."""
    return coefficient * seq_len * batch_size * hidden_size * num_layers


def gradient_accumulation_steps(global_batch: int, micro_batch: int, data_parallel: int) -> float:
    """Micro-batches each data-parallel rank accumulates per optimizer step: global / (micro x data-parallel ranks)."""
    return global_batch / (micro_batch * data_parallel)


def tokens_per_step(global_batch: int, seq_len: int) -> float:
    """Tokens per optimizer step over the whole job: global batch (sequences) x tokens per sequence."""
    return float(global_batch) * seq_len


# ---- the record of a derived value ------------------------------------------------------------------------------


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


def _num(f: Facts, name: str) -> float:
    return float(f[name])


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
    problems.extend(_layout_problems(facts))
    if problems:
        raise ObservationError(problems, title="the observations contradict each other")


def _layout_problems(facts: Facts) -> list[Problem]:
    """The parallel degrees given multiply to more GPUs than the job has (n = p·t·d, Megatron-LM)."""
    if "num_gpus" not in facts:
        return []
    given = [name for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
             if name in facts]
    width = 1.0
    for name in given:
        width *= _num(facts, name)
    if width <= _num(facts, "num_gpus"):
        return []
    product = " x ".join(f"{name} {facts[name]}" for name in given) + (f" = {width:g} GPUs" if len(given) > 1 else "")
    return [Problem(given[0], f"{product} is more than num_gpus ({facts['num_gpus']})",
                    "tensor x pipeline x data-parallel ranks cannot exceed the job's GPUs; give num_gpus as the job's "
                    "total over all nodes, or correct the parallel sizes")]



__all__ = ["DerivedValue", "Facts", "Value", "achieved_tflops", "amdahl_max_speedup",
           "arithmetic_intensity", "check_consistency", "comm_term",
           "compression_ratio", "coordination_loss", "daly_interval", "decode_bandwidth_gbs", "decode_intensity",
           "exposed_comm", "gradient_accumulation_steps", "io_overhead", "iron_law", "lost_share", "mfu",
           "prefill_intensity", "ridge_point",
           "ring_allreduce_bytes", "scaling_efficiency", "share_of_idle", "tokens_per_step", "young_interval"]
