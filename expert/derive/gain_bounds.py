"""The most an optimization can speed its own iron-law term up, as ratios of dense peaks from the hardware catalog
(issue 12 item 8: every "max gain" from the report's own terms). knowledge_base/optimizations.yaml names them
(`term_speedup`); the report's expected gain is then 1 / (1 - share + share / ratio), never above the ratio.

- `lower_precision_peak_ratio`: the dense peak of the next narrower format the part has (units.yaml `lower`: bf16 ->
  fp8, fp32 -> bf16, fp16 where there is no bf16) over the peak of today's dtype; 1 where the part has no narrower
  format (an A100 in bf16) or the dtype is already the narrowest.
- `lower_precision_bytes_ratio`: the bytes of a value of today's dtype over those of that narrower format (fp32 -> bf16
  2, bf16 -> fp8 2): how much faster the D/BW term can run in it at best; 1 where there is none.
- `faster_gpu_peak_ratio`: the dense peak of the part's realistic successor (hardware.yaml `upgrades`) in the same
  dtype over today's.
- `faster_memory_ratio`: the device-memory bandwidth of the part's successor (the same `upgrades`) over today's,
  where the successor's memory is faster (else the declared bound of more_memory_bandwidth applies).
- `quantization_bytes_ratio`: how much fewer bytes quantization leaves. Serving: the weights to 4 bits (bytes per
  weight over half a byte) and the KV cache to fp8 (dtype bytes over one), mixed by the weights' share of a decode
  step's bytes where known, else the larger of the two; so weights already 4-bit still leave the KV cache's 2x (bf16).
  Training: dtype bytes over one byte (fp8 values and 8-bit optimizer states, the narrowest its training form names).
- `offloaded_copy_frac`: the host-to-device copies' share of the step where the weights do not fit (an LLM service,
  weights_to_hbm above 1), so the copies bring in offloaded weights; quantization that makes them fit removes it.
- `tensor_core_peak_ratio`: the tensor-core peak of today's dtype over the CUDA-core fp32 peak; for an fp32 job tf32's
  peak, or on a part without tf32 (Volta, Turing) that of bf16/fp16, the only way its matmuls reach tensor cores; for a
  bf16 job on a part without bf16 (Volta, Turing: emulated on the CUDA cores) that of fp16.
- `achieved_to_fp32_peak`: achieved FLOP/s over the CUDA-core fp32 peak; above 1 the matmuls already run on tensor
  cores (rules/precision.yaml).
- `pcie_link_speedup`: 1 / pcie_link_frac, how much faster host-device copies run on a link trained to what the
  GPU and slot support.
- `clock_slowdown_step_frac`: clock_slowdown_frac x gpu_util, the share of the step the GPU works under a clock
  slowdown (gpu_util taken as 1 when not given): all that fixing the slowdown can give back.
- `padded_token_ratio`: token positions computed per real token, 1 / (1 - padding_frac): the most packing can speed
  up the work that grows with the tokens.
"""

from __future__ import annotations

from collections.abc import Callable

from ..kb.knowledge import HardwareSpec, KnowledgeBase
from ..rules.model import Condition
from .derivation import (
    DECODE_GPU_FACTS,
    Derivation,
    Gate,
    Result,
    all_of,
    any_of,
    fact_test,
    hardware_of,
    num,
    num_or,
    required,
)
from .formulas import Facts, Value

_CATALOG = "knowledge_base/hardware.yaml (dense peaks per dtype)"
_LOWER = f"{_CATALOG} and units.yaml dtypes `lower` (the narrower format lower precision moves to)"
_UPGRADE = f"{_CATALOG} and its `upgrades` (the realistic next part of each line)"
_UPGRADE_MEMORY = ("knowledge_base/hardware.yaml (memory bandwidth per part) and its `upgrades` (the realistic next "
                   "part of each line)")
_CUDA_CORES = ("NVIDIA tensor-core docs: the fp32 peak of the catalog is the CUDA-core (non-tensor) rate; tf32, "
               "bf16, fp16 and fp8 peaks are tensor-core rates")


def _dtypes(kb: KnowledgeBase) -> list[str]:
    return list(kb.units.dtypes)


