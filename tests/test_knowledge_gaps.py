"""The knowledge gaps of issues 12 and 13, closed as data: gain bounds from the catalog's peak ratios, the
memory-capacity regime, preemptions, micro/global batch and gradient accumulation, the memory constants in
knowledge_base/memory.yaml; and scenarios a new user would bring, each checked the way an expert would sign it.

Every number below is worked by hand in the comment beside it."""

from __future__ import annotations

from typing import Any

import pytest

import expert
from expert._resources import examples_dir
from expert.derive.formulas import (
    activation_bytes,
    gradient_accumulation_steps,
    model_state_bytes,
    pipeline_bubble,
    tokens_per_step,
)
from expert.observations.file import read_observation_file
from expert.report.model import Report

EXPERT = expert.default_expert()
KB = EXPERT.kb


def _diagnose(facts: dict[str, Any]) -> Report:
    return EXPERT.diagnose(facts)


# ---- pure formulas against a hand calculation ------------------------------------------------------------------


def test_gradient_accumulation_by_hand() -> None:
    assert gradient_accumulation_steps(1024, 4, 64) == 4.0  # 1024 / (4 x 64)
    assert gradient_accumulation_steps(512, 2, 64) == 4.0  # 512 / 128
    assert gradient_accumulation_steps(1000, 3, 64) == pytest.approx(5.2083, rel=1e-4)  # 1000 / 192: inconsistent


def test_pipeline_bubble_by_hand() -> None:
    assert pipeline_bubble(8, 8) == pytest.approx(7 / 15)  # GPipe: (p - 1) / (m + p - 1)
    assert pipeline_bubble(4, 16) == pytest.approx(3 / 19)  # four micro-batches per stage: 16 %
    assert pipeline_bubble(1, 8) == 0.0


def test_tokens_per_step_by_hand() -> None:
    assert tokens_per_step(1024, 4096) == 4_194_304  # Llama 2's 4M-token global batch
    assert tokens_per_step(1, 1) == 1


def test_memory_constants_come_from_the_knowledge_base() -> None:
    memory = KB.memory
    assert memory is not None
    assert memory.optimizer_on_gpu.bytes_per_param == 16  # 2 + 2 + 4 + 4 + 4 (ZeRO §3.1)
    assert sum(memory.optimizer_on_gpu.parts.values()) == 16
    assert memory.optimizer_offloaded.bytes_per_param == 4  # 16-bit weights and gradients stay
    assert memory.activations.coefficient == 34  # Korthikanti et al. 2022, eq. 1
    assert "1910.02054" in memory.optimizer_on_gpu.source and "2205.05198" in memory.activations.source
    # 13B x 16 B = 208 GB; 34 x 4096 x 4 x 5120 x 40 = 114,085,068,800 B
    assert model_state_bytes(13e9, 1, memory.optimizer_on_gpu.bytes_per_param) == 208e9
    assert activation_bytes(4096, 4, 5120, 40, memory.activations.coefficient) == 114_085_068_800


def test_the_memory_model_is_read_not_repeated(tmp_path: Any) -> None:
    """Change the constants in a copy of the knowledge base: the derived bytes follow."""
    import shutil

    from expert._resources import data_dir
    from expert.kb.knowledge import KnowledgeBase

    kb_dir = tmp_path / "knowledge_base"
    shutil.copytree(data_dir("knowledge_base"), kb_dir)
    path = kb_dir / "memory.yaml"
    text = path.read_text().replace("bytes_per_param: 16", "bytes_per_param: 18").replace(
        "adam_variance_fp32: 4}", "adam_variance_fp32: 4, loss_scale_and_buffers: 2}")
    path.write_text(text.replace("coefficient: 34", "coefficient: 17"))
    KnowledgeBase.load(kb_dir)  # the changed copy still validates (parts add up)
    other = expert.Expert(knowledge_base=kb_dir, engine="pure")
    report = other.diagnose({"workload": "training", "hardware": "h100-sxm", "dtype": "bf16", "model_params": 1e9,
                             "sharding_degree": 1, "batch_size": 1, "seq_len": 1000, "hidden_size": 1000,
                             "num_layers": 10})
    assert report.derived["model_state_bytes"].value == 18e9  # 18 B x 1e9
    assert report.derived["activation_bytes"].value == 17 * 1000 * 1 * 1000 * 10


def test_a_knowledge_base_without_the_memory_model_derives_no_model_state_bytes() -> None:
    import copy

    kb = copy.copy(KB)
    kb.memory = None
    from expert.derive.graph import derive

    derived = derive({"workload": "training", "model_params": 1e9, "sharding_degree": 1}, kb)
    assert "model_state_bytes" not in derived


# ---- derivations: batches, tokens per step, preemptions -----------------------------------------------------------


def _assert_ratio(facts: dict[str, Any], name: str, ratio: float | None) -> None:
    """The derived ratio `name` on these facts is `ratio`, or not derived where `ratio` is None."""
    derived = _diagnose(facts).derived
    if ratio is None:
        assert name not in derived
    else:
        assert derived[name].value == pytest.approx(ratio)


@pytest.mark.parametrize(("facts", "expected", "note"), [
    ({"global_batch_size": 1024, "micro_batch_size": 4, "data_parallel_size": 64, "num_gpus": 256}, 4.0, None),
    # no data-parallel size: every GPU a rank, said in a note
    ({"global_batch_size": 512, "micro_batch_size": 2, "num_gpus": 64}, 4.0, "every GPU"),
    # 1000 / (3 x 64) = 5.21: the three figures disagree
    ({"global_batch_size": 1000, "micro_batch_size": 3, "data_parallel_size": 64}, 1000 / 192, "disagree"),
], ids=["data-parallel-given", "num-gpus-as-ranks", "inconsistent"])
def test_gradient_accumulation_is_derived(facts: dict[str, Any], expected: float, note: str | None) -> None:
    d = _diagnose({"workload": "training", **facts}).derived["gradient_accumulation_steps"]
    assert d.value == pytest.approx(expected)
    assert (d.note is None) if note is None else (note in (d.note or ""))


def test_llama2_7b_mfu_from_the_global_batch() -> None:
    # Llama 2 7B: 4M-token global batch (1024 x 4096) on 64 A100s; 184,320 GPU-hours for 2T tokens is 3,014 tok/s/GPU,
    # 192,896 tok/s in all, so a step of 4,194,304 tokens takes 21.74 s.
    # MFU = 6 x 6.74e9 x 193,286 / 64 / 312e12 = 0.39.
    report = _diagnose({"workload": "training", "hardware": "a100-sxm-80gb", "dtype": "bf16", "model_params": 6.74e9,
                        "num_gpus": 64, "global_batch_size": 1024, "seq_len": 4096, "step_time_s": 21.7})
    facts = report.facts()
    assert facts["tokens_per_step"] == 4_194_304
    assert facts["tokens_per_s"] == pytest.approx(4_194_304 / 21.7)
    assert facts["mfu"] == pytest.approx(6 * 6.74e9 * (4_194_304 / 21.7) / 64 / 312e12, rel=1e-6)
    assert 0.38 < float(facts["mfu"]) < 0.40


def test_preemptions_are_a_fact_per_minute() -> None:
    spec = KB.facts["preemptions"]
    assert spec.unit == "preemptions/min" and spec.question and "num_preemptions_total" in spec.description
    for name in ("micro_batch_size", "global_batch_size", "data_parallel_size"):
        assert KB.facts[name].question and KB.facts[name].type == "integer"
    assert KB.facts["tokens_per_step"].kind == "both"


# ---- gain bounds: the catalog's peak ratios ----------------------------------------------------------------------


@pytest.mark.parametrize(("hardware", "dtype", "ratio"), [
    ("h100-sxm", "bf16", 1978.9 / 989.4),  # bf16 -> fp8: 2x
    ("h100-sxm", "fp32", 989.4 / 67.0),  # fp32 -> bf16 autocast: 14.8x on the matmul peak
    ("a100-sxm-80gb", "bf16", 1.0),  # no fp8 on an A100
    ("a100-sxm-80gb", "fp32", 312.0 / 19.5),  # fp32 -> bf16: 16x
    ("v100-sxm2", "fp32", 125.0 / 15.7),  # no bf16 on a V100: fp16
    ("t4", "fp32", 65.0 / 8.1),  # no bf16 on a T4: fp16
    ("l4", "fp16", 242.5 / 121.0),  # Ada has fp8
    ("h100-sxm", "fp8", 1.0),  # already the narrowest
    ("h800", "bf16", None),  # unpublished figures: no ratio, the declared bound applies
], ids=lambda v: str(v))
def test_lower_precision_peak_ratio(hardware: str, dtype: str, ratio: float | None) -> None:
    _assert_ratio({"hardware": hardware, "dtype": dtype}, "lower_precision_peak_ratio", ratio)


