"""Property tests for the C³ rules: the wasted invariant, engine agreement, provenance, the checkpoint-interval
formulas, and that single-GPU diagnoses are exactly what they were without the cluster rules."""

from __future__ import annotations

import math
import shutil
from typing import Any

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import _value, observations

from expert import Expert, ExpertError, Report
from expert._resources import data_dir
from expert.derive.formulas import coordination_loss, daly_interval, ring_allreduce_bytes, young_interval
from expert.report.model import ClusterSection

DURABLE = Expert(engine="durable")
PURE = Expert(engine="pure")
KB = PURE.kb
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# The observable facts of the cluster vocabulary (knowledge_base/facts.yaml, "cluster scale").
CLUSTER_FACTS = ("num_gpus", "num_nodes", "single_gpu_throughput", "cluster_throughput", "per_gpu_throughput",
                 "single_gpu_step_time_s", "scaling_efficiency", "comm_time_s", "comm_overlap_frac", "comm_frac",
                 "interconnect", "interconnect_bandwidth", "gradient_bytes", "sync_wait_s", "checkpoint_write_s",
                 "checkpoint_interval_s", "mtbf_h", "failures_per_day", "node_mtbf_h", "restart_time_s",
                 "bus_bandwidth", "world_size", "slowest_rank", "compute_skew", "step_time_skew", "nccl_bus_bandwidth",
                 "pipeline_parallel_size", "tensor_parallel_size", "grad_sync_per_micro_batch")
NODE_FACTS = ("hardware", "dtype", "gpu_util", "sm_active", "mem_bw_util", "mfu", "host_cpu_util", "data_wait_s")
# Seed Table 6 / C³: what a cluster verdict must never recommend ("faster GPUs" are wasted).
NEVER = {"communication": {"more_peak_flops", "more_memory_bandwidth"},
         "coordination": {"more_peak_flops", "more_memory_bandwidth"}}
CONCLUSION_KINDS = {"finding", "bottleneck", "recommendation", "wasted"}


@st.composite
def cluster_observations(draw: st.DrawFn) -> dict[str, Any]:
    """A multi-GPU job: a GPU count and a step time, some cluster facts and some node-level facts."""
    names = draw(st.lists(st.sampled_from(CLUSTER_FACTS + NODE_FACTS), unique=True, min_size=1, max_size=14))
    obs: dict[str, Any] = {name: draw(_value(KB.facts[name])) for name in names}
    obs["num_gpus"] = draw(st.sampled_from([2, 8, 64, 1024]))
    obs["step_time_s"] = draw(st.floats(1e-3, 10.0))
    if "data_wait_s" in obs:
        obs["data_wait_s"] = obs["step_time_s"] * draw(st.floats(0.0, 1.0))
    return obs


@st.composite
def single_gpu_observations(draw: st.DrawFn) -> dict[str, Any]:
    """Any valid observation set without a cluster fact (sometimes saying num_gpus: 1)."""
    obs = {k: v for k, v in draw(observations()).items() if k not in CLUSTER_FACTS}
    if draw(st.booleans()):
        obs["num_gpus"] = 1
    return obs


def _diagnose(expert: Expert, obs: dict[str, Any]) -> Report | None:
    try:
        return expert.diagnose(obs)
    except ExpertError:  # cross-fact contradictions are refused, as designed
        return None


@SETTINGS
@given(cluster_observations())
def test_wasted_invariant_holds_for_cluster_verdicts(obs: dict[str, Any]) -> None:
    report = _diagnose(DURABLE, obs)
    if report is None:
        return
    recommended = {r.id for r in report.recommended}
    wasted = {w.id for w in report.wasted}
    assert not recommended & wasted
    if report.bottleneck in NEVER:
        assert NEVER[report.bottleneck] <= wasted, report.bottleneck
        assert not recommended & NEVER[report.bottleneck], (report.bottleneck, recommended)


@SETTINGS
@given(cluster_observations())
def test_engines_agree_on_cluster_jobs(obs: dict[str, Any]) -> None:
    durable, pure = _diagnose(DURABLE, obs), _diagnose(PURE, obs)
    if durable is None or pure is None:
        assert durable is None and pure is None
        return
    assert durable.bottleneck == pure.bottleneck
    assert [(c.regime, c.strength, c.score, c.rules) for c in durable.candidates] == [
        (c.regime, c.strength, c.score, c.rules) for c in pure.candidates]
    assert sorted(e.rule_id for e in durable.evaluations if e.fired) == sorted(
        e.rule_id for e in pure.evaluations if e.fired)
    assert [r.id for r in durable.recommended] == [r.id for r in pure.recommended]
    assert durable.cluster == pure.cluster


