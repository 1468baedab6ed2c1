"""Derivations on one accelerator: catalog peaks, the roofline, the seed's Table 5 scorecard (MFU, I/O overhead,
compression), bandwidth use, the iron-law terms and their shares, and the compute term's η."""

from __future__ import annotations

from collections.abc import Callable

from ..kb.knowledge import HardwareSpec, KnowledgeBase
from ..rules.model import Condition
from .derivation import (
    ACTIVE_PARAMS,
    DECODE_GPU_FACTS,
    LLM_DECODE,
    LLM_DECODE_PER_GPU,
    LLM_PREFILL,
    MBU_SOURCE,
    PIPELINED_DECODE,
    Derivation,
    Gate,
    Result,
    all_of,
    any_of,
    clamp_fraction,
    decode_bytes_left_out,
    decode_gpus,
    either,
    fact_test,
    hardware_of,
    num,
    num_or,
    params_streamed,
    required,
)
from .formulas import (
    Facts,
    Value,
    achieved_tflops,
    arithmetic_intensity,
    compression_ratio,
    decode_bandwidth_gbs,
    decode_intensity,
    dispatch_share,
    io_overhead,
    iron_law,
    kv_cache_bytes,
    mfu,
    prefill_intensity,
    ridge_point,
    share_of_idle,
)


def _published_peaks(kb: KnowledgeBase) -> Condition:
    """One branch per dtype: dtype = t and hardware is one whose catalog entry publishes a dense t peak."""
    spec = kb.facts.get("dtype")
    dtypes = list(spec.choices or []) if spec is not None else []
    dtypes += sorted({d for hw in kb.hardware.values() for d in hw.peak_tflops if d not in dtypes})
    return any_of([all_of([fact_test("dtype", eq=dtype), fact_test(
        "hardware", **{"in": [hw.id for hw in kb.hardware.values() if hw.peak(dtype) is not None]})])
        for dtype in dtypes] or [fact_test("hardware", **{"in": []})])


def _published_bandwidths(kb: KnowledgeBase) -> Condition:
    """hardware is one whose catalog entry publishes its memory bandwidth (some parts have none published)."""
    return fact_test("hardware",
                     **{"in": [hw.id for hw in kb.hardware.values() if hw.memory_bandwidth_gbs is not None]})


PUBLISHED_BANDWIDTH = Gate("the hardware catalog publishes this hardware's memory bandwidth", _published_bandwidths)
PUBLISHED_PEAK = Gate("the hardware catalog publishes a dense peak for this hardware and dtype", _published_peaks)

def _peak(f: Facts, kb: KnowledgeBase) -> Result:
    hw, dtype = hardware_of(f, kb), str(f["dtype"])
    peak = required(hw.peak(dtype), f"a {dtype} peak of {hw.id}")
    return Result(peak, {f"{hw.id} dense {dtype} peak (TFLOP/s)": peak, "source": hw.source})


def _bandwidth(f: Facts, kb: KnowledgeBase) -> Result:
    hw = hardware_of(f, kb)
    bandwidth = required(hw.memory_bandwidth_gbs, f"the memory bandwidth of {hw.id}")
    figures: dict[str, Value] = {f"{hw.id} memory bandwidth (GB/s)": bandwidth, "source": hw.source}
    return Result(bandwidth, figures)


def _dtype_bytes(f: Facts, kb: KnowledgeBase) -> Result:
    return Result(kb.dtype_bytes(str(f["dtype"])))


def _decode_bw_per_gpu(f: Facts, kb: KnowledgeBase) -> tuple[float, dict[str, Value]]:
    """Achieved weight-streaming GB/s per GPU: tokens_per_s is the job's, and over num_gpus GPUs each reads its
    share (tensor parallelism splits the weights; replicas split the tokens)."""
    b = num(f, "bytes_per_weight")
    gpus = decode_gpus(f)
    achieved = decode_bandwidth_gbs(num(f, "tokens_per_s"), int(num(f, "batch_size")), params_streamed(f), b) / gpus
    figures: dict[str, Value] = {"bytes per weight": b, "achieved GB/s": round(achieved, 1)}
    if gpus != 1:
        figures["GPUs sharing the tokens"] = gpus
    return achieved, figures


def _decode_bw_util(f: Facts, kb: KnowledgeBase) -> Result:
    achieved, figures = _decode_bw_per_gpu(f, kb)
    result = clamp_fraction(achieved / num(f, "peak_bandwidth"), "derived bandwidth utilization")
    notes = (result.note, *decode_bytes_left_out(f, kv_counted=False))
    return Result(result.value, figures, "; ".join(n for n in notes if n) or None)


def _decode_bw_ratio(f: Facts, kb: KnowledgeBase) -> Result:
    achieved, figures = _decode_bw_per_gpu(f, kb)
    return Result(achieved / num(f, "peak_bandwidth"), figures)


def _decode_ai(f: Facts, kb: KnowledgeBase) -> Result:
    b = num(f, "bytes_per_weight")
    return Result(decode_intensity(int(num(f, "batch_size")), b), {"bytes per weight": b},
                  "short-context approximation: KV-cache reads would lower it further")