def _by_dtype(kb: KnowledgeBase, applies: Callable[[HardwareSpec, str], bool]) -> Condition:
    """One branch per dtype: dtype = d and hardware is one for which `applies(hw, d)`."""
    return any_of([all_of([fact_test("dtype", eq=dtype), fact_test(
        "hardware", **{"in": [hw.id for hw in kb.hardware.values() if applies(hw, dtype)]})])
        for dtype in _dtypes(kb)] or [fact_test("hardware", **{"in": []})])


def _lower_known(kb: KnowledgeBase) -> Callable[[HardwareSpec, str], bool]:
    def known(hw: HardwareSpec, dtype: str) -> bool:
        if hw.peak(dtype) is None:
            return False
        target = kb.units.narrower_format(dtype, hw)
        return target is None or hw.peak(target) is not None

    return known


def _lower_ratio(f: Facts, kb: KnowledgeBase) -> Result:
    hw, dtype = hardware_of(f, kb), str(f["dtype"])
    today = required(hw.peak(dtype), f"a {dtype} peak of {hw.id}")
    target = kb.units.narrower_format(dtype, hw)
    if target is None:
        return Result(1.0, {f"{hw.id} dense {dtype} peak (TFLOP/s)": today, "source": hw.source},
                      f"{hw.id} has no format narrower than {dtype} with a dense peak: lower precision gains nothing")
    peak = required(hw.peak(target), f"a {target} peak of {hw.id}")
    figures: dict[str, Value] = {"target dtype": target, f"{hw.id} dense {dtype} peak (TFLOP/s)": today,
                                 f"{hw.id} dense {target} peak (TFLOP/s)": peak, "source": hw.source}
    return Result(peak / today, figures)


def _lower_bytes_ratio(f: Facts, kb: KnowledgeBase) -> Result:
    hw, dtype = hardware_of(f, kb), str(f["dtype"])
    target = kb.units.narrower_format(dtype, hw)
    today = kb.units.dtypes[dtype].bytes
    if target is None:
        return Result(1.0, {f"bytes of a {dtype} value": today},
                      f"{hw.id} has no format narrower than {dtype} with a dense peak: its values stay {today} bytes")
    return Result(today / kb.units.dtypes[target].bytes,
                  {f"bytes of a {dtype} value": today, f"bytes of a {target} value": kb.units.dtypes[target].bytes})


def _slowed_share(f: Facts, kb: KnowledgeBase) -> Result:
    """clock_slowdown_frac of the busy samples, as a share of the step: times gpu_util, or alone (every sample taken
    as busy, an upper bound) when the utilization is not given."""
    util = num_or(f, "gpu_util", None)
    slowed = num(f, "clock_slowdown_frac")
    if util is None:
        return Result(slowed, note="gpu_util not given: every sample taken as busy, an upper bound")
    return Result(slowed * util)


def _upgrade_known(kb: KnowledgeBase) -> Callable[[HardwareSpec, str], bool]:
    def known(hw: HardwareSpec, dtype: str) -> bool:
        upgrade = kb.hardware_upgrades.get(hw.id)
        return (upgrade is not None and hw.peak(dtype) is not None
                and kb.hardware[upgrade.to].peak(dtype) is not None)

    return known


def _upgrade_ratio(f: Facts, kb: KnowledgeBase) -> Result:
    hw, dtype = hardware_of(f, kb), str(f["dtype"])
    upgrade = required(kb.hardware_upgrades.get(hw.id), f"an upgrade of {hw.id}")
    nxt = kb.hardware[upgrade.to]
    today = required(hw.peak(dtype), f"a {dtype} peak of {hw.id}")
    peak = required(nxt.peak(dtype), f"a {dtype} peak of {nxt.id}")
    figures: dict[str, Value] = {"next part": nxt.id, f"{hw.id} dense {dtype} peak (TFLOP/s)": today,
                                 f"{nxt.id} dense {dtype} peak (TFLOP/s)": peak, "why": upgrade.why,
                                 "source": nxt.source}
    return Result(peak / today, figures)