@pytest.mark.parametrize(("hardware", "dtype", "ratio"), [
    ("a100-sxm-80gb", "fp32", 156.0 / 19.5),  # fp32 -> tf32 on tensor cores: 8x
    ("h100-sxm", "fp32", 494.7 / 67.0),  # tf32: 7.4x
    ("v100-sxm2", "fp32", 125.0 / 15.7),  # no tf32 on Volta: its tensor cores multiply fp16 only (once 33x: unbounded)
    ("t4", "fp32", 65.0 / 8.1),  # nor on Turing
    ("h100-sxm", "bf16", 989.4 / 67.0),  # a bf16 job's tensor-core peak over the CUDA-core rate
    ("h800", "fp32", None),  # unpublished figures: no ratio
], ids=lambda v: str(v))
def test_tensor_core_peak_ratio(hardware: str, dtype: str, ratio: float | None) -> None:
    _assert_ratio({"hardware": hardware, "dtype": dtype}, "tensor_core_peak_ratio", ratio)


@pytest.mark.parametrize(("hardware", "dtype", "ratio"), [
    ("a100-sxm-80gb", "bf16", 989.4 / 312.0),  # A100 -> H100 SXM: 3.17x
    ("h100-sxm", "bf16", 2250.0 / 989.4),  # H100 -> B200: 2.27x
    ("t4", "fp16", 121.0 / 65.0),  # T4 -> L4: 1.86x
    ("v100-sxm2", "fp16", 312.0 / 125.0),  # V100 -> A100: 2.5x
    ("gb200", "bf16", None),  # the newest part has no successor in the catalog
], ids=lambda v: str(v))
def test_faster_gpu_peak_ratio(hardware: str, dtype: str, ratio: float | None) -> None:
    _assert_ratio({"hardware": hardware, "dtype": dtype}, "faster_gpu_peak_ratio", ratio)


def test_the_declared_faster_gpu_bound_covers_every_catalogued_upgrade() -> None:
    bound = KB.optimizations["more_peak_flops"].max_term_speedup
    assert bound is not None
    for part, upgrade in KB.hardware_upgrades.items():
        hw, nxt = KB.hardware[part], KB.hardware[upgrade.to]
        if hw.mig_of is not None:  # a MIG slice's upgrade is its whole part: both peaks are known, the ratio is taken
            continue
        for dtype, peak in hw.peak_tflops.items():
            if peak and nxt.peak(dtype):
                assert nxt.peak(dtype) / peak <= bound, (part, upgrade.to, dtype)  # type: ignore[operator]


@pytest.mark.parametrize(("hardware", "ratio"), [
    ("h100-sxm", 7700.0 / 3350.0),  # H100 -> B200: 2.30x
    ("a100-sxm-80gb", 3350.0 / 2039.0),  # A100 -> H100: 1.64x
    ("t4", None),  # T4 -> L4: the L4's memory is slower (300 vs 320 GB/s), so no ratio (the declared bound applies)
    ("l40", None),  # L40 -> L40S: the same memory
    ("gb200", None),  # the newest part has no successor in the catalog
], ids=lambda v: str(v))
def test_faster_memory_ratio(hardware: str, ratio: float | None) -> None:
    _assert_ratio({"hardware": hardware}, "faster_memory_ratio", ratio)


def test_the_declared_memory_bound_covers_every_catalogued_upgrade() -> None:
    bound = KB.optimizations["more_memory_bandwidth"].max_term_speedup
    assert bound is not None
    for part, upgrade in KB.hardware_upgrades.items():
        today, nxt = KB.hardware[part].memory_bandwidth_gbs, KB.hardware[upgrade.to].memory_bandwidth_gbs
        if today and nxt and KB.hardware[part].mig_of is None:  # a slice's whole part: the ratio is always taken
            assert nxt / today <= bound, (part, upgrade.to)


def test_more_memory_bandwidth_speeds_the_data_term_up_by_the_bandwidth_ratio_not_to_zero() -> None:
    # H100 decode at 80 % of its bandwidth: D/BW is 80 % of the step. A move to the B200 (7.7 / 3.35 TB/s = 2.30x)
    # leaves 0.8 / 2.30 of it: 1 / (1 - 0.8 + 0.8 / 2.30) = 1.83x, not the 5x of removing the term.
    report = _diagnose({"hardware": "h100-sxm", "workload": "inference", "phase": "decode", "batch_size": 1,
                        "gpu_util": 0.97, "mem_bw_util": 0.8, "step_time_s": 0.02})
    assert report.bottleneck == "memory"
    gain = {r.id: r.expected_gain for r in report.recommended}["more_memory_bandwidth"]
    ratio = 7700.0 / 3350.0
    assert gain is not None and gain.max_speedup == pytest.approx(1 / (1 - 0.8 + 0.8 / ratio), abs=1e-3)
    assert "faster_memory_ratio" in gain.assumptions


@pytest.mark.parametrize(("hardware", "dtype", "ratio"), [
    ("a100-sxm-80gb", "fp32", 2.0),  # fp32 -> bf16: half the bytes per value
    ("v100-sxm2", "fp32", 2.0),  # no bf16 on a V100: fp16, also 2 bytes
    ("h100-sxm", "bf16", 2.0),  # bf16 -> fp8
    ("a100-sxm-80gb", "bf16", 1.0),  # no fp8 on an A100: nothing narrower
    ("h100-sxm", "fp8", 1.0),  # already the narrowest
    ("h800", "bf16", None),  # unpublished peaks: the narrower format is not known to run
], ids=lambda v: str(v))
def test_lower_precision_bytes_ratio(hardware: str, dtype: str, ratio: float | None) -> None:
    _assert_ratio({"hardware": hardware, "dtype": dtype}, "lower_precision_bytes_ratio", ratio)


# An fp32 elementwise chain on an A100 (Horace He, "Making Deep Learning Go Brrrr", the memory-bound example): 8 GB
# moved and 2 GFLOP in 5 ms, the GPU busy 99 % of it. D/BW is 8e9 / 2.039e12 = 3.92 ms, 78.5 % of the step; η is the
# MFU over the busy share, so the compute term is the busy time, 99 %.
_FP32_CHAIN = {"workload": "training", "hardware": "a100-sxm-80gb", "dtype": "fp32", "gpu_util": 0.99,
               "flops": 2.0e9, "bytes_moved": 8.0e9, "step_time_s": 0.005}


def test_lower_precision_speeds_a_memory_bound_busy_term_up_by_its_bytes_not_its_peak() -> None:
    # bf16 halves the bytes: the busy time falls at best to 78.5 % / 2 of the step, 1 / (1 - 0.99 + 0.392) = 2.48x,
    # not the 1 / (1 - 0.99 + 0.99 / 16) = 13.9x of the bf16 tensor-core peak over fp32's
    report = _diagnose(_FP32_CHAIN)
    assert report.bottleneck == "memory"
    gain = {r.id: r.expected_gain for r in report.recommended}["lower_precision"]
    share_data = 8.0e9 / 2039e9 / 0.005
    assert gain is not None and gain.max_speedup == pytest.approx(1 / (1 - 0.99 + share_data / 2), abs=1e-3)
    assert "share_data 78.5% / lower_precision_bytes_ratio 2" in gain.assumptions


def test_math_only_optimizations_keep_the_bytes_of_a_busy_term() -> None:
    from expert.diagnosis.gains import expected_gain
    from expert.diagnosis.provenance import Basis

    report = _diagnose(_FP32_CHAIN)
    facts = report.facts()
    ctx = Basis(kb=KB, ruleset=EXPERT.ruleset, facts=dict(facts), findings=(), observations=report.observations,
                derived=report.derived, fired=[], fired_ids=set(), rule_parts=lambda rule: ({}, {}))
    share, data = float(facts["share_compute"]), float(facts["share_data"])
    tensor = expected_gain(ctx, KB.optimizations["tensor_cores"])  # the same bytes: at most busy / D-term
    assert tensor is not None and tensor.max_speedup == pytest.approx(1 / (1 - share + data), abs=1e-3)
    better = expected_gain(ctx, KB.optimizations["better_kernels"])  # may cut bytes (fusion, FlashAttention): no cap
    assert better is not None and better.max_speedup > tensor.max_speedup
    # without a busy share there is no η: the compute term is flops at the peak (η = 1), a term of its own beside
    # D/BW, and nothing keeps it at the D/BW term's length
    alone = _diagnose({k: v for k, v in _FP32_CHAIN.items() if k != "gpu_util"})
    assert "compute_efficiency" not in alone.derived and "compute_efficiency" not in alone.derived["t_compute_s"].inputs


