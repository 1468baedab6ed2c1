"""The derivation registry: every way a derived fact is computed, with its inputs and its gate declared as data.

A `Derivation` names its output, the facts it needs (all must be known), the formula in words, its source, and the
function that computes it from the facts (`expert.derive.formulas` holds the arithmetic). When a formula applies only
to some jobs or only where the catalog has a figure, its `gate` says so as a condition on facts in the rule
language's own condition model (`expert.rules.model`): "phase = decode and the workload is inference or not given",
"hardware is one the catalog publishes a dense peak for in this dtype". The walker (`expert.derive.graph`) applies a
formula only where its gate holds, and everyone who asks whether a formula could still apply (the report's missing
evidence, the consultation) reads the gate instead of trying the formula: a formula never declines, so an error in
one is an error, not a missing input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..kb.knowledge import HardwareSpec, KnowledgeBase
from ..rules.model import AllOf, AnyOf, Condition, FactTest
from . import consistency
from .formulas import (
    Facts,
    Value,
    achieved_tflops,
    activation_bytes,
    arithmetic_intensity,
    comm_term,
    compression_ratio,
    coordination_loss,
    daly_interval,
    decode_bandwidth_gbs,
    decode_intensity,
    exposed_comm,
    inference_flops_per_token,
    io_overhead,
    iron_law,
    kv_cache_bytes,
    lost_share,
    mfu,
    model_state_bytes,
    per_gpu_tflops,
    ridge_point,
    ring_allreduce_bytes,
    scaling_efficiency,
    training_flops_per_token,
    young_interval,
)
from .formulas import decode_bytes_per_token as bytes_per_decoded_token

_T = TypeVar("_T")


@dataclass(frozen=True)
class Result:
    """What a formula gives: the value, the catalog figures it used (with their source), a note (a clamp)."""

    value: float
    constants: dict[str, Value] = field(default_factory=dict)
    note: str | None = None


@dataclass(frozen=True)
class Gate:
    """When a derivation applies, as a condition on facts. `condition` is the condition itself or, for a gate on
    catalog data, how to write it for a knowledge base (it lists the catalog entries that have the figure)."""

    description: str
    condition: Condition | Callable[[KnowledgeBase], Condition]

    def on(self, kb: KnowledgeBase) -> Condition:
        """The condition for this knowledge base."""
        return self.condition(kb) if callable(self.condition) else self.condition


@dataclass(frozen=True)
class Derivation:
    """One way to compute `output` from `inputs` (all must be known), where its `gate` (if any) holds."""

    output: str
    inputs: tuple[str, ...]
    formula: str
    source: str
    compute: Callable[[Facts, KnowledgeBase], Result]
    gate: Gate | None = None
    optional: tuple[str, ...] = ()  # also used, and recorded among the inputs, when known (the iron law's other terms)
    substitutes: tuple[tuple[str, str], ...] = ()  # (input, fact used in its place when known)
    needs: frozenset[str] = field(init=False, repr=False, compare=False)  # `inputs` as a set, for the hot loop

    def __post_init__(self) -> None:
        object.__setattr__(self, "needs", frozenset(self.inputs))

    @property
    def gated(self) -> bool:
        """Whether the derivation applies only where its gate holds (LLM decode only, a link the GPU has)."""
        return self.gate is not None

    def recorded_inputs(self, facts: Mapping[str, Value]) -> dict[str, Value]:
        """The inputs a derived value records: every input, and the optional ones that are known."""
        used = {name: facts[name] for name in self.inputs}
        if self.optional:
            used.update({name: facts[name] for name in self.optional if name in facts})
        return used


def _required(value: _T | None, what: str) -> _T:
    """A catalog figure the derivation's gate promised; its absence is a bug in the gate, not a missing input."""
    if value is None:
        raise LookupError(f"the gate let the formula through, but the catalog has no {what}")
    return value


# ---- gates ------------------------------------------------------------------------------------------------------


def _fact(name: str, **test: Any) -> FactTest:
    return FactTest.model_validate({"fact": name, **test})


def _any(branches: list[Condition]) -> Condition:
    return branches[0] if len(branches) == 1 else AnyOf(any=branches)


LLM_DECODE = Gate("LLM decode of an inference service (or of a job whose kind is not given)", AllOf(all=[
    _fact("phase", eq="decode"), AnyOf(any=[_fact("workload", eq="inference"), _fact("workload", known=False)])]))
SEVERAL_GPUS = Gate("more than one GPU (one GPU has no all-reduce)", _fact("num_gpus", ge=2))
SOME_COMM_TIME = Gate("the collectives took some time", _fact("comm_time_s", gt=0))
SOME_FAILURES = Gate("the job fails at all (no failures: no time between them)", _fact("failures_per_day", gt=0))


def _published_peaks(kb: KnowledgeBase) -> Condition:
    """One branch per dtype: dtype = t and hardware is one whose catalog entry publishes a dense t peak."""
    spec = kb.facts.get("dtype")
    dtypes = list(spec.choices or []) if spec is not None else []
    dtypes += sorted({d for hw in kb.hardware.values() for d in hw.peak_tflops if d not in dtypes})
    return _any([AllOf(all=[_fact("dtype", eq=dtype), _fact(
        "hardware", **{"in": [hw.id for hw in kb.hardware.values() if hw.peak(dtype) is not None]})])
        for dtype in dtypes] or [_fact("hardware", **{"in": []})])


def _own_links(kb: KnowledgeBase) -> Condition:
    """interconnect = nvlink (pcie) and hardware is one whose catalog entry gives its own NVLink (PCIe) link."""
    return _any([AllOf(all=[_fact("interconnect", eq=kind), _fact(
        "hardware", **{"in": [hw.id for hw in kb.hardware.values() if _own_link(hw, kind) is not None]})])
        for kind in _HARDWARE_LINKS])


def _default_links(kb: KnowledgeBase) -> Condition:
    """interconnect is a link kind the interconnect catalog has a default entry for."""
    kinds = list(dict.fromkeys(i.kind for i in kb.interconnects.values() if i.default))
    return _fact("interconnect", **{"in": kinds})


def _published_bandwidths(kb: KnowledgeBase) -> Condition:
    """hardware is one whose catalog entry publishes its memory bandwidth (some parts have none published)."""
    return _fact("hardware", **{"in": [hw.id for hw in kb.hardware.values() if hw.memory_bandwidth_gbs is not None]})


