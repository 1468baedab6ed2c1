"""From node to cluster (seed Table 6 and C³): cluster facts, derivations, regimes, report section and examples."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from pytest import approx

import expert
from expert import Expert, KnowledgeBaseError, Report
from expert._resources import examples_dir
from expert.derive.formulas import (
    comm_term,
    coordination_loss,
    daly_interval,
    exposed_comm,
    lost_share,
    ring_allreduce_bytes,
    scaling_efficiency,
    young_interval,
)
from expert.derive.graph import derive
from expert.kb.knowledge import KnowledgeBase
from expert.observations.file import read_observation_file
from expert.report.model import ClusterSection

EXPERT = Expert(engine="pure")
KB = EXPERT.kb
MIN, HOUR = 60.0, 3600.0
CLUSTER_REGIMES = ("communication", "coordination")


def derived(obs: dict[str, Any]) -> dict[str, float]:
    return {name: d.value for name, d in derive(EXPERT.observations(obs).values(), KB).items()}


def example(name: str) -> Report:
    return EXPERT.diagnose(read_observation_file(examples_dir() / f"{name}.yaml").observations)


# ---- Young 1974 and Daly 2006 -------------------------------------------------------------------------------------

# Daly's worked values (FGCS 22, 2006), δ = 5 min, R = 10 min (R does not enter the optimum).
@pytest.mark.parametrize(("mtbf_s", "daly_min", "young_min"), [
    (24 * HOUR, 117, 120),
    (6 * HOUR, 57, 60),
    (15 * MIN, 9.1, 12.2),
], ids=["M=24h", "M=6h", "M=15min"])
def test_daly_worked_values(mtbf_s: float, daly_min: float, young_min: float) -> None:
    delta = 5 * MIN
    assert daly_interval(delta, mtbf_s) / MIN == approx(daly_min, abs=0.5 if daly_min > 20 else 0.05)
    assert young_interval(delta, mtbf_s) / MIN == approx(young_min, abs=0.05)


def test_daly_worked_values_through_a_diagnosis_with_units() -> None:
    for mtbf, daly_min in (("24 h", 117), ("6 h", 57), ("15 min", 9.1)):
        report = EXPERT.diagnose({"checkpoint_write_s": "5 min", "mtbf_h": mtbf, "restart_time_s": "10 min",
                                  "checkpoint_interval_s": "1 h"})
        assert report.derived["daly_interval_s"].value / MIN == approx(daly_min, abs=0.5 if daly_min > 20 else 0.05)
        assert "Daly 2006" in report.derived["daly_interval_s"].source
        assert "10.1145/361147.361115" in report.derived["young_interval_s"].source
        assert report.cluster is not None and report.cluster.daly_interval_s == report.derived["daly_interval_s"].value


def test_daly_exact_formula_at_24h() -> None:
    # √(2·300·86400) = 7200; δ/2M = 1/576: 7200·(1 + 1/72 + 1/5184) − 300 = 7001.39 s
    assert daly_interval(300, 86400) == approx(7200 * (1 + 1 / 72 + 1 / 5184) - 300)


def test_daly_is_the_mtbf_once_the_checkpoint_takes_two_mtbfs() -> None:
    assert daly_interval(2 * HOUR, 1 * HOUR) == 1 * HOUR
    assert daly_interval(5 * HOUR, 1 * HOUR) == 1 * HOUR


def test_first_order_loss_is_minimal_and_balanced_at_young() -> None:
    delta, mtbf = 300.0, 86400.0
    tau = young_interval(delta, mtbf)
    assert delta / tau == approx(tau / (2 * mtbf))  # checkpoint cost equals expected rework at the optimum
    assert coordination_loss(delta, tau, mtbf) == approx(math.sqrt(2 * delta / mtbf))
    assert coordination_loss(delta, 2 * tau, mtbf) == approx(1.25 * coordination_loss(delta, tau, mtbf))
    assert coordination_loss(delta, tau / 2, mtbf) == approx(1.25 * coordination_loss(delta, tau, mtbf))
    assert coordination_loss(delta, tau, mtbf, restart_s=600) == approx(math.sqrt(2 * delta / mtbf) + 600 / mtbf)
    assert lost_share(0.25) == approx(0.2)


def test_coordination_overhead_is_derived_with_and_without_restart_time() -> None:
    base = {"checkpoint_write_s": "5 min", "mtbf_h": 24, "checkpoint_interval_s": "8 h"}
    without = derived(base)
    x = 300 / 28800 + 28800 / 172800
    assert without["coordination_overhead"] == approx(x / (1 + x))
    assert without["checkpoint_interval_ratio"] == approx(28800 / daly_interval(300, 86400))
    with_restart = derived({**base, "restart_time_s": "10 min"})
    x += 600 / 86400
    assert with_restart["coordination_overhead"] == approx(x / (1 + x))
    assert with_restart["excess_coordination_overhead"] == approx(
        with_restart["coordination_overhead"] - with_restart["optimal_coordination_overhead"])


@pytest.mark.parametrize(("obs", "mtbf_h"), [
    ({"failures_per_day": 2}, 12.0),
    ({"node_mtbf_h": "1500 h", "num_nodes": 128}, 1500 / 128),
    ({"mtbf_h": "90 min"}, 1.5),
], ids=["failures-per-day", "node-mtbf", "minutes"])
def test_job_mtbf(obs: dict[str, Any], mtbf_h: float) -> None:
    report = EXPERT.diagnose({**obs, "checkpoint_write_s": 60})
    facts = report.facts()
    assert facts["mtbf_h"] == approx(mtbf_h)


def test_zero_failures_per_day_derives_no_mtbf() -> None:
    assert "mtbf_h" not in derived({"failures_per_day": 0, "checkpoint_write_s": 60})


# ---- scaling efficiency and the communication term ----------------------------------------------------------------

def test_scaling_efficiency_from_throughputs_and_from_step_times() -> None:
    assert scaling_efficiency(700, 1000) == approx(0.7)
    d = derived({"num_gpus": 16, "single_gpu_throughput": 1000, "cluster_throughput": 11000})
    assert d["per_gpu_throughput"] == approx(687.5)
    assert d["scaling_efficiency"] == approx(0.6875)
    assert d["effective_gpus"] == approx(11.0)
    d = derived({"num_gpus": 32, "single_gpu_step_time_s": "400 ms", "step_time_s": "500 ms"})
    assert d["scaling_efficiency"] == approx(0.8)


def test_superlinear_scaling_is_clamped_with_a_note() -> None:
    report = EXPERT.diagnose({"num_gpus": 8, "single_gpu_throughput": 100, "per_gpu_throughput": 110})
    value = report.derived["scaling_efficiency"]
    assert value.value == 1.0 and value.note and "superlinear" in value.note


def test_ring_allreduce_moves_two_n_minus_one_over_n() -> None:
    assert ring_allreduce_bytes(1e9, 8) == approx(1.75e9)
    assert ring_allreduce_bytes(1e9, 2) == approx(1e9)
    assert ring_allreduce_bytes(1e9, 1) == 0.0
    assert ring_allreduce_bytes(1e9, 4096) < 2e9
    assert comm_term(1.75e9, 50) == approx(0.035)
    assert exposed_comm(0.2, 0.25) == approx(0.15)


def test_communication_derivations_chain() -> None:
    d = derived({"hardware": "l40s", "num_gpus": 8, "interconnect": "pcie", "gradient_bytes": "2.6 GB",
                 "step_time_s": 0.6, "comm_time_s": 0.24, "comm_overlap_frac": 0.2})
    assert d["interconnect_bandwidth"] == approx(32.0)  # L40S PCIe Gen4 x16: 64 GB/s bidirectional
    assert d["allreduce_bytes"] == approx(2 * 7 / 8 * 2.6e9)
    assert d["t_comm_s"] == approx(4.55e9 / 32e9)
    assert d["comm_term_share"] == approx(4.55e9 / 32e9 / 0.6)
    assert d["exposed_comm_s"] == approx(0.192)
    assert d["comm_frac"] == approx(0.32)
    assert d["bus_bandwidth"] == approx(4.55 / 0.24)
    assert d["bus_bw_util"] == approx(4.55 / 0.24 / 32)


def test_a_given_comm_frac_wins_over_the_trace() -> None:
    d = derived({"comm_frac": 0.05, "comm_time_s": 0.24, "comm_overlap_frac": 0.2, "step_time_s": 0.6})
    assert "comm_frac" not in d and d["exposed_comm_s"] == approx(0.192)


@pytest.mark.parametrize(("obs", "gbs", "source"), [
    ({"hardware": "h100-sxm", "interconnect": "nvlink"}, 450.0, "nvidia.com"),   # NVLink4 900 GB/s total
    ({"hardware": "a100-sxm-80gb", "interconnect": "nvlink"}, 300.0, "nvidia"),  # NVLink3 600 GB/s total
    ({"hardware": "h100-sxm", "interconnect": "pcie"}, 64.0, "nvidia.com"),      # PCIe Gen5 128 GB/s total
    ({"hardware": "h100-sxm", "interconnect": "infiniband"}, 50.0, "dgx"),       # NDR 400 Gb/s, catalog
    ({"interconnect": "ethernet"}, 12.5, "IEEE"),                                # 100 GbE, catalog default
    ({"interconnect": "nvlink"}, 450.0, "nvidia.com"),                           # catalog default, NVLink4
    ({"hardware": "l4", "interconnect": "nvlink"}, 450.0, "nvidia.com"),         # the L4 has no NVLink: catalog
])
def test_interconnect_bandwidth_from_hardware_or_catalog(obs: dict[str, Any], gbs: float, source: str) -> None:
    report = EXPERT.diagnose(obs)
    value = report.derived["interconnect_bandwidth"]
    assert value.value == approx(gbs)
    assert source.casefold() in str(value.constants.get("source", "")).casefold()


def test_a_given_link_bandwidth_overrides_the_catalog() -> None:
    assert "interconnect_bandwidth" not in derived({"interconnect": "ethernet", "interconnect_bandwidth": "50 GB/s"})


def test_one_gpu_has_no_all_reduce() -> None:
    d = derived({"num_gpus": 1, "gradient_bytes": "1 GB", "interconnect": "pcie", "step_time_s": 1.0})
    assert "allreduce_bytes" not in d and "t_comm_s" not in d


def test_every_cluster_derivation_output_is_in_the_vocabulary() -> None:
    from expert.derive.registry import DERIVATIONS

    for d in DERIVATIONS:
        spec = KB.facts[d.output]
        assert spec.kind in ("derived", "both"), d.output
        for name in d.inputs:
            assert name in KB.facts, (d.output, name)


# ---- knowledge base -------------------------------------------------------------------------------------------------

def test_each_link_kind_has_one_default_with_a_source() -> None:
    kinds = KB.facts["interconnect"].choices or []
    assert set(kinds) == {"nvlink", "pcie", "infiniband", "ethernet"}
    for kind in kinds:
        link = KB.default_interconnect(kind)
        assert link is not None and link.source and link.per_direction_gbs > 0


def test_a_catalog_link_of_an_unknown_kind_is_refused(kb_copy: Path) -> None:
    path = kb_copy / "interconnects.yaml"
    path.write_text(path.read_text().replace("kind: ethernet", "kind: token-ring", 1))
    with pytest.raises(KnowledgeBaseError, match="token-ring"):
        KnowledgeBase.load(kb_copy)


def test_cluster_regimes_come_after_the_single_node_ones() -> None:
    precedence = KB.regimes.precedence
    # host: CPU starvation, beside input; capacity: what fits limits the batch before any time regime
    assert precedence[:6] == ["input", "host", "capacity", "latency", "memory", "compute"]
    assert precedence[6:] == list(CLUSTER_REGIMES)
    for regime in CLUSTER_REGIMES:
        assert KB.regimes.regimes[regime].term == regime
        assert "Table 6" in KB.regimes.regimes[regime].source


@pytest.mark.parametrize("regime", CLUSTER_REGIMES)
def test_faster_gpus_are_wasted_in_the_cluster_regime_tables(regime: str) -> None:
    _, table = EXPERT.ruleset.tables[regime]
    assert "more_peak_flops" in {w.id for w in table.wasted}
    assert "more_peak_flops" not in table.effective
    for opt in table.effective:
        shrinks = KB.optimizations[opt].shrinks
        assert shrinks in (regime, "overlap") or KB.regimes.terms[shrinks].part_of == regime


def test_every_cluster_rule_names_its_source() -> None:
    rules = [lr for lr in EXPERT.ruleset.rules.values() if lr.path.name == "cluster.yaml"]
    assert len(rules) >= 15
    sources = " ".join(lr.rule.source for lr in rules)
    for needle in ("Table 6", "C³", "Daly 2006", "Young 1974", "nccl-tests"):
        assert needle in sources


# ---- the report's cluster section and the bundled examples --------------------------------------------------------

def test_single_node_reports_have_no_cluster_section() -> None:
    report = EXPERT.diagnose({"hardware": "h100-sxm", "gpu_util": 0.45, "data_wait_s": 0.12, "step_time_s": 0.3})
    assert report.cluster is None
    assert '"cluster": null' in report.to_json()


def test_cluster_section_mirrors_the_facts_and_round_trips() -> None:
    report = example("ddp_exposed_allreduce_pcie")
    section = report.cluster
    assert section is not None
    facts = report.facts()
    for name in ClusterSection.model_fields:
        if name in ("ranks", "straggler_rank", "slow_link"):  # from rank traces and rules/cluster_ranks.yaml, not facts
            continue
        value = getattr(section, name)
        assert value == facts.get(name), name
    assert section.ranks == [] and section.straggler_rank is None and section.slow_link is None
    assert section.num_gpus == 8 and section.interconnect == "pcie"
    assert section.comm_frac == approx(0.32)
    assert Report.model_validate_json(report.to_json()) == report


def test_example_ddp_exposed_allreduce_on_pcie() -> None:
    report = example("ddp_exposed_allreduce_pcie")
    assert report.bottleneck == "communication"
    findings = {f.id for f in report.findings}
    assert {"communication_wall", "comm_poorly_overlapped", "slow_interconnect", "low_scaling_efficiency",
            "no_nvlink_between_gpus"} <= findings  # eight L40S in one node: PCIe between every pair
    recommended = [r.id for r in report.recommended]
    assert {"async_grad_sync", "gradient_bucketing", "gradient_compression", "faster_interconnect"} <= set(recommended)
    wasted = {w.id for w in report.wasted}
    assert "more_peak_flops" in wasted and "more_peak_flops" not in recommended
    assert "topology_aware_placement" in wasted  # no NVLink domain to keep the traffic in
    bucketing = next(r for r in report.recommended if r.id == "gradient_bucketing")
    assert bucketing.expected_gain is not None and bucketing.expected_gain.term_share == approx(0.32)


def test_example_checkpoint_interval_too_long() -> None:
    report = example("checkpoint_interval_too_long")
    assert report.bottleneck == "coordination"
    section = report.cluster
    assert section is not None and section.mtbf_h == approx(2000 / 256)
    assert section.daly_interval_s is not None and 55 * MIN < section.daly_interval_s < 65 * MIN
    assert section.checkpoint_interval_ratio is not None and section.checkpoint_interval_ratio > 5
    assert {"checkpoint_interval_too_long", "coordination_interval_loss"} <= {f.id for f in report.findings}
    recommended = [r.id for r in report.recommended]
    assert {"checkpoint_interval_tuning", "async_checkpointing"} <= set(recommended)
    assert "more_peak_flops" in {w.id for w in report.wasted}


def test_example_well_scaled_cluster() -> None:
    report = example("well_scaled_cluster")
    assert report.bottleneck == "compute"
    assert not {c.regime for c in report.candidates} & set(CLUSTER_REGIMES)
    findings = {f.id for f in report.findings}
    assert {"scales_well", "checkpoint_interval_ok", "cluster_job"} <= findings
    assert not findings & {"exposed_communication", "low_scaling_efficiency", "stragglers", "mfu_at_cluster_cost"}
    assert "faster_interconnect" in {w.id for w in report.wasted}
    section = report.cluster
    assert section is not None and section.scaling_efficiency == approx(405 / 420)
    assert section.bus_bw_util is not None and section.bus_bw_util > 0.9


def test_bundled_cluster_examples_are_listed() -> None:
    names = {p.stem for p in examples_dir().glob("*.yaml")}
    assert {"ddp_exposed_allreduce_pcie", "checkpoint_interval_too_long", "well_scaled_cluster"} <= names


def test_the_mfu_warning_of_the_seed() -> None:
    report = expert.diagnose({"num_gpus": 128, "mfu": 0.55, "scaling_efficiency": 0.65})
    finding = next(f for f in report.findings if f.id == "mfu_at_cluster_cost")
    assert "55%" in finding.message and "65%" in finding.message
    assert "transition to C³" in finding.source


def test_a_communication_verdict_is_confirmed_on_the_collectives_not_the_dataloader() -> None:
    """The data axis's row of seed Table 4 (framework profiler: batch load and wait time) confirms an input-bound
    step, not a communication-bound one: its confirming measurement is the collectives' own time and bandwidth."""
    report = example("ddp_exposed_allreduce_pcie")
    assert report.bottleneck == "communication"
    (confirm,) = [m for m in report.next_measurements if m.fact is None and m.settles == ["communication"]]
    assert confirm.tool == "Nsight Systems" and "NCCL" in confirm.how and "Batch load" not in confirm.how
    assert expert.diagnose(read_observation_file(examples_dir() / "data_starved_training.yaml").observations
                           ).next_measurements[-1].how.startswith("Batch load and wait time")


