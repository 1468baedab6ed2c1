"""Derivations for LLM training and serving, the host side and device-memory capacity (issue 13): FLOP rates from
tokens/s (6·N, 2·N, the attention term), the KV cache and decode bytes per token, serving SLO ratios, the offloaded
optimizer's share, host synchronizations, storage, model-state and activation bytes against HBM."""

from __future__ import annotations

from collections.abc import Callable

from ..kb.knowledge import KnowledgeBase, MemoryModel
from ..rules.model import Condition
from .derivation import (
    ACTIVE_PARAMS,
    DECODE_GPU_FACTS,
    GPU_COUNT_POSSIBLE,
    LLM_DECODE,
    LLM_DECODE_PER_GPU,
    LLM_PREFILL,
    MBU_SOURCE,
    PIPELINED,
    PIPELINED_DECODE,
    Derivation,
    Gate,
    Result,
    all_of,
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
    activation_bytes,
    gradient_accumulation_steps,
    inference_flops_per_token,
    kv_cache_bytes,
    model_state_bytes,
    per_gpu_tflops,
    pipeline_bubble,
    tokens_per_step,
    training_flops_per_token,
)
from .formulas import decode_bytes_per_token as bytes_per_decoded_token

TRAINING = Gate("a training job", fact_test("workload", eq="training"))
PREFILL_OR_FORWARD = Gate("inference outside token decode (prompt prefill, or the phase not given)", all_of([
    fact_test("workload", eq="inference"),
    either([fact_test("phase", eq="prefill"), fact_test("phase", known=False)])]))
SERVING = Gate("an inference service (or a job whose kind is not given): only serving holds a KV cache",
               either([fact_test("workload", eq="inference"), fact_test("workload", known=False)]))
PREFILL_QUEUE_MEASURED = Gate("LLM prompt prefill whose queueing is measured and under 90 % of the time to first "
                              "token (the rest is the prefill)", all_of([
                                  LLM_PREFILL.on_static(), fact_test("ttft_queue_share", lt=0.9)]))
PREFILL_UNQUEUED = Gate("LLM prompt prefill with no request waiting (requests_waiting 0) and the queue time not "
                        "given: the time to first token is the prefill's", all_of([
                            LLM_PREFILL.on_static(), fact_test("requests_waiting", eq=0),
                            fact_test("ttft_queue_ms", known=False)]))
LLM_PREFILL_PER_GPU = Gate(f"{LLM_PREFILL.description}, whose GPUs are known (num_gpus or the parallel sizes given, "
                           "or the weights fit one GPU)", all_of([LLM_PREFILL.on_static(), GPU_COUNT_POSSIBLE]))
OPTIMIZER_ON_GPU = Gate("a training job whose optimizer states stay on the GPU (not offloaded, or not said)",
                        all_of([fact_test("workload", eq="training"), either([
                            fact_test("optimizer_offload", eq="no"), fact_test("optimizer_offload", known=False)])]))
FWD_BWD_UNTIMED = Gate("forward and backward not timed (fwd_bwd_s not given)", fact_test("fwd_bwd_s", known=False))
OPTIMIZER_OFFLOADED = Gate("a training job whose optimizer states and step are offloaded to the host", all_of([
    fact_test("workload", eq="training"), fact_test("optimizer_offload", eq="yes")]))


def _with_memory_model(condition: Condition) -> Callable[[KnowledgeBase], Condition]:
    """`condition` where the knowledge base has its memory model (knowledge_base/memory.yaml), false otherwise."""
    return lambda kb: condition if kb.memory is not None else fact_test("workload", **{"in": []})


STATES_ON_GPU = Gate(f"{OPTIMIZER_ON_GPU.description}, with the knowledge base's memory model",
                     _with_memory_model(OPTIMIZER_ON_GPU.on_static()))
STATES_OFFLOADED = Gate(f"{OPTIMIZER_OFFLOADED.description}, with the knowledge base's memory model",
                        _with_memory_model(OPTIMIZER_OFFLOADED.on_static()))
STATES_ON_GPU_WITH_TRAFFIC = Gate(
    f"{OPTIMIZER_ON_GPU.description}, with the knowledge base's optimizer step traffic",
    lambda kb: OPTIMIZER_ON_GPU.on_static() if kb.memory is not None and kb.memory.optimizer_step_traffic is not None
    else fact_test("workload", **{"in": []}))
TRAINING_MEMORY = Gate("a training job, with the knowledge base's memory model",
                       _with_memory_model(TRAINING.on_static()))


def _published_memory(kb: KnowledgeBase) -> Condition:
    """hardware is one whose catalog entry gives its device-memory capacity."""
    return fact_test("hardware", **{"in": [hw.id for hw in kb.hardware.values() if hw.memory_gb is not None]})


ONE_GPU = Gate("a job on one GPU", fact_test("num_gpus", eq=1))
NO_PIPELINE = Gate("no pipeline parallelism given (a pipelined job's GPUs are not all data-parallel ranks)",
                   either([fact_test("pipeline_parallel_size", known=False),
                           fact_test("pipeline_parallel_size", le=1)]))
OVERSIZED_DECODE_COUNT_UNSAID = Gate(
    f"{LLM_DECODE.description}, whose weights need more than one GPU's memory, the GPU count not given",
    all_of([LLM_DECODE.on_static(), fact_test("weights_to_one_gpu", gt=1.0), fact_test("num_gpus", known=False),
            fact_test("tensor_parallel_size", known=False), fact_test("pipeline_parallel_size", known=False)]))
