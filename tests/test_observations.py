"""Observation parsing and validation; knowledge-base loading errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import expert
from expert import KnowledgeBaseError, ObservationError, Observations
from expert.kb.knowledge import KnowledgeBase
from expert.observations.normalise import convert, is_unknown, normalise

EXPERT = expert.default_expert()
KB = EXPERT.kb


def _one(name: str, raw: Any) -> Any:
    return EXPERT.observations({name: raw}).facts[name].value


@pytest.mark.parametrize(("name", "raw", "value"), [
    ("gpu_util", "62%", 0.62),
    ("gpu_util", "62 %", 0.62),
    ("gpu_util", "0.62", 0.62),
    ("gpu_util", 0.62, 0.62),
    ("gpu_util", 1, 1.0),
    ("step_time_s", "12 ms", 0.012),
    ("step_time_s", "1.5", 1.5),
    ("step_time_s", "250ms", 0.25),
    ("data_wait_s", "40 us", 4e-5),
    ("mean_kernel_us", "8 us", 8.0),
    ("mean_kernel_us", "0.5 ms", 500.0),
    ("latency_ms", "0.12 s", 120.0),
    ("achieved_bandwidth", "3.35 TB/s", 3350.0),
    ("model_params", "7B", 7e9),
    ("model_params", "70M", 7e7),
    ("tokens_per_s", "2.5k tokens/s", 2500.0),  # as training logs print rates
    ("tokens_per_s", "2.5k", 2500.0),
    ("tokens_per_s", "1.2M tok/s", 1.2e6),
    ("tokens_per_s", "2500 tok/s", 2500.0),
    ("flops", "3.2 TFLOP", 3.2e12),
    ("bytes_moved", "40 GB", 4e10),
    ("bytes_moved", "1 GiB", 2**30),
    ("achieved_tflops", "410", 410.0),
    ("achieved_tflops", "0.41 PFLOP/s", 410.0),
    ("batch_size", "32", 32),
    ("batch_size", 32.0, 32),
    ("context_len", "8k", 8192),  # token lengths count k as 1,024, as context windows do
    ("context_len", "128K", 131072),
    ("prompt_tokens", "2K tokens", 2048),
    ("seq_len", "4096 tokens", 4096),
    ("seq_len", "1.5k", 1536),
    ("hardware", "NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("hardware", "H100-SXM", "h100-sxm"),
    ("hardware", "Tesla V100-SXM2-16GB", "v100-sxm2"),
    ("dtype", "BF16", "bf16"),
])
def test_values_are_parsed_to_canonical_units(name: str, raw: Any, value: Any) -> None:
    assert _one(name, raw) == pytest.approx(value)


@pytest.mark.parametrize(("name", "raw", "value"), [
    # counts: a lowercase magnitude is how model sizes are written ("a 7b model", pythia-70m); a count has no milli
    ("model_params", "7b", 7e9),
    ("model_params", "7 b", 7e9),
    ("model_params", "70m", 7e7),
    ("model_params", "1.5k", 1.5e3),
    ("active_params", "13b", 1.3e10),
    ("tokens_per_step", "2m", 2e6),
    # the magnitude as a word, and the fact's own unit after it, as model cards write sizes
    ("model_params", "7 billion", 7e9),
    ("model_params", "1.5 Million", 1.5e6),
    ("model_params", "70B params", 7e10),
    ("trainable_params", "40 M params", 4e7),
    ("model_params", "7e9 params", 7e9),
    # other units keep taking any case, and an all-lowercase bytes unit keeps meaning bytes
    ("bytes_moved", "40 gb", 4e10),
    ("step_time_s", "12 MS", 0.012),
    ("achieved_bandwidth", "3.35 tb/s", 3350.0),
])
def test_unit_case_is_read_where_it_is_unambiguous(name: str, raw: Any, value: Any) -> None:
    assert _one(name, raw) == pytest.approx(value)


@pytest.mark.parametrize(("name", "raw", "text"), [
    ("interconnect_bandwidth", "400 Gb/s", "'Gb/s' reads as bits"),  # a 400 Gb/s link moves 50 GB/s, not 400
    ("bytes_moved", "8 Gib", "write GiB"),
    ("bytes_moved", "1 Mb", "write MB"),
    ("model_params", "7 bn", "unknown unit 'bn'"),
    ("model_params", "70 xparams", "unknown unit 'xparams'"),  # the fact's unit only as a word of its own
])
def test_a_unit_of_bits_is_not_read_as_bytes(name: str, raw: str, text: str) -> None:
    with pytest.raises(ObservationError) as info:
        EXPERT.observations({name: raw})
    assert info.value.problems[0].where == name and text in str(info.value.problems[0])


@pytest.mark.parametrize("percent", range(101))
def test_percentages_convert_exactly(percent: int) -> None:
    # "95%" is the double nearest 0.95, never 95 * 0.01 = 0.9500000000000001 (which reads as "above 95 %")
    assert _one("gpu_util", f"{percent}%") == percent / 100
    assert _one("gpu_util", f"{percent}.5%") == float(f"0.{percent:02d}5") if percent < 100 else True


@pytest.mark.parametrize(("raw", "value"), [("1,000", 1000), ("1,300 ms", 1.3), ("12,345,678", 12345678)])
def test_thousands_separators_in_groups_of_three_are_read(raw: str, value: float) -> None:
    name = "step_time_s" if "ms" in raw else "batch_size"
    assert _one(name, raw) == value


@pytest.mark.parametrize("raw", ["0,3", "1,2", "0_3", "1_000", "1,00", "12,3456"])
def test_a_decimal_comma_or_underscore_is_never_guessed(raw: str) -> None:
    with pytest.raises(ObservationError) as info:
        EXPERT.observations({"step_time_s": raw})
    assert info.value.problems[0].where == "step_time_s"


def test_an_enum_error_lists_the_choices_once() -> None:
    with pytest.raises(ObservationError) as info:
        EXPERT.observations({"workload": "llm"})
    text = str(info.value)
    assert text.count("training") == 1 and "inference" in text


def test_unknown_and_skip_mean_not_observed() -> None:
    obs = EXPERT.observations({"gpu_util": "unknown", "sm_active": "skip", "mem_bw_util": None, "batch_size": 4})
    assert set(obs.facts) == {"batch_size"}


@pytest.mark.parametrize(("raw", "where", "text"), [
    ({"gpu_utl": 0.5}, "gpu_utl", "did you mean gpu_util"),
    ({"gpu_util": 62}, "gpu_util", "did you mean 62%"),
    ({"gpu_util": "162%"}, "gpu_util", "outside [0, 1]"),
    ({"step_time_s": -1}, "step_time_s", "out of range"),
    ({"step_time_s": 0}, "step_time_s", "out of range"),
    ({"step_time_s": "12 parsecs"}, "step_time_s", "unknown unit"),
    ({"hardware": "h100-sxn"}, "hardware", "did you mean h100-sxm"),  # a bare "h100" resolves (a family)
    ({"dtype": "fp64"}, "dtype", "not one of"),
    ({"batch_size": 2.5}, "batch_size", "not a whole number"),
    ({"batch_size": 0}, "batch_size", "out of range"),
    ({"gpu_util": True}, "gpu_util", "true/false"),
    ({"gpu_util": float("nan")}, "gpu_util", "NaN"),
    ({"gpu_util": [0.5]}, "gpu_util", "expected a number"),
    ({"io_overhead": 0.2}, "io_overhead", "derived"),
])
def test_bad_values_are_named_with_what_is_accepted(raw: dict[str, Any], where: str, text: str) -> None:
    with pytest.raises(ObservationError) as info:
        expert.diagnose(raw)
    problem = info.value.problems[0]
    assert problem.where == where
    assert text in str(problem)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ObservationError) as info:
        expert.diagnose({"gpu_util": 5, "hardware": "nope", "batch_size": -3})
    assert {p.where for p in info.value.problems} == {"gpu_util", "hardware", "batch_size"}


def test_observations_model_accepts_flat_and_sourced_forms() -> None:
    flat = Observations({"gpu_util": 0.5})
    sourced = Observations({"gpu_util": {"value": 0.5, "source": "nvidia-smi.csv", "detail": {"samples": 12}}})
    assert flat.values() == sourced.values() == {"gpu_util": 0.5}
    report = expert.diagnose(sourced)
    assert report.observations["gpu_util"].source == "nvidia-smi.csv"
    assert report.observations["gpu_util"].detail == {"samples": 12}


def test_the_vocabulary_has_the_issue_minimum_set() -> None:
    required = ["hardware", "dtype", "workload", "phase", "batch_size", "gpu_util", "sm_active", "tensor_active",
                "mem_bw_util", "host_cpu_util", "step_time_s", "data_wait_s", "gpu_idle_gap_frac", "mean_kernel_us",
                "flops", "bytes_moved", "arithmetic_intensity", "achieved_tflops", "mfu", "model_params",
                "active_params", "tokens_per_s", "latency_ms", "latency_target_ms"]
    missing = [name for name in required if name not in EXPERT.kb.facts or not EXPERT.kb.facts[name].askable]
    assert not missing
    assert EXPERT.kb.facts["dtype"].choices == ["fp32", "tf32", "bf16", "fp16", "fp8", "int8"]


def test_catalogs_have_the_required_ids() -> None:
    hardware = {"h100-sxm", "h100-pcie", "h200-sxm", "a100-sxm-80gb", "a100-40gb", "b200", "l4", "l40s", "v100-sxm2",
                "mi250x-gcd", "mi250x-oam", "mi300x", "tpu-v4", "tpu-v5e", "tpu-v5p", "gaudi3"}
    optimizations = {"more_peak_flops", "more_memory_bandwidth", "quantization", "pruning", "batching",
                     "kernel_fusion", "better_kernels", "tensor_cores", "lower_precision", "async_scheduling",
                     "cuda_graphs", "prefetching", "pin_memory", "more_dataloader_workers", "cuda_streams_overlap",
                     "double_buffering", "async_grad_sync"}
    assert hardware <= set(EXPERT.kb.hardware)
    assert optimizations <= set(EXPERT.kb.optimizations)
    for hw in EXPERT.kb.hardware.values():
        # a vendor that publishes no bandwidth leaves it null (a10g, h20, h800), never invented
        assert hw.source and (hw.memory_bandwidth_gbs is None or hw.memory_bandwidth_gbs > 0)
    # dense, never the 2:4-sparse headline: NVIDIA's H100 sheet says 1979 TFLOP/s bf16 "with sparsity"
    assert EXPERT.kb.hardware["h100-sxm"].peak("bf16") == 989.4


def test_a_bad_knowledge_base_file_names_file_entry_and_field(kb_copy: Path) -> None:
    path = kb_copy / "hardware.yaml"
    path.write_text(path.read_text().replace("memory_bandwidth_gbs: 3350", "memory_bandwidth_gbs: fast", 1))
    with pytest.raises(KnowledgeBaseError) as info:
        KnowledgeBase.load(kb_copy)
    text = str(info.value)
    assert "hardware.yaml" in text and "h100-sxm" in text and "memory_bandwidth_gbs" in text


def test_malformed_knowledge_base_yaml_names_the_line(kb_copy: Path) -> None:
    (kb_copy / "units.yaml").write_text("dimensions:\n  time: [unclosed\n")
    with pytest.raises(KnowledgeBaseError, match=r"units.yaml:\d+"):
        KnowledgeBase.load(kb_copy)


def test_a_dangling_reference_in_the_knowledge_base_is_refused(kb_copy: Path) -> None:
    path = kb_copy / "tools.yaml"
    path.write_text(path.read_text().replace("tool: nvidia_smi", "tool: nvidia_smy", 1))
    with pytest.raises(KnowledgeBaseError, match="nvidia_smy"):
        KnowledgeBase.load(kb_copy)


def test_a_rule_on_an_unknown_fact_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("""
schema_version: 1
rules:
  - {id: bad-rule, title: t, source: s, rationale: r, when: {fact: gpu_utilisation, lt: 0.8},
     then: {finding: {id: x, message: m}}}