@pytest.mark.parametrize(("name", "verdict", "tool", "says"), [
    ("kv_cache_bound_server", "capacity", "nvidia-smi", "kv_cache_usage"),
    ("model_does_not_fit", "capacity", "nvidia-smi", "memory.used"),
    ("offloaded_optimizer_weak_host", "host", "Framework profiler trace (torch.profiler)", "Optimizer.step"),
])
def test_capacity_and_host_verdicts_are_confirmed_where_they_show(name: str, verdict: str, tool: str,
                                                                   says: str) -> None:
    """What fits shows in memory in use (not in a kernel's counters, Nsight Compute's Table 4 row); CPU work on the
    critical path shows in the host's operators while the GPU idles (not in the DataLoader's batch wait)."""
    report = example(name)
    assert report.bottleneck == verdict
    (confirm,) = [m for m in report.next_measurements if m.fact is None and m.settles == [verdict]]
    assert confirm.tool == tool and says in confirm.how
    assert "Nsight Compute" not in confirm.tool and "Batch load" not in confirm.how


def test_a_regime_confirmed_with_an_unknown_tool_does_not_load(kb_copy: Path) -> None:
    path = kb_copy / "regimes.yaml"
    path.write_text(path.read_text().replace("tool: nsight_systems\n", "tool: nsight_sistems\n", 1))
    with pytest.raises(KnowledgeBaseError, match="unknown tool 'nsight_sistems'"):
        KnowledgeBase.load(kb_copy)