PUBLISHED_BANDWIDTH = Gate("the hardware catalog publishes this hardware's memory bandwidth", _published_bandwidths)
PUBLISHED_PEAK = Gate("the hardware catalog publishes a dense peak for this hardware and dtype", _published_peaks)
OWN_LINK = Gate("an NVLink or PCIe link the hardware catalog gives for this hardware", _own_links)
CATALOG_LINK = Gate("a link kind the interconnect catalog has a default for", _default_links)


# ---- from facts to the formulas -----------------------------------------------------------------------------------


def _hw(f: Facts, kb: KnowledgeBase) -> HardwareSpec:
    return kb.hardware[str(f["hardware"])]


def _num(f: Facts, name: str) -> float:
    return float(f[name])


def _clamp_fraction(value: float, what: str) -> Result:
    if value > 1.0:
        return Result(1.0, note=f"{what} came out at {value:.2f} (> 1); clamped to 1 - check the inputs")
    return Result(max(0.0, value))


def _peak(f: Facts, kb: KnowledgeBase) -> Result:
    hw, dtype = _hw(f, kb), str(f["dtype"])
    peak = _required(hw.peak(dtype), f"a {dtype} peak of {hw.id}")
    return Result(peak, {f"{hw.id} dense {dtype} peak (TFLOP/s)": peak, "source": hw.source})


def _bandwidth(f: Facts, kb: KnowledgeBase) -> Result:
    hw = _hw(f, kb)
    bandwidth = _required(hw.memory_bandwidth_gbs, f"the memory bandwidth of {hw.id}")
    figures: dict[str, Value] = {f"{hw.id} memory bandwidth (GB/s)": bandwidth, "source": hw.source}
    return Result(bandwidth, figures)


def _decode_params(f: Facts) -> float:
    return _num(f, "active_params") if "active_params" in f else _num(f, "model_params")


def _decode_bw_util(f: Facts, kb: KnowledgeBase) -> Result:
    b = kb.dtype_bytes(str(f["dtype"]))
    achieved = decode_bandwidth_gbs(_num(f, "tokens_per_s"), int(_num(f, "batch_size")), _decode_params(f), b)
    result = _clamp_fraction(achieved / _num(f, "peak_bandwidth"), "derived bandwidth utilization")
    return Result(result.value, {"bytes per weight": b, "achieved GB/s": round(achieved, 1)}, result.note)


def _decode_bw_ratio(f: Facts, kb: KnowledgeBase) -> Result:
    b = kb.dtype_bytes(str(f["dtype"]))
    achieved = decode_bandwidth_gbs(_num(f, "tokens_per_s"), int(_num(f, "batch_size")), _decode_params(f), b)
    return Result(achieved / _num(f, "peak_bandwidth"), {"bytes per weight": b, "achieved GB/s": round(achieved, 1)})


def _decode_ai(f: Facts, kb: KnowledgeBase) -> Result:
    b = kb.dtype_bytes(str(f["dtype"]))
    return Result(decode_intensity(int(_num(f, "batch_size")), b), {"bytes per weight": b},
                  "short-context approximation: KV-cache reads would lower it further")


def _term_share(name: str) -> Callable[[Facts, KnowledgeBase], Result]:
    def share(f: Facts, kb: KnowledgeBase) -> Result:
        return Result(min(1.0, _num(f, name) / _num(f, "step_time_s")))

    return share


def _scaling(value: float) -> Result:
    if value > 1.0:
        return Result(1.0, note=f"scaling efficiency came out at {value:.2f} (superlinear, e.g. per-GPU data now fits "
                      "in cache or memory); clamped to 1")
    return Result(max(0.0, value))


_HARDWARE_LINKS = {"nvlink": ("scale_up_link", "scale_up_gbs", "nvlink"),
                   "pcie": ("host_link", "host_link_gbs", "pcie")}


def _own_link(hw: HardwareSpec, kind: str) -> tuple[str, float] | None:
    """The hardware's own link of a kind (its name and bidirectional GB/s), if hardware.yaml gives one."""
    name_field, gbs_field, marker = _HARDWARE_LINKS[kind]
    name, total = getattr(hw, name_field), getattr(hw, gbs_field)
    if not name or total is None or marker not in str(name).casefold():
        return None
    return name, total


def _hardware_link(f: Facts, kb: KnowledgeBase) -> Result:
    """The hardware's own NVLink or PCIe figure (hardware.yaml quotes bidirectional totals; halved per direction)."""
    hw = _hw(f, kb)
    name, total = _required(_own_link(hw, str(f["interconnect"])), f"a {f['interconnect']} link of {hw.id}")
    return Result(total / 2.0, {f"{hw.id} {name} (GB/s, bidirectional)": total, "source": hw.source})


def _catalog_link(f: Facts, kb: KnowledgeBase) -> Result:
    link = _required(kb.default_interconnect(str(f["interconnect"])), f"a default {f['interconnect']} link")
    return Result(link.per_direction_gbs, {f"{link.name} (GB/s per direction)": link.per_direction_gbs,
                                           "source": link.source}, link.notes)


def _mtbf_s(f: Facts) -> float:
    return _num(f, "mtbf_h") * 3600.0


def _coordination(interval: str, with_restart: bool) -> Callable[[Facts, KnowledgeBase], Result]:
    def overhead(f: Facts, kb: KnowledgeBase) -> Result:
        restart = _num(f, "restart_time_s") if with_restart else 0.0
        loss = coordination_loss(_num(f, "checkpoint_write_s"), _num(f, interval), _mtbf_s(f), restart)
        return Result(lost_share(loss), {"time lost per unit of useful time (x)": round(loss, 6)})

    return overhead


def _terms(f: Facts) -> tuple[float | None, float | None, float | None, float | None]:
    def get(name: str) -> float | None:
        return _num(f, name) if name in f else None

    return get("t_input_s"), get("t_data_s"), get("t_compute_s"), get("t_overhead_s")


_ACTIVE_PARAMS = (("model_params", "active_params"),)  # decode streams the active parameters when they are known
_OPTIONAL_TERMS = ("t_input_s", "t_overhead_s")

