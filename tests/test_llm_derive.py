"""Issue 13: LLM training and serving, host-side and memory-capacity derivations, each against a hand calculation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import expert
from expert._resources import examples_dir
from expert.derive.formulas import (
    activation_bytes,
    decode_bytes_per_token,
    inference_flops_per_token,
    kv_cache_bytes,
    model_state_bytes,
    per_gpu_tflops,
    training_flops_per_token,
)
from expert.derive.graph import derive
from expert.observations.file import read_observation_file

EXPERT = expert.default_expert()
KB = EXPERT.kb
approx = pytest.approx


def _derived(**facts: Any) -> dict[str, float]:
    from expert.observations.normalise import convert

    observed = {name: convert(KB.facts[name], value, KB) for name, value in facts.items()}
    return {name: d.value for name, d in derive(observed, KB).items()}


# ---- the pure formulas ----------------------------------------------------------------------------------------------

def test_training_flops_per_token_dense_and_with_attention() -> None:
    assert training_flops_per_token(7e9) == 4.2e10  # 6 x 7e9
    # 6 x 6.7e9 + 12 x 32 layers x 4096 hidden x 4096 tokens = 4.02e10 + 6,442,450,944
    assert training_flops_per_token(6.7e9, 32, 4096, 4096) == approx(46_642_450_944)
    assert training_flops_per_token(6.7e9, 32, None, 4096) == approx(4.02e10)  # an incomplete shape: no attention term


def test_inference_flops_and_per_gpu_rate() -> None:
    assert inference_flops_per_token(7e9) == 1.4e10
    # 4.2e10 FLOP/token x 24,000 tokens/s over 8 GPUs = 126 TFLOP/s per GPU
    assert per_gpu_tflops(4.2e10, 24_000, 8) == approx(126.0)


def test_kv_cache_and_decode_bytes_per_token() -> None:
    # Llama-3-8B: 2 x 32 layers x 8 KV heads x 128 x 4096 tokens x 2 B = 536,870,912 B per sequence; x 32 sequences
    assert kv_cache_bytes(32, 8, 128, 4096, 2, 1) == 536_870_912
    assert kv_cache_bytes(32, 8, 128, 4096, 2, 32) == 17_179_869_184
    # (8e9 x 2 B of weights + 17,179,869,184 B of KV cache) / 32 tokens per step
    assert decode_bytes_per_token(8e9, 2, 17_179_869_184, 32) == approx(1_036_870_912)


def test_model_state_and_activation_bytes() -> None:
    assert model_state_bytes(13e9, 1, 16.0) == 208e9  # 16 B x 13e9
    assert model_state_bytes(13e9, 8, 16.0) == 26e9
    assert model_state_bytes(13e9, 1, 4.0) == 52e9  # optimizer offloaded: 16-bit weights and gradients stay
    # 34 x 4096 x 4 x 5120 x 40 = 114,085,068,800 B
    assert activation_bytes(4096, 4, 5120, 40, 34.0) == 114_085_068_800


# ---- the registry: which formula applies where -------------------------------------------------------------------

def test_mfu_from_tokens_per_s_with_the_attention_term() -> None:
    d = _derived(workload="training", hardware="h100-sxm", dtype="bf16", num_gpus=8, model_params="6.7B",
                 tokens_per_s=24_000, seq_len=4096, num_layers=32, hidden_size=4096)
    # 46,642,450,944 FLOP/token x 3,000 tokens/s per GPU = 139.93 TFLOP/s; over the 989.4 dense bf16 peak
    assert d["achieved_tflops"] == approx(139.927, rel=1e-4)
    assert d["mfu"] == approx(139.927 / 989.4, rel=1e-4)


def test_mfu_from_tokens_per_s_dense_and_moe() -> None:
    dense = _derived(workload="training", hardware="h100-sxm", dtype="bf16", num_gpus=1, model_params="7B",
                     tokens_per_s=3000)
    assert dense["achieved_tflops"] == approx(126.0)  # 6 x 7e9 x 3000
    assert dense["mfu"] == approx(126.0 / 989.4)
    moe = _derived(workload="training", hardware="h100-sxm", dtype="bf16", num_gpus=8, model_params="47B",
                   active_params="13B", tokens_per_s=1000)
    assert moe["achieved_tflops"] == approx(9.75)  # 6 x 13e9 x 1000 / 8: the active parameters


def test_a_frozen_base_computes_no_weight_gradients() -> None:
    """LoRA: forward 2·N, activation gradients 2·N, weight gradients only for the trainable parameters."""
    assert training_flops_per_token(7e9, trainable=4e7) == approx(4 * 7e9 + 2 * 4e7)
    assert training_flops_per_token(7e9, trainable=7e9) == training_flops_per_token(7e9)  # full fine-tune: 6·N
    assert training_flops_per_token(7e9, trainable=9e9) == training_flops_per_token(7e9)  # more than N: every one
    # with the attention term, which a frozen base still runs forward and backward
    assert training_flops_per_token(6.7e9, 32, 4096, 4096, trainable=0.0) == approx(4 * 6.7e9 + 6_442_450_944)
    lora = _derived(workload="training", hardware="a100-sxm-80gb", dtype="bf16", num_gpus=1, model_params="7B",
                    trainable_params="40M", tokens_per_s=3000)
    # (4 x 7e9 + 2 x 4e7) x 3000 = 84.24 TFLOP/s: MFU 27 % of the 312 dense bf16 peak, not 6·N's 40 %
    assert lora["achieved_tflops"] == approx(84.24)
    assert lora["mfu"] == approx(84.24 / 312)


def test_tokens_per_s_needs_num_gpus_and_the_job_kind() -> None:
    assert "achieved_tflops" not in _derived(workload="training", hardware="h100-sxm", dtype="bf16",
                                             model_params="7B", tokens_per_s=3000)
    assert "achieved_tflops" not in _derived(hardware="h100-sxm", dtype="bf16", num_gpus=1, model_params="7B",
                                             tokens_per_s=3000)


def test_prefill_is_two_n_per_token_and_decode_gets_no_flop_rate() -> None:
    prefill = _derived(workload="inference", phase="prefill", hardware="h100-sxm", dtype="bf16", num_gpus=1,
                       model_params="7B", tokens_per_s=10_000)
    assert prefill["achieved_tflops"] == approx(140.0)  # 2 x 7e9 x 10,000
    decode = _derived(workload="inference", phase="decode", hardware="h100-sxm", dtype="bf16", num_gpus=1,
                      model_params="7B", tokens_per_s=100, batch_size=1)
    assert "achieved_tflops" not in decode


def test_prefill_intensity_from_the_prompt_length() -> None:
    """A prefill does 2 FLOPs per weight for every token it holds: 2 x tokens / bytes a weight. One 4,096-token
    prompt in bf16 is 4,096 FLOP/B, past the ridge whatever prefills with it; one 64-token prompt is below it, so
    without the prompts per prefill (batch_size) the intensity stays unknown; 8 prompts make 512; a mixture of
    experts reads every expert, so its active share scales the intensity (DeepSeek-V3: 37B of 671B)."""
    base = dict(workload="inference", phase="prefill", hardware="h100-sxm", dtype="bf16")
    long = _derived(**base, prompt_tokens=4096)
    assert long["arithmetic_intensity"] == approx(4096.0)
    assert long["prompt_to_ridge"] == approx(4096.0 / long["ridge_point"])
    short = _derived(**base, prompt_tokens=64)
    assert short["prompt_to_ridge"] < 1 and "arithmetic_intensity" not in short
    assert _derived(**base, prompt_tokens=64, batch_size=8)["arithmetic_intensity"] == approx(512.0)
    moe = _derived(**{**base, "hardware": "h200-sxm", "dtype": "fp8"}, prompt_tokens=4096, model_params="671B",
                   active_params="37B")
    assert moe["arithmetic_intensity"] == approx(2 * 4096 * 37 / 671)
    # a decode's intensity stays its batch's, whatever the prompt was
    decode = _derived(**{**base, "phase": "decode"}, prompt_tokens=4096, batch_size=4)
    assert decode["arithmetic_intensity"] == approx(4.0) and "prompt_to_ridge" not in decode


def test_decode_intensity_counts_the_kv_cache_when_its_shape_is_given() -> None:
    """A decode step reads every weight once and each sequence's KV cache: 8B in bf16 at batch 512 with 512-token
    contexts does 2 x 8e9 x 512 FLOPs over 16 GB of weights and 2 x 32 x 8 x 128 x 512 x 2 x 512 = 34.4 GB of KV
    cache; without the cache's shape, the weights alone (2 x 512 / 2)."""
    base = dict(workload="inference", phase="decode", hardware="h100-sxm", dtype="bf16", model_params="8B",
                batch_size=512)
    kv = 2 * 32 * 8 * 128 * 512 * 2 * 512
    shaped = _derived(**base, num_layers=32, num_kv_heads=8, head_dim=128, context_len=512)
    assert shaped["arithmetic_intensity"] == approx(2 * 8e9 * 512 / (16e9 + kv))
    assert shaped["arithmetic_intensity"] < shaped["ridge_point"] < 512
    assert _derived(**base)["arithmetic_intensity"] == approx(512.0)