def test_a_compute_bound_fp32_step_keeps_the_peak_ratio_bound() -> None:
    # fp32 matmuls on an A100 busy 99 %: 1.5 TFLOP and 20 GB in 100 ms. D/BW is 9.8 % of the step, 4.9 % in bf16:
    # less than the 99 % / 16 = 6.2 % that 16x faster math leaves, so the peak ratio bounds the gain
    facts = {**_FP32_CHAIN, "flops": 1.5e12, "bytes_moved": 2.0e10, "step_time_s": 0.1}
    report = _diagnose(facts)
    gain = {r.id: r.expected_gain for r in report.recommended}.get("lower_precision")
    share_data = 2.0e10 / 2039e9 / 0.1
    assert gain is not None
    assert gain.max_speedup == pytest.approx(1 / (1 - 0.99 + max(0.99 / 16, share_data / 2)), abs=1e-3)


def test_data_term_speedup_is_for_compute_term_optimizations() -> None:
    from pydantic import ValidationError

    from expert.kb.catalogs import Optimization

    spec = {"id": "x", "title": "x", "axis": "machine", "shrinks": "data", "how": "x", "source": "x",
            "data_term_speedup": 1}
    with pytest.raises(ValidationError, match="data_term_speedup bounds an optimization of the compute term"):
        Optimization.model_validate(spec)
    with pytest.raises(ValidationError, match="at least 1"):
        Optimization.model_validate({**spec, "shrinks": "compute", "data_term_speedup": 0.5})
    assert Optimization.model_validate({**spec, "shrinks": "compute"}).data_term_speedup == 1
    assert Optimization.model_validate({**spec, "shrinks": "compute", "data_term_speedup": "faster_memory_ratio"})


# A 70B model decoding on eight H100s (TP8) at batch 64, 25 ms a token: the weights alone make 21 % of the bandwidth
# roof. The 64 sequences' KV cache, its size not given, comes on top of that and may outweigh the weights.
_DECODE_64 = {"workload": "inference", "hardware": "h100-sxm", "dtype": "bf16", "phase": "decode",
              "model_params": 70e9, "tensor_parallel_size": 8, "num_gpus": 8, "batch_size": 64, "tpot_ms": 25}


def test_a_share_counted_from_the_weights_alone_bounds_no_gain() -> None:
    report = _diagnose(_DECODE_64)
    note = report.derived["mem_bw_util"].note
    assert note is not None and "KV cache the 64 sequences read is not counted" in note and "lower bound" in note
    gains = {r.id: r.expected_gain for r in report.recommended}
    assert {"quantization", "more_memory_bandwidth", "batching"} <= set(gains)
    assert gains["quantization"] is None and gains["more_memory_bandwidth"] is None  # a lower bound bounds nothing
    assert gains["batching"] is not None  # batching amortises the weight reads, which the estimate counts in full


def test_with_the_kv_cache_counted_the_gains_are_bounded_again() -> None:
    kv = {"num_layers": 80, "num_kv_heads": 8, "head_dim": 128, "context_len": 2048}
    report = _diagnose({**_DECODE_64, **kv})
    assert "decode_bytes_per_token" in report.derived["mem_bw_util"].inputs
    gains = {r.id: r.expected_gain for r in report.recommended}
    assert all(gain is not None for gain in gains.values()), gains
    one = _diagnose({**_DECODE_64, "batch_size": 1, "tpot_ms": 10})  # one sequence: the weights are nearly all
    assert one.derived["mem_bw_util"].note is None


def test_a_mixture_of_experts_at_batch_32_reads_more_than_one_tokens_experts() -> None:
    # Mixtral 8x7B in fp8 on one H100, batch 32, 20 ms a token, its KV cache counted: 12.9B active parameters read
    # at that rate fill a quarter of the roof, but 32 tokens routed to two of eight experts each leave almost none
    # unread, so the bandwidth share is a lower bound: no "below the roof" (latency) verdict, and no bound on the gains
    # that read it
    report = _diagnose({"hardware": "h100-sxm", "dtype": "fp8", "workload": "inference", "phase": "decode",
                        "batch_size": 32, "model_params": 46.7e9, "active_params": 12.9e9, "tpot_ms": 20,
                        "num_layers": 32, "num_kv_heads": 8, "head_dim": 128, "context_len": 2048})
    note = report.derived["mem_bw_util"].note
    assert note is not None and "routed to more experts than one token is" in note
    assert report.bottleneck != "latency" and "decode_below_roof" not in {f.id for f in report.findings}
    gains = {r.id: r.expected_gain for r in report.recommended}
    assert "quantization" in gains and gains["quantization"] is None
    one = _diagnose({"hardware": "h100-sxm", "dtype": "fp8", "workload": "inference", "phase": "decode",
                     "batch_size": 1, "model_params": 46.7e9, "active_params": 12.9e9, "tpot_ms": 20})
    assert one.derived["mem_bw_util"].note is None  # one token reads its own experts only


def _every_case() -> list[tuple[str, dict[str, Any]]]:
    from expert._resources import data_dir
    from expert.rules.testing import load_rule_tests

    out = [(f"example/{p.stem}", dict(read_observation_file(p).observations))
           for p in sorted(examples_dir().glob("*.yaml"))]
    for path, tf in load_rule_tests([data_dir("rules")]):
        out += [(f"{path.stem}/{c.name}", dict(c.facts)) for c in tf.cases]
    return out


def test_no_gain_exceeds_what_its_own_term_allows() -> None:
    """Over every example and rule-test case: a recommendation's max gain is at most the Amdahl bound of its own
    term's share (capped), and, for an optimization with a term speed-up bound, at most that bound, on what it does
    not take away entirely (`removes`: offloaded weights that fit once quantized stop being copied)."""
    cap = KB.regimes.max_reported_speedup
    checked = 0
    for name, facts in _every_case():
        try:
            report = _diagnose(facts)
        except expert.ObservationError:
            continue
        values = report.facts()
        for rec in report.recommended:
            gain = rec.expected_gain
            if gain is None:
                continue
            share = gain.term_share + 5e-5  # rounded to 4 places: the share itself is at most half a unit more
            amdahl = cap if share >= 1 - 1 / cap else 1 / (1 - share)
            assert gain.max_speedup <= amdahl + 1e-3, (name, rec.id, gain)
            opt = KB.optimizations[rec.id]
            raw = values.get(opt.term_speedup) if opt.term_speedup else None
            bound = float(raw) if isinstance(raw, (int, float)) else opt.max_term_speedup
            removed = sum(float(v) for f in opt.removes if isinstance(v := values.get(f), (int, float)))
            if bound is not None and not removed:
                assert gain.max_speedup <= max(1.0, bound) + 1e-3, (name, rec.id, gain, bound)
            if bound is not None:
                acted = max(0.0, share - removed)
                assert gain.max_speedup <= 1 / max(1 / cap, 1 - share + acted / max(1.0, bound)) + 1e-3, (
                    name, rec.id, gain)
            checked += 1
    assert checked > 50


def test_a_compute_bound_step_gains_at_most_the_peak_ratio() -> None:
    # A100 bf16 at MFU 58 %, SMs 95 % active: compute 0.58 / 0.6105 = 95 % of the step. The faster GPU is the H100
    # (989.4 / 312 = 3.17x): 1 / (1 - 0.95 + 0.95 / 3.171) = 2.86x, not the 20x of removing the term; fp8 is absent.
    report = _diagnose({"workload": "training", "hardware": "a100-sxm-80gb", "dtype": "bf16", "mfu": 0.58,
                        "gpu_util": 0.99, "sm_active": 0.95, "step_time_s": 1.0})
    assert report.bottleneck == "compute"
    gains = {r.id: r.expected_gain for r in report.recommended}
    faster = gains["more_peak_flops"]
    assert faster is not None and faster.max_speedup == pytest.approx(1 / (1 - 0.95 + 0.95 / (989.4 / 312)), abs=1e-3)
    assert "faster_gpu_peak_ratio" in faster.assumptions
    assert {"lower_precision", "tensor_cores"} <= {w.id for w in report.wasted}