_SEED_IRON = "seed, iron law T = D/BW + O/(R_peak·η) + L_lat"
_C3_SCALING = "seed C³ (C1 computation adds scaling-efficiency loss); scaling efficiency = per-GPU throughput N vs 1"
_C3_COMM = "seed Table 6 and C³ (C2 communication: the communication wall)"
_C3_COORD = "seed Table 6 (reliability wall, cluster MTBF) and C³ (C3 coordination)"
_NCCL = "NCCL ring all-reduce moves 2(N−1)/N × bytes per rank (nccl-tests doc/PERFORMANCE.md, bus bandwidth)"
_YOUNG = "Young 1974, CACM 17(9), https://doi.org/10.1145/361147.361115"
_DALY = "Daly 2006, FGCS 22, https://doi.org/10.1016/j.future.2004.11.016"
_ROOFLINE = "seed, arithmetic-intensity boundary (ridge R_peak/BW); Williams et al. 2009 roofline"

# ---- the compute term's η (issue 12 item 7) ----------------------------------------------------------------------
_ETA = ("seed, iron law compute term O/(R_peak·η); η = achieved FLOP/s over peak while the GPU computes: MFU is "
        "achieved over the whole step, so it is divided by the share of the step the GPU is busy (DCGM SM_ACTIVE, "
        "else nvidia-smi utilization.gpu, else PIPE_TENSOR_ACTIVE)")


def _busy_gate(name: str) -> Gate:
    return Gate(f"mfu and {name} above zero (an idle GPU, or one doing no model FLOPs, has no efficiency to take)",
                AllOf(all=[_fact("mfu", gt=0), _fact(name, gt=0)]))


def _efficiency(busy: str) -> Callable[[Facts, KnowledgeBase], Result]:
    def eta(f: Facts, kb: KnowledgeBase) -> Result:
        value = _num(f, "mfu") / _num(f, busy)
        return _clamp_fraction(value, f"η = mfu / {busy}")

    return eta


_EFFICIENCY = tuple(
    Derivation("compute_efficiency", ("mfu", busy), f"mfu / {busy} (achieved over peak while {what})", _ETA,
               _efficiency(busy), gate=_busy_gate(busy))
    for busy, what in (("sm_active", "the SMs are active"), ("gpu_util", "a kernel runs"),
                       ("tensor_active", "the tensor pipe is active")))


def _fp8_known(hw: HardwareSpec) -> bool:
    """The catalog says whether the part computes in fp8: a published peak, or fp8 left out (no such format); a
    null figure (unpublished) says neither."""
    return "fp8" not in hw.peak_tflops or hw.peak("fp8") is not None


def _fp8_peaks(kb: KnowledgeBase) -> Condition:
    """hardware is one whose catalog entry publishes a dense fp8 peak or leaves fp8 out (the part has none)."""
    return _fact("hardware", **{"in": [hw.id for hw in kb.hardware.values() if _fp8_known(hw)]})


FP8_PEAK = Gate("the hardware catalog publishes this hardware's fp8 peak, or leaves fp8 out (no fp8 format)",
                _fp8_peaks)


def _fp8_peak(f: Facts, kb: KnowledgeBase) -> Result:
    hw = _hw(f, kb)
    peak = hw.peak("fp8") or 0.0
    note = None if peak else f"{hw.id} has no fp8 format (knowledge_base/hardware.yaml leaves fp8 out)"
    return Result(peak, {f"{hw.id} dense fp8 peak (TFLOP/s)": peak, "source": hw.source}, note)


# ---- LLM training and serving, host side, memory capacity (issue 13) -------------------------------------------------

TRAINING = Gate("a training job", _fact("workload", eq="training"))
PREFILL_OR_FORWARD = Gate("inference outside token decode (prompt prefill, or the phase not given)", AllOf(all=[
    _fact("workload", eq="inference"), AnyOf(any=[_fact("phase", eq="prefill"), _fact("phase", known=False)])]))
SERVING = Gate("an inference service (or a job whose kind is not given): only serving holds a KV cache",
               AnyOf(any=[_fact("workload", eq="inference"), _fact("workload", known=False)]))
OPTIMIZER_ON_GPU = Gate("a training job whose optimizer states stay on the GPU (not offloaded, or not said)",
                        AllOf(all=[_fact("workload", eq="training"), AnyOf(any=[
                            _fact("optimizer_offload", eq="no"), _fact("optimizer_offload", known=False)])]))
OPTIMIZER_OFFLOADED = Gate("a training job whose optimizer states and step are offloaded to the host", AllOf(all=[
    _fact("workload", eq="training"), _fact("optimizer_offload", eq="yes")]))


def _published_memory(kb: KnowledgeBase) -> Condition:
    """hardware is one whose catalog entry gives its device-memory capacity."""
    return _fact("hardware", **{"in": [hw.id for hw in kb.hardware.values() if hw.memory_gb is not None]})


PUBLISHED_MEMORY = Gate("the hardware catalog gives this hardware's memory capacity", _published_memory)

_KAPLAN = "Kaplan et al. 2020, arXiv:2001.08361 (C ≈ 6·N FLOPs per trained token, 2·N per forward token)"
_PALM = "Chowdhery et al. 2022 (PaLM), arXiv:2204.02311, appendix B (MFU with the attention term 12·L·H·Q·T)"
_KV = ("KV cache = 2 · layers · KV heads · head dim · context · bytes per element (Pope et al. 2022, "
       "arXiv:2211.05102, §2; vLLM docs); decode reads the weights and the KV cache every step")
_ZERO = "Rajbhandari et al. 2020 (ZeRO), arXiv:1910.02054, §3.1: mixed-precision Adam holds 16 bytes per parameter"
_ACTIVATIONS = "Korthikanti et al. 2022, arXiv:2205.05198, eq. 1: 34·s·b·h bytes per layer with fused attention"
_SLO = "serving SLOs on time to first token and time per output token (vLLM / SGLang serving metrics)"


def _hbm_bytes(f: Facts, kb: KnowledgeBase) -> tuple[float, dict[str, Value]]:
    hw = _hw(f, kb)
    gb = _required(hw.memory_gb, f"the memory capacity of {hw.id}")
    return gb * 1e9, {f"{hw.id} memory (GB)": gb, "source": hw.source}