def test_prefill_rate_bandwidth_and_mfu_from_the_time_to_first_token() -> None:
    """With no request waiting, the time to first token is the prefill's: 64 tokens in 40 ms on an 8B bf16 model is
    1,600 tokens/s, 25 prefills a second reading 16 GB each (400 GB/s, 0.119 of 3,350) and 25.6 TFLOP/s; a measured
    queue time is taken off; with requests waiting and no queue time, nothing is derived."""
    base = dict(workload="inference", phase="prefill", hardware="h100-sxm", dtype="bf16", model_params="8B",
                prompt_tokens=64, batch_size=1, ttft_ms="40 ms")
    unqueued = _derived(**base, requests_waiting=0)
    assert unqueued["tokens_per_s"] == approx(1600.0)
    assert unqueued["mem_bw_util"] == approx(16e9 * 25 / 3.35e12)
    assert unqueued["achieved_tflops"] == approx(25.6)
    # what removing launch and host overhead can reach: at most the part of the prefill not reading the weights
    assert unqueued["overhead_reach_frac"] == approx(1 - unqueued["mem_bw_util"])
    assert _derived(**base, ttft_queue_ms="30 ms")["tokens_per_s"] == approx(6400.0)  # a 10 ms prefill
    assert "tokens_per_s" not in _derived(**base, requests_waiting=5)
    assert "tokens_per_s" not in _derived(**base, ttft_queue_ms="39 ms")  # 97.5 % queued: too little left to time
    # over 4 tensor-parallel GPUs each reads a quarter of the weights and does a quarter of the FLOPs
    sharded = _derived(**base, requests_waiting=0, tensor_parallel_size=4)
    assert sharded["mem_bw_util"] == approx(unqueued["mem_bw_util"] / 4)
    assert sharded["achieved_tflops"] == approx(6.4)