def _faster_memory(kb: KnowledgeBase) -> Condition:
    """hardware is a part whose catalogued successor has faster device memory (both bandwidths known)."""
    def faster(hw: HardwareSpec) -> bool:
        upgrade = kb.hardware_upgrades.get(hw.id)
        if upgrade is None or hw.memory_bandwidth_gbs is None:
            return False
        nxt = kb.hardware[upgrade.to].memory_bandwidth_gbs
        return nxt is not None and nxt > hw.memory_bandwidth_gbs

    return fact_test("hardware", **{"in": [hw.id for hw in kb.hardware.values() if faster(hw)]})


def _memory_ratio(f: Facts, kb: KnowledgeBase) -> Result:
    hw = hardware_of(f, kb)
    upgrade = required(kb.hardware_upgrades.get(hw.id), f"an upgrade of {hw.id}")
    nxt = kb.hardware[upgrade.to]
    today = required(hw.memory_bandwidth_gbs, f"the memory bandwidth of {hw.id}")
    faster = required(nxt.memory_bandwidth_gbs, f"the memory bandwidth of {nxt.id}")
    figures: dict[str, Value] = {"next part": nxt.id, f"{hw.id} memory bandwidth (GB/s)": today,
                                 f"{nxt.id} memory bandwidth (GB/s)": faster, "why": upgrade.why,
                                 "source": nxt.source}
    return Result(faster / today, figures)


def _training_quantization_ratio(f: Facts, kb: KnowledgeBase) -> Result:
    dtype = str(f["dtype"])
    spec = required(kb.units.dtypes.get(dtype), f"the bytes of a {dtype} value")
    quantized = kb.units.quantized_training_bytes
    return Result(spec.bytes / quantized, {f"bytes of a {dtype} value": spec.bytes,
                                           "bytes of a value in fp8 (8-bit states)": quantized})


_QUANTIZED_SERVING = ("knowledge_base/units.yaml dtypes `bytes`, `quantized_weight_bytes` and "
                      "`quantized_kv_cache_bytes`; 4-bit weight quantization (AWQ, GPTQ); fp8 KV cache (vLLM "
                      "kv_cache_dtype=fp8, TensorRT-LLM)")


def _weight_quantization_ratio(f: Facts, kb: KnowledgeBase) -> Result:
    quantized = kb.units.quantized_weight_bytes
    return Result(num(f, "bytes_per_weight") / quantized, {"bytes of a quantized weight": quantized})


def _serving_quantization_ratio(f: Facts, kb: KnowledgeBase) -> Result:
    """Weights to 4 bits and the KV cache (stored in dtype) to fp8: mixed by the weights' share of the decode bytes
    where it is known, else the larger of the two (an upper bound whatever the mix)."""
    dtype = str(f["dtype"])
    spec = required(kb.units.dtypes.get(dtype), f"the bytes of a {dtype} value")
    weights = _weight_quantization_ratio(f, kb).value
    kv = spec.bytes / kb.units.quantized_kv_cache_bytes
    constants: dict[str, Value] = {"bytes of a quantized weight": kb.units.quantized_weight_bytes,
                                   f"bytes of a {dtype} value": spec.bytes,
                                   "bytes of a quantized KV-cache value": kb.units.quantized_kv_cache_bytes}
    share = f.get("decode_weight_share")
    if isinstance(share, (int, float)) and not isinstance(share, bool):
        return Result(1.0 / (share / weights + (1.0 - share) / kv), constants)
    return Result(max(weights, kv), constants)


def _tensor_known(kb: KnowledgeBase) -> Callable[[HardwareSpec, str], bool]:
    def known(hw: HardwareSpec, dtype: str) -> bool:
        return hw.peak("fp32") is not None and hw.peak(kb.units.tensor_core_format(dtype, hw)) is not None

    return known


def _tensor_ratio(f: Facts, kb: KnowledgeBase) -> Result:
    hw, dtype = hardware_of(f, kb), str(f["dtype"])
    core = kb.units.tensor_core_format(dtype, hw)
    cuda = required(hw.peak("fp32"), f"an fp32 peak of {hw.id}")
    tensor = required(hw.peak(core), f"a {core} peak of {hw.id}")
    return Result(tensor / cuda, {f"{hw.id} dense {core} peak (TFLOP/s)": tensor,
                                  f"{hw.id} fp32 CUDA-core peak (TFLOP/s)": cuda, "source": hw.source})