def _train_tflops(with_attention: bool) -> Callable[[Facts, KnowledgeBase], Result]:
    def rate(f: Facts, kb: KnowledgeBase) -> Result:
        params = _decode_params(f)
        shape = (int(_num(f, "num_layers")), int(_num(f, "hidden_size")), int(_num(f, "seq_len"))) \
            if with_attention else (None, None, None)
        per_token = training_flops_per_token(params, *shape)
        return Result(per_gpu_tflops(per_token, _num(f, "tokens_per_s"), int(_num(f, "num_gpus"))),
                      {"FLOPs per token": per_token, "params used": params})

    return rate


def _forward_tflops(f: Facts, kb: KnowledgeBase) -> Result:
    params = _decode_params(f)
    per_token = inference_flops_per_token(params)
    return Result(per_gpu_tflops(per_token, _num(f, "tokens_per_s"), int(_num(f, "num_gpus"))),
                  {"FLOPs per token": per_token, "params used": params})


def _kv_cache(f: Facts, kb: KnowledgeBase) -> Result:
    b = kb.dtype_bytes(str(f["dtype"]))
    value = kv_cache_bytes(int(_num(f, "num_layers")), int(_num(f, "num_kv_heads")), int(_num(f, "head_dim")),
                           int(_num(f, "context_len")), b, int(_num(f, "batch_size")))
    return Result(value, {"bytes per KV element": b},
                  "KV cache stored in the model's dtype; an fp8 KV cache would halve it")


def _decode_bytes(f: Facts, kb: KnowledgeBase) -> Result:
    b = kb.dtype_bytes(str(f["dtype"]))
    params = _decode_params(f)
    value = bytes_per_decoded_token(params, b, _num(f, "kv_cache_bytes"), int(_num(f, "batch_size")))
    return Result(value, {"bytes per weight": b, "weight bytes per step": params * b})


def _decode_kv_bandwidth(clamp: bool) -> Callable[[Facts, KnowledgeBase], Result]:
    def util(f: Facts, kb: KnowledgeBase) -> Result:
        achieved = _num(f, "tokens_per_s") * _num(f, "decode_bytes_per_token") / 1e9
        ratio = achieved / _num(f, "peak_bandwidth")
        figures: dict[str, Value] = {"achieved GB/s (weights + KV cache)": round(achieved, 1)}
        if not clamp:
            return Result(ratio, figures)
        result = _clamp_fraction(ratio, "derived bandwidth utilization")
        return Result(result.value, figures, result.note)

    return util


def _serving_memory(f: Facts, kb: KnowledgeBase) -> Result:
    hbm, figures = _hbm_bytes(f, kb)
    gpus = int(_num(f, "num_gpus"))
    weights = _num(f, "model_params") * kb.dtype_bytes(str(f["dtype"]))
    free = gpus * hbm - weights
    figures.update({"weight bytes": weights, "HBM left for the KV cache (GB)": round(free / 1e9, 2)})
    return Result((weights + _num(f, "kv_cache_bytes")) / (gpus * hbm), figures)


def _model_states(bytes_per_param: float) -> Callable[[Facts, KnowledgeBase], Result]:
    def states(f: Facts, kb: KnowledgeBase) -> Result:
        value = model_state_bytes(_num(f, "model_params"), int(_num(f, "sharding_degree")), bytes_per_param)
        return Result(value, {"bytes per parameter": bytes_per_param})

    return states


def _to_hbm(*names: str) -> Callable[[Facts, KnowledgeBase], Result]:
    def ratio(f: Facts, kb: KnowledgeBase) -> Result:
        hbm, figures = _hbm_bytes(f, kb)
        return Result(sum(_num(f, n) for n in names) / hbm, figures)

    return ratio