def _decode_ai_with_kv(f: Facts, kb: KnowledgeBase) -> Result:
    b = num(f, "bytes_per_weight")
    params = params_streamed(f)
    batch = int(num(f, "batch_size"))
    element = kb.dtype_bytes(str(f["dtype"]))
    kv = kv_cache_bytes(int(num(f, "num_layers")), int(num(f, "num_kv_heads")), int(num(f, "head_dim")),
                        int(num(f, "context_len")), element, batch)
    notes = ["KV cache stored in the model's dtype", *decode_bytes_left_out(f, kv_counted=True)]
    return Result(2.0 * params * batch / (params * b + kv), {"bytes per weight": b, "KV cache bytes per step": kv,
                                                            "params used": params}, "; ".join(notes))


def _active_share(f: Facts) -> tuple[float, dict[str, Value]]:
    """A mixture of experts' active parameters over all of them (1 for a dense model), with the figure recorded."""
    if "active_params" not in f or "model_params" not in f:
        return 1.0, {}
    share = min(1.0, num(f, "active_params") / num(f, "model_params"))
    return share, {"active share of the parameters (every expert read)": round(share, 4)}


_PREFILL_NOTE = ("weights only: the activations and the KV cache a prefill writes add bytes, a few percent at the "
                 "ridge point and more on long prompts, which stay above it")


def _prefill_ai(batch_known: bool) -> Callable[[Facts, KnowledgeBase], Result]:
    def intensity(f: Facts, kb: KnowledgeBase) -> Result:
        b = num(f, "bytes_per_weight")
        prompts = int(num(f, "batch_size")) if batch_known else 1
        share, figures = _active_share(f)
        tokens = int(num(f, "prompt_tokens")) * prompts
        note = _PREFILL_NOTE if batch_known else (
            f"one prompt's prefill (batch_size not given): prompts prefilled together only raise it; {_PREFILL_NOTE}")
        return Result(prefill_intensity(tokens, b, share), {"bytes per weight": b, "tokens per prefill": tokens,
                                                            **figures}, note)

    return intensity


def _prompt_to_ridge(f: Facts, kb: KnowledgeBase) -> Result:
    share, figures = _active_share(f)
    value = prefill_intensity(int(num(f, "prompt_tokens")), num(f, "bytes_per_weight"), share)
    return Result(value / num(f, "ridge_point"), figures)


def _batch_to_ridge(f: Facts, kb: KnowledgeBase) -> Result:
    return Result(decode_intensity(int(num(f, "batch_size")), num(f, "bytes_per_weight")) / num(f, "ridge_point"))


def _term_share(name: str) -> Callable[[Facts, KnowledgeBase], Result]:
    def share(f: Facts, kb: KnowledgeBase) -> Result:
        return Result(min(1.0, num(f, name) / num(f, "step_time_s")))

    return share


def _terms(f: Facts) -> tuple[float | None, float | None, float | None, float | None]:
    def get(name: str) -> float | None:
        return num(f, name) if name in f else None

    return get("t_input_s"), get("t_data_s"), get("t_compute_s"), get("t_overhead_s")


_OPTIONAL_TERMS = ("t_input_s", "t_overhead_s")

_SEED_IRON = "seed, iron law T = D/BW + O/(R_peak·η) + L_lat"
_REACH = ("seed Table 3 (memory-bound row: fusion and quantization cut the bytes moved); Amdahl's law: an "
          "optimization saves at most the time of the kernels whose bytes it cuts")
_BATCH = ("seed Table 3 (memory-bound and latency-bound rows: a larger batch amortises weight reads and launches); "
          "Amdahl's law, per unit of work")
# a training step's D/BW is mostly activations, which a larger micro-batch does not amortise; a decode step's is the
# weights (and the KV cache)
_NOT_TRAINING = Gate("an inference service, or a job whose kind is not given (a training step's bytes are mostly "
                     "activations, which a larger batch does not amortise)",
                     either([fact_test("workload", eq="inference"), fact_test("workload", known=False)]))
_PRUNE = ("seed Table 1 (algorithm axis: model compression cuts both the bytes and the FLOPs) and Table 3 "
          "(memory-bound row); Amdahl's law: it saves at most the time of the kernels it shrinks")
_ONE_SEQUENCE_DECODE = Gate("LLM decode of one sequence (batch size 1)",
                            all_of([LLM_DECODE.on_static(), fact_test("batch_size", eq=1)]))
_MEASURED_BYTES_DECODE = Gate("LLM decode whose bytes were measured (DRAM activity or bytes moved, which count the KV "
                              "cache too), not estimated from tokens/s and the weights",
                              all_of([LLM_DECODE.on_static(), fact_test("tokens_per_s", known=False)]))
_KIPPLY = "kipply, Transformer inference arithmetic (https://kipp.ly/transformer-inference-arithmetic/)"
_ROOFLINE = "seed, arithmetic-intensity boundary (ridge R_peak/BW); Williams et al. 2009 roofline"
_WEIGHT_BITS = ("weight-only quantization stores weights in fewer bits than the math runs in: Lin et al. 2024, AWQ, "
                "arXiv:2306.00978; Frantar et al. 2023, GPTQ, arXiv:2210.17323; Dettmers et al. 2023, QLoRA (nf4), "
                "arXiv:2305.14314")