def _tf32_ratio(f: Facts, kb: KnowledgeBase) -> Result:
    hw = hardware_of(f, kb)
    cuda = required(hw.peak("fp32"), f"an fp32 peak of {hw.id}")
    tf32 = required(hw.peak("tf32"), f"a tf32 peak of {hw.id}")
    return Result(tf32 / cuda, {f"{hw.id} dense tf32 peak (TFLOP/s)": tf32,
                                f"{hw.id} fp32 CUDA-core peak (TFLOP/s)": cuda, "source": hw.source})


def _tf32_published(kb: KnowledgeBase) -> Condition:
    """Parts of a vendor whose fp32 matmuls take TF32 only when allowed (units.yaml tf32 `opt_in_vendors`), with both
    peaks catalogued."""
    tf32 = kb.units.dtypes.get("tf32")
    vendors = set(tf32.opt_in_vendors) if tf32 is not None else set()
    return fact_test("hardware", **{"in": [hw.id for hw in kb.hardware.values() if hw.vendor in vendors
                                           and hw.peak("fp32") is not None and hw.peak("tf32") is not None]})


def _fp32_published(kb: KnowledgeBase) -> Condition:
    return fact_test("hardware", **{"in": [hw.id for hw in kb.hardware.values() if hw.peak("fp32") is not None]})


def _over_cuda_cores(f: Facts, kb: KnowledgeBase) -> Result:
    hw = hardware_of(f, kb)
    cuda = required(hw.peak("fp32"), f"an fp32 peak of {hw.id}")
    return Result(num(f, "achieved_tflops") / cuda, {f"{hw.id} fp32 CUDA-core peak (TFLOP/s)": cuda,
                                                     "source": hw.source})


def _mfu_over_cuda_cores(f: Facts, kb: KnowledgeBase) -> Result:
    hw = hardware_of(f, kb)
    cuda = required(hw.peak("fp32"), f"an fp32 peak of {hw.id}")
    return Result(num(f, "mfu") * num(f, "peak_tflops") / cuda, {f"{hw.id} fp32 CUDA-core peak (TFLOP/s)": cuda,
                                                                 "source": hw.source})


LOWER_PRECISION_KNOWN = Gate("the catalog gives the dense peaks of this dtype and of the next narrower format the "
                             "part has (or the part has none)", lambda kb: _by_dtype(kb, _lower_known(kb)))
UPGRADE_KNOWN = Gate("the catalog lists a successor of this part and both dense peaks in this dtype",
                     lambda kb: _by_dtype(kb, _upgrade_known(kb)))
FASTER_MEMORY_KNOWN = Gate("the catalog lists a successor of this part with faster device memory (both bandwidths "
                           "known)", _faster_memory)
TENSOR_CORE_KNOWN = Gate("the catalog gives this part's fp32 CUDA-core peak and its tensor-core peak in this dtype",
                         lambda kb: _by_dtype(kb, _tensor_known(kb)))
SOME_LINK = Gate("the link carries a measurable share of its bandwidth (pcie_link_frac at least 0.1 %: Gen1 x1 of a "
                 "Gen5 x16 link is 0.4 %)", fact_test("pcie_link_frac", ge=0.001))
SOME_REAL_TOKENS = Gate("some positions hold real tokens (padding_frac below 1)", fact_test("padding_frac", lt=1))
_PACKING = ("Krell et al. 2021, Efficient Sequence Packing without Cross-contamination, arXiv:2107.02027 (packing "
            "removed the padding, about 50 % of BERT's pre-training positions, for a 2x speed-up); Hugging Face, "
            "Packing with FlashAttention-2 (DataCollatorWithFlattening)")
FP32_PUBLISHED = Gate("the catalog gives this part's fp32 CUDA-core peak", _fp32_published)
TF32_PUBLISHED = Gate("a part whose fp32 matmuls take TF32 only when allowed (units.yaml tf32 `opt_in_vendors`: "
                      "NVIDIA's), its fp32 CUDA-core and tf32 tensor-core peaks in the catalog", _tf32_published)