# Spliced into DERIVATIONS where the walker needs them (it applies derivations in one pass, in order): the tokens/s
# and FLOP-rate ways to achieved_tflops before mfu reads it, and the KV-cache bandwidth before the weights-only one.
_LLM_RATES: tuple[Derivation, ...] = (
    Derivation("tokens_per_s", ("tokens_per_step", "step_time_s"), "tokens_per_step / step_time_s",
               "definition (tokens per optimizer step over the step's wall time)",
               lambda f, kb: Result(_num(f, "tokens_per_step") / _num(f, "step_time_s"))),
    Derivation("achieved_tflops", ("workload", "model_params", "tokens_per_s", "num_gpus", "num_layers",
                                   "hidden_size", "seq_len"),
               "(6·N + 12·L·H·Q·T) · tokens_per_s / num_gpus / 1e12 (N: active parameters when given)",
               f"{_KAPLAN}; {_PALM}", _train_tflops(True), gate=TRAINING, substitutes=_ACTIVE_PARAMS),
    Derivation("achieved_tflops", ("workload", "model_params", "tokens_per_s", "num_gpus"),
               "6·N · tokens_per_s / num_gpus / 1e12 (N: active parameters when given; attention term left out)",
               _KAPLAN, _train_tflops(False), gate=TRAINING, substitutes=_ACTIVE_PARAMS),
    Derivation("achieved_tflops", ("workload", "model_params", "tokens_per_s", "num_gpus"),
               "2·N · tokens_per_s / num_gpus / 1e12 (forward only; N: active parameters when given)",
               _KAPLAN, _forward_tflops, gate=PREFILL_OR_FORWARD, substitutes=_ACTIVE_PARAMS),
    Derivation("kv_cache_bytes", ("num_layers", "num_kv_heads", "head_dim", "context_len", "dtype", "batch_size"),
               "2 · num_layers · num_kv_heads · head_dim · context_len · bytes per element · batch_size", _KV,
               _kv_cache, gate=SERVING),
    Derivation("decode_bytes_per_token", ("phase", "model_params", "dtype", "kv_cache_bytes", "batch_size"),
               "(params · bytes per weight + kv_cache_bytes) / batch_size", _KV, _decode_bytes, gate=LLM_DECODE,
               substitutes=_ACTIVE_PARAMS),
    Derivation("serving_memory_to_hbm", ("kv_cache_bytes", "model_params", "dtype", "hardware", "num_gpus"),
               "(model_params · bytes per weight + kv_cache_bytes) / (num_gpus · HBM per GPU)", _KV, _serving_memory,
               gate=PUBLISHED_MEMORY),
)
_LLM_DECODE_UTIL = (
    Derivation("mem_bw_util", ("phase", "tokens_per_s", "decode_bytes_per_token", "peak_bandwidth"),
               "tokens_per_s · decode_bytes_per_token / peak_bandwidth (weights + KV cache)",
               f"{_KV}; domain.md §B (MBU)", _decode_kv_bandwidth(True), gate=LLM_DECODE),
)
_LLM_DECODE_RATIO = (
    Derivation("bandwidth_to_peak", ("phase", "tokens_per_s", "decode_bytes_per_token", "peak_bandwidth"),
               "tokens_per_s · decode_bytes_per_token / peak_bandwidth (weights + KV cache, unclamped)",
               _KV, _decode_kv_bandwidth(False), gate=LLM_DECODE),
)
_LLM_TAIL: tuple[Derivation, ...] = (
    Derivation("ttft_over_target", ("ttft_ms", "ttft_target_ms"), "ttft_ms / ttft_target_ms", _SLO,
               lambda f, kb: Result(_num(f, "ttft_ms") / _num(f, "ttft_target_ms"))),
    Derivation("tpot_over_target", ("tpot_ms", "tpot_target_ms"), "tpot_ms / tpot_target_ms", _SLO,
               lambda f, kb: Result(_num(f, "tpot_ms") / _num(f, "tpot_target_ms"))),
    Derivation("optimizer_step_frac", ("optimizer_step_s", "fwd_bwd_s"),
               "optimizer_step_s / (optimizer_step_s + fwd_bwd_s)",
               "ZeRO-Offload, Ren et al. 2021, arXiv:2101.06840 (the CPU optimizer step must not dominate the step)",
               lambda f, kb: Result(_num(f, "optimizer_step_s")
                                    / (_num(f, "optimizer_step_s") + _num(f, "fwd_bwd_s")))),
    Derivation("host_sync_wait_frac", ("host_sync_wait_s", "step_time_s"), "host_sync_wait_s / step_time_s",
               "PyTorch performance tuning guide (avoid unnecessary CPU-GPU synchronization)",
               lambda f, kb: _clamp_fraction(_num(f, "host_sync_wait_s") / _num(f, "step_time_s"),
                                             "host synchronization share")),
    Derivation("storage_read_util", ("storage_read_mb_s", "storage_bandwidth_mb_s"),
               "storage_read_mb_s / storage_bandwidth_mb_s", "seed Table 1 (data axis: I/O bandwidth, disk/PCIe) and "
               "Table 4 (data row: iostat)",
               lambda f, kb: Result(_num(f, "storage_read_mb_s") / _num(f, "storage_bandwidth_mb_s"))),
    Derivation("model_state_bytes", ("workload", "model_params", "sharding_degree"),
               "16 bytes · model_params / sharding_degree", _ZERO, _model_states(16.0), gate=OPTIMIZER_ON_GPU),
    Derivation("model_state_bytes", ("workload", "model_params", "sharding_degree", "optimizer_offload"),
               "4 bytes (16-bit weights and gradients) · model_params / sharding_degree; optimizer states on the host",
               f"{_ZERO}; Ren et al. 2021 (ZeRO-Offload), arXiv:2101.06840", _model_states(4.0),
               gate=OPTIMIZER_OFFLOADED),
    Derivation("activation_bytes", ("workload", "seq_len", "batch_size", "hidden_size", "num_layers"),
               "34 · seq_len · batch_size · hidden_size · num_layers", _ACTIVATIONS,
               lambda f, kb: Result(activation_bytes(int(_num(f, "seq_len")), int(_num(f, "batch_size")),
                                                     int(_num(f, "hidden_size")), int(_num(f, "num_layers"))),
                                    note="no recomputation, no tensor or sequence parallelism, 16-bit activations"),
               gate=TRAINING),
    Derivation("model_state_to_hbm", ("model_state_bytes", "hardware"), "model_state_bytes / HBM per GPU", _ZERO,
               _to_hbm("model_state_bytes"), gate=PUBLISHED_MEMORY),
    Derivation("training_memory_to_hbm", ("model_state_bytes", "activation_bytes", "hardware"),
               "(model_state_bytes + activation_bytes) / HBM per GPU", f"{_ZERO}; {_ACTIVATIONS}",
               _to_hbm("model_state_bytes", "activation_bytes"), gate=PUBLISHED_MEMORY),
)
# consistency margins (expert/derive/consistency.py)
SOME_ACHIEVED = Gate("some achieved FLOP/s to compare the MFU with", _fact("flops_to_peak", gt=0))
_CONFLICT_MFU = ("seed Table 5 (MFU = achieved FLOP/s over the dense peak); "
                 "PaLM, Chowdhery et al. 2022, App. B (MFU vs HFU)")
_CONFLICT_BW = "DCGM DRAM_ACTIVE definition (achieved / peak DRAM bandwidth); Nsight Compute dram__bytes per step"
_CONFLICT_IDLE = ("NVML utilization.gpu (a kernel was running) and the trace's idle share (nothing running) "
                  "exclude each other")
_CONFLICT_PIPES = ("DCGM profiling metrics: PIPE_TENSOR_ACTIVE counts cycles of resident warps, "
                   "so it cannot exceed SM_ACTIVE")
_CONFLICT_WAIT = "seed Table 5 (I/O overhead) and screening signal 1: an exposed data wait leaves the GPU idle"
_CONFLICT_NODES = "every node of a GPU job holds at least one GPU"