# a matmul of M rows (samples, tokens, or a convolution's pixels: each sample gives at least one) against N·K weights
# does 2·M·N·K FLOPs over at least N·K weight values read: at least 2·M / bytes-per-value FLOP per byte
_BATCH_INTENSITY = (_ROOFLINE + "; Pope et al. 2022, arXiv:2211.05102 (a weight-streaming matmul's intensity grows "
                    "with the rows that share each weight read)")
_WAIT_SHARE = ("seed screening signal 1 (GPU utilization < 80 %: confirm data starvation with the data-loader wait) "
               "and the iron law's overlap form: a wait shorter than the idle time leaves the rest of it unexplained")
_DISPATCH = ("Horace He, Making Deep Learning Go Brrrr (overhead-bound: the GPU waits while Python and the framework "
             "dispatch each operator); the host-compute idle time a profiler trace credits to GPU operators")

# ---- the compute term's η (issue 12 item 7) ----------------------------------------------------------------------
_ETA = ("seed, iron law compute term O/(R_peak·η); η = achieved FLOP/s over peak while the GPU computes: MFU is "
        "achieved over the whole step, so it is divided by the share of the step the GPU is busy (DCGM SM_ACTIVE, "
        "else nvidia-smi utilization.gpu, else PIPE_TENSOR_ACTIVE)")


def _busy_gate(name: str) -> Gate:
    return Gate(f"mfu and {name} above zero (an idle GPU, or one doing no model FLOPs, has no efficiency to take)",
                all_of([fact_test("mfu", gt=0), fact_test(name, gt=0)]))


def _efficiency(busy: str) -> Callable[[Facts, KnowledgeBase], Result]:
    def eta(f: Facts, kb: KnowledgeBase) -> Result:
        value = num(f, "mfu") / num(f, busy)
        return clamp_fraction(value, f"η = mfu / {busy}")

    return eta


_EFFICIENCY = tuple(
    Derivation("compute_efficiency", ("mfu", busy), f"mfu / {busy} (achieved over peak while {what})", _ETA,
               _efficiency(busy), gate=_busy_gate(busy))
    for busy, what in (("sm_active", "the SMs are active"), ("gpu_util", "a kernel runs"),
                       ("tensor_active", "the tensor pipe is active")))


def _format_known(fmt: str) -> Callable[[HardwareSpec], bool]:
    def known(hw: HardwareSpec) -> bool:
        """The catalog says whether the part computes in `fmt`: a published peak, or the format left out (no such
        format); a null figure (unpublished) says neither."""
        return fmt not in hw.peak_tflops or hw.peak(fmt) is not None

    return known


def _format_peaks(fmt: str) -> Callable[[KnowledgeBase], Condition]:
    def condition(kb: KnowledgeBase) -> Condition:
        """hardware is one whose catalog entry publishes a dense `fmt` peak or leaves `fmt` out (the part has none)."""
        known = _format_known(fmt)
        return fact_test("hardware", **{"in": [hw.id for hw in kb.hardware.values() if known(hw)]})

    return condition


FP8_PEAK = Gate("the hardware catalog publishes this hardware's fp8 peak, or leaves fp8 out (no fp8 format)",
                _format_peaks("fp8"))
BF16_PEAK = Gate("the hardware catalog publishes this hardware's bf16 peak, or leaves bf16 out (no bf16 format)",
                 _format_peaks("bf16"))


def _format_peak(fmt: str) -> Callable[[Facts, KnowledgeBase], Result]:
    def peak_of(f: Facts, kb: KnowledgeBase) -> Result:
        hw = hardware_of(f, kb)
        peak = hw.peak(fmt) or 0.0
        note = None if peak else f"{hw.id} has no {fmt} format (knowledge_base/hardware.yaml leaves {fmt} out)"
        return Result(peak, {f"{hw.id} dense {fmt} peak (TFLOP/s)": peak, "source": hw.source}, note)

    return peak_of


# ---- the derivations, in the chunks the registry interleaves with the LLM ones ------------------------------------

