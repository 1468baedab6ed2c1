"""Derived quantities, each checked against a hand calculation."""

from __future__ import annotations

import pytest

import expert
from expert import ObservationError
from expert.derive.formulas import (
    achieved_tflops,
    amdahl_max_speedup,
    arithmetic_intensity,
    compression_ratio,
    decode_bandwidth_gbs,
    decode_intensity,
    io_overhead,
    iron_law,
    mfu,
    ridge_point,
)
from expert.derive.graph import GRAPH, DerivationGraph, derive
from expert.derive.registry import CATALOG_LINK, DERIVATIONS, LLM_DECODE, OWN_LINK, PUBLISHED_PEAK, Derivation, Result
from expert.rules.evaluate import evaluate
from expert.rules.logic import facts_used

KB = expert.default_expert().kb
approx = pytest.approx


def test_no_derivation_reads_a_fact_derived_after_it() -> None:
    """The walk is one pass in registry order. A derivation that reads (an input, an optional input, a substitute or
    a gate's fact) what a later one derives would see it unknown, and it makes every what-if of a consultation walk
    the whole registry again instead of what the changed facts reach (DerivationGraph.revalue): 3x slower turns."""
    kb = expert.Expert(engine="pure").kb
    later: set[str] = set()
    for d in reversed(DERIVATIONS):
        later.add(d.output)
        assert not GRAPH.reads(d, kb) & later, (d.output, d.formula, sorted(GRAPH.reads(d, kb) & later))


def test_ridge_point_h100_sxm_bf16_is_the_seeds_295() -> None:
    # 989.4e12 FLOP/s / 3.35e12 B/s = 295.34 (the seed rounds 989/3.35 to 295.2)
    assert ridge_point(989.4, 3350) == approx(295.34, abs=0.01)


@pytest.mark.parametrize(("hw", "ridge"), [("a100-sxm-80gb", 153.0), ("h200-sxm", 206.1), ("l4", 403.3),
                                           ("mi300x", 246.7), ("v100-sxm2", 138.9)])
def test_catalog_ridge_points_match_the_reference_table(hw: str, ridge: float) -> None:
    spec = KB.hardware[hw]
    peak = spec.peak("bf16") or spec.peak("fp16")
    assert peak is not None
    assert ridge_point(peak, spec.memory_bandwidth_gbs) == approx(ridge, abs=0.5)


def test_arithmetic_intensity_of_a_square_gemm() -> None:
    n = 4096  # bf16 square GEMM: 2n^3 FLOPs over 3 n^2 elements x 2 bytes = n / 3
    assert arithmetic_intensity(2 * n**3, 3 * n * n * 2) == approx(n / 3)


def test_decode_intensity_is_about_the_batch_in_bf16() -> None:
    assert decode_intensity(1, 2) == 1.0
    assert decode_intensity(64, 1) == 128.0


def test_io_overhead_mfu_compression() -> None:
    assert io_overhead(0.12, 0.30) == approx(0.4)
    assert achieved_tflops(3.0e15, 2.0) == approx(1500.0)
    assert mfu(494.7, 989.4) == approx(0.5)
    assert compression_ratio(13e9, 47e9) == approx(0.2766, abs=1e-4)


def test_decode_bandwidth_llama_7b_on_h100() -> None:
    # 180 tok/s at batch 1, 6.7e9 params x 2 B = 13.4 GB per token -> 2412 GB/s, 72 % of 3350 GB/s
    assert decode_bandwidth_gbs(180, 1, 6.7e9, 2) == approx(2412.0)
    # batch 8: 8 tokens per weight pass
    assert decode_bandwidth_gbs(800, 8, 6.7e9, 2) == approx(1340.0)


def test_iron_law_sequential_and_overlapped() -> None:
    seq, over = iron_law(0.1, 0.2, 0.5, 0.05)
    assert seq == approx(0.85)
    assert over == approx(0.1 + 0.5 + 0.05)
    seq, over = iron_law(None, 0.2, None, None)
    assert (seq, over) == (approx(0.2), approx(0.2))


def test_amdahl_bound() -> None:
    assert amdahl_max_speedup(0.4) == approx(1 / 0.6)
    assert amdahl_max_speedup(1.0) == float("inf")