def test_tokens_per_s_from_tokens_per_step() -> None:
    assert _derived(tokens_per_step="4M", step_time_s="2 s")["tokens_per_s"] == approx(2e6)


def test_decode_rate_from_the_time_per_output_token() -> None:
    """A decode step gives each of its sequences one token, so TPOT is the step time: 32 sequences at 40 ms per
    token make 800 tokens/s; over 4 GPUs they are taken as one sharded model (the note says so); a given rate wins,
    and a prefill or a training job derives nothing from a TPOT."""
    facts = dict(workload="inference", phase="decode", batch_size=32, tpot_ms="40 ms")
    assert _derived(**facts)["tokens_per_s"] == approx(800)
    report = EXPERT.diagnose({**facts, "num_gpus": 4})
    rate = report.derived["tokens_per_s"]
    assert rate.value == approx(800) and rate.note is not None and "sharded" in rate.note
    assert "sharded" not in (EXPERT.diagnose(facts).derived["tokens_per_s"].note or "")
    assert "tokens_per_s" not in _derived(**{**facts, "phase": "prefill"})
    assert "tokens_per_s" not in _derived(**{**facts, "workload": "training"})
    assert "tokens_per_s" not in _derived(**facts, tokens_per_s=1000)  # observed: nothing to derive
    # batch-1 Llama-2-7B bf16 at 30 ms per token on an A100: 33.3 tokens/s x 13.4e9 B = 447 GB/s, 0.219 of 2,039
    decode = _derived(workload="inference", phase="decode", batch_size=1, tpot_ms="30 ms", model_params="6.7B",
                      dtype="bf16", hardware="a100-sxm-80gb")
    assert decode["mem_bw_util"] == approx(1000 / 30 * 6.7e9 * 2 / 2.039e12)