SYNCS_EVERY_MICRO_BATCH = Gate("the job all-reduces after every micro-batch (grad_sync_per_micro_batch yes)",
                               fact_test("grad_sync_per_micro_batch", eq="yes"))
PUBLISHED_MEMORY = Gate("the hardware catalog gives this hardware's memory capacity", _published_memory)
SERVING_MEMORY = Gate(f"{SERVING.description}, on hardware whose memory capacity the catalog gives",
                      lambda kb: all_of([SERVING.on_static(), _published_memory(kb)]))

WIDE_TENSOR_PARALLEL = Gate("tensor parallelism over four GPUs or more (halved, still two or more: over two GPUs "
                            "halving is one GPU, which weights_to_one_gpu reads)",
                            fact_test("tensor_parallel_size", ge=4))
SERVING_MEMORY_PER_GPU = Gate(f"{SERVING_MEMORY.description}, whose GPUs are known (num_gpus or the parallel sizes "
                              "given, or the weights fit one GPU)",
                              lambda kb: all_of([SERVING_MEMORY.on(kb), GPU_COUNT_POSSIBLE]))

_FROZEN = ("Narayanan et al. 2021, arXiv:2104.04473, §5.1 (the backward pass doubles the forward: gradients with "
           "respect to both inputs and weights); Hu et al. 2021, LoRA, arXiv:2106.09685 §4 (no gradients for the "
           "frozen weights)")
_KAPLAN = "Kaplan et al. 2020, arXiv:2001.08361 (C ≈ 6·N FLOPs per trained token, 2·N per forward token)"
_PALM = "Chowdhery et al. 2022 (PaLM), arXiv:2204.02311, appendix B (MFU with the attention term 12·L·H·Q·T)"
_KV = ("KV cache = 2 · layers · KV heads · head dim · context · bytes per element (Pope et al. 2022, "
       "arXiv:2211.05102, §2; vLLM docs); decode reads the weights and the KV cache every step")
_ZERO = ("Rajbhandari et al. 2020 (ZeRO), arXiv:1910.02054, §3.1: mixed-precision Adam's bytes per parameter "
         "(knowledge_base/memory.yaml)")
_LORA = ("Hu et al. 2021, LoRA, arXiv:2106.09685 (the pretrained weights stay frozen; only the low-rank adapters get "
         "gradients and optimizer states)")
_QLORA = "Dettmers et al. 2023, QLoRA, arXiv:2305.14314 (the frozen base stored in 4-bit NF4)"
_ACTIVATIONS = ("Korthikanti et al. 2022, arXiv:2205.05198, eq. 1: activation bytes per layer, coefficient·s·b·h with "
                "fused attention (knowledge_base/memory.yaml)")
_BATCHES = "definition: global batch = micro-batch x gradient-accumulation steps x data-parallel ranks"
_BUBBLE = ("Huang et al. 2019 (GPipe), arXiv:1811.06965: the bubble is (p − 1)/(m + p − 1) of the step; Narayanan et "
           "al. 2021, arXiv:2104.04473, §2.2: the same bubble under the 1F1B schedule, (p − 1)/m of the ideal time")
_PIPELINE_DECODE = ("Huang et al. 2019 (GPipe), arXiv:1811.06965 (a stage works only on the micro-batches it holds, so "
                    "a pipeline needs as many in flight as it has stages); vLLM docs, parallelism and scaling "
                    "(pipeline parallelism across stages for throughput, tensor parallelism within a layer for "
                    "latency)")
_NO_SYNC = ("PyTorch DistributedDataParallel.no_sync() (gradients accumulate locally, one all-reduce in the last "
            "micro-batch's backward); Hugging Face Accelerate, gradient accumulation guide")
_DECODE_STEP = ("decode emits one token per sequence per forward step, so the time per output token is the decode "
                "step time (Pope et al. 2022, arXiv:2211.05102, §2; vLLM serving metrics: TPOT / inter-token latency)")
_TENSOR_CORE_SHAPES = ("NVIDIA Deep Learning Performance Guide, Matrix Multiplication Background (Tensor Core "
                       "Requirements: GEMM dimensions in multiples of 16 bytes, and 64 or 128 bytes for the best "
                       "efficiency on A100 and later)")
_SLO = "serving SLOs on time to first token and time per output token (vLLM / SGLang serving metrics)"
_PREFILL_STEP = ("a prefill runs every token of its prompts through the model in one forward step, reading each "
                 "weight once (kipply, Transformer inference arithmetic, https://kipp.ly/transformer-inference-"
                 "arithmetic/); the time to first token is queueing plus that prefill")


def _hbm_bytes(f: Facts, kb: KnowledgeBase) -> tuple[float, dict[str, Value]]:
    hw = hardware_of(f, kb)
    gb = required(hw.memory_gb, f"the memory capacity of {hw.id}")
    return gb * 1e9, {f"{hw.id} memory (GB)": gb, "source": hw.source}