PEAKS_AND_ROOFLINE: tuple[Derivation, ...] = (
    # the bytes a weight takes: weight-only quantization (AWQ, GPTQ, nf4, int8/fp8 weights) stores fewer bits than
    # the dtype the math runs in; the first way whose input is known wins
    Derivation("bytes_per_weight", ("weight_bits",), "weight_bits / 8", _WEIGHT_BITS,
               lambda f, kb: Result(num(f, "weight_bits") / 8)),
    Derivation("bytes_per_weight", ("dtype",), "bytes of a dtype value (weights stored in the dtype)",
               "knowledge_base/units.yaml dtypes `bytes`", _dtype_bytes),
    Derivation("weight_bits_to_dtype", ("weight_bits", "dtype"), "weight_bits / (8 · bytes of a dtype value) (below 1: "
               "the kernels unpack narrower weights into the dtype's math)", _WEIGHT_BITS,
               lambda f, kb: Result(num(f, "weight_bits") / (8 * kb.dtype_bytes(str(f["dtype"]))))),
    Derivation("peak_tflops", ("hardware", "dtype"), "catalog dense peak for (hardware, dtype)",
               "knowledge_base/hardware.yaml", _peak, gate=PUBLISHED_PEAK),
    Derivation("fp8_peak_tflops", ("hardware",), "catalog dense fp8 peak of the hardware (0: no fp8 format)",
               "knowledge_base/hardware.yaml", _format_peak("fp8"), gate=FP8_PEAK),
    Derivation("bf16_peak_tflops", ("hardware",), "catalog dense bf16 peak of the hardware (0: no bf16 format)",
               "knowledge_base/hardware.yaml", _format_peak("bf16"), gate=BF16_PEAK),
    Derivation("peak_bandwidth", ("hardware",), "catalog peak memory bandwidth",
               "knowledge_base/hardware.yaml", _bandwidth, gate=PUBLISHED_BANDWIDTH),
    Derivation("ridge_point", ("peak_tflops", "peak_bandwidth"), "R_peak / BW", _ROOFLINE,
               lambda f, kb: Result(ridge_point(num(f, "peak_tflops"), num(f, "peak_bandwidth")))),
    Derivation("arithmetic_intensity", ("flops", "bytes_moved"), "flops / bytes_moved", _ROOFLINE,
               lambda f, kb: Result(arithmetic_intensity(num(f, "flops"), num(f, "bytes_moved")))),
    Derivation("arithmetic_intensity", ("phase", "batch_size", "bytes_per_weight", "model_params", "num_layers",
                                        "num_kv_heads", "head_dim", "context_len", "dtype"),
               "2 · N · batch_size / (N · bytes_per_weight + KV cache bytes of the batch) (LLM decode, each step "
               "reading every weight once and every sequence's KV cache; N: active parameters when given)",
               "LLM decode: I = FLOPs over bytes a step; " + _KIPPLY, _decode_ai_with_kv, gate=LLM_DECODE,
               substitutes=ACTIVE_PARAMS),
    Derivation("arithmetic_intensity", ("phase", "batch_size", "bytes_per_weight"),
               "2 · batch_size / bytes_per_weight (LLM decode)",
               "LLM decode: I ≈ 2B/b_w at short context; " + _KIPPLY, _decode_ai, gate=LLM_DECODE),
    Derivation("prompt_to_ridge", ("phase", "prompt_tokens", "bytes_per_weight", "ridge_point"),
               "2 · prompt_tokens / bytes_per_weight (× active_params / model_params) / ridge_point (one prompt's "
               "prefill)", "LLM prefill: I ≈ 2T/b_w, T the tokens of the prefill; " + _KIPPLY, _prompt_to_ridge,
               gate=LLM_PREFILL, optional=("model_params", "active_params")),
    Derivation("arithmetic_intensity", ("phase", "prompt_tokens", "batch_size", "bytes_per_weight"),
               "2 · prompt_tokens · batch_size / bytes_per_weight (× active_params / model_params) (LLM prefill)",
               "LLM prefill: I ≈ 2T/b_w, T the tokens of the prefill; " + _KIPPLY, _prefill_ai(True),
               gate=LLM_PREFILL, optional=("model_params", "active_params")),
    Derivation("arithmetic_intensity", ("phase", "prompt_tokens", "bytes_per_weight"),
               "2 · prompt_tokens / bytes_per_weight (× active_params / model_params) (LLM prefill of one prompt, "
               "where that alone is past the ridge point: more prompts at once only raise it)",
               "LLM prefill: I ≈ 2T/b_w, T the tokens of the prefill; " + _KIPPLY, _prefill_ai(False),
               gate=Gate("LLM prompt prefill where one prompt alone is past the ridge point (prompt_to_ridge ≥ 1)",
                         all_of([LLM_PREFILL.on_static(), fact_test("prompt_to_ridge", ge=1.0)])),
               optional=("model_params", "active_params")),
    Derivation("intensity_to_ridge", ("arithmetic_intensity", "ridge_point"), "arithmetic_intensity / ridge_point",
               _ROOFLINE, lambda f, kb: Result(num(f, "arithmetic_intensity") / num(f, "ridge_point"))),
    Derivation("batch_to_ridge", ("batch_size", "bytes_per_weight", "ridge_point"),
               "2 · batch_size / bytes_per_weight / ridge_point (the least intensity of a matmul reading weights)",
               _BATCH_INTENSITY, _batch_to_ridge),
    Derivation("achieved_tflops", ("flops", "step_time_s"), "flops / step_time_s / 1e12", "seed Table 5 (MFU)",
               lambda f, kb: Result(achieved_tflops(num(f, "flops"), num(f, "step_time_s")))),
)
# achieved FLOP/s against the peak, the scorecard, and measured bandwidth use (after the tokens/s FLOP rates)
SCORECARD: tuple[Derivation, ...] = (
    Derivation("flops_to_peak", ("achieved_tflops", "peak_tflops"), "achieved_tflops / peak_tflops (unclamped)",
               "roofline: no kernel exceeds the dense peak",
               lambda f, kb: Result(num(f, "achieved_tflops") / num(f, "peak_tflops"))),
    Derivation("mfu", ("achieved_tflops", "peak_tflops"), "achieved_tflops / peak_tflops (dense)", "seed Table 5 (MFU)",
               lambda f, kb: clamp_fraction(mfu(num(f, "achieved_tflops"), num(f, "peak_tflops")), "MFU")),
    Derivation("io_overhead", ("data_wait_s", "step_time_s"), "data_wait_s / step_time_s",
               "seed Table 5 (I/O overhead)",
               lambda f, kb: Result(io_overhead(num(f, "data_wait_s"), num(f, "step_time_s")))),
    # how much of the GPU's idle time the data wait can account for: the idle share a trace measures, else the
    # complement of the utilization (the same window read from the other side)
    Derivation("wait_share_of_idle", ("io_overhead", "gpu_idle_gap_frac"), "io_overhead / gpu_idle_gap_frac",
               _WAIT_SHARE, lambda f, kb: Result(share_of_idle(num(f, "io_overhead"),
                                                               num(f, "gpu_idle_gap_frac")))),
    Derivation("wait_share_of_idle", ("io_overhead", "gpu_util"), "io_overhead / (1 − gpu_util)", _WAIT_SHARE,
               lambda f, kb: Result(share_of_idle(num(f, "io_overhead"), 1.0 - num(f, "gpu_util")))),
    Derivation("dispatch_share_of_host", ("host_dispatch_frac", "host_compute_frac"),
               "host_dispatch_frac / host_compute_frac", _DISPATCH,
               lambda f, kb: Result(dispatch_share(num(f, "host_dispatch_frac"), num(f, "host_compute_frac")))),
    Derivation("compression_ratio", ("active_params", "model_params"), "active_params / model_params",
               "seed Table 5 (compression/sparsity ratio)",
               lambda f, kb: Result(compression_ratio(num(f, "active_params"), num(f, "model_params")))),
    Derivation("mem_bw_util", ("achieved_bandwidth", "peak_bandwidth"), "achieved_bandwidth / peak_bandwidth",
               "DCGM DRAM_ACTIVE definition (achieved / peak DRAM bandwidth)",
               lambda f, kb: clamp_fraction(num(f, "achieved_bandwidth") / num(f, "peak_bandwidth"),
                                             "bandwidth utilization")),
)