def _derive(obs: dict[str, object]) -> dict[str, float]:
    normalised = expert.default_expert().observations(obs)
    return {name: d.value for name, d in derive(normalised.values(), KB).items()}


def test_pipeline_training_step() -> None:
    d = _derive({"hardware": "h100-sxm", "dtype": "bf16", "flops": 3.1e15, "bytes_moved": 4e11,
                 "step_time_s": 10.0, "data_wait_s": 1.0})
    assert d["peak_tflops"] == 989.4
    assert d["peak_bandwidth"] == 3350
    assert d["ridge_point"] == approx(295.34, abs=0.01)
    assert d["arithmetic_intensity"] == approx(7750.0)
    assert d["intensity_to_ridge"] == approx(7750 / 295.343, rel=1e-4)
    assert d["achieved_tflops"] == approx(310.0)
    assert d["mfu"] == approx(310 / 989.4)
    assert d["io_overhead"] == approx(0.1)
    assert d["t_data_s"] == approx(4e11 / 3.35e12)
    assert d["t_compute_s"] == approx(3.1e15 / 989.4e12)
    assert d["t_sequential_s"] == approx(1.0 + 4e11 / 3.35e12 + 3.1e15 / 989.4e12)
    assert d["t_overlapped_s"] == approx(1.0 + 3.1e15 / 989.4e12)
    assert d["share_input"] == approx(0.1)


def test_pipeline_llm_decode_derives_bandwidth_and_intensity() -> None:
    d = _derive({"hardware": "h100-sxm", "dtype": "bf16", "workload": "inference", "phase": "decode",
                 "batch_size": 1, "model_params": "6.7B", "tokens_per_s": 180})
    assert d["mem_bw_util"] == approx(2412 / 3350)
    assert d["arithmetic_intensity"] == 1.0


def test_observed_values_are_never_overwritten() -> None:
    d = _derive({"hardware": "h100-sxm", "dtype": "bf16", "mfu": 0.4, "achieved_tflops": 100})
    assert "mfu" not in d  # observed, so not derived


def test_measured_bandwidth_share_feeds_the_data_term() -> None:
    d = _derive({"mem_bw_util": 0.8, "step_time_s": 0.5})
    assert d["t_data_s"] == approx(0.4)
    assert d["share_data"] == approx(0.8)


def test_launch_gap_is_idle_time_beyond_the_data_wait() -> None:
    d = _derive({"gpu_idle_gap_frac": 0.5, "data_wait_s": 0.1, "step_time_s": 1.0})
    assert d["launch_gap_frac"] == approx(0.4)
    assert d["t_overhead_s"] == approx(0.4)


def test_impossible_decode_rate_is_clamped_with_a_note() -> None:
    normalised = expert.default_expert().observations(
        {"hardware": "l4", "dtype": "bf16", "phase": "decode", "batch_size": 1, "model_params": "70B",
         "tokens_per_s": 100, "num_gpus": 8})  # 8 L4s: 140 GB x 100 / 8 = 1.75 TB/s each, 5.8x the 300 GB/s peak
    d = derive(normalised.values(), KB)
    assert d["mem_bw_util"].value == 1.0
    assert d["mem_bw_util"].note and "clamped" in d["mem_bw_util"].note


def test_unpublished_peak_derives_nothing() -> None:
    d = _derive({"hardware": "v100-sxm2", "dtype": "bf16", "flops": 1e12, "bytes_moved": 1e10})
    assert "peak_tflops" not in d and "ridge_point" not in d
    assert d["arithmetic_intensity"] == approx(100.0)


@pytest.mark.parametrize(("obs", "field"), [
    ({"data_wait_s": 2.0, "step_time_s": 1.0}, "data_wait_s"),
    ({"active_params": 2e9, "model_params": 1e9}, "active_params"),
    ({"num_gpus": 8, "tensor_parallel_size": 16}, "tensor_parallel_size"),
    ({"num_gpus": 16, "pipeline_parallel_size": 4, "data_parallel_size": 8}, "pipeline_parallel_size"),
    ({"num_gpus": 64, "tensor_parallel_size": 8, "pipeline_parallel_size": 4, "data_parallel_size": 4},
     "tensor_parallel_size"),
])
def test_contradictory_observations_are_refused(obs: dict[str, float], field: str) -> None:
    with pytest.raises(ObservationError) as info:
        expert.diagnose(obs)
    assert info.value.problems[0].where == field


