"""Contradictory facts given together (issue 21): pairs of observations that bound each other by definition
(rules/contradictions.yaml, rules/conflicts.yaml) are reported as conflicts, and no verdict built on them is confirmed
(each finding caps the candidates, knowledge_base/regimes.yaml evidence_caps). Extend the table."""

from __future__ import annotations

from typing import Any

import pytest

import expert

# (case id, facts, the rule that must fire, its conflict finding)
CONTRADICTIONS: list[tuple[str, dict[str, Any], str, str]] = [
    ("busy-and-idle", {"gpu_util": "99%", "gpu_idle_gap_frac": "90%"}, "conflict-busy-vs-idle", "conflict_busy_idle"),
    ("mfu-above-util", {"mfu": "90%", "gpu_util": "10%"}, "contradiction-mfu-above-utilization", "conflict_mfu_util"),
    ("sm-active-above-util", {"sm_active": 0.9, "gpu_util": "20%"}, "contradiction-sm-active-above-utilization",
     "conflict_sm_util"),
    ("host-wait-above-idle", {"host_wait_frac": "80%", "gpu_idle_gap_frac": "10%"},
     "contradiction-host-wait-above-idle", "conflict_host_wait_idle"),
    ("one-gpu-64-nodes", {"num_gpus": 1, "num_nodes": 64}, "conflict-gpus-below-nodes", "conflict_gpus_nodes"),
]
CONFLICT_FINDINGS = {c[3] for c in CONTRADICTIONS}
STARVED = {"hardware": "h100-sxm", "dtype": "bf16", "workload": "training", "batch_size": 256, "num_workers": 0,
           "gpu_util": "45%", "host_cpu_util": "30%", "step_time_s": "300 ms", "data_wait_s": "120 ms"}


@pytest.mark.parametrize(("case", "facts", "rule", "finding"), CONTRADICTIONS, ids=[c[0] for c in CONTRADICTIONS])
def test_contradictory_facts_are_reported(case: str, facts: dict[str, Any], rule: str, finding: str) -> None:
    report = expert.diagnose(facts)
    found = [f for f in report.findings if f.id == finding]
    assert found, [f.id for f in report.findings]
    assert any(f.rule_id == rule for f in found)
    assert all(c.strength != "confirmed" for c in report.candidates)


def test_a_confirmed_verdict_on_contradictory_facts_is_only_suspected() -> None:
    assert expert.diagnose(STARVED).candidates[0].strength == "confirmed"
    report = expert.diagnose({**STARVED, "num_gpus": 1, "num_nodes": 4})
    assert report.candidates[0].regime == "input" and report.candidates[0].strength == "suspect"
    assert report.bottleneck is None  # insufficient evidence, not a guess


@pytest.mark.parametrize("facts", [{"gpu_util": "95%", "gpu_idle_gap_frac": "4%"}, {"mfu": "45%", "gpu_util": "97%"},
                                   {"sm_active": 0.7, "gpu_util": "90%"}, {"num_gpus": 64, "num_nodes": 8},
                                   {"host_wait_frac": "20%", "gpu_idle_gap_frac": "35%"}])
def test_consistent_facts_are_not_contradictions(facts: dict[str, Any]) -> None:
    assert not CONFLICT_FINDINGS & {f.id for f in expert.diagnose(facts).findings}