def _weights_only_decode(name: str, note: str, source: str, fn: Callable[[Facts, KnowledgeBase], Result]) -> Derivation:
    """A decode derivation from the weights streamed per token alone (the bytes of the KV cache not counted)."""
    return Derivation(name, ("phase", "tokens_per_s", "batch_size", "model_params", "bytes_per_weight",
                             "peak_bandwidth"),
                      "(tokens_per_s / batch_size) · params · bytes_per_weight / num_gpus / peak_bandwidth "
                      f"(num_gpus, else tensor × pipeline parallel size, else 1{note})", source, fn,
                      gate=LLM_DECODE_PER_GPU, substitutes=ACTIVE_PARAMS,
                      optional=DECODE_GPU_FACTS)


# weight-streaming decode bandwidth (after the KV-cache-aware one, which wins when its inputs are known)
DECODE_WEIGHT_STREAMING: tuple[Derivation, ...] = (
    _weights_only_decode("mem_bw_util", "", "LLM decode bytes per step; " + MBU_SOURCE,
                         _decode_bw_util),
    Derivation("bandwidth_to_peak", ("achieved_bandwidth", "peak_bandwidth"), "achieved_bandwidth / peak_bandwidth",
               "roofline: no step exceeds the peak memory bandwidth",
               lambda f, kb: Result(num(f, "achieved_bandwidth") / num(f, "peak_bandwidth"))),
)


def _rest_of_data(f: Facts, kb: KnowledgeBase) -> Result:
    """1 − share_data: the part of the step not moving device memory."""
    return Result(max(0.0, 1.0 - num(f, "share_data")))


def _reach(name: str, kernel_share: str, measured: str, unmeasured: str,
           decode: tuple[Derivation, ...] = ()) -> tuple[Derivation, ...]:
    """What an optimization can act on: a share of GPU time in some kernels (a trace fact) times gpu_util, the share
    of the window; else what `decode` gives for an LLM decode; else the D/BW term's share."""
    return (Derivation(name, (kernel_share, "gpu_util"), f"{kernel_share} × gpu_util ({measured})", _REACH,
                       lambda f, kb: clamp_fraction(num(f, kernel_share) * num(f, "gpu_util"), name)),
            *decode,
            Derivation(name, ("share_data",), f"share_data (the kernel mix not measured: {unmeasured})", _REACH,
                       lambda f, kb: Result(num(f, "share_data"))))


# An LLM decode step streams the weights and the KV cache; fusion shrinks neither (a token's activations are a few
# KiB against GiB of weights), only the launches: without a kernel mix its reach is the launch term's.
_DECODE_STREAMS = ("Pope et al. 2022, arXiv:2211.05102 (a decode step reads every weight and the KV cache once); "
                   "seed Table 3 (fusion in the memory-bound and latency-bound rows: fewer DRAM round trips and "
                   "launches)")
_PREFILL_STREAMS = ("kipply, Transformer inference arithmetic (https://kipp.ly/transformer-inference-arithmetic/) (a "
                    "prefill reads every weight once for all its tokens); seed, the iron law T = D/BW + O/(R·η) + L "
                    "(the L term is at most what the D/BW term leaves of the step)")
_DECODE_FUSIBLE: tuple[Derivation, ...] = (
    Derivation("fusible_frac", ("overhead_reach_frac",), "overhead_reach_frac (LLM decode: the launches fusion saves; "
               "the weights and the KV cache it streams are not fusible)", _DECODE_STREAMS,
               lambda f, kb: Result(num(f, "overhead_reach_frac")), gate=LLM_DECODE),
)