def test_the_declared_bound_applies_where_the_catalog_has_no_ratio() -> None:
    # no hardware: MFU 60 %, SMs 99 % active, so η = 0.606 and compute is 0.6 / 0.606 = 99 % of a 1 s step.
    # Lower precision: the declared 2x, 1 / (1 - 0.99 + 0.495) = 1.98x; a faster GPU: the declared 6.9x,
    # 1 / (1 - 0.99 + 0.99 / 6.9) = 6.52x; better kernels reach η = 1: 1 / (1 - 0.99 + 0.6) = 1.64x, not the 100x cap.
    report = _diagnose({"dtype": "bf16", "mfu": 0.6, "gpu_util": 0.99, "sm_active": 0.99, "step_time_s": 1.0})
    gains = {r.id: r.expected_gain for r in report.recommended}
    lower, faster, kernels = gains["lower_precision"], gains["more_peak_flops"], gains["better_kernels"]
    assert lower is not None and lower.max_speedup == pytest.approx(1 / (1 - 0.99 + 0.99 / 2), abs=2e-3)
    assert "declared bound" in lower.assumptions
    assert faster is not None and faster.max_speedup == pytest.approx(1 / (1 - 0.99 + 0.99 / 6.9), abs=2e-3)
    assert kernels is not None and kernels.max_speedup == pytest.approx(1 / (1 - 0.99 + 0.6), abs=2e-3)
    assert "tensor_cores" in {w.id for w in report.wasted}  # MFU 60 % of a bf16 peak: already on tensor cores


def test_cuda_cores_reach_at_most_half_of_every_16_bit_peak() -> None:
    """What rules/precision.yaml precision-tensor-cores-in-use relies on for MFU > 50 % in bf16/fp16/fp8. Within the
    rounding of the published figures: the RTX 3090's 35.6 and 71 are both rounded from one clock (82 SMs at
    1.695 GHz), at exactly 1:2."""
    for hw in KB.hardware.values():
        cuda = hw.peak("fp32")
        for dtype in ("bf16", "fp16", "fp8"):
            peak = hw.peak(dtype)
            if cuda and peak:
                assert cuda <= 0.5 * peak * 1.005, (hw.id, dtype)


# ---- the capacity regime ---------------------------------------------------------------------------------------


def test_capacity_is_its_own_regime_not_bandwidth() -> None:
    regime = KB.regimes.regimes["capacity"]
    assert "capacity" in regime.title.lower() and "bandwidth" not in regime.title.lower()
    assert KB.regimes.terms[regime.term].share is None  # no share of a step: no Amdahl bound
    assert "capacity" in EXPERT.ruleset.tables
    assert "memory" in KB.regimes.regimes and KB.regimes.regimes["memory"].title == "Memory-bandwidth-bound"


@pytest.mark.parametrize("example", ["kv_cache_bound_server", "model_does_not_fit"])
def test_every_renderer_names_the_capacity_verdict(example: str) -> None:
    from expert.report.render.graph import to_dot, to_graphml, to_json, to_mermaid
    from expert.report.render.html import to_html
    from expert.report.render.markdown import postmortem

    path = examples_dir() / f"{example}.yaml"
    report = _diagnose(dict(read_observation_file(path).observations))
    assert report.bottleneck == "capacity" and report.verdict_title
    assert "capacity" in report.verdict_title.lower()
    for render in (postmortem, to_html, to_mermaid, to_dot, to_graphml, to_json):
        assert "capacity" in render(report).lower(), render.__name__
    assert Report.model_validate_json(report.to_json()).bottleneck == "capacity"


# ---- scenarios a new user brings (public incident reports and the seed) ---------------------------------------------
# (name, facts, verdict, must be recommended, must be wasted, must not be recommended)

SCENARIOS: list[tuple[str, dict[str, Any], str | None, set[str], set[str], set[str]]] = [
    # Llama 2 7B pretraining (Touvron et al. 2023: 184,320 A100-hours for 2T tokens -> 3,014 tok/s/GPU): MFU 39 %
    # with the GPU busy is between the bands; utilization alone decides nothing -> no verdict, never a guess
    ("llama2-7b-pretraining-mfu", {"workload": "training", "hardware": "a100-sxm-80gb", "dtype": "bf16",
                                   "model_params": 6.74e9, "num_gpus": 64, "tokens_per_s": 192896},
     None, set(), {"lower_precision"}, {"more_memory_bandwidth"}),
    # batch-1 decode of a 7B bf16 model: 14 GB per token
    # A100 at 30 tok/s: 420 GB/s, 21 % of 2,039 -> overhead-bound (issue 12 item 3)
    ("decode-7b-a100-30-tok-s", {"workload": "inference", "phase": "decode", "hardware": "a100-sxm-80gb",
                                 "dtype": "bf16", "model_params": 7e9, "batch_size": 1, "tokens_per_s": 30},
     "latency", {"cuda_graphs"}, {"quantization", "more_memory_bandwidth"}, set()),
    # H100 at 150 tok/s: 2.1 TB/s, 63 % of 3.35 TB/s -> weight streaming
    ("decode-7b-h100-150-tok-s", {"workload": "inference", "phase": "decode", "hardware": "h100-sxm",
                                  "dtype": "bf16", "model_params": 7e9, "batch_size": 1, "tokens_per_s": 150},
     "memory", {"quantization", "batching"}, {"more_peak_flops"}, set()),
    # L4 at 15 tok/s: 210 GB/s, 70 % of 300 GB/s -> saturated
    ("decode-7b-l4-15-tok-s", {"workload": "inference", "phase": "decode", "hardware": "l4", "dtype": "bf16",
                               "model_params": 7e9, "batch_size": 1, "tokens_per_s": 15},
     "memory", {"quantization"}, {"more_peak_flops"}, set()),
    # L4 at 5 tok/s: 70 GB/s, 23 % -> overhead-bound
    ("decode-7b-l4-5-tok-s", {"workload": "inference", "phase": "decode", "hardware": "l4", "dtype": "bf16",
                              "model_params": 7e9, "batch_size": 1, "tokens_per_s": 5},
     "latency", {"cuda_graphs"}, {"quantization"}, set()),
    # Llama-2-7B with a 4,096-token KV cache: 2 x 32 x 32 x 128 x 4096 x 2 B = 2.15 GB beside 13.5 GB of weights;
    # 100 tok/s moves 1.56 TB/s, 77 % of the A100's 2,039 GB/s (43 % without the KV cache: the cache decides it)
    ("decode-7b-kv-cache-a100", {"workload": "inference", "phase": "decode", "hardware": "a100-sxm-80gb",
                                 "dtype": "bf16", "model_params": 6.74e9, "batch_size": 1, "tokens_per_s": 100,
                                 "num_layers": 32, "num_kv_heads": 32, "head_dim": 128, "context_len": 4096},
     "memory", {"quantization"}, {"more_peak_flops", "lower_precision"}, set()),
    # fp8 GEMM with the tensor pipes 85 % busy and DRAM at 20 % (issue 12 item 2): compute, tensor cores in use,
    # nothing narrower than fp8
    ("fp8-gemm-tensor-pipes-busy", {"hardware": "h100-sxm", "dtype": "fp8", "tensor_active": 0.85,
                                    "mem_bw_util": 0.20},
     "compute", {"better_kernels"}, {"tensor_cores", "lower_precision", "more_memory_bandwidth"}, set()),
    # the roofline both ways (issue 12 item 1): 2.2e12 / 6e8 = 3,667 FLOP/B, 12x the H100's 295 ridge
    ("roofline-above-the-ridge", {"hardware": "h100-sxm", "dtype": "bf16", "flops": 2.2e12, "bytes_moved": 6e8},
     "compute", {"better_kernels"}, {"more_memory_bandwidth"}, set()),
    # 1e11 / 1e10 = 10 FLOP/B, a thirtieth of the ridge
    ("roofline-below-the-ridge", {"hardware": "h100-sxm", "dtype": "bf16", "flops": 1e11, "bytes_moved": 1e10},
     "memory", {"kernel_fusion"}, {"more_peak_flops"}, set()),
    # pegged host CPU with a measured data wait (50 % of the step) -> input; more workers would contend for the cores
    ("host-saturated-with-data-wait", {"workload": "training", "hardware": "a100-sxm-80gb", "dtype": "bf16",
                                       "host_cpu_util": 1.0, "data_wait_s": 0.05, "step_time_s": 0.1,
                                       "gpu_util": 0.45, "num_workers": 4},
     "input", {"gpu_data_preprocessing"}, {"more_dataloader_workers", "more_peak_flops"}, set()),
    # pegged host CPU, batch 1, 10 µs kernels, 60 % idle, no data wait measured (issue 12 item 5) -> launch overhead
    ("host-saturated-launch-overhead", {"workload": "training", "hardware": "a100-sxm-80gb", "dtype": "bf16",
                                        "host_cpu_util": 1.0, "batch_size": 1, "mean_kernel_us": 10,
                                        "gpu_idle_gap_frac": 0.6, "gpu_util": 0.4},
     "latency", set(), {"more_dataloader_workers"}, set()),
    # an L4 service at batch 1 missing its SLO with 9 µs kernels and 60 % idle (issue 12 item 6)
    ("l4-serving-batch-1-tiny-kernels", {"workload": "inference", "hardware": "l4", "dtype": "fp16",
                                         "batch_size": 1, "mean_kernel_us": 9, "gpu_idle_gap_frac": 0.6,
                                         "latency_ms": 80, "latency_target_ms": 50},
     "latency", {"cuda_graphs", "kernel_fusion"}, {"more_peak_flops", "more_memory_bandwidth"}, set()),
    # ZeRO-Offload of a 7B model on an A10G host: the CPU Adam step (2.5 s) is 71 % of the step
    ("offloaded-optimizer-weak-host", {"workload": "training", "hardware": "a10g", "dtype": "bf16",
                                       "model_params": 7e9, "optimizer_offload": "yes", "optimizer_step_s": 2.5,
                                       "fwd_bwd_s": 1.0, "host_cpu_util": 0.98, "gpu_util": 0.3},
     "host", {"fused_cpu_optimizer"}, {"more_peak_flops", "cuda_graphs", "lower_precision"}, set()),
    # data wait 60 % of the step with the host idle (20 %) and storage at 96 % of its bandwidth
    ("storage-bound-input", {"workload": "training", "hardware": "a100-sxm-80gb", "dtype": "bf16",
                             "data_wait_s": 0.3, "step_time_s": 0.5, "host_cpu_util": 0.2, "storage_read_mb_s": 480,
                             "storage_bandwidth_mb_s": 500, "gpu_util": 0.4, "num_workers": 8},
     "input", {"faster_storage", "dataset_caching"}, {"more_dataloader_workers", "more_peak_flops"}, set()),
    # 70B full fine-tune under FSDP over 8 H100s: 70e9 x 16 B / 8 = 140 GB per GPU, 1.75x its 80 GB
    ("70b-fsdp-8-does-not-fit", {"workload": "training", "hardware": "h100-sxm", "dtype": "bf16",
                                 "model_params": 70e9, "num_gpus": 8, "sharding_degree": 8,
                                 "optimizer_offload": "no"},
     "capacity", {"cpu_offload", "zero_sharding"}, {"activation_checkpointing", "more_peak_flops"}, set()),
    # vLLM with a 70B model over 4 H100s: cache 98 % full, 40 waiting, 30 preemptions a minute -> confirmed capacity
    ("vllm-70b-preempting", {"workload": "inference", "hardware": "h100-sxm", "dtype": "bf16", "model_params": 70e9,
                             "num_gpus": 4, "kv_cache_usage": 0.98, "requests_waiting": 40, "requests_running": 96,
                             "preemptions": 30, "gpu_util": 0.97},
     "capacity", {"kv_cache_capacity"}, {"batching", "more_memory_bandwidth", "more_peak_flops"}, set()),
    # conflicting evidence: 1,200 TFLOP/s on an H100 (dense bf16 peak 989) -> no verdict, no advice built on it
    ("above-the-peak", {"hardware": "h100-sxm", "dtype": "bf16", "achieved_tflops": 1200, "gpu_util": 0.99},
     None, set(), set(), {"lower_precision", "more_peak_flops"}),
    # conflicting evidence: utilization 99 % with 60 % idle gaps
    ("busy-and-idle", {"hardware": "h100-sxm", "dtype": "bf16", "gpu_util": 0.99, "gpu_idle_gap_frac": 0.6,
                       "mfu": 0.2},
     None, set(), set(), set()),
    # already applied: a latency-bound service that replays CUDA graphs is never told to capture them
    ("latency-bound-with-cuda-graphs", {"workload": "inference", "hardware": "a100-sxm-80gb", "dtype": "fp16",
                                        "batch_size": 1, "mean_kernel_us": 8, "gpu_idle_gap_frac": 0.55,
                                        "applied_optimizations": "cuda_graphs"},
     "latency", {"kernel_fusion"}, set(), {"cuda_graphs"}),
    # compute-bound A100 in bf16: no fp8 on the part; tensor cores are in use (0.58 x 312 = 181 > 19.5 TFLOP/s)
    ("a100-compute-bound-bf16", {"workload": "training", "hardware": "a100-sxm-80gb", "dtype": "bf16", "mfu": 0.58,
                                 "gpu_util": 0.99, "sm_active": 0.95, "step_time_s": 1.0},
     "compute", {"more_peak_flops", "better_kernels"}, {"lower_precision", "tensor_cores"}, set()),
    # a 1.3B model needing 43 % of an H100: checkpointing and offload would cost compute for memory not needed
    ("small-model-memory-not-tight", {"workload": "training", "hardware": "h100-sxm", "dtype": "bf16",
                                      "model_params": 1.3e9, "sharding_degree": 1, "micro_batch_size": 4,
                                      "seq_len": 2048, "hidden_size": 2048, "num_layers": 24,
                                      "optimizer_offload": "no"},
     None, set(), {"activation_checkpointing", "cpu_offload"}, set()),
]