def _train_tflops(with_attention: bool) -> Callable[[Facts, KnowledgeBase], Result]:
    def rate(f: Facts, kb: KnowledgeBase) -> Result:
        params = params_streamed(f)
        layers, hidden, seq = (int(num(f, "num_layers")), int(num(f, "hidden_size")), int(num(f, "seq_len"))) \
            if with_attention else (None, None, None)
        trainable = num_or(f, "trainable_params", None)
        per_token = training_flops_per_token(params, layers, hidden, seq, trainable=trainable)
        figures: dict[str, Value] = {"FLOPs per token": per_token, "params used": params}
        if trainable is not None:
            figures["params with weight gradients"] = min(trainable, params)
        return Result(per_gpu_tflops(per_token, num(f, "tokens_per_s"), int(num(f, "num_gpus"))), figures)

    return rate


def _forward_tflops(f: Facts, kb: KnowledgeBase) -> Result:
    """2·N FLOPs a forward token over the GPUs: num_gpus (an input of the general way; the prefill's way reads it
    when given, else the tensor × pipeline parallel size, else 1)."""
    params = params_streamed(f)
    per_token = inference_flops_per_token(params)
    return Result(per_gpu_tflops(per_token, num(f, "tokens_per_s"), decode_gpus(f)),
                  {"FLOPs per token": per_token, "params used": params})


def _decode_rate(f: Facts, kb: KnowledgeBase) -> Result:
    replicas = num_or(f, "data_parallel_size", 1.0)  # given: each replica decodes its own batch_size sequences
    value = replicas * num(f, "batch_size") * 1000.0 / num(f, "tpot_ms")
    note = ("a TPOT at a tail percentile (p90, p99) is longer than the typical decode step, so the rate is then a "
            "lower bound")
    if replicas > 1:
        note += (f"; each of the {replicas:.0f} data-parallel replicas decodes its own batch_size sequences a step, "
                 "so the service's rate is their sum")
    elif decode_gpus(f) != 1:
        note += ("; the GPUs (num_gpus, else the tensor × pipeline parallel size) taken as one model sharded across "
                 "them (tensor or pipeline parallel): "
                 "data-parallel replicas would each add this rate")
    return Result(value, {"decode steps per second": round(1000.0 / num(f, "tpot_ms"), 3)}, note)


def _prefill_rate(queue_known: bool) -> Callable[[Facts, KnowledgeBase], Result]:
    def rate(f: Facts, kb: KnowledgeBase) -> Result:
        tokens = num(f, "prompt_tokens") * num(f, "batch_size")
        prefill_ms = num(f, "ttft_ms") - (num(f, "ttft_queue_ms") if queue_known else 0.0)
        note = ("the time to first token also holds tokenizing, scheduling and the first token's sampling, so the "
                "rate is a lower bound")
        if decode_gpus(f) != 1:
            note += "; the GPUs taken as one model sharded across them (tensor or pipeline parallel)"
        return Result(tokens * 1000.0 / prefill_ms, {"tokens per prefill": tokens,
                                                     "prefill time (ms)": round(prefill_ms, 3)}, note)

    return rate


def _prefill_bandwidth(f: Facts, kb: KnowledgeBase) -> Result:
    gpus = decode_gpus(f)
    weights = num(f, "model_params") * num(f, "bytes_per_weight")
    prefills_per_s = num(f, "tokens_per_s") / (num(f, "prompt_tokens") * num(f, "batch_size"))
    achieved = weights * prefills_per_s / 1e9 / gpus
    result = clamp_fraction(achieved / num(f, "peak_bandwidth"), "derived prefill bandwidth utilization")
    figures: dict[str, Value] = {"achieved GB/s (weights only)": round(achieved, 1)}
    if gpus != 1:
        figures["GPUs sharing the weights"] = gpus
    note = ("the weights' bytes only (every expert's, for a mixture of experts): the activations and the KV cache a "
            "prefill writes add to them, so a lower bound")
    return Result(result.value, figures, "; ".join(n for n in (result.note, note) if n))


def _kv_cache(f: Facts, kb: KnowledgeBase) -> Result:
    b = kb.dtype_bytes(str(f["dtype"]))
    value = kv_cache_bytes(int(num(f, "num_layers")), int(num(f, "num_kv_heads")), int(num(f, "head_dim")),
                           int(num(f, "context_len")), b, int(num(f, "batch_size")))
    return Result(value, {"bytes per KV element": b},
                  "KV cache stored in the model's dtype; an fp8 KV cache would halve it")


def _decode_bytes(f: Facts, kb: KnowledgeBase) -> Result:
    b = num(f, "bytes_per_weight")
    params = params_streamed(f)
    value = bytes_per_decoded_token(params, b, num(f, "kv_cache_bytes"), int(num(f, "batch_size")))
    return Result(value, {"bytes per weight": b, "weight bytes per step": params * b})


def _decode_kv_bandwidth(clamp: bool) -> Callable[[Facts, KnowledgeBase], Result]:
    def util(f: Facts, kb: KnowledgeBase) -> Result:
        gpus = decode_gpus(f)  # tokens_per_s is the job's: each GPU reads its share of the bytes per token
        achieved = num(f, "tokens_per_s") * num(f, "decode_bytes_per_token") / 1e9 / gpus
        ratio = achieved / num(f, "peak_bandwidth")
        figures: dict[str, Value] = {"achieved GB/s (weights + KV cache)": round(achieved, 1)}
        if gpus != 1:
            figures["GPUs sharing the tokens"] = gpus
        left_out = decode_bytes_left_out(f, kv_counted=True)
        if not clamp:
            return Result(ratio, figures, "; ".join(left_out) or None)
        result = clamp_fraction(ratio, "derived bandwidth utilization")
        return Result(result.value, figures, "; ".join(n for n in (result.note, *left_out) if n) or None)

    return util