DERIVATIONS: tuple[Derivation, ...] = (
    Derivation("peak_tflops", ("hardware", "dtype"), "catalog dense peak for (hardware, dtype)",
               "knowledge_base/hardware.yaml", _peak, gate=PUBLISHED_PEAK),
    Derivation("fp8_peak_tflops", ("hardware",), "catalog dense fp8 peak of the hardware (0: no fp8 format)",
               "knowledge_base/hardware.yaml", _fp8_peak, gate=FP8_PEAK),
    Derivation("peak_bandwidth", ("hardware",), "catalog peak memory bandwidth",
               "knowledge_base/hardware.yaml", _bandwidth, gate=PUBLISHED_BANDWIDTH),
    Derivation("ridge_point", ("peak_tflops", "peak_bandwidth"), "R_peak / BW", _ROOFLINE,
               lambda f, kb: Result(ridge_point(_num(f, "peak_tflops"), _num(f, "peak_bandwidth")))),
    Derivation("arithmetic_intensity", ("flops", "bytes_moved"), "flops / bytes_moved", _ROOFLINE,
               lambda f, kb: Result(arithmetic_intensity(_num(f, "flops"), _num(f, "bytes_moved")))),
    Derivation("arithmetic_intensity", ("phase", "batch_size", "dtype"),
               "2 · batch_size / bytes_per_weight (LLM decode)",
               "domain.md §B, LLM decode: I ≈ 2B/b_w at short context", _decode_ai, gate=LLM_DECODE),
    Derivation("intensity_to_ridge", ("arithmetic_intensity", "ridge_point"), "arithmetic_intensity / ridge_point",
               _ROOFLINE, lambda f, kb: Result(_num(f, "arithmetic_intensity") / _num(f, "ridge_point"))),
    Derivation("achieved_tflops", ("flops", "step_time_s"), "flops / step_time_s / 1e12", "seed Table 5 (MFU)",
               lambda f, kb: Result(achieved_tflops(_num(f, "flops"), _num(f, "step_time_s")))),
    *_LLM_RATES,
    Derivation("flops_to_peak", ("achieved_tflops", "peak_tflops"), "achieved_tflops / peak_tflops (unclamped)",
               "roofline: no kernel exceeds the dense peak",
               lambda f, kb: Result(_num(f, "achieved_tflops") / _num(f, "peak_tflops"))),
    Derivation("mfu", ("achieved_tflops", "peak_tflops"), "achieved_tflops / peak_tflops (dense)", "seed Table 5 (MFU)",
               lambda f, kb: _clamp_fraction(mfu(_num(f, "achieved_tflops"), _num(f, "peak_tflops")), "MFU")),
    Derivation("io_overhead", ("data_wait_s", "step_time_s"), "data_wait_s / step_time_s",
               "seed Table 5 (I/O overhead)",
               lambda f, kb: Result(io_overhead(_num(f, "data_wait_s"), _num(f, "step_time_s")))),
    Derivation("compression_ratio", ("active_params", "model_params"), "active_params / model_params",
               "seed Table 5 (compression/sparsity ratio)",
               lambda f, kb: Result(compression_ratio(_num(f, "active_params"), _num(f, "model_params")))),
    Derivation("mem_bw_util", ("achieved_bandwidth", "peak_bandwidth"), "achieved_bandwidth / peak_bandwidth",
               "DCGM DRAM_ACTIVE definition (achieved / peak DRAM bandwidth)",
               lambda f, kb: _clamp_fraction(_num(f, "achieved_bandwidth") / _num(f, "peak_bandwidth"),
                                             "bandwidth utilization")),
    *_LLM_DECODE_UTIL,
    Derivation("mem_bw_util", ("phase", "tokens_per_s", "batch_size", "model_params", "dtype", "peak_bandwidth"),
               "(tokens_per_s / batch_size) · params · bytes_per_weight / peak_bandwidth",
               "domain.md §B, LLM decode bytes per step and MBU (Databricks)", _decode_bw_util, gate=LLM_DECODE,
               substitutes=_ACTIVE_PARAMS),
    Derivation("bandwidth_to_peak", ("achieved_bandwidth", "peak_bandwidth"), "achieved_bandwidth / peak_bandwidth",
               "roofline: no step exceeds the peak memory bandwidth",
               lambda f, kb: Result(_num(f, "achieved_bandwidth") / _num(f, "peak_bandwidth"))),
    *_LLM_DECODE_RATIO,
    Derivation("bandwidth_to_peak", ("phase", "tokens_per_s", "batch_size", "model_params", "dtype", "peak_bandwidth"),
               "(tokens_per_s / batch_size) · params · bytes_per_weight / peak_bandwidth (unclamped)",
               "domain.md §B, LLM decode bytes per step", _decode_bw_ratio, gate=LLM_DECODE,
               substitutes=_ACTIVE_PARAMS),
    Derivation("launch_gap_frac", ("gpu_idle_gap_frac", "io_overhead"), "max(0, gpu_idle_gap_frac − io_overhead)",
               "seed screening signals (timeline gaps not explained by data wait)",
               lambda f, kb: Result(max(0.0, _num(f, "gpu_idle_gap_frac") - _num(f, "io_overhead")))),
    Derivation("latency_over_target", ("latency_ms", "latency_target_ms"), "latency_ms / latency_target_ms",
               "service-level objective", lambda f, kb: Result(_num(f, "latency_ms") / _num(f, "latency_target_ms"))),
    Derivation("overlap_headroom", ("data_wait_s", "gpu_util", "step_time_s"),
               "min(data_wait_s, gpu_util · step_time_s) / step_time_s", "seed Table 2 (overlap turns sum into max)",
               lambda f, kb: Result(min(_num(f, "data_wait_s"), _num(f, "gpu_util") * _num(f, "step_time_s"))
                                    / _num(f, "step_time_s"))),
    # iron-law terms
    Derivation("t_input_s", ("data_wait_s",), "data_wait_s", _SEED_IRON, lambda f, kb: Result(_num(f, "data_wait_s"))),
    Derivation("t_data_s", ("bytes_moved", "peak_bandwidth"), "bytes_moved / BW", _SEED_IRON,
               lambda f, kb: Result(_num(f, "bytes_moved") / (_num(f, "peak_bandwidth") * 1e9))),
    Derivation("t_data_s", ("mem_bw_util", "step_time_s"), "mem_bw_util · step_time_s (achieved-bandwidth share)",
               _SEED_IRON, lambda f, kb: Result(_num(f, "mem_bw_util") * _num(f, "step_time_s"))),
    # the compute term's η (issue 12 item 7): the first derivation whose inputs are known wins
    *_EFFICIENCY,
    Derivation("t_compute_s", ("flops", "peak_tflops", "compute_efficiency"),
               "flops / (R_peak · η), η = compute_efficiency", _SEED_IRON,
               lambda f, kb: Result(_num(f, "flops")
                                    / (_num(f, "peak_tflops") * 1e12 * _num(f, "compute_efficiency")))),
    Derivation("t_compute_s", ("mfu", "step_time_s", "compute_efficiency"),
               "mfu · step_time_s / η (useful-compute share at η = compute_efficiency)", _SEED_IRON,
               lambda f, kb: Result(_num(f, "mfu") * _num(f, "step_time_s") / _num(f, "compute_efficiency"))),
    Derivation("t_compute_s", ("flops", "peak_tflops"), "flops / (R_peak · η), η = 1 (no activity measured: a lower "
               "bound)", _SEED_IRON,
               lambda f, kb: Result(_num(f, "flops") / (_num(f, "peak_tflops") * 1e12))),
    Derivation("t_compute_s", ("mfu", "step_time_s"), "mfu · step_time_s (useful-compute share, η = 1: a lower bound)",
               _SEED_IRON, lambda f, kb: Result(_num(f, "mfu") * _num(f, "step_time_s"))),
    Derivation("t_overhead_s", ("host_wait_frac", "step_time_s"), "host_wait_frac · step_time_s", _SEED_IRON,
               lambda f, kb: Result(_num(f, "host_wait_frac") * _num(f, "step_time_s"))),
    Derivation("t_overhead_s", ("launch_gap_frac", "step_time_s"), "launch_gap_frac · step_time_s", _SEED_IRON,
               lambda f, kb: Result(_num(f, "launch_gap_frac") * _num(f, "step_time_s"))),
    Derivation("t_sequential_s", ("t_data_s", "t_compute_s"), "t_input + D/BW + O/(R·η) + L (known terms)", _SEED_IRON,
               lambda f, kb: Result(iron_law(*_terms(f))[0]), optional=_OPTIONAL_TERMS),
    Derivation("t_overlapped_s", ("t_data_s", "t_compute_s"), "t_input + max(D/BW, O/(R·η)) + L", _SEED_IRON,
               lambda f, kb: Result(iron_law(*_terms(f))[1]), optional=_OPTIONAL_TERMS),
    Derivation("share_input", ("t_input_s", "step_time_s"), "t_input_s / step_time_s", _SEED_IRON,
               _term_share("t_input_s")),
    Derivation("share_data", ("t_data_s", "step_time_s"), "t_data_s / step_time_s", _SEED_IRON,
               _term_share("t_data_s")),
    Derivation("share_compute", ("t_compute_s", "step_time_s"), "t_compute_s / step_time_s", _SEED_IRON,
               _term_share("t_compute_s")),
    Derivation("share_overhead", ("t_overhead_s", "step_time_s"), "t_overhead_s / step_time_s", _SEED_IRON,
               _term_share("t_overhead_s")),
    Derivation("share_compute_at_peak", ("share_compute", "compute_efficiency"), "share_compute · η (the compute "
               "term at η = 1, a share of today's step)", _ETA,
               lambda f, kb: Result(_num(f, "share_compute") * _num(f, "compute_efficiency"))),
    # cluster scale (seed Table 6, C³): computation, communication, coordination
    Derivation("per_gpu_throughput", ("cluster_throughput", "num_gpus"), "cluster_throughput / num_gpus", _C3_SCALING,
               lambda f, kb: Result(_num(f, "cluster_throughput") / _num(f, "num_gpus"))),
    Derivation("scaling_efficiency", ("per_gpu_throughput", "single_gpu_throughput"),
               "per_gpu_throughput / single_gpu_throughput", _C3_SCALING,
               lambda f, kb: _scaling(scaling_efficiency(_num(f, "per_gpu_throughput"),
                                                         _num(f, "single_gpu_throughput")))),
    Derivation("scaling_efficiency", ("single_gpu_step_time_s", "step_time_s"),
               "single_gpu_step_time_s / step_time_s (weak scaling: same per-GPU batch)", _C3_SCALING,
               lambda f, kb: _scaling(_num(f, "single_gpu_step_time_s") / _num(f, "step_time_s"))),
    Derivation("effective_gpus", ("num_gpus", "scaling_efficiency"), "num_gpus × scaling_efficiency", _C3_SCALING,
               lambda f, kb: Result(_num(f, "num_gpus") * _num(f, "scaling_efficiency"))),
    Derivation("exposed_comm_s", ("comm_time_s", "comm_overlap_frac"), "comm_time_s × (1 − comm_overlap_frac)",
               _C3_COMM,
               lambda f, kb: Result(exposed_comm(_num(f, "comm_time_s"), _num(f, "comm_overlap_frac")))),
    Derivation("comm_frac", ("exposed_comm_s", "step_time_s"), "exposed_comm_s / step_time_s", _C3_COMM,
               lambda f, kb: _clamp_fraction(_num(f, "exposed_comm_s") / _num(f, "step_time_s"),
                                             "exposed communication share")),
    Derivation("interconnect_bandwidth", ("interconnect", "hardware"),
               "the hardware's own link (hardware.yaml, bidirectional total) / 2", "knowledge_base/hardware.yaml",
               _hardware_link, gate=OWN_LINK),
    Derivation("interconnect_bandwidth", ("interconnect",), "catalog default per-direction bandwidth of the link kind",
               "knowledge_base/interconnects.yaml", _catalog_link, gate=CATALOG_LINK),
    Derivation("allreduce_bytes", ("gradient_bytes", "num_gpus"), "2(N − 1)/N × gradient_bytes (ring all-reduce)",
               _NCCL,
               lambda f, kb: Result(ring_allreduce_bytes(_num(f, "gradient_bytes"), int(_num(f, "num_gpus")))),
               gate=SEVERAL_GPUS),
    Derivation("t_comm_s", ("allreduce_bytes", "interconnect_bandwidth"), "allreduce_bytes / interconnect_bandwidth",
               f"{_NCCL}; seed Table 6 (communication wall)",
               lambda f, kb: Result(comm_term(_num(f, "allreduce_bytes"), _num(f, "interconnect_bandwidth")))),
    Derivation("comm_term_share", ("t_comm_s", "step_time_s"), "t_comm_s / step_time_s", _C3_COMM,
               lambda f, kb: Result(_num(f, "t_comm_s") / _num(f, "step_time_s"))),
    Derivation("bus_bandwidth", ("allreduce_bytes", "comm_time_s"), "allreduce_bytes / comm_time_s", _NCCL,
               lambda f, kb: Result(_num(f, "allreduce_bytes") / _num(f, "comm_time_s") / 1e9), gate=SOME_COMM_TIME),
    Derivation("bus_bw_util", ("bus_bandwidth", "interconnect_bandwidth"), "bus_bandwidth / interconnect_bandwidth",
               _NCCL,
               lambda f, kb: _clamp_fraction(_num(f, "bus_bandwidth") / _num(f, "interconnect_bandwidth"),
                                             "bus bandwidth utilization")),
    Derivation("nccl_bw_util", ("nccl_bus_bandwidth", "interconnect_bandwidth"),
               "nccl_bus_bandwidth / interconnect_bandwidth", _NCCL,
               lambda f, kb: Result(_num(f, "nccl_bus_bandwidth") / _num(f, "interconnect_bandwidth"))),
    Derivation("sync_wait_frac", ("sync_wait_s", "step_time_s"), "sync_wait_s / step_time_s", _C3_COORD,
               lambda f, kb: _clamp_fraction(_num(f, "sync_wait_s") / _num(f, "step_time_s"), "straggler wait share")),
    Derivation("mtbf_h", ("failures_per_day",), "24 h / failures_per_day", _C3_COORD,
               lambda f, kb: Result(24.0 / _num(f, "failures_per_day")), gate=SOME_FAILURES),
    Derivation("mtbf_h", ("node_mtbf_h", "num_nodes"), "node_mtbf_h / num_nodes (independent node failures)", _C3_COORD,
               lambda f, kb: Result(_num(f, "node_mtbf_h") / _num(f, "num_nodes"))),
    Derivation("young_interval_s", ("checkpoint_write_s", "mtbf_h"), "√(2·δ·M), δ = checkpoint_write_s, M = mtbf_h",
               _YOUNG,
               lambda f, kb: Result(young_interval(_num(f, "checkpoint_write_s"), _mtbf_s(f)))),
    Derivation("daly_interval_s", ("checkpoint_write_s", "mtbf_h"),
               "√(2δM)·[1 + ⅓·√(δ/2M) + (δ/2M)/9] − δ for δ < 2M, else M", _DALY,
               lambda f, kb: Result(daly_interval(_num(f, "checkpoint_write_s"), _mtbf_s(f)))),
    Derivation("checkpoint_interval_ratio", ("checkpoint_interval_s", "daly_interval_s"),
               "checkpoint_interval_s / daly_interval_s", _DALY,
               lambda f, kb: Result(_num(f, "checkpoint_interval_s") / _num(f, "daly_interval_s"))),
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
    Derivation("coordination_frac", ("coordination_overhead", "sync_wait_frac"),
               "coordination_overhead + sync_wait_frac (checkpoints and rework, plus straggler waits)", _C3_COORD,
               lambda f, kb: _clamp_fraction(_num(f, "coordination_overhead") + _num(f, "sync_wait_frac"),
                                             "coordination share")),
    Derivation("coordination_frac", ("coordination_overhead",), "coordination_overhead (no straggler measured)",
               _C3_COORD, lambda f, kb: Result(_num(f, "coordination_overhead"))),
    Derivation("coordination_frac", ("sync_wait_frac",), "sync_wait_frac (no checkpoint figures)", _C3_COORD,
               lambda f, kb: Result(_num(f, "sync_wait_frac"))),
    Derivation("excess_coordination_overhead", ("coordination_overhead", "optimal_coordination_overhead"),
               "max(0, coordination_overhead − optimal_coordination_overhead)", _DALY,
               lambda f, kb: Result(max(0.0, _num(f, "coordination_overhead")
                                        - _num(f, "optimal_coordination_overhead")))),
    *_LLM_TAIL,
    # ---- consistency margins: pairs of facts that physically must agree (rules/conflicts.yaml judges them) ----------
    *(
        Derivation("mfu_to_achieved", ("mfu", "flops_to_peak"), "mfu / (achieved_tflops / peak_tflops)",
                   _CONFLICT_MFU, lambda f, kb: Result(consistency.ratio_of_readings(
                       _num(f, "mfu"), _num(f, "flops_to_peak"))), gate=SOME_ACHIEVED),
        Derivation("bytes_bw_util", ("bytes_moved", "step_time_s", "peak_bandwidth"),
                   "bytes_moved / step_time_s / peak_bandwidth (unclamped)", _CONFLICT_BW,
                   lambda f, kb: Result(consistency.bytes_bandwidth_util(
                       _num(f, "bytes_moved"), _num(f, "step_time_s"), _num(f, "peak_bandwidth")))),
        Derivation("bandwidth_to_peak", ("bytes_bw_util",), "bytes_moved / step_time_s / peak_bandwidth (unclamped)",
                   "roofline: no step exceeds the peak memory bandwidth",
                   lambda f, kb: Result(_num(f, "bytes_bw_util"))),
        Derivation("mem_bw_to_bytes", ("mem_bw_util", "bytes_bw_util"), "mem_bw_util / bytes_bw_util",
                   _CONFLICT_BW, lambda f, kb: Result(consistency.ratio_of_readings(
                       _num(f, "mem_bw_util"), _num(f, "bytes_bw_util")))),
        Derivation("busy_idle_excess", ("gpu_util", "gpu_idle_gap_frac"), "gpu_util + gpu_idle_gap_frac − 1",
                   _CONFLICT_IDLE, lambda f, kb: Result(consistency.busy_idle_excess(
                       _num(f, "gpu_util"), _num(f, "gpu_idle_gap_frac")))),
        Derivation("tensor_over_sm", ("tensor_active", "sm_active"), "tensor_active − sm_active", _CONFLICT_PIPES,
                   lambda f, kb: Result(consistency.excess(_num(f, "tensor_active"), _num(f, "sm_active")))),
        Derivation("wait_over_idle", ("io_overhead", "gpu_idle_gap_frac"), "io_overhead − gpu_idle_gap_frac",
                   _CONFLICT_WAIT, lambda f, kb: Result(consistency.excess(
                       _num(f, "io_overhead"), _num(f, "gpu_idle_gap_frac")))),
        Derivation("gpus_per_node", ("num_gpus", "num_nodes"), "num_gpus / num_nodes", _CONFLICT_NODES,
                   lambda f, kb: Result(consistency.per_node(_num(f, "num_gpus"), _num(f, "num_nodes")))),
    ),
)