OFFLOADED_WEIGHTS = Gate("an LLM service whose weights alone need more than the GPUs' memory (weights_to_hbm above 1): "
                         "what does not fit is kept in host memory and copied in every step",
                         all_of([fact_test("workload", eq="inference"), fact_test("phase", known=True),
                                 fact_test("weights_to_hbm", gt=1.0)]))
# no GPU count given: weights too large for one GPU may be sharded (resident, nothing copied in) or kept in host
# memory; copies past the I/O-overhead fail band (the threshold of rule input-h2d-copies-exposed, whose finding rule
# capacity-weights-offloaded-count-unsaid reads) say the latter
_COPIES_EXPOSED = "scorecard.io_overhead.fail_above"


def _offloaded_count_unsaid(kb: KnowledgeBase) -> Condition:
    exposed = required(kb.scorecard.bound(_COPIES_EXPOSED), f"the scorecard's {_COPIES_EXPOSED}")
    return all_of([fact_test("workload", eq="inference"), fact_test("phase", known=True),
                   *(fact_test(name, known=False) for name in DECODE_GPU_FACTS),
                   fact_test("weights_to_one_gpu", gt=1.0), fact_test("h2d_copy_frac", gt=exposed)])


OFFLOADED_WEIGHTS_COUNT_UNSAID = Gate(
    "an LLM service with no GPU count given (num_gpus, tensor or pipeline parallel size) whose weights alone need "
    "more than one GPU's memory (weights_to_one_gpu above 1) and whose host-to-device copies take more of the step "
    "than the I/O-overhead fail band: sharded weights would stay resident, so the copies bring in weights kept in "
    "host memory", _offloaded_count_unsaid)
_OFFLOAD = ("Hugging Face Accelerate big-model inference docs (device_map='auto' keeps what does not fit in CPU RAM "
            "and moves it to the GPU for every forward pass)")

TRAINING_JOB = Gate("a training job (it quantizes to fp8 values and 8-bit optimizer states, not 4-bit weights)",
                    fact_test("workload", eq="training"))