def _serving_memory(f: Facts, kb: KnowledgeBase) -> Result:
    hbm, figures = _hbm_bytes(f, kb)
    gpus = int(num(f, "num_gpus"))
    weights = num(f, "model_params") * num(f, "bytes_per_weight")
    free = gpus * hbm - weights
    figures.update({"weight bytes": weights, "HBM left for the KV cache (GB)": round(free / 1e9, 2)})
    return Result((weights + num(f, "kv_cache_bytes")) / (gpus * hbm), figures)


def _weight_bytes(f: Facts, kb: KnowledgeBase) -> tuple[float, float, dict[str, Value]]:
    """The model's weight bytes, one GPU's memory in bytes, and the figures both used."""
    hbm, figures = _hbm_bytes(f, kb)
    weights = num(f, "model_params") * num(f, "bytes_per_weight")
    figures.update({"weight bytes": weights, "bytes per weight": num(f, "bytes_per_weight")})
    return weights, hbm, figures


def _weights_to_hbm(f: Facts, kb: KnowledgeBase) -> Result:
    weights, hbm, figures = _weight_bytes(f, kb)
    gpus = decode_gpus(f)
    if gpus != 1:
        figures["GPUs sharing the weights (at best)"] = gpus
    return Result(weights / gpus / hbm, figures)


def _weights_to_one_gpu(f: Facts, kb: KnowledgeBase) -> Result:
    weights, hbm, figures = _weight_bytes(f, kb)
    return Result(weights / hbm, figures)


def _one_gpu_decode_bw(f: Facts, kb: KnowledgeBase) -> Result:
    params = params_streamed(f)
    achieved = num(f, "tokens_per_s") / num(f, "batch_size") * params * num(f, "bytes_per_weight") / 1e9
    return Result(achieved / num(f, "peak_bandwidth"), {"weights read (GB/s)": round(achieved, 1)})


def _memory_model(kb: KnowledgeBase) -> MemoryModel:
    return required(kb.memory, "memory model (knowledge_base/memory.yaml)")


def _model_states(offloaded: bool, trainable: bool = False,
                  quantized_base: bool = False) -> Callable[[Facts, KnowledgeBase], Result]:
    def states(f: Facts, kb: KnowledgeBase) -> Result:
        memory = _memory_model(kb)
        model = memory.optimizer_offloaded if offloaded else memory.optimizer_on_gpu
        params, sharding = num(f, "model_params"), int(num(f, "sharding_degree"))
        figures: dict[str, Value] = {"bytes per parameter": model.bytes_per_param,
                                     **{f"{part} (bytes/param)": b for part, b in model.parts.items()},
                                     "source": model.source}
        if not trainable:
            return Result(model_state_bytes(params, sharding, model.bytes_per_param), figures)
        asked = num(f, "trainable_params")
        trained = min(asked, params)
        frozen = num(f, "weight_bits") / 8 if quantized_base else model.frozen_bytes_per_param  # QLoRA: a 4-bit base
        value = (model_state_bytes(trained, sharding, model.bytes_per_param)
                 + model_state_bytes(params - trained, sharding, frozen))
        figures["bytes per frozen parameter"] = frozen
        note = "trainable_params above model_params: every parameter taken as trained" if asked > params else None
        return Result(value, figures, note)

    return states


def _optimizer_over_floor(f: Facts, kb: KnowledgeBase) -> Result:
    """optimizer_step_s over the step's bytes (memory.yaml `optimizer_step_traffic` per trained parameter, on this
    GPU's shard) at the peak bandwidth."""
    traffic = required(_memory_model(kb).optimizer_step_traffic,
                       "optimizer step traffic (knowledge_base/memory.yaml optimizer_step_traffic)")
    trained = min(num_or(f, "trainable_params", num(f, "model_params")), num(f, "model_params"))
    shards = num_or(f, "sharding_degree", None)
    floor_s = traffic.bytes_per_param * trained / (shards or 1.0) / (num(f, "peak_bandwidth") * 1e9)
    figures: dict[str, Value] = {"bytes per trained parameter": traffic.bytes_per_param,
                                 "floor (s)": floor_s, "source": traffic.source}
    note = None if shards else "sharding_degree not given: every GPU taken to update all the states"
    return Result(num(f, "optimizer_step_s") / floor_s, figures, note)


def _activations(batch: str) -> Callable[[Facts, KnowledgeBase], Result]:
    def kept(f: Facts, kb: KnowledgeBase) -> Result:
        model = _memory_model(kb).activations
        value = activation_bytes(int(num(f, "seq_len")), int(num(f, batch)), int(num(f, "hidden_size")),
                                 int(num(f, "num_layers")), model.coefficient)
        return Result(value, {"bytes per layer per token per hidden unit": model.coefficient, "source": model.source},
                      note=model.assumptions)

    return kept


def _accumulation(ranks: str) -> Callable[[Facts, KnowledgeBase], Result]:
    def steps(f: Facts, kb: KnowledgeBase) -> Result:
        value = gradient_accumulation_steps(int(num(f, "global_batch_size")), int(num(f, "micro_batch_size")),
                                            int(num(f, ranks)))
        note = None
        if value < 1 or abs(value - round(value)) > 1e-9:
            note = (f"{value:.3g} is not a whole number of micro-batches of at least 1: global_batch_size, "
                    f"micro_batch_size and {ranks} disagree")
        elif ranks == "num_gpus":
            note = "every GPU taken as a data-parallel rank (no tensor or pipeline parallelism given)"
        return Result(value, note=note)

    return steps