""")
    with pytest.raises(KnowledgeBaseError) as info:
        expert.Expert(rules_dirs=[tmp_path])
    assert "bad-rule" in str(info.value) and "gpu_utilisation" in str(info.value)


def test_a_rule_that_executes_nothing_but_has_no_condition_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("""
schema_version: 1
rules:
  - {id: bad-rule, title: t, source: s, rationale: r, when: {python: "os.system('x')"},
     then: {finding: {id: x, message: m}}}
""")
    with pytest.raises(KnowledgeBaseError, match="exactly one of"):
        expert.Expert(rules_dirs=[tmp_path])


@pytest.mark.parametrize(("raw", "value"), [(True, "yes"), (False, "no"), ("true", "yes"), ("False", "no"),
                                            ("on", "yes"), ("off", "no"), ("yes", "yes"), (" No ", "no")])
def test_yes_no_facts_take_yaml_booleans(raw: object, value: str) -> None:
    """YAML reads a bare `yes` as True: a yes/no fact accepts the boolean and the usual spellings."""
    report = expert.diagnose({"uses_cuda_graphs": raw, "optimizer_offload": raw})
    assert report.observations["uses_cuda_graphs"].value == value
    assert report.observations["optimizer_offload"].value == value


@pytest.mark.parametrize(("fact", "raw", "value"), [
    ("dtype", "torch.bfloat16", "bf16"),  # print(model.dtype)
    ("dtype", "BFloat16", "bf16"),  # matched as the choices are: case-insensitive
    ("dtype", "bf16-mixed", "bf16"),  # Lightning's precision=
    ("dtype", "float16", "fp16"),
    ("dtype", "float8_e4m3fn", "fp8"),
    ("attention_implementation", "flash_attention_2", "flash"),  # Hugging Face attn_implementation=
    ("workload", "serving", "inference"),
    ("workload", "fine-tuning", "training"),
    ("phase", "generation", "decode"),
    ("interconnect", "IB", "infiniband"),
    ("interconnect", "RoCE", "ethernet"),
    ("interconnect", "RoCE v2", "ethernet"),
    ("interconnect", "NDR", "infiniband"),  # InfiniBand by its generation, as cluster specs write it
    ("interconnect", "NVLink 4", "nvlink"),
    ("attention_implementation", "FlashAttention-2", "flash"),
    ("optimizer_offload", "nvme", "yes"),  # DeepSpeed offload_optimizer.device
    ("activation_recompute", "selective", "yes"),  # Megatron --recompute-granularity
])
def test_enum_facts_take_the_spellings_frameworks_print(fact: str, raw: str, value: str) -> None:
    assert convert(KB.facts[fact], raw, KB) == value
    report = expert.diagnose({fact: raw})
    assert report.observations[fact].value == value


def test_an_alias_must_name_a_choice_and_not_shadow_one() -> None:
    from pydantic import ValidationError

    from expert.kb.catalogs import FactSpec

    spec = {"name": "x", "kind": "observed", "type": "enum", "choices": ["a", "b"], "description": "d",
            "question": "q?"}
    assert FactSpec.model_validate({**spec, "aliases": {"alpha": "a"}}).aliases == {"alpha": "a"}
    for aliases, message in (({"alpha": "c"}, "not one of the choices"), ({"b": "a"}, "not a choice itself"),
                             ({"Alpha": "a"}, "lower case")):
        with pytest.raises(ValidationError, match=message):
            FactSpec.model_validate({**spec, "aliases": aliases})
    with pytest.raises(ValidationError, match="spell the choices of an enum fact"):
        FactSpec.model_validate({**spec, "type": "text", "choices": None, "aliases": {"alpha": "a"}})


def test_a_derived_fact_given_names_what_to_give_instead() -> None:
    with pytest.raises(ObservationError) as info:
        expert.diagnose({"exposed_comm_s": 0.7, "compute_efficiency": 0.4, "step_time_s": 2})
    hints = {p.where: p.hint for p in info.value.problems}
    assert hints["exposed_comm_s"] == "it is worked out from comm_time_s and comm_overlap_frac: give those instead"
    assert hints["compute_efficiency"] == ("it is worked out from mfu and sm_active; or from mfu and gpu_util; or "
                                           "from mfu and tensor_active: give those instead")
    assert set(hints) == {"exposed_comm_s", "compute_efficiency"}  # step_time_s is fine


def test_a_boolean_is_no_answer_to_other_choices() -> None:
    with pytest.raises(ObservationError, match="workload"):
        expert.diagnose({"workload": True})


_QUICK_FACTS = [name for name, spec in KB.facts.items()
                if spec.kind != "derived" and spec.type in ("fraction", "number", "integer", "enum")]
# each fact's bounds and their neighbours, and the values either side of a fraction's [0, 1]
_EDGES: list[object] = [
    *sorted({v for spec in KB.facts.values() for bound in (spec.min, spec.max) if bound is not None
             for v in (bound, bound - 1e-9, bound + 1e-9, int(bound))}),
    0, 1, 2, -1, 0.0, 1.0, -0.0, 0.5, 1.5, 1.0000001, 100.0, 1e-300, 1e308, 2**53 + 1]  # ints and floats alike
_SPELLINGS = [*sorted({c for s in KB.facts.values() for c in s.choices or ()}),
              "Yes", " no", "y", "on", "true", "unknown", "?"]


@settings(max_examples=400, deadline=None)
@given(name=st.sampled_from(_QUICK_FACTS),
       raw=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(min_value=-2.0, max_value=2.0),
                     st.integers(min_value=-10**400, max_value=10**400), st.integers(min_value=-3, max_value=3),
                     st.booleans(), st.sampled_from(_EDGES),
                     st.text(max_size=6), st.sampled_from(_SPELLINGS)))
def test_plain_values_take_the_same_value_or_error_as_the_general_conversion(name: str, raw: object) -> None:
    """`normalise` checks plain numbers and an enum's own spelling inline (its quick path): every value it keeps is
    the one `convert` gives, of the same type, and every value `convert` refuses is refused, with the same message."""
    spec = KB.facts[name]
    try:
        expected: object = convert(spec, raw, KB)
    except ValueError as exc:
        expected = exc
    if is_unknown(raw):
        assert name not in normalise(KB, {name: raw}).facts
        return
    try:
        got: object = normalise(KB, {name: raw}).facts[name].value
    except ObservationError as exc:
        assert isinstance(expected, ValueError)
        assert str(expected) in str(exc)
        return
    assert not isinstance(expected, ValueError), f"{raw!r} kept as {got!r}, convert says {expected}"
    assert got == expected and type(got) is type(expected)