def test_decode_rate_of_data_parallel_replicas_is_their_sum() -> None:
    """Eight one-GPU replicas of Llama-3-8B (vLLM data parallelism), each decoding 64 sequences at 25 ms a token:
    the service makes 8 x 2,560 tokens/s, and each GPU reads its 16 GB of weights 40 times a second (19 % of an
    H100's bandwidth), not an eighth of that."""
    facts = dict(workload="inference", phase="decode", hardware="h100-sxm", dtype="bf16", model_params="8B",
                 num_gpus=8, data_parallel_size=8, batch_size=64, tpot_ms=25)
    report = EXPERT.diagnose(facts)
    rate = report.derived["tokens_per_s"]
    assert rate.value == approx(8 * 64 * 1000 / 25)
    assert rate.note is not None and "data-parallel replicas" in rate.note and "sharded" not in rate.note
    assert report.derived["mem_bw_util"].value == approx(1000 / 25 * 16e9 / 3.35e12)


def test_decode_bandwidth_includes_the_kv_cache() -> None:
    facts = dict(workload="inference", phase="decode", hardware="h100-sxm", dtype="bf16", num_gpus=1, batch_size=32,
                 model_params="8B", tokens_per_s=2400)
    weights_only = _derived(**facts)
    # 2400 / 32 steps/s x 16e9 B = 1.2e12 B/s over 3.35e12
    assert weights_only["mem_bw_util"] == approx(1200 / 3350)
    with_kv = _derived(**facts, num_layers=32, num_kv_heads=8, head_dim=128, context_len=4096)
    assert with_kv["kv_cache_bytes"] == 17_179_869_184
    # 2400 tokens/s x 1,036,870,912 B/token = 2,488.5 GB/s over 3,350
    assert with_kv["mem_bw_util"] == approx(2400 * 1_036_870_912 / 3.35e12)
    assert with_kv["bandwidth_to_peak"] == approx(with_kv["mem_bw_util"])
    # weights + KV cache over one H100's 80 GB
    assert with_kv["serving_memory_to_hbm"] == approx((16e9 + 17_179_869_184) / 80e9)


def test_decode_bandwidth_is_per_gpu() -> None:
    """tokens_per_s is the job's: Llama-2-70B bf16 at 35 tokens/s over 4 H100s (tensor parallel) reads
    140e9 B x 35 / 4 = 1,225 GB/s per GPU, 0.366 of 3,350 GB/s; on one GPU the same rate would be 1.46x the peak."""
    facts = dict(workload="inference", phase="decode", hardware="h100-sxm", dtype="bf16", batch_size=1,
                 model_params="70B", tokens_per_s=35)
    four = _derived(**facts, num_gpus=4)
    assert four["mem_bw_util"] == approx(140e9 * 35 / 4 / 3.35e12)
    assert four["bandwidth_to_peak"] == approx(four["mem_bw_util"])
    # no num_gpus: one GPU is taken only where it can hold the weights (an 8B model); 140 GB cannot be on one H100, so
    # nothing per GPU is derived until the count is given (rule capacity-weights-need-the-gpu-count asks for it)
    unsaid = _derived(**facts)
    assert not {"mem_bw_util", "bandwidth_to_peak", "weights_to_hbm"} & set(unsaid)
    assert unsaid["weights_to_one_gpu"] == approx(140e9 / 80e9)
    small = _derived(**{**facts, "model_params": "8B"})
    assert small["bandwidth_to_peak"] == approx(16e9 * 35 / 3.35e12)
    assert small["weights_to_hbm"] == approx(16e9 / 80e9)
    assert "gpu_count_needed" in {f.id for f in EXPERT.diagnose(facts).findings}
    with_kv = _derived(**facts, num_gpus=4, num_layers=80, num_kv_heads=8, head_dim=128, context_len=4096)
    kv = 2 * 80 * 8 * 128 * 4096 * 2  # 1,342,177,280 B for one sequence
    assert with_kv["mem_bw_util"] == approx((140e9 + kv) * 35 / 4 / 3.35e12)
    report = EXPERT.diagnose({**facts, "num_gpus": 4})
    assert not report.conflicts  # no "above the peak bandwidth" from the job's total rate
    assert report.derived["mem_bw_util"].inputs["num_gpus"] == 4


def test_missing_names_the_one_fact_that_completes_a_derivation() -> None:
    """Model size and tokens/s on a known part: num_gpus alone completes the achieved FLOP/s and so the MFU."""
    report = EXPERT.diagnose({"workload": "training", "hardware": "h100-sxm", "dtype": "bf16", "model_params": 7e9,
                              "tokens_per_s": 3000})
    missing = {m.fact: m for m in report.missing}
    assert "num_gpus" in missing and "compute-high-mfu" in missing["num_gpus"].rules
    alone = EXPERT.diagnose({"workload": "training", "hardware": "h100-sxm", "dtype": "bf16"})
    assert "compute-high-mfu" not in {r for m in alone.missing if m.fact == "num_gpus" for r in m.rules}