def _to_hbm(*names: str) -> Callable[[Facts, KnowledgeBase], Result]:
    def ratio(f: Facts, kb: KnowledgeBase) -> Result:
        hbm, figures = _hbm_bytes(f, kb)
        return Result(sum(num(f, n) for n in names) / hbm, figures)

    return ratio


# Spliced into DERIVATIONS where the walker needs them (it applies derivations in one pass, in order): the tokens/s
# and FLOP-rate ways to achieved_tflops before mfu reads it, and the KV-cache bandwidth before the weights-only one.
LLM_RATES: tuple[Derivation, ...] = (
    Derivation("tokens_per_step", ("global_batch_size", "seq_len"), "global_batch_size · seq_len",
               "definition (sequences per optimizer step x tokens per sequence)",
               lambda f, kb: Result(tokens_per_step(int(num(f, "global_batch_size")), int(num(f, "seq_len"))))),
    Derivation("tokens_per_s", ("tokens_per_step", "step_time_s"), "tokens_per_step / step_time_s",
               "definition (tokens per optimizer step over the step's wall time)",
               lambda f, kb: Result(num(f, "tokens_per_step") / num(f, "step_time_s"))),
    Derivation("tokens_per_s", ("phase", "tpot_ms", "batch_size"),
               "batch_size · 1000 / tpot_ms (a decode step gives each of its batch_size sequences one token), times "
               "data_parallel_size where given (each replica decodes its own batch)",
               f"{_DECODE_STEP}; {_SLO}", _decode_rate, gate=LLM_DECODE,
               optional=(*DECODE_GPU_FACTS, "data_parallel_size")),
    Derivation("ttft_queue_share", ("ttft_queue_ms", "ttft_ms"), "ttft_queue_ms / ttft_ms (at most 1)",
               "vLLM metrics (vllm:request_queue_time_seconds: time in the WAITING phase, part of the time to first "
               "token with the prefill)",
               lambda f, kb: clamp_fraction(num(f, "ttft_queue_ms") / num(f, "ttft_ms"), "queue share of TTFT")),
    Derivation("tokens_per_s", ("phase", "prompt_tokens", "batch_size", "ttft_ms", "ttft_queue_ms"),
               "prompt_tokens · batch_size · 1000 / (ttft_ms − ttft_queue_ms) (a prefill runs its batch_size "
               "prompts at once; the first token's time less its queueing)",
               f"{_PREFILL_STEP}; {_SLO}", _prefill_rate(True), gate=PREFILL_QUEUE_MEASURED,
               optional=DECODE_GPU_FACTS),
    Derivation("tokens_per_s", ("phase", "prompt_tokens", "batch_size", "ttft_ms"),
               "prompt_tokens · batch_size · 1000 / ttft_ms (a prefill runs its batch_size prompts at once; no "
               "request waits, so the first token's time is the prefill's)",
               f"{_PREFILL_STEP}; {_SLO}", _prefill_rate(False), gate=PREFILL_UNQUEUED, optional=DECODE_GPU_FACTS),
    Derivation("achieved_tflops", ("workload", "model_params", "tokens_per_s", "num_gpus", "num_layers",
                                   "hidden_size", "seq_len"),
               "(6·N + 12·L·H·Q·T) · tokens_per_s / num_gpus / 1e12 (N: active parameters when given; 4·N + "
               "2·trainable_params in place of 6·N when the trainable parameters are given)",
               f"{_KAPLAN}; {_PALM}; {_FROZEN}", _train_tflops(True), gate=TRAINING, substitutes=ACTIVE_PARAMS,
               optional=("trainable_params",)),
    Derivation("achieved_tflops", ("workload", "model_params", "tokens_per_s", "num_gpus"),
               "6·N · tokens_per_s / num_gpus / 1e12 (N: active parameters when given; 4·N + 2·trainable_params "
               "when the trainable parameters are given; attention term left out)",
               f"{_KAPLAN}; {_FROZEN}", _train_tflops(False), gate=TRAINING, substitutes=ACTIVE_PARAMS,
               optional=("trainable_params",)),
    Derivation("achieved_tflops", ("workload", "model_params", "tokens_per_s", "num_gpus"),
               "2·N · tokens_per_s / num_gpus / 1e12 (forward only; N: active parameters when given)",
               _KAPLAN, _forward_tflops, gate=PREFILL_OR_FORWARD, substitutes=ACTIVE_PARAMS),
    Derivation("kv_cache_bytes", ("num_layers", "num_kv_heads", "head_dim", "context_len", "dtype", "batch_size"),
               "2 · num_layers · num_kv_heads · head_dim · context_len · bytes per element · batch_size", _KV,
               _kv_cache, gate=SERVING),
    Derivation("decode_bytes_per_token", ("phase", "model_params", "bytes_per_weight", "kv_cache_bytes",
                                          "batch_size"),
               "(params · bytes per weight + kv_cache_bytes) / batch_size", _KV, _decode_bytes, gate=LLM_DECODE,
               substitutes=ACTIVE_PARAMS),
    Derivation("decode_weight_share", ("decode_bytes_per_token", "kv_cache_bytes", "batch_size"),
               "1 − kv_cache_bytes / (decode_bytes_per_token · batch_size) (the weights' share of the bytes a decode "
               "step reads; the rest is the KV cache)", _KV,
               lambda f, kb: clamp_fraction(1.0 - num(f, "kv_cache_bytes")
                                            / (num(f, "decode_bytes_per_token") * num(f, "batch_size")),
                                            "weights' share of the decode bytes"), gate=LLM_DECODE),
    Derivation("serving_memory_to_hbm", ("kv_cache_bytes", "model_params", "bytes_per_weight", "hardware",
                                         "num_gpus"),
               "(model_params · bytes per weight + kv_cache_bytes) / (num_gpus · HBM per GPU)", _KV, _serving_memory,
               gate=PUBLISHED_MEMORY),
    Derivation("weights_to_one_gpu", ("model_params", "bytes_per_weight", "hardware"),
               "model_params · bytes per weight / HBM of one GPU (the whole model on one GPU, however many serve it)",
               "definition (every weight is resident for the step: params x bytes per element)",
               _weights_to_one_gpu, gate=SERVING_MEMORY),
    # a service split wider than its weights need: what each GPU would hold with half the tensor-parallel GPUs
    Derivation("weights_to_gpu_at_half_tp", ("weights_to_one_gpu", "tensor_parallel_size"),
               "weights_to_one_gpu / (tensor_parallel_size / 2) (the weights' share of each GPU's memory were the "
               "model split over half as many GPUs)",
               "definition (tensor parallelism shards every layer's weights evenly over its GPUs: Shoeybi et al. "
               "2019, Megatron-LM, arXiv:1909.08053)",
               lambda f, kb: Result(num(f, "weights_to_one_gpu") / (num(f, "tensor_parallel_size") / 2.0)),
               gate=WIDE_TENSOR_PARALLEL),
    Derivation("one_gpu_decode_bw_util", ("tokens_per_s", "batch_size", "model_params", "bytes_per_weight",
                                          "peak_bandwidth"),
               "(tokens_per_s / batch_size) · params · bytes_per_weight / peak_bandwidth of one GPU (the weights "
               "read per decode step against one GPU's memory bandwidth, however many GPUs there are)",
               "LLM decode bytes per step; " + MBU_SOURCE, _one_gpu_decode_bw, gate=OVERSIZED_DECODE_COUNT_UNSAID),
    Derivation("weights_to_hbm", ("model_params", "bytes_per_weight", "hardware"),
               "model_params · bytes per weight / num_gpus / HBM per GPU (num_gpus, else tensor × pipeline "
               "parallel size, else 1 where the weights fit one GPU; every GPU holding an equal shard, the least any "
               "layout puts on one)",
               "definition (every weight is resident for the step: params x bytes per element); Pope et al. 2022, "
               "arXiv:2211.05102 §2 (weights are sharded at best evenly over the chips)",
               _weights_to_hbm, gate=SERVING_MEMORY_PER_GPU, optional=DECODE_GPU_FACTS),
    Derivation("achieved_tflops", ("phase", "model_params", "tokens_per_s"),
               "2·N · tokens_per_s / GPUs / 1e12 (LLM prefill, forward only; N: active parameters when given; GPUs: "
               "num_gpus, else tensor × pipeline parallel size, else 1)",
               _KAPLAN, _forward_tflops, gate=LLM_PREFILL_PER_GPU, substitutes=ACTIVE_PARAMS,
               optional=DECODE_GPU_FACTS),
)