@pytest.mark.parametrize(("facts", "verdict", "recommended", "wasted", "not_recommended"),
                         [s[1:] for s in SCENARIOS], ids=[s[0] for s in SCENARIOS])
def test_scenario(facts: dict[str, Any], verdict: str | None, recommended: set[str], wasted: set[str],
                  not_recommended: set[str]) -> None:
    report = _diagnose(facts)
    assert report.bottleneck == verdict, [(c.regime, c.strength) for c in report.candidates]
    got = {r.id for r in report.recommended}
    assert recommended <= got, got
    assert wasted <= {w.id for w in report.wasted}
    assert not (got & (not_recommended | wasted))
    if verdict is not None:  # the regime table's waste is never recommended
        _, table = EXPERT.ruleset.tables.get(verdict, (None, None))
        if table is not None:
            assert not got & {w.id for w in table.wasted}


# ---- issue 12 knowledge gaps (last review): an idle timeline is starvation evidence; a KV cache estimated above HBM
# votes capacity; a bf16 trace on a part with fp8 leaves lower precision open ----------------------------------------
# (name, facts, verdict, its strength, candidates that must be ranked, must be wasted, facts asked for)

STARVE_SCENARIOS: list[tuple[str, dict[str, Any], str | None, str | None, set[str], set[str], set[str]]] = [
    # pegged host, batch 1, 10 µs kernels, the trace's timeline 60 % empty, no gpu_util and no data wait: the idle
    # share says "busy < 80 %" from the other side (seed screening signal 1) -> launch overhead, not input
    ("idle-trace-launch-overhead", {"workload": "training", "hardware": "a100-sxm-80gb", "dtype": "bf16",
                                    "host_cpu_util": 1.0, "batch_size": 1, "mean_kernel_us": 10,
                                    "gpu_idle_gap_frac": 0.6},
     "latency", "likely", {"latency"}, {"more_dataloader_workers"}, set()),
    # the same with a measured data wait of 50 ms per 100 ms step (I/O overhead 50 % > 10 %) -> input
    ("idle-trace-data-wait", {"workload": "training", "hardware": "a100-sxm-80gb", "dtype": "bf16",
                              "host_cpu_util": 1.0, "batch_size": 1, "mean_kernel_us": 10, "gpu_idle_gap_frac": 0.6,
                              "data_wait_s": 0.05, "step_time_s": 0.1},
     "input", "confirmed", {"input"}, {"more_dataloader_workers"}, set()),
    # pegged host and a 45 %-idle timeline, nothing else: input or launch overhead, both ranked, the wait asked for
    ("idle-trace-cause-open", {"workload": "training", "host_cpu_util": 0.98, "gpu_idle_gap_frac": 0.45},
     None, None, {"input", "latency"}, set(), {"data_wait_s"}),
    # 99 % utilization against 60 % idle gaps is conflicting evidence: the launch-overhead vote needs the idle GPU
    # in dispute, so it stays a suspicion and the verdict is withheld until the two are re-measured together
    ("busy-util-idle-trace-pegged-host", {"workload": "training", "gpu_util": 0.99, "gpu_idle_gap_frac": 0.6,
                                          "host_cpu_util": 1.0, "batch_size": 1, "mean_kernel_us": 10},
     None, None, {"latency"}, set(), set()),
    # Llama-2-13B on one A100-80GB, 32 sequences at 4,096 tokens: 2 x 40 x 40 x 128 x 4096 x 2 B = 3.36 GB a
    # sequence, 107.4 GB for 32, + 26 GB of bf16 weights = 133.4 GB, 1.67x the 80 GB -> capacity, from an estimate
    ("kv-cache-exceeds-hbm-estimate", {"workload": "inference", "phase": "decode", "hardware": "a100-sxm-80gb",
                                       "dtype": "bf16", "num_gpus": 1, "model_params": 13e9, "batch_size": 32,
                                       "num_layers": 40, "num_kv_heads": 40, "head_dim": 128, "context_len": 4096},
     "capacity", "likely", {"capacity"}, {"more_peak_flops", "more_memory_bandwidth", "batching"},
     {"kv_cache_usage"}),
    # the same with 12 preemptions a minute measured: the estimate and the engine agree -> confirmed
    ("kv-cache-exceeds-hbm-preempting", {"workload": "inference", "phase": "decode", "hardware": "a100-sxm-80gb",
                                         "dtype": "bf16", "num_gpus": 1, "model_params": 13e9, "batch_size": 32,
                                         "num_layers": 40, "num_kv_heads": 40, "head_dim": 128,
                                         "context_len": 4096, "preemptions": 12},
     "capacity", "confirmed", {"capacity"}, {"more_peak_flops", "tensor_cores", "better_kernels"}, set()),
]