def test_one_gpu_shards_nothing() -> None:
    """num_gpus 1 -> sharding_degree 1, so the model states are 16 B x params on that GPU (70B: 1.12e12 B)."""
    d = _derived(workload="training", hardware="a100-sxm-80gb", model_params="70B", num_gpus=1)
    assert d["sharding_degree"] == 1
    assert d["model_state_bytes"] == approx(70e9 * 16)
    assert d["model_state_to_hbm"] == approx(70e9 * 16 / 80e9)
    assert "sharding_degree" not in _derived(workload="training", model_params="70B", num_gpus=8)


def test_training_jobs_hold_no_kv_cache() -> None:
    d = _derived(workload="training", dtype="bf16", batch_size=32, num_layers=32, num_kv_heads=8, head_dim=128,
                 context_len=4096)
    assert "kv_cache_bytes" not in d


def test_memory_capacity_against_hbm() -> None:
    d = _derived(workload="training", hardware="h100-sxm", dtype="bf16", model_params="13B", sharding_degree=1,
                 batch_size=4, seq_len=4096, num_layers=40, hidden_size=5120)
    assert d["model_state_bytes"] == 208e9
    assert d["model_state_to_hbm"] == approx(2.6)  # 208 GB / 80 GB
    assert d["training_memory_to_hbm"] == approx((208e9 + 114_085_068_800) / 80e9)
    offloaded = _derived(workload="training", hardware="h100-sxm", dtype="bf16", model_params="13B",
                         sharding_degree=1, optimizer_offload="yes")
    assert offloaded["model_state_to_hbm"] == approx(0.65)  # 4 B x 13e9 / 80 GB
    assert "model_state_bytes" not in _derived(workload="inference", model_params="13B", sharding_degree=1)


def test_host_side_shares() -> None:
    d = _derived(optimizer_step_s="2.6 s", fwd_bwd_s="900 ms", host_sync_wait_s="60 ms", step_time_s="250 ms",
                 storage_read_mb_s="480 MB/s", storage_bandwidth_mb_s="0.5 GB/s", ttft_ms=4200, ttft_target_ms=1000,
                 tpot_ms=38, tpot_target_ms=50)
    assert d["optimizer_step_frac"] == approx(2.6 / 3.5)
    assert d["host_sync_wait_frac"] == approx(0.24)
    assert d["storage_read_util"] == approx(0.96)
    assert d["ttft_over_target"] == approx(4.2)
    assert d["tpot_over_target"] == approx(0.76)


# ---- the bundled examples -------------------------------------------------------------------------------------------

EXAMPLES = {
    "llm_pretraining_mfu": None,
    "llm_decode_kv_cache": "memory",
    "kv_cache_bound_server": "capacity",  # KV-cache capacity, not bandwidth
    "offloaded_optimizer_weak_host": "host",
    "storage_bound_input": "input",
    "model_does_not_fit": "capacity",  # the states do not fit: what fits limits the job
}


@pytest.mark.parametrize(("name", "verdict"), sorted(EXAMPLES.items()))
def test_issue_13_examples(name: str, verdict: str | None) -> None:
    path: Path = examples_dir() / f"{name}.yaml"
    report = EXPERT.diagnose(read_observation_file(path).observations)
    assert report.bottleneck == verdict
    findings = {f.id for f in report.findings}
    wasted = {w.id for w in report.wasted}
    recommended = {r.id for r in report.recommended}
    expected = {
        "llm_pretraining_mfu": lambda: "mfu_fail" in findings,
        "llm_decode_kv_cache": lambda: "bandwidth_saturated" in findings,
        "kv_cache_bound_server": lambda: "kv_cache_full" in findings and "batching" in wasted,
        "offloaded_optimizer_weak_host": lambda: "offloaded_optimizer_dominates" in findings
        and {"more_peak_flops", "cuda_graphs", "lower_precision"} <= wasted,
        "storage_bound_input": lambda: "storage_bound" in findings and "more_dataloader_workers" in wasted
        and "faster_storage" in recommended,
        "model_does_not_fit": lambda: "model_states_do_not_fit" in findings and "zero_sharding" in recommended
        and "activation_checkpointing" in wasted,
    }[name]
    assert expected(), (findings, recommended, wasted)