_KERNEL_TIME = ("Holistic Trace Analysis docs, temporal breakdown (idle time: the part of the step no kernel runs); "
                "seed screening signal 1 (confirm launch starvation through timeline gaps)")
# Kernels that add up to more than the step overlap on several streams: their sum then says nothing about the gaps.
_KERNELS_FIT = Gate("the kernels add up to no more than the step (they do not overlap on several streams)",
                    fact_test("kernel_time_frac", le=1.0))


def _idle_from_kernels(f: Facts, kb: KnowledgeBase) -> Result:
    """The share of the step with neither a kernel nor a host-to-device copy running, both run one at a time."""
    return Result(max(0.0, 1.0 - num(f, "kernel_time_frac") - num_or(f, "h2d_copy_frac", 0.0)))


# the GPU's idle share from the kernels of a step where no trace measures it: first in the walk, since what reads the
# idle share (the scorecard's wait_share_of_idle, the launch gaps) comes after it, and it reads observed facts only
KERNEL_TIMELINE: tuple[Derivation, ...] = (
    Derivation("kernel_time_frac", ("kernels_per_step", "mean_kernel_us", "step_time_s"),
               "kernels_per_step · mean_kernel_us / step_time_s", _KERNEL_TIME,
               lambda f, kb: Result(num(f, "kernels_per_step") * num(f, "mean_kernel_us") * 1e-6
                                    / num(f, "step_time_s"))),
    Derivation("gpu_idle_gap_frac", ("kernel_time_frac",),
               "1 − kernel_time_frac − h2d_copy_frac (the step less its kernels and copies, run one at a time)",
               _KERNEL_TIME, _idle_from_kernels, gate=_KERNELS_FIT, optional=("h2d_copy_frac",)),
)


def _pipelined_batchable(f: Facts, kb: KnowledgeBase) -> Result:
    """The share of a pipelined decode's GPU time more sequences can reclaim: the stages idle for want of a sequence
    (1 − min(1, batch / stages)), plus the weight reads (share_data · decode_weight_share) and launches (share_overhead)
    of the busy ones, amortised over the batch."""
    idle = 1.0 - min(1.0, num(f, "batch_size") / num(f, "pipeline_parallel_size"))
    weights = num(f, "share_data") * num_or(f, "decode_weight_share", 1.0)
    return clamp_fraction(idle + weights + num_or(f, "share_overhead", 0.0), "batchable share")