@SETTINGS
@given(cluster_observations())
def test_cluster_conclusions_trace_back_to_observations(obs: dict[str, Any]) -> None:
    report = _diagnose(PURE, obs)
    if report is None:
        return
    graph = report.provenance
    observed = {n for n, kind in graph.nodes(data="kind") if kind == "observation"}
    for node, kind in graph.nodes(data="kind"):
        if kind in CONCLUSION_KINDS:
            assert nx.ancestors(graph, node) & observed, node
    section = report.cluster
    assert section is not None  # num_gpus > 1 is always given
    facts = report.facts()
    from_rules = {"ranks": section.ranks, "straggler_rank": section.straggler_rank, "slow_link": section.slow_link}
    assert section == ClusterSection.model_validate({k: facts[k] for k in ClusterSection.model_fields if k in facts}
                                                    ).model_copy(update=from_rules)  # the rest mirrors the facts
    assert section.straggler_rank is None or section.straggler_rank == facts["slowest_rank"]
    for name in ("scaling_efficiency", "comm_frac", "bus_bw_util", "sync_wait_frac", "coordination_overhead"):
        value = getattr(section, name)
        assert value is None or 0.0 <= value <= 1.0, (name, value)


# ---- single-GPU behaviour is unchanged ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def without_cluster_rules(tmp_path_factory: pytest.TempPathFactory) -> Expert:
    """The same knowledge base with every rule file except the cluster ones (cluster*.yaml)."""
    rules = tmp_path_factory.mktemp("rules")
    for path in data_dir("rules").glob("*.yaml"):
        if not path.name.startswith("cluster"):
            shutil.copy(path, rules / path.name)
    return Expert(rules_dirs=[rules], engine="pure")


def _without_cluster_parts(report: Report) -> dict[str, Any]:
    cluster_rules = {r for r, lr in PURE.ruleset.rules.items() if lr.path.name.startswith("cluster")}
    data = report.model_dump(mode="json")
    data["evaluations"] = [e for e in data["evaluations"] if e["rule_id"] not in cluster_rules]
    data["tables"] = [t for t in data["tables"] if t["regime"] not in NEVER]
    section = data.pop("cluster")  # only `num_gpus: 1` may show there
    assert section is None or {k: v for k, v in section.items() if v not in (None, [])} == {"num_gpus": 1}, section
    return data


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(single_gpu_observations())
def test_single_gpu_reports_are_unchanged_by_the_cluster_rules(without_cluster_rules: Expert,
                                                              obs: dict[str, Any]) -> None:
    report = _diagnose(PURE, obs)
    if report is None:
        assert _diagnose(without_cluster_rules, obs) is None
        return
    for evaluation in report.evaluations:
        if evaluation.rule_id.startswith(("cluster-", "comm-", "coord-")):
            assert evaluation.outcome == "false", evaluation.rule_id  # never unknown: nothing is asked for
    assert _without_cluster_parts(report) == _without_cluster_parts(without_cluster_rules.diagnose(obs))


def test_bundled_single_node_examples_are_unchanged(without_cluster_rules: Expert) -> None:
    from expert._resources import examples_dir
    from expert.observations.file import read_observation_file

    checked = 0
    for path in sorted(examples_dir().glob("*.yaml")):
        obs = read_observation_file(path).observations
        if set(obs) & set(CLUSTER_FACTS):
            continue
        checked += 1
        assert _without_cluster_parts(PURE.diagnose(obs)) == _without_cluster_parts(without_cluster_rules.diagnose(obs))
    assert checked >= 6


# ---- the formulas ---------------------------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(st.floats(1.0, 1e5), st.floats(60.0, 1e8))
def test_daly_is_below_young_and_the_mtbf(delta: float, mtbf: float) -> None:
    tau = daly_interval(delta, mtbf)
    assert 0 < tau <= mtbf
    if delta < 2 * mtbf:
        assert tau < young_interval(delta, mtbf)
        assert tau <= 0.8889 * mtbf  # 2√x − 4x/3 + 2x^1.5/9 peaks at x = δ/2M = 1


@settings(max_examples=300, deadline=None)
@given(st.floats(1.0, 1e4), st.floats(1e3, 1e7), st.floats(1e-3, 1e3))
def test_young_minimises_the_first_order_loss(delta: float, mtbf: float, factor: float) -> None:
    best = young_interval(delta, mtbf)
    assert coordination_loss(delta, best, mtbf) <= coordination_loss(delta, best * factor, mtbf) * (1 + 1e-12)


@settings(max_examples=200, deadline=None)
@given(st.floats(1.0, 1e15), st.integers(1, 100000))
def test_ring_all_reduce_bytes_grow_with_ranks_but_stay_below_twice(size: float, ranks: int) -> None:
    moved = ring_allreduce_bytes(size, ranks)
    assert 0 <= moved < 2 * size
    assert ring_allreduce_bytes(size, ranks + 1) >= moved
    assert math.isclose(ring_allreduce_bytes(size, 2), size)