def test_parallel_sizes_within_the_gpus_are_accepted() -> None:
    """n = p·t·d: degrees whose product is at most num_gpus (context parallelism takes the rest) are consistent."""
    expert.diagnose({"num_gpus": 64, "tensor_parallel_size": 8, "pipeline_parallel_size": 4, "data_parallel_size": 2})
    with pytest.raises(ObservationError) as info:
        expert.diagnose({"num_gpus": 8, "tensor_parallel_size": 4, "pipeline_parallel_size": 4})
    assert "tensor_parallel_size 4 x pipeline_parallel_size 4 = 16 GPUs is more than num_gpus (8)" in (
        info.value.problems[0].message)


@pytest.mark.parametrize(("obs", "share", "replicas"), [
    ({"num_gpus": 16, "tensor_parallel_size": 16}, 1.0, 1),  # tensor parallel over every GPU: one replica
    ({"num_gpus": 32, "tensor_parallel_size": 8, "pipeline_parallel_size": 4}, 1.0, 1),
    ({"num_gpus": 4, "pipeline_parallel_size": 4}, 1.0, 1),  # tensor parallelism not given: taken as 1
    ({"num_gpus": 32, "tensor_parallel_size": 8}, 0.25, None),  # 4 replicas, or fewer with pipeline stages: unsaid
    ({"num_gpus": 32, "tensor_parallel_size": 8, "pipeline_parallel_size": 4, "data_parallel_size": 1}, 1.0, 1),
])
def test_one_replica_over_every_gpu_has_one_data_parallel_rank(obs: dict[str, float], share: float,
                                                                 replicas: int | None) -> None:
    d = _derive(obs)
    assert d["model_parallel_to_gpus"] == approx(share)
    assert d.get("data_parallel_size", obs.get("data_parallel_size")) == replicas


def test_the_gradient_all_reduce_runs_over_the_data_parallel_ranks() -> None:
    """2(D − 1)/D × gradient bytes over D data-parallel ranks (num_gpus when not given); one replica all-reduces no
    gradient, so no bus bandwidth is read off the collectives' time (they are tensor-parallel all-reduces)."""
    base = {"num_gpus": 16, "gradient_bytes": 1e9, "comm_time_s": 0.1}
    assert _derive(base)["allreduce_bytes"] == approx(2 * 15 / 16 * 1e9)
    assert _derive({**base, "data_parallel_size": 2})["allreduce_bytes"] == approx(1e9)
    one = _derive({**base, "tensor_parallel_size": 16})
    assert one["allreduce_bytes"] == 0.0
    assert "bus_bandwidth" not in one and _derive(base)["bus_bandwidth"] == approx(2 * 15 / 16 * 10)


def test_every_derived_value_is_a_provenance_node_linked_to_its_inputs() -> None:
    report = expert.diagnose({"hardware": "h100-sxm", "dtype": "bf16", "flops": 3.1e15, "bytes_moved": 4e11,
                              "step_time_s": 10.0, "data_wait_s": 1.0, "gpu_util": 0.5})
    graph = report.provenance
    for name, derived in report.derived.items():
        node = f"derived:{name}"
        assert graph.nodes[node]["kind"] == "derived"
        parents = {p.split(":", 1)[1] for p in graph.predecessors(node)}
        assert parents <= set(derived.inputs), (name, parents)
        assert parents, name


def test_every_gate_tests_vocabulary_facts_and_every_formula_gives_a_value() -> None:
    """Gates are conditions on facts of the vocabulary; no formula declines (its type says it returns a Result)."""
    for d in DERIVATIONS:
        gate = GRAPH.gate(d, KB)
        assert (gate is None) == (d.gate is None) and d.gated == (d.gate is not None), d.output
        if gate is not None:
            assert set(facts_used(gate)) <= set(KB.facts), d.output
    cases = [expert.default_expert().observations(c).values() for c in (
        {"hardware": "h100-sxm", "dtype": "bf16", "flops": 3.1e15, "bytes_moved": 4e11, "step_time_s": 10.0,
         "data_wait_s": 1.0, "gpu_util": 0.9, "num_gpus": 16, "gradient_bytes": "14 GB", "interconnect": "nvlink",
         "comm_time_s": 0.4, "failures_per_day": 2, "checkpoint_write_s": 60, "checkpoint_interval_s": 3600},
        {"hardware": "l4", "dtype": "fp8", "workload": "inference", "phase": "decode", "batch_size": 4,
         "model_params": "7B", "active_params": "2B", "tokens_per_s": 300, "interconnect": "pcie"})]
    for facts in cases:
        for name, value in derive(facts, KB).items():
            assert isinstance(value.value, float | int) and value.value == value.value, name