def _vocab_alignment(f: Facts, kb: KnowledgeBase) -> Result:
    element = kb.dtype_bytes(str(f["dtype"]))
    row = round(int(num(f, "vocab_size")) * element)
    return Result(min(row & -row, 128) if row > 0 else 1, {"bytes per element": element})


MODEL_SHAPE: tuple[Derivation, ...] = (
    Derivation("vocab_alignment_bytes", ("vocab_size", "dtype"),
               "the largest power of two, up to 128, dividing vocab_size · bytes per element of dtype",
               _TENSOR_CORE_SHAPES, _vocab_alignment),
)
LLM_DECODE_UTIL = (
    Derivation("mem_bw_util", ("phase", "tokens_per_s", "prompt_tokens", "batch_size", "model_params",
                               "bytes_per_weight", "peak_bandwidth"),
               "model_params · bytes_per_weight · tokens_per_s / (prompt_tokens · batch_size) / GPUs / "
               "peak_bandwidth (LLM prefill: the weights read once a prefill; GPUs: num_gpus, else tensor × "
               "pipeline parallel size, else 1)",
               f"{_PREFILL_STEP}; " + MBU_SOURCE, _prefill_bandwidth, gate=LLM_PREFILL_PER_GPU,
               optional=DECODE_GPU_FACTS),
    Derivation("mem_bw_util", ("phase", "tokens_per_s", "decode_bytes_per_token", "peak_bandwidth"),
               "tokens_per_s · decode_bytes_per_token / num_gpus / peak_bandwidth "
               "(weights + KV cache; num_gpus, else tensor × pipeline parallel size, else 1)",
               f"{_KV}; " + MBU_SOURCE, _decode_kv_bandwidth(True), gate=LLM_DECODE_PER_GPU,
               optional=DECODE_GPU_FACTS),
)
LLM_DECODE_RATIO = (
    Derivation("bandwidth_to_peak", ("phase", "tokens_per_s", "decode_bytes_per_token", "peak_bandwidth"),
               "tokens_per_s · decode_bytes_per_token / num_gpus / peak_bandwidth "
               "(weights + KV cache; num_gpus, else tensor × pipeline parallel size, else 1; "
               "unclamped)",
               _KV, _decode_kv_bandwidth(False), gate=LLM_DECODE_PER_GPU,
               optional=DECODE_GPU_FACTS),
)
LAYOUT_UNSAID_DECODE = Gate(f"{LLM_DECODE.description}, over several GPUs (num_gpus) with neither a tensor- nor a "
                            "pipeline-parallel size given", all_of([
                                LLM_DECODE.on_static(), fact_test("num_gpus", ge=2),
                                fact_test("tensor_parallel_size", known=False),
                                fact_test("pipeline_parallel_size", known=False)]))