@pytest.mark.parametrize(("facts", "verdict", "strength", "candidates", "wasted", "asked"),
                         [s[1:] for s in STARVE_SCENARIOS], ids=[s[0] for s in STARVE_SCENARIOS])
def test_starvation_and_capacity_scenario(facts: dict[str, Any], verdict: str | None, strength: str | None,
                                          candidates: set[str], wasted: set[str], asked: set[str]) -> None:
    report = _diagnose(facts)
    assert report.bottleneck == verdict, [(c.regime, c.strength) for c in report.candidates]
    if verdict is not None:
        assert next(c.strength for c in report.candidates if c.regime == verdict) == strength
    assert candidates <= {c.regime for c in report.candidates}
    assert wasted <= {w.id for w in report.wasted}
    assert not {r.id for r in report.recommended} & {w.id for w in report.wasted}
    assert asked <= {m.fact for m in report.next_measurements}, [m.fact for m in report.next_measurements]
    if "gpu_util" in facts and "gpu_idle_gap_frac" in facts:
        assert report.conflicts and all(c.strength != "confirmed" for c in report.candidates)


def test_a_kv_cache_measured_with_room_overrules_the_estimate() -> None:
    """The 13B/A100 batch above, with the engine reporting its cache half used: it holds what it runs."""
    report = _diagnose({**STARVE_SCENARIOS[4][1], "kv_cache_usage": 0.5})
    assert "capacity" not in {c.regime for c in report.candidates}


@pytest.mark.parametrize(("device", "kernel", "dtype", "lower_precision"), [
    # bf16 GEMMs on an H100: fp8 (1,979 TFLOP/s dense, 2x bf16) is still open -> recommended
    ({"id": 0, "name": "NVIDIA H100 80GB HBM3"}, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "bf16",
     "recommended"),
    # bf16 GEMMs on an A100: no fp8 on the part, the trace shows lower precision applied
    ({"id": 0, "name": "NVIDIA A100-SXM4-80GB"}, "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn",
     "bf16", "applied"),
    # fp8 GEMMs on an H100: the narrowest format the part has -> applied
    ({"id": 0, "name": "NVIDIA H100 80GB HBM3"}, "sm90_xmma_gemm_e4m3e4m3_bf16f32_f32_tn_n_tilesize128x128x128",
     "fp8", "applied"),
])
def test_a_trace_marks_lower_precision_only_at_the_narrowest_format(tmp_path: Any, device: dict[str, Any],
                                                                    kernel: str, dtype: str,
                                                                    lower_precision: str) -> None:
    from kineto_builder import Trace

    from expert.ingest import ingest_result

    t = Trace(device)
    ts = 0.0
    for s in range(4):
        start, corr = ts, t.runtime("cudaLaunchKernel", ts, 8)
        for k in range(20):
            t.kernel(kernel, ts + 10 + 401 * k, 400, corr)
        ts += 10 + 401 * 20 + 30
        t.step(s + 1, start, ts - start)
    result = ingest_result(t.write(tmp_path / "t.json"))
    facts = {name: m.value for name, m in result.observations.facts.items()}
    report = _diagnose({**facts, "dtype": dtype, "mfu": 0.6})
    assert report.bottleneck == "compute"
    applied = {a.id for a in report.applied}
    recommended = {r.id for r in report.recommended}
    assert ("lower_precision" in applied) == (lower_precision == "applied")
    assert ("lower_precision" in recommended) == (lower_precision == "recommended")


def test_batching_amortises_the_weight_reads_and_the_launches_of_a_batch_one_decode() -> None:
    # seed screening signal (batch size 1) and Table 3: a larger batch amortises the weight reads (the D/BW term, 80 %
    # of this decode step) and the launches over more tokens. Bounded by the latency term alone, batching had no gain
    # (the launch overhead is unknown here) and was listed after every remedy of the data term.
    report = _diagnose({"hardware": "h100-sxm", "workload": "inference", "phase": "decode", "batch_size": 1,
                        "gpu_util": 0.97, "mem_bw_util": 0.8, "step_time_s": 0.02})
    assert report.derived["batchable_frac"].value == pytest.approx(0.8)
    gains = {r.id: r.expected_gain for r in report.recommended}
    batching = gains["batching"]
    assert batching is not None and batching.max_speedup == pytest.approx(1 / (1 - 0.8), abs=1e-3)
    assert "batchable_frac" in batching.assumptions
    order = [r.id for r in report.recommended]
    assert order[0] == "batching" and order.index("batching") < order.index("quantization")
    # with the launch overhead known too, both terms add up
    both = _diagnose({"hardware": "h100-sxm", "workload": "inference", "phase": "decode", "batch_size": 1,
                      "gpu_util": 0.97, "mem_bw_util": 0.6, "host_wait_frac": 0.2, "step_time_s": 0.02})
    assert both.derived["batchable_frac"].value == pytest.approx(0.8)
    # a training step's bytes are mostly activations, which a larger micro-batch does not amortise: launches only
    training = _diagnose({"hardware": "h100-sxm", "workload": "training", "gpu_util": 0.97, "mem_bw_util": 0.6,
                          "host_wait_frac": 0.2, "step_time_s": 0.2})
    assert training.derived["batchable_frac"].value == pytest.approx(0.2)


@pytest.mark.parametrize(("dtype", "ratio"), [("fp32", 8.0), ("bf16", 4.0), ("fp16", 4.0), ("fp8", 2.0), ("int8", 2.0)])
def test_quantization_bytes_ratio_is_the_shrink_to_4_bit_values(dtype: str, ratio: float) -> None:
    derived = _diagnose({"dtype": dtype}).derived
    assert derived["quantization_bytes_ratio"].value == pytest.approx(ratio)
    declared = KB.optimizations["quantization"].max_term_speedup
    assert declared is not None and ratio <= declared  # the declared bound covers every dtype


def test_weights_already_4_bit_still_leave_the_kv_cache_to_quantize() -> None:
    """A service with 4-bit weights: the weights have nothing left to shrink, an fp8 KV cache halves a bf16 one. With
    the mix unknown the bound is the larger ratio (2x, once 1x: a recommendation promising nothing); with the weights'
    share of the decode bytes known, the two ratios are mixed by it."""
    facts = {"workload": "inference", "phase": "decode", "hardware": "h100-sxm", "dtype": "bf16", "weight_bits": 4,
             "batch_size": 1, "model_params": 70e9, "tokens_per_s": 60, "gpu_util": 0.95}
    report = _diagnose(facts)
    assert report.derived["quantization_bytes_ratio"].value == pytest.approx(2.0)
    gain = next(r for r in report.recommended if r.id == "quantization").expected_gain
    assert gain is not None and gain.max_speedup > 1.0
    known = _diagnose({**facts, "batch_size": 16, "num_layers": 80, "num_kv_heads": 8, "head_dim": 128,
                       "context_len": 4096})
    w = known.derived["decode_weight_share"].value
    assert isinstance(w, float) and 0 < w < 1
    assert known.derived["quantization_bytes_ratio"].value == pytest.approx(1 / (w / 1.0 + (1 - w) / 2.0))
    # 16-bit weights: 4x for the weights, 2x for the KV cache
    plain = _diagnose({**facts, "weight_bits": 16, "batch_size": 16, "num_layers": 80, "num_kv_heads": 8,
                       "head_dim": 128, "context_len": 4096})
    w16 = plain.derived["decode_weight_share"].value
    assert isinstance(w16, float)
    assert plain.derived["quantization_bytes_ratio"].value == pytest.approx(1 / (w16 / 4.0 + (1 - w16) / 2.0))


