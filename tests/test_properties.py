"""Property tests over generated observation sets (Hypothesis)."""

from __future__ import annotations

from typing import Any

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import observations, rich_observations

import expert
from expert import Expert, Report

DURABLE = Expert(engine="durable")
PURE = Expert(engine="pure")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Seed Table 3 (and the data-starved case): what must never be recommended for each verdict.
NEVER = {
    "memory": {"more_peak_flops"},
    "compute": {"more_memory_bandwidth"},
    "latency": {"more_peak_flops", "more_memory_bandwidth"},
    "input": {"more_peak_flops"},
}
CONCLUSION_KINDS = {"finding", "bottleneck", "recommendation", "wasted"}


def _summary(report: Report) -> dict[str, Any]:
    return {
        "bottleneck": report.bottleneck,
        "candidates": [(c.regime, c.strength, c.score, c.rules) for c in report.candidates],
        "findings": [(f.id, f.rule_id, f.message) for f in report.findings],
        "recommended": [(r.id, r.rules) for r in report.recommended],
        "wasted": [(w.id, w.reason) for w in report.wasted],
        "fired": sorted(e.rule_id for e in report.evaluations if e.fired),
        "graph": sorted((e.source, e.target, e.relation) for e in report.graph.edges),
    }


@SETTINGS
@given(observations())
def test_no_valid_observation_set_raises(obs: dict[str, Any]) -> None:
    report = DURABLE.diagnose(obs)
    assert report.bottleneck is None or report.bottleneck in DURABLE.kb.regimes.regimes


@SETTINGS
@given(rich_observations())
def test_wasted_is_never_recommended(obs: dict[str, Any]) -> None:
    report = DURABLE.diagnose(obs)
    recommended = {r.id for r in report.recommended}
    assert not recommended & {w.id for w in report.wasted}, "an optimization is both recommended and wasted"
    if report.bottleneck:
        assert not recommended & NEVER.get(report.bottleneck, set()), (report.bottleneck, recommended)


@SETTINGS
@given(rich_observations())
def test_no_optimization_outside_the_workload_is_offered_or_ruled_out(obs: dict[str, Any]) -> None:
    """optimizations.yaml `workloads`: a training job is never offered a KV cache, a service never DDP settings;
    both lists drop them, and with the workload unknown every optimization may appear."""
    report = DURABLE.diagnose(obs)
    workload = report.observations.get("workload")
    if workload is None:
        return
    listed = {r.id for r in report.recommended} | {w.id for w in report.wasted}
    outside = {o.id for o in DURABLE.kb.optimizations.values() if o.workloads and workload.value not in o.workloads}
    assert not listed & outside, (workload.value, listed & outside)


@SETTINGS
@given(rich_observations(), st.randoms(use_true_random=False))
def test_key_order_never_changes_the_report(obs: dict[str, Any], rnd: Any) -> None:
    items = list(obs.items())
    rnd.shuffle(items)
    assert DURABLE.diagnose(dict(items)).to_json() == DURABLE.diagnose(obs).to_json()


@SETTINGS
@given(rich_observations())
def test_durable_rules_and_pure_engine_agree(obs: dict[str, Any]) -> None:
    durable, pure = DURABLE.diagnose(obs), PURE.diagnose(obs)
    assert durable.engine == "durable-rules" and pure.engine == "pure"
    assert _summary(durable) == _summary(pure)


@SETTINGS
@given(rich_observations())
def test_engine_fires_exactly_the_rules_whose_condition_holds(obs: dict[str, Any]) -> None:
    report = DURABLE.diagnose(obs)
    for evaluation in report.evaluations:
        assert evaluation.fired == (evaluation.outcome == "true"), evaluation.rule_id


@SETTINGS
@given(rich_observations())
def test_every_conclusion_has_a_provenance_path_to_an_observation(obs: dict[str, Any]) -> None:
    report = DURABLE.diagnose(obs)
    graph = report.provenance
    observations_ = {n for n, kind in graph.nodes(data="kind") if kind == "observation"}
    for node, kind in graph.nodes(data="kind"):
        assert kind is not None, f"node {node} has no kind"
        if kind in CONCLUSION_KINDS:
            assert nx.ancestors(graph, node) & observations_, f"{node} has no path to an observation"


@SETTINGS
@given(rich_observations())
def test_report_json_round_trip_is_lossless(obs: dict[str, Any]) -> None:
    report = DURABLE.diagnose(obs)
    again = Report.model_validate_json(report.to_json())
    assert again == report
    assert again.to_json() == report.to_json()


def test_default_diagnose_uses_durable_rules() -> None:
    assert expert.default_expert().engine_name == "durable-rules"


@pytest.mark.parametrize("regime", sorted(NEVER))
def test_regime_tables_encode_the_invariant(regime: str) -> None:
    """The invariant above must come from the data: each regime's table wastes what NEVER forbids."""
    _, table = DURABLE.ruleset.tables[regime]
    assert NEVER[regime] <= {w.id for w in table.wasted}
    assert not NEVER[regime] & set(table.effective)