LLM_DECODE_IN_TURNS = (
    Derivation("mem_bw_util_if_in_turns", ("mem_bw_util", "num_gpus"),
               "mem_bw_util · num_gpus: each GPU's bandwidth while it works, if the GPUs took turns",
               _PIPELINE_DECODE, lambda f, kb: Result(num(f, "mem_bw_util") * num(f, "num_gpus")),
               gate=LAYOUT_UNSAID_DECODE),
)
LLM_SERVING_HOST_MEMORY: tuple[Derivation, ...] = (
    Derivation("ttft_over_target", ("ttft_ms", "ttft_target_ms"), "ttft_ms / ttft_target_ms", _SLO,
               lambda f, kb: Result(num(f, "ttft_ms") / num(f, "ttft_target_ms"))),
    Derivation("tpot_over_target", ("tpot_ms", "tpot_target_ms"), "tpot_ms / tpot_target_ms", _SLO,
               lambda f, kb: Result(num(f, "tpot_ms") / num(f, "tpot_target_ms"))),
    Derivation("itl_tail_ratio", ("itl_p99_ms", "itl_median_ms"), "itl_p99_ms / itl_median_ms",
               "Agrawal et al. 2024, Sarathi-Serve, OSDI '24, arXiv:2403.02310 (generation stalls show as inter-token "
               "latency spikes far above the median)",
               lambda f, kb: Result(num(f, "itl_p99_ms") / num(f, "itl_median_ms"))),
    Derivation("optimizer_step_frac", ("optimizer_step_s", "fwd_bwd_s"),
               "optimizer_step_s / (optimizer_step_s + fwd_bwd_s)",
               "ZeRO-Offload, Ren et al. 2021, arXiv:2101.06840 (the CPU optimizer step must not dominate the step)",
               lambda f, kb: Result(num(f, "optimizer_step_s")
                                    / (num(f, "optimizer_step_s") + num(f, "fwd_bwd_s")))),
    # forward and backward not timed: the step's wall time holds the optimizer step, so optimizer_step_s over it is
    # a lower bound of the share above (the step also holds waits and copies)
    Derivation("optimizer_step_frac", ("optimizer_step_s", "step_time_s"), "optimizer_step_s / step_time_s",
               "ZeRO-Offload, Ren et al. 2021, arXiv:2101.06840 (the CPU optimizer step must not dominate the step)",
               lambda f, kb: clamp_fraction(num(f, "optimizer_step_s") / num(f, "step_time_s"),
                                            "optimizer step share"),
               gate=FWD_BWD_UNTIMED),
    Derivation("host_sync_wait_frac", ("host_sync_wait_s", "step_time_s"), "host_sync_wait_s / step_time_s",
               "PyTorch performance tuning guide (avoid unnecessary CPU-GPU synchronization)",
               lambda f, kb: clamp_fraction(num(f, "host_sync_wait_s") / num(f, "step_time_s"),
                                             "host synchronization share")),
    Derivation("storage_read_util", ("storage_read_mb_s", "storage_bandwidth_mb_s"),
               "storage_read_mb_s / storage_bandwidth_mb_s", "seed Table 1 (data axis: I/O bandwidth, disk/PCIe) and "
               "Table 4 (data row: iostat)",
               lambda f, kb: Result(num(f, "storage_read_mb_s") / num(f, "storage_bandwidth_mb_s"))),
    Derivation("sharding_degree", ("num_gpus",), "1 on one GPU (there is nothing to shard the states across)",
               _ZERO, lambda f, kb: Result(1), gate=ONE_GPU),
    # parameter-efficient fine-tuning (LoRA): the optimizer trains a few parameters, the frozen rest keeps its weight,
    # in weight_bits where the base is quantized (QLoRA: 4-bit NF4)
    Derivation("model_state_bytes", ("workload", "model_params", "trainable_params", "sharding_degree", "weight_bits"),
               "(bytes per parameter (optimizer on the GPU) · trainable_params + weight_bits / 8 · "
               "(model_params − trainable_params)) / sharding_degree", f"{_ZERO}; {_LORA}; {_QLORA}",
               _model_states(False, trainable=True, quantized_base=True), gate=STATES_ON_GPU),
    Derivation("model_state_bytes", ("workload", "model_params", "trainable_params", "sharding_degree",
                                     "optimizer_offload", "weight_bits"),
               "(bytes per parameter (optimizer states on the host) · trainable_params + weight_bits / 8 · "
               "(model_params − trainable_params)) / sharding_degree",
               f"{_ZERO}; Ren et al. 2021 (ZeRO-Offload), arXiv:2101.06840; {_LORA}; {_QLORA}",
               _model_states(True, trainable=True, quantized_base=True), gate=STATES_OFFLOADED),
    Derivation("model_state_bytes", ("workload", "model_params", "trainable_params", "sharding_degree"),
               "(bytes per parameter (optimizer on the GPU) · trainable_params + bytes per frozen parameter · "
               "(model_params − trainable_params)) / sharding_degree", f"{_ZERO}; {_LORA}",
               _model_states(False, trainable=True), gate=STATES_ON_GPU),
    Derivation("model_state_bytes", ("workload", "model_params", "trainable_params", "sharding_degree",
                                     "optimizer_offload"),
               "(bytes per parameter (optimizer states on the host) · trainable_params + bytes per frozen parameter · "
               "(model_params − trainable_params)) / sharding_degree",
               f"{_ZERO}; Ren et al. 2021 (ZeRO-Offload), arXiv:2101.06840; {_LORA}",
               _model_states(True, trainable=True), gate=STATES_OFFLOADED),
    Derivation("model_state_bytes", ("workload", "model_params", "sharding_degree"),
               "bytes per parameter (optimizer on the GPU) · model_params / sharding_degree", _ZERO,
               _model_states(False), gate=STATES_ON_GPU),
    Derivation("model_state_bytes", ("workload", "model_params", "sharding_degree", "optimizer_offload"),
               "bytes per parameter (16-bit weights and gradients; optimizer states on the host) · model_params / "
               "sharding_degree", f"{_ZERO}; Ren et al. 2021 (ZeRO-Offload), arXiv:2101.06840",
               _model_states(True), gate=STATES_OFFLOADED),
    Derivation("optimizer_over_floor", ("workload", "optimizer_step_s", "model_params", "peak_bandwidth"),
               "optimizer_step_s / (bytes per trained parameter · (trainable_params or model_params) / "
               "sharding_degree / peak_bandwidth) (sharding_degree: 1 unless given)",
               f"{_ZERO}; PyTorch docs, torch.optim (the for-loop, foreach and fused implementations of each "
               "optimizer)", _optimizer_over_floor, gate=STATES_ON_GPU_WITH_TRAFFIC,
               optional=("trainable_params", "sharding_degree")),
    Derivation("activation_bytes", ("workload", "seq_len", "micro_batch_size", "hidden_size", "num_layers"),
               "coefficient · seq_len · micro_batch_size · hidden_size · num_layers", _ACTIVATIONS,
               _activations("micro_batch_size"), gate=TRAINING_MEMORY),
    Derivation("activation_bytes", ("workload", "seq_len", "batch_size", "hidden_size", "num_layers"),
               "coefficient · seq_len · batch_size · hidden_size · num_layers (batch_size as the micro-batch)",
               _ACTIVATIONS, _activations("batch_size"), gate=TRAINING_MEMORY),
    Derivation("gradient_accumulation_steps", ("global_batch_size", "micro_batch_size", "data_parallel_size"),
               "global_batch_size / (micro_batch_size · data_parallel_size)", _BATCHES,
               _accumulation("data_parallel_size")),
    Derivation("gradient_accumulation_steps", ("global_batch_size", "micro_batch_size", "num_gpus"),
               "global_batch_size / (micro_batch_size · num_gpus) (every GPU a data-parallel rank)", _BATCHES,
               _accumulation("num_gpus"), gate=NO_PIPELINE),
    Derivation("pipeline_bubble_frac", ("pipeline_parallel_size", "gradient_accumulation_steps"),
               "(p − 1) / (m + p − 1), p = pipeline_parallel_size, m = gradient_accumulation_steps", _BUBBLE,
               lambda f, kb: Result(pipeline_bubble(int(num(f, "pipeline_parallel_size")),
                                                    num(f, "gradient_accumulation_steps"))),
               gate=PIPELINED),
    Derivation("decode_stages_busy_frac", ("pipeline_parallel_size", "batch_size"),
               "min(1, batch_size / pipeline_parallel_size): the share of the stages that can decode at once, each "
               "sequence in one stage at a time", _PIPELINE_DECODE,
               lambda f, kb: Result(min(1.0, num(f, "batch_size") / num(f, "pipeline_parallel_size"))),
               gate=PIPELINED_DECODE),
    Derivation("grad_sync_reduction", ("gradient_accumulation_steps", "grad_sync_per_micro_batch"),
               "gradient_accumulation_steps (one all-reduce per optimizer step instead of one per micro-batch)",
               _NO_SYNC, lambda f, kb: Result(num(f, "gradient_accumulation_steps")), gate=SYNCS_EVERY_MICRO_BATCH),
    Derivation("model_state_to_hbm", ("model_state_bytes", "hardware"), "model_state_bytes / HBM per GPU", _ZERO,
               _to_hbm("model_state_bytes"), gate=PUBLISHED_MEMORY),
    Derivation("training_memory_to_hbm", ("model_state_bytes", "activation_bytes", "hardware"),
               "(model_state_bytes + activation_bytes) / HBM per GPU", f"{_ZERO}; {_ACTIVATIONS}",
               _to_hbm("model_state_bytes", "activation_bytes"), gate=PUBLISHED_MEMORY),
)