def test_offloaded_weights_are_made_to_fit_not_pinned() -> None:
    """A 30B model in fp16 (60 GB) on a 24 GB A10: what does not fit crosses PCIe every step, 80 % of it. Quantization
    that makes the weights fit removes those copies (`removes: [offloaded_copy_frac]`) and shrinks the rest 4x: at
    most 1 / (0.2 / 4) = 20x (it read 1.18x, from the 20 % alone). Pinning is wasted, and a copy stream hides at most
    the other 20 % (1.25x, it read 5x)."""
    facts = {"workload": "inference", "phase": "decode", "hardware": "a10", "dtype": "fp16", "model_params": 30e9,
             "batch_size": 1, "gpu_util": 0.15, "h2d_copy_frac": 0.8, "tokens_per_s": 2, "num_gpus": 1}
    report = _diagnose(facts)
    assert report.bottleneck == "capacity"
    assert report.derived["offloaded_copy_frac"].value == pytest.approx(0.8)
    assert report.derived["copy_overlap_frac"].value == pytest.approx(0.2)
    gains = {r.id: r.expected_gain for r in report.recommended}
    quantization, streams = gains["quantization"], gains["cuda_streams_overlap"]
    assert quantization is not None and streams is not None
    share = report.derived["quantizable_frac"].value
    assert isinstance(share, float)
    assert quantization.max_speedup == pytest.approx(1 / (1 - 1.0 + share / 4), abs=1e-3)
    assert "offloaded_copy_frac 80% is removed entirely" in quantization.assumptions
    assert streams.max_speedup == pytest.approx(1.25, abs=1e-3)
    assert report.recommended[0].id == "quantization"
    assert "pin_memory" in {w.id for w in report.wasted}
    # weights that fit: the copies are the job's own, nothing is offloaded, quantization acts on the bytes alone
    fits = _diagnose({**facts, "model_params": 7e9})
    assert "offloaded_copy_frac" not in fits.derived
    assert "pin_memory" not in {w.id for w in fits.wasted}
    # no GPU count: sharded weights would stay resident, so the copies still say offloaded (and bound quantization)
    unsaid = _diagnose({k: v for k, v in facts.items() if k != "num_gpus"})
    assert unsaid.bottleneck == "capacity" and unsaid.recommended[0].id == "quantization"
    assert unsaid.derived["offloaded_copy_frac"].value == pytest.approx(0.8)
    assert "pin_memory" in {w.id for w in unsaid.wasted}


def test_offloaded_weights_whose_copies_are_not_measured_are_bounded_by_the_rest_of_the_step() -> None:
    """The same 30B model on a 24 GB RTX 4090, no trace: the copies are not measured, so what does not read device
    memory bounds them (1 − share_data). Quantization that makes the weights fit then reaches nearly the whole step,
    not the HBM term alone (it read 1.07x; 4-bit weights fit in 15 GB and decode at the memory's speed)."""
    facts = {"workload": "inference", "phase": "decode", "hardware": "rtx-4090", "dtype": "fp16", "model_params": 30e9,
             "batch_size": 1, "gpu_util": 0.15, "tokens_per_s": 1.5, "num_gpus": 1}
    report = _diagnose(facts)
    share = report.derived["share_data"].value
    assert isinstance(share, float) and share < 0.2
    copies = report.derived["offloaded_copy_frac"]
    assert copies.value == pytest.approx(1 - share) and copies.formula.startswith("1 − share_data")
    quantization = {r.id: r.expected_gain for r in report.recommended}["quantization"]
    assert quantization is not None and quantization.max_speedup > 20
    assert report.recommended[0].id == "quantization"
    # measured copies win over the estimate
    measured = _diagnose({**facts, "h2d_copy_frac": 0.5})
    assert measured.derived["offloaded_copy_frac"].value == pytest.approx(0.5)
    # no GPU count and no copies measured: three 4090s could hold the 60 GB sharded, but 1.5 tokens/s reads the
    # weights at 90 GB/s, 9 % of even one card's bandwidth: far below any resident layout, so offloading is likely
    # (capacity-weights-offloaded-by-the-rate) beside the question of the count, and nothing per GPU is derived
    unsaid = _diagnose({k: v for k, v in facts.items() if k != "num_gpus"})
    assert {"gpu_count_needed", "weights_likely_offloaded"} <= {f.id for f in unsaid.findings}
    assert [(c.regime, c.strength) for c in unsaid.candidates if c.regime == "capacity"] == [("capacity", "likely")]
    assert not {"offloaded_copy_frac", "mem_bw_util", "weights_to_hbm"} & set(unsaid.derived)
    assert "quantization" in {r.id for r in unsaid.recommended}


def test_removes_needs_acts_on() -> None:
    from pydantic import ValidationError

    from expert.kb.catalogs import Optimization

    spec = {"id": "x", "title": "x", "axis": "data", "shrinks": "data", "how": "x", "source": "x",
            "removes": ["offloaded_copy_frac"]}
    with pytest.raises(ValidationError, match="removes needs acts_on"):
        Optimization.model_validate(spec)
    Optimization.model_validate({**spec, "acts_on": ["quantizable_frac"]})


@pytest.mark.parametrize(("link", "bandwidth", "ratio"), [
    ("ethernet", None, 100 / 12.5),  # 100G Ethernet (the kind's default) to InfiniBand XDR: 8x
    ("infiniband", None, 100 / 50),  # NDR to XDR
    ("infiniband", 100.0, 1.0),  # already on the fastest network link the catalog lists
    ("pcie", 31.5, 900 / 31.5),  # a PCIe 4.0 x16 card to NVLink 5 (an SXM part)
], ids=lambda v: str(v))
def test_a_faster_interconnect_speeds_the_exposed_communication_up_by_the_link_ratio(
        link: str, bandwidth: float | None, ratio: float) -> None:
    facts: dict[str, Any] = {"workload": "training", "num_gpus": 16, "num_nodes": 2, "interconnect": link,
                             "comm_frac": 0.4, "gpu_util": 0.7}
    if bandwidth is not None:
        facts["interconnect_bandwidth"] = bandwidth
    report = _diagnose(facts)
    assert report.derived["faster_link_ratio"].value == pytest.approx(ratio)
    gain = {r.id: r.expected_gain for r in report.recommended}["faster_interconnect"]
    assert gain is not None and gain.max_speedup == pytest.approx(1 / (1 - 0.4 + 0.4 / ratio), abs=1e-3)
    assert "faster_link_ratio" in gain.assumptions


def test_the_declared_link_bound_covers_every_catalogued_move() -> None:
    bound = KB.optimizations["faster_interconnect"].max_term_speedup
    assert bound is not None
    links = list(KB.interconnects.values())
    for a in links:
        for b in links:
            if a.reach == b.reach:
                assert b.per_direction_gbs / a.per_direction_gbs <= bound, (a.id, b.id)


def test_every_cited_source_is_one_a_user_can_read() -> None:
    """A rule's, an optimization's or a derivation's `source` reaches users in reports and `dam explain`: it names the
    paper, datasheet, guide or seed table, never a note of this project's development checkout (../shared, which an
    installed package does not have)."""
    from expert.derive.registry import DERIVATIONS

    sources = {f"rule {lr.id}": lr.rule.source for lr in EXPERT.ruleset.rules.values()}
    sources |= {f"optimization {opt.id}": opt.source for opt in KB.optimizations.values()}
    sources |= {f"derivation of {d.output} ({d.formula})": d.source for d in DERIVATIONS}
    assert len(sources) > 250
    private = ("domain.md", "shared/", "durable-rules-notes", "rule-design-anchors", "peer-tools.md")
    cited = {where: source for where, source in sources.items() if any(p in (source or "") for p in private)}
    assert not cited


@pytest.mark.parametrize(("facts", "expected"), [
    ({"pipeline_parallel_size": 8, "gradient_accumulation_steps": 8}, 7 / 15),
    ({"pipeline_parallel_size": 4, "global_batch_size": 512, "micro_batch_size": 1, "data_parallel_size": 64},
     3 / 11),  # 512 / 64 = 8 micro-batches
], ids=["micro-batches-given", "micro-batches-derived"])
def test_pipeline_bubble_is_derived(facts: dict[str, Any], expected: float) -> None:
    assert _diagnose({"workload": "training", **facts}).derived["pipeline_bubble_frac"].value == pytest.approx(expected)