# the unclamped weights-only decode ratio, launch gaps, the SLO ratio, overlap and the iron-law terms
IRON_LAW: tuple[Derivation, ...] = (
    _weights_only_decode("bandwidth_to_peak", "; unclamped", "LLM decode bytes per step; " + _KIPPLY,
                         _decode_bw_ratio),
    Derivation("launch_gap_frac", ("gpu_idle_gap_frac", "io_overhead"), "max(0, gpu_idle_gap_frac − io_overhead)",
               "seed screening signals (timeline gaps not explained by data wait)",
               lambda f, kb: Result(max(0.0, num(f, "gpu_idle_gap_frac") - num(f, "io_overhead")))),
    Derivation("latency_over_target", ("latency_ms", "latency_target_ms"), "latency_ms / latency_target_ms",
               "service-level objective", lambda f, kb: Result(num(f, "latency_ms") / num(f, "latency_target_ms"))),
    Derivation("overlap_headroom", ("data_wait_s", "gpu_util", "step_time_s"),
               "min(data_wait_s, gpu_util · step_time_s) / step_time_s", "seed Table 2 (overlap turns sum into max)",
               lambda f, kb: Result(min(num(f, "data_wait_s"), num(f, "gpu_util") * num(f, "step_time_s"))
                                    / num(f, "step_time_s"))),
    Derivation("copy_overlap_frac", ("h2d_copy_frac",), "min(h2d_copy_frac, 1 − h2d_copy_frac)",
               "seed Table 2 (overlap turns the sum into the max: T ≥ max(copy, the rest)); the copies are serialised "
               "on the link, so a step is never shorter than they are",
               lambda f, kb: Result(min(num(f, "h2d_copy_frac"), 1.0 - num(f, "h2d_copy_frac")))),
    # iron-law terms
    Derivation("t_input_s", ("data_wait_s",), "data_wait_s", _SEED_IRON, lambda f, kb: Result(num(f, "data_wait_s"))),
    Derivation("t_data_s", ("bytes_moved", "peak_bandwidth"), "bytes_moved / BW", _SEED_IRON,
               lambda f, kb: Result(num(f, "bytes_moved") / (num(f, "peak_bandwidth") * 1e9))),
    Derivation("t_data_s", ("mem_bw_util", "step_time_s"), "mem_bw_util · step_time_s (achieved-bandwidth share)",
               _SEED_IRON, lambda f, kb: Result(num(f, "mem_bw_util") * num(f, "step_time_s"))),
    # the compute term's η (issue 12 item 7): the first derivation whose inputs are known wins
    *_EFFICIENCY,
    Derivation("t_compute_s", ("flops", "peak_tflops", "compute_efficiency"),
               "flops / (R_peak · η), η = compute_efficiency", _SEED_IRON,
               lambda f, kb: Result(num(f, "flops")
                                    / (num(f, "peak_tflops") * 1e12 * num(f, "compute_efficiency")))),
    Derivation("t_compute_s", ("mfu", "step_time_s", "compute_efficiency"),
               "mfu · step_time_s / η (useful-compute share at η = compute_efficiency)", _SEED_IRON,
               lambda f, kb: Result(num(f, "mfu") * num(f, "step_time_s") / num(f, "compute_efficiency"))),
    Derivation("t_compute_s", ("flops", "peak_tflops"), "flops / (R_peak · η), η = 1 (no activity measured: a lower "
               "bound)", _SEED_IRON,
               lambda f, kb: Result(num(f, "flops") / (num(f, "peak_tflops") * 1e12))),
    Derivation("t_compute_s", ("mfu", "step_time_s"), "mfu · step_time_s (useful-compute share, η = 1: a lower bound)",
               _SEED_IRON, lambda f, kb: Result(num(f, "mfu") * num(f, "step_time_s"))),
    Derivation("t_overhead_s", ("host_wait_frac", "step_time_s"), "host_wait_frac · step_time_s", _SEED_IRON,
               lambda f, kb: Result(num(f, "host_wait_frac") * num(f, "step_time_s"))),
    Derivation("t_overhead_s", ("launch_gap_frac", "step_time_s"), "launch_gap_frac · step_time_s", _SEED_IRON,
               lambda f, kb: Result(num(f, "launch_gap_frac") * num(f, "step_time_s"))),
    Derivation("t_sequential_s", ("t_data_s", "t_compute_s"), "t_input + D/BW + O/(R·η) + L (known terms)", _SEED_IRON,
               lambda f, kb: Result(iron_law(*_terms(f))[0]), optional=_OPTIONAL_TERMS),
    Derivation("t_overlapped_s", ("t_data_s", "t_compute_s"), "t_input + max(D/BW, O/(R·η)) + L", _SEED_IRON,
               lambda f, kb: Result(iron_law(*_terms(f))[1]), optional=_OPTIONAL_TERMS),
    Derivation("share_input", ("t_input_s", "step_time_s"), "t_input_s / step_time_s", _SEED_IRON,
               _term_share("t_input_s")),
    Derivation("share_data", ("t_data_s", "step_time_s"), "t_data_s / step_time_s", _SEED_IRON,
               _term_share("t_data_s")),
    # without a step time the share is still known: (D/BW) / T = (D/T) / BW, the achieved share of peak bandwidth
    Derivation("share_data", ("mem_bw_util",), "mem_bw_util ((D/BW) / T = (D/T) / BW: the D/BW term's share of the "
               "step is the achieved share of peak bandwidth; the step time not known)", _SEED_IRON,
               lambda f, kb: Result(num(f, "mem_bw_util"))),
    Derivation("share_compute", ("t_compute_s", "step_time_s"), "t_compute_s / step_time_s", _SEED_IRON,
               _term_share("t_compute_s")),
    Derivation("share_overhead", ("t_overhead_s", "step_time_s"), "t_overhead_s / step_time_s", _SEED_IRON,
               _term_share("t_overhead_s")),
    Derivation("share_compute_at_peak", ("share_compute", "compute_efficiency"), "share_compute · η (the compute "
               "term at η = 1, a share of today's step)", _ETA,
               lambda f, kb: Result(num(f, "share_compute") * num(f, "compute_efficiency"))),
    # what removing launch and sync overhead can act on (CUDA graphs, asynchronous scheduling): the L term where it is
    # known; in an LLM decode, at most what streaming the weights and the KV cache leaves of the step
    Derivation("overhead_reach_frac", ("share_overhead",), "share_overhead", _SEED_IRON,
               lambda f, kb: Result(num(f, "share_overhead"))),
    Derivation("overhead_reach_frac", ("share_data", "kv_cache_bytes"), "1 − share_data (LLM decode, the L term not "
               "measured: at most the part of the step not streaming the weights and the KV cache)", _DECODE_STREAMS,
               _rest_of_data, gate=LLM_DECODE),
    Derivation("overhead_reach_frac", ("share_data", "batch_size"), "1 − share_data (LLM decode of one sequence, the L "
               "term not measured: at most the part of the step not streaming the weights; one sequence's KV cache is "
               "small beside them)", _DECODE_STREAMS,
               _rest_of_data, gate=_ONE_SEQUENCE_DECODE),
    Derivation("overhead_reach_frac", ("share_data", "prompt_tokens"), "1 − share_data (LLM prefill, the L term not "
               "measured: at most the part of the step not reading the weights)", _PREFILL_STREAMS, _rest_of_data,
               gate=LLM_PREFILL),
    Derivation("overhead_reach_frac", ("share_data",), "1 − share_data (LLM decode, the L term not measured: at most "
               "the part of the step not moving device memory; its bytes were measured, the KV cache's with them)",
               _DECODE_STREAMS, _rest_of_data,
               gate=_MEASURED_BYTES_DECODE),
    # what fusion and quantization act on (optimizations.yaml acts_on): the time of the kernels whose bytes they cut,
    # measured where a trace gives the kernel mix; else the D/BW term, the bound they had before it was measured
    *_reach("fusible_frac", "memory_bound_kernel_frac", "the memory-bound kernels' share of the window",
            "the whole D/BW term taken as fusible", decode=_DECODE_FUSIBLE),
    *_reach("quantizable_frac", "weight_kernel_frac",
            "the share of the window in kernels that may read the weights or the KV cache",
            "the whole D/BW term taken as weight and KV-cache bytes"),
    # an LLM decode whose D/BW term is not known (no bandwidth figure for the part): its kernels stream the weights
    # and the KV cache, so they reach at most the time some kernel runs (as pruning's last way below)
    Derivation("quantizable_frac", ("gpu_util",), "gpu_util (LLM decode, the D/BW term not known: its kernels stream "
               "the weights and the KV cache, so at most the share of the step some kernel runs)", _REACH,
               lambda f, kb: Result(num(f, "gpu_util")), gate=LLM_DECODE),
    # batching amortises the launches over more work, and in serving the weight reads too (seed Table 3,
    # memory-bound and latency-bound rows): per unit of work it can save at most those terms
    # a decode pipelined over more stages than it has sequences: each stage idles while the others hold the batch, and
    # more sequences fill those idle stages before they amortise anything (cluster-pipeline-decode-idle-stages)
    Derivation("batchable_frac", ("share_data", "pipeline_parallel_size", "batch_size"), "(1 − min(1, batch_size / "
               "pipeline_parallel_size)) + share_data · decode_weight_share + share_overhead (LLM decode in pipeline "
               "stages: the stages idle for want of a sequence, then the weight reads and launches amortised over the "
               "batch; decode_weight_share and share_overhead where known)", _BATCH, _pipelined_batchable,
               gate=PIPELINED_DECODE, optional=("decode_weight_share", "share_overhead")),
    # an LLM decode whose KV cache is counted: a larger batch amortises the weights it reads, not the KV cache (each
    # sequence reads its own)
    Derivation("batchable_frac", ("share_data", "decode_weight_share", "share_overhead"), "share_data · "
               "decode_weight_share + share_overhead (LLM decode: the weight reads and launches amortised over the "
               "batch; each sequence reads its own KV cache)", _BATCH,
               lambda f, kb: clamp_fraction(num(f, "share_data") * num(f, "decode_weight_share")
                                            + num(f, "share_overhead"), "batchable share"), gate=LLM_DECODE),
    Derivation("batchable_frac", ("share_data", "decode_weight_share"), "share_data · decode_weight_share (LLM "
               "decode: the weight reads amortised over the batch, not the KV cache; the launch overhead not known)",
               _BATCH, lambda f, kb: Result(num(f, "share_data") * num(f, "decode_weight_share")), gate=LLM_DECODE),
    Derivation("batchable_frac", ("share_data", "share_overhead"), "share_data + share_overhead (weight reads and "
               "launches amortised over the batch)", _BATCH,
               lambda f, kb: clamp_fraction(num(f, "share_data") + num(f, "share_overhead"), "batchable share"),
               gate=_NOT_TRAINING),
    Derivation("batchable_frac", ("share_data",), "share_data (weight reads amortised over the batch; the launch "
               "overhead not known)", _BATCH, lambda f, kb: Result(num(f, "share_data")), gate=_NOT_TRAINING),
    Derivation("batchable_frac", ("share_overhead",), "share_overhead (launches amortised over the batch)", _BATCH,
               lambda f, kb: Result(num(f, "share_overhead"))),
    # pruning and distillation shrink the bytes and FLOPs of the kernels that read the weights, never the time the GPU
    # idles: those kernels' time where a trace gives the kernel mix, else both terms, else the busy time
    Derivation("prunable_frac", ("weight_kernel_frac", "gpu_util"), "weight_kernel_frac × gpu_util (the kernels that "
               "read the weights: GEMM, convolution, attention)", _PRUNE,
               lambda f, kb: clamp_fraction(num(f, "weight_kernel_frac") * num(f, "gpu_util"), "prunable share")),
    Derivation("prunable_frac", ("share_data", "share_compute"), "min(share_data + share_compute, gpu_util) (the D/BW "
               "and compute terms, both shrunk with the parameters; at most the time some kernel runs, where known)",
               _PRUNE, lambda f, kb: clamp_fraction(min(num(f, "share_data") + num(f, "share_compute"),
                                                        float(f.get("gpu_util", 1.0))), "prunable share"),
               optional=("gpu_util",)),
    Derivation("prunable_frac", ("share_data", "decode_weight_share"), "share_data · decode_weight_share (LLM decode: "
               "the time of the weights it streams; the KV cache and the launches do not shrink with the parameters)",
               _PRUNE, lambda f, kb: Result(num(f, "share_data") * num(f, "decode_weight_share")), gate=LLM_DECODE),
    Derivation("prunable_frac", ("share_data",), "share_data (LLM decode: its kernels take the time of the weights "
               "they stream, and the KV cache and the launches do not shrink with the parameters)", _PRUNE,
               lambda f, kb: Result(num(f, "share_data")), gate=LLM_DECODE),
    Derivation("prunable_frac", ("gpu_util",), "gpu_util (the share of the step some kernel runs; the terms not both "
               "known)", _PRUNE, lambda f, kb: Result(num(f, "gpu_util"))),
)