GAIN_BOUNDS: tuple[Derivation, ...] = (
    Derivation("lower_precision_peak_ratio", ("hardware", "dtype"),
               "dense peak of the next narrower format the part has / dense peak of dtype (1: none)", _LOWER,
               _lower_ratio, gate=LOWER_PRECISION_KNOWN),
    Derivation("lower_precision_bytes_ratio", ("hardware", "dtype"),
               "bytes of a dtype value / bytes of a value of the next narrower format the part has (1: none)",
               f"{_LOWER}; units.yaml dtypes `bytes`", _lower_bytes_ratio, gate=LOWER_PRECISION_KNOWN),
    Derivation("faster_gpu_peak_ratio", ("hardware", "dtype"),
               "dense dtype peak of the part's successor / dense dtype peak of the part", _UPGRADE, _upgrade_ratio,
               gate=UPGRADE_KNOWN),
    Derivation("faster_memory_ratio", ("hardware",),
               "memory bandwidth of the part's successor / memory bandwidth of the part", _UPGRADE_MEMORY,
               _memory_ratio, gate=FASTER_MEMORY_KNOWN),
    # training quantizes to fp8 (Transformer Engine) and 8-bit optimizer states, not to 4-bit weights
    Derivation("quantization_bytes_ratio", ("dtype",), "bytes of a dtype value / quantized_training_bytes (fp8 "
               "values, 8-bit optimizer states)", "knowledge_base/units.yaml dtypes `bytes` and "
               "`quantized_training_bytes`; NVIDIA Transformer Engine (fp8 training); Dettmers et al. 2022, 8-bit "
               "Optimizers via Block-wise Quantization, arXiv:2110.02861", _training_quantization_ratio,
               gate=TRAINING_JOB),
    # serving quantizes the weights (to 4 bits) and the KV cache (to fp8): weights already 4-bit leave the KV cache
    Derivation("quantization_bytes_ratio", ("bytes_per_weight", "dtype"),
               "1 / (w / r_w + (1 − w) / r_kv), w = decode_weight_share, r_w = bytes per weight / "
               "quantized_weight_bytes (4-bit weights), r_kv = dtype bytes / quantized_kv_cache_bytes (fp8 KV cache); "
               "max(r_w, r_kv) where w is unknown", _QUANTIZED_SERVING,
               _serving_quantization_ratio, optional=("decode_weight_share",)),
    Derivation("quantization_bytes_ratio", ("bytes_per_weight",), "bytes per weight / quantized_weight_bytes (4-bit "
               "weights)", _QUANTIZED_SERVING, _weight_quantization_ratio),
    Derivation("offloaded_copy_frac", ("h2d_copy_frac", "weights_to_hbm"),
               "h2d_copy_frac (the weights do not fit: the host-to-device copies bring in the offloaded weights)",
               _OFFLOAD, lambda f, kb: Result(num(f, "h2d_copy_frac")), gate=OFFLOADED_WEIGHTS),
    Derivation("offloaded_copy_frac", ("h2d_copy_frac", "weights_to_one_gpu"),
               "h2d_copy_frac (no GPU count given, the weights need more than one GPU and the copies take over a "
               "tenth of the step: they bring in weights kept in host memory)",
               _OFFLOAD, lambda f, kb: Result(num(f, "h2d_copy_frac")), gate=OFFLOADED_WEIGHTS_COUNT_UNSAID),
    # the copies not measured: at most all of the step that is not reading device memory (an upper bound, as the gain
    # it feeds is: a model that fits once quantized stops copying at all)
    Derivation("offloaded_copy_frac", ("weights_to_hbm", "share_data"),
               "1 − share_data (the weights do not fit and the copies are not measured: at most the part of the step "
               "not reading device memory)", _OFFLOAD, lambda f, kb: Result(max(0.0, 1.0 - num(f, "share_data"))),
               gate=OFFLOADED_WEIGHTS),
    Derivation("tensor_core_peak_ratio", ("hardware", "dtype"),
               "tensor-core dense peak of dtype (for fp32: tf32, else bf16 or fp16; for bf16 on a part without it: "
               "fp16) / fp32 CUDA-core peak",
               f"{_CATALOG}; {_CUDA_CORES}",
               _tensor_ratio, gate=TENSOR_CORE_KNOWN),
    Derivation("tf32_peak_ratio", ("hardware",), "tf32 tensor-core dense peak / fp32 CUDA-core peak",
               f"{_CATALOG}; {_CUDA_CORES}", _tf32_ratio, gate=TF32_PUBLISHED),
    Derivation("achieved_to_fp32_peak", ("achieved_tflops", "hardware"), "achieved_tflops / fp32 CUDA-core peak",
               f"{_CATALOG}; {_CUDA_CORES}", _over_cuda_cores, gate=FP32_PUBLISHED),
    Derivation("achieved_to_fp32_peak", ("mfu", "peak_tflops", "hardware"),
               "mfu · peak_tflops / fp32 CUDA-core peak", f"{_CATALOG}; {_CUDA_CORES}", _mfu_over_cuda_cores,
               gate=FP32_PUBLISHED),
    Derivation("pcie_link_speedup", ("pcie_link_frac",), "1 / pcie_link_frac",
               "PCI-SIG lane rates (Gen3 8, Gen4 16, Gen5 32 GT/s per lane; bandwidth scales with the lanes): a copy "
               "over a link trained below its capability takes 1 / pcie_link_frac times as long",
               lambda f, kb: Result(1.0 / num(f, "pcie_link_frac")), gate=SOME_LINK),
    Derivation("clock_slowdown_step_frac", ("clock_slowdown_frac",),
               "clock_slowdown_frac · gpu_util (gpu_util: 1 unless given)",
               "NVML clock event reasons (the share of busy samples with a slowdown active); busy samples are gpu_util "
               "of the time, so the slowed work is at most that share of the step",
               _slowed_share, optional=("gpu_util",)),
    Derivation("padded_token_ratio", ("padding_frac",), "1 / (1 − padding_frac)", _PACKING,
               lambda f, kb: Result(1.0 / (1.0 - num(f, "padding_frac"))), gate=SOME_REAL_TOKENS),
)