def test_a_pipelined_jobs_gpus_are_not_taken_as_data_parallel_ranks() -> None:
    facts = {"workload": "training", "num_gpus": 64, "global_batch_size": 512, "micro_batch_size": 1}
    assert _diagnose(facts).derived["gradient_accumulation_steps"].value == 8.0  # every GPU a rank
    pipelined = _diagnose({**facts, "pipeline_parallel_size": 8}).derived
    assert "gradient_accumulation_steps" not in pipelined and "pipeline_bubble_frac" not in pipelined
    assert "pipeline_bubble_frac" not in _diagnose({**facts, "pipeline_parallel_size": 1}).derived


# ---- padding and gradient synchronisation during accumulation -----------------------------------------------------

def test_packing_is_bounded_by_the_positions_it_saves() -> None:
    """A third of the positions padded: 1.5 positions per real token, and the compute term (80 % of the step) falls
    at best to 80 % / 1.5, so the gain is 1 / (1 - 0.8 + 0.8 / 1.5) = 1.36x, never the Amdahl bound of the term."""
    report = _diagnose({"workload": "training", "hardware": "h100-sxm", "dtype": "bf16", "padding_frac": 1 / 3,
                        "gpu_util": 0.97, "sm_active": 0.9, "step_time_s": 0.5, "flops": 2e14})
    assert report.derived["padded_token_ratio"].value == pytest.approx(1.5)
    share = report.derived["share_compute"].value
    packing = next(r for r in report.recommended if r.id == "sequence_packing")
    assert packing.expected_gain is not None
    assert packing.expected_gain.max_speedup == pytest.approx(1 / (1 - share + share / 1.5), abs=1e-3)
    assert "padded_token_ratio = 1.5, from 1 / (1 − padding_frac)" in packing.expected_gain.assumptions


def test_all_padding_derives_no_ratio() -> None:
    assert "padded_token_ratio" not in _diagnose({"padding_frac": 1.0}).derived


def test_syncing_every_micro_batch_is_bounded_by_the_micro_batches() -> None:
    """Eight all-reduces where one would do: the exposed all-reduce share (30 %) falls at best to 30 % / 8."""
    report = _diagnose({"workload": "training", "num_gpus": 16, "gradient_accumulation_steps": 8,
                        "grad_sync_per_micro_batch": "yes", "comm_frac": 0.3, "step_time_s": 1.2})
    assert report.derived["grad_sync_reduction"].value == 8
    sync = next(r for r in report.recommended if r.id == "sync_once_per_step")
    assert sync.expected_gain is not None
    assert sync.expected_gain.max_speedup == pytest.approx(1 / (1 - 0.3 + 0.3 / 8), abs=1e-3)
    once = _diagnose({"workload": "training", "num_gpus": 16, "gradient_accumulation_steps": 8,
                      "grad_sync_per_micro_batch": "no", "comm_frac": 0.3, "step_time_s": 1.2})
    assert "grad_sync_reduction" not in once.derived
    assert "sync_once_per_step" not in {r.id for r in once.recommended}


@pytest.mark.parametrize(("facts", "span", "fires"), [
    ({"num_gpus": 64, "num_nodes": 8, "tensor_parallel_size": 16}, 2.0, True),
    ({"num_gpus": 64, "num_nodes": 8, "tensor_parallel_size": 8}, 1.0, False),
    ({"num_gpus": 64, "num_nodes": 8, "tensor_parallel_size": 16, "interconnect": "nvlink"}, 2.0, False),
], ids=["sixteen-over-nodes-of-eight", "one-node", "an-nvlink-domain-across-nodes"])
def test_a_tensor_parallel_group_spanning_nodes(facts: dict[str, Any], span: float, fires: bool) -> None:
    report = _diagnose({"workload": "training", **facts})
    assert report.derived["tensor_parallel_span"].value == span
    assert ("tensor_parallel_across_nodes" in {f.id for f in report.findings}) is fires


@pytest.mark.parametrize(("vocab", "dtype", "alignment"), [
    (50257, "bf16", 2),  # GPT-2: odd, 100514 bytes a column
    (50304, "bf16", 128),  # nanoGPT's padding: 50304 = 393 * 128, capped at 128 bytes
    (30522, "fp16", 4),  # BERT: 2 * 15261 rows, 4 bytes
    (30528, "fp16", 128),  # NVIDIA's BERT pads to a multiple of 8 rows: 30528 = 477 * 64 rows, 128 bytes
    (32001, "fp8", 1),  # Llama's 32000 plus one pad token, in one byte each
    (32000, "tf32", 128),  # tf32 values are stored in 4 bytes
], ids=["gpt2", "nanogpt", "bert", "bert-padded", "llama-plus-pad-token", "tf32"])
def test_vocab_alignment_in_bytes(vocab: int, dtype: str, alignment: int) -> None:
    assert _diagnose({"vocab_size": vocab, "dtype": dtype}).derived["vocab_alignment_bytes"].value == alignment


def test_an_odd_vocabulary_in_a_compute_bound_step_is_padded_first() -> None:
    """nanoGPT (GPT-2 124M, vocab 50257) near the compute roof: padding the vocabulary is the cheapest lever, bounded
    like any kernel gain by the compute term at peak; the padded vocabulary is silent."""
    facts = {"workload": "training", "hardware": "a100-sxm-80gb", "dtype": "bf16", "mfu": 0.55, "gpu_util": 0.98}
    report = _diagnose({**facts, "vocab_size": 50257})
    assert report.bottleneck == "compute"
    assert report.recommended[0].id == "align_tensor_dims"
    assert "vocab_misaligned" in {f.id for f in report.findings}
    padded = _diagnose({**facts, "vocab_size": 50304})
    assert "align_tensor_dims" not in {r.id for r in padded.recommended}
    assert "vocab_misaligned" not in {f.id for f in padded.findings}


@pytest.mark.parametrize(("dtype", "ratio"), [("fp32", 4.0), ("bf16", 2.0), ("fp16", 2.0), ("fp8", 1.0)])
def test_a_training_job_quantizes_to_one_byte_not_to_four_bits(dtype: str, ratio: float) -> None:
    """Training quantizes to fp8 values and 8-bit optimizer states: a memory-bound bf16 step's bytes shrink at most
    2x (bound 1 / (1 - 0.9 + 0.9 / 2) = 1.82x at a 90 % data term), not the 4x of 4-bit serving weights; in fp8
    there is nothing left to shrink and quantization is wasted."""
    facts = {"workload": "training", "hardware": "h100-sxm", "dtype": dtype, "gpu_util": 0.97, "mem_bw_util": 0.9,
             "sm_active": 0.9}
    report = _diagnose(facts)
    assert report.derived["quantization_bytes_ratio"].value == pytest.approx(ratio)
    if ratio > 1:
        quantization = next(r for r in report.recommended if r.id == "quantization")
        assert quantization.expected_gain is not None
        assert quantization.expected_gain.max_speedup == pytest.approx(1 / (1 - 0.9 + 0.9 / ratio), abs=1e-3)
    else:
        assert "quantization" in {w.id for w in report.wasted}
        assert "quantization" not in {r.id for r in report.recommended}
    serving = _diagnose({**facts, "workload": "inference"})
    assert serving.derived["quantization_bytes_ratio"].value == pytest.approx(2 * ratio)  # 4-bit weights


def test_lora_keeps_optimizer_states_for_the_adapters_only() -> None:
    """LoRA on Llama-2-7B (PEFT: 4,194,304 trainable of 6,742,609,920): the frozen base keeps its 16-bit weights
    (2 bytes each), the adapters the 16 bytes of mixed-precision Adam: 6,738,415,616 x 2 + 4,194,304 x 16 bytes."""
    facts = {"workload": "training", "hardware": "h100-sxm", "dtype": "bf16", "model_params": 6_742_609_920,
             "num_gpus": 1, "tokens_per_s": 3000}
    lora = _diagnose({**facts, "trainable_params": 4_194_304})
    assert lora.derived["model_state_bytes"].value == pytest.approx(6_738_415_616 * 2 + 4_194_304 * 16)
    assert lora.state != "conflicting evidence"
    full = _diagnose(facts)  # every parameter trained: 16 bytes each, 108 GB, cannot run on 80 GB, yet it runs
    assert full.derived["model_state_bytes"].value == pytest.approx(6_742_609_920 * 16)
    assert full.state == "conflicting evidence"
    offloaded = _diagnose({**facts, "trainable_params": 4_194_304, "optimizer_offload": "yes"})
    assert offloaded.derived["model_state_bytes"].value == pytest.approx(6_738_415_616 * 2 + 4_194_304 * 4)