@pytest.mark.parametrize("hw", sorted(KB.hardware))
def test_catalog_gates_say_exactly_what_the_catalog_has(hw: str) -> None:
    spec = KB.hardware[hw]
    for dtype in KB.facts["dtype"].choices or []:
        holds = evaluate(PUBLISHED_PEAK.on(KB), {"hardware": hw, "dtype": dtype}, ())
        assert (holds == "true") == (spec.peak(dtype) is not None), (hw, dtype)
    for kind in KB.facts["interconnect"].choices or []:
        own = evaluate(OWN_LINK.on(KB), {"hardware": hw, "interconnect": kind}, ())
        name = {"nvlink": spec.scale_up_link, "pcie": spec.host_link}.get(kind)
        assert (own == "true") == (kind in ("nvlink", "pcie") and name is not None and kind in name.casefold()
                                   and (spec.scale_up_gbs if kind == "nvlink" else spec.host_link_gbs) is not None)
        default = evaluate(CATALOG_LINK.on(KB), {"interconnect": kind}, ())
        assert (default == "true") == (KB.default_interconnect(kind) is not None), kind


def test_a_gate_not_yet_decided_leaves_its_formula_possible() -> None:
    decode = next(d for d in DERIVATIONS if d.gate is LLM_DECODE)
    assert GRAPH.could_apply(decode, {}, KB)  # the kind of job is not known yet
    assert GRAPH.could_apply(decode, {"phase": "decode"}, KB)  # an unstated workload counts as inference
    assert not GRAPH.could_apply(decode, {"workload": "training"}, KB)
    assert not GRAPH.could_apply(decode, {"phase": "prefill"}, KB)


def test_a_formula_with_a_bug_raises_instead_of_looking_like_a_missing_input() -> None:
    def broken(f: object, kb: object) -> Result:
        return Result(float({}["oops"]))  # type: ignore[index]

    graph = DerivationGraph((Derivation("io_overhead", ("data_wait_s", "step_time_s"), "broken", "test", broken),))
    with pytest.raises(KeyError, match="oops"):
        graph.derive({"data_wait_s": 0.1, "step_time_s": 1.0}, KB)
    assert graph.askable_inputs_given("io_overhead", {"data_wait_s": 0.1}, KB) == ["step_time_s"]  # never run


def test_missing_evidence_leaves_out_the_inputs_of_ways_a_gate_closes() -> None:
    """One GPU has no all-reduce: its size (gradient_bytes) cannot settle the communication rules."""
    facts = {"hardware": "l40s", "interconnect": "pcie", "comm_frac": "20%"}
    several = [m for m in expert.diagnose({**facts, "num_gpus": 8}).missing if m.fact == "gradient_bytes"]
    assert several and "comm-term-exceeds-step" in several[0].rules  # the all-reduce term needs its size
    assert "gradient_bytes" not in [m.fact for m in expert.diagnose({**facts, "num_gpus": 1}).missing]
    no_time = {**facts, "num_gpus": 8, "comm_time_s": 0}  # no collective time: no bus bandwidth to compare
    assert "comm-below-link-speed" not in next(m.rules for m in expert.diagnose(no_time).missing
                                               if m.fact == "gradient_bytes")


def test_missing_evidence_of_a_training_job_leaves_out_decode_inputs() -> None:
    import expert

    report = expert.diagnose({"hardware": "h100-sxm", "dtype": "bf16", "workload": "training", "gpu_util": 0.5})
    missing = [m.fact for m in report.missing]
    assert "phase" not in missing and "tokens_per_s" not in missing and "mem_bw_util" in missing
    unknown_kind = expert.diagnose({"hardware": "h100-sxm", "dtype": "bf16", "gpu_util": 0.5})
    assert "phase" in [m.fact for m in unknown_kind.missing]  # it might be decode


