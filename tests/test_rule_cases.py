"""Runs every YAML rule-test case (rules/tests/*.test.yaml) on both engines, one pytest id per case."""

from __future__ import annotations

from pathlib import Path

import pytest

from expert import Expert
from expert._resources import data_dir
from expert.rules.testing import RuleTestCase, load_rule_tests, run_case

RULES = data_dir("rules")
CASES = [(path, case) for path, tf in load_rule_tests([RULES]) for case in tf.cases]


@pytest.fixture(scope="module", params=["durable", "pure"])
def engine_expert(request: pytest.FixtureRequest) -> Expert:
    return Expert(engine=request.param)


@pytest.mark.parametrize(("path", "case"), CASES, ids=[f"{p.stem.removesuffix('.test')}::{c.name}" for p, c in CASES])
def test_rule_case(engine_expert: Expert, path: Path, case: RuleTestCase) -> None:
    if case.todo:
        pytest.xfail(case.todo)
    result = run_case(engine_expert, path, case)
    assert result.error is None, result.error
    assert not result.false_negatives and not result.false_positives, (
        f"{case.name}: false negatives {result.false_negatives}, false positives {result.false_positives}"
    )


def test_every_rule_has_a_firing_and_a_silent_case() -> None:
    expert = Expert(engine="pure")
    firing: set[str] = set()
    silent: set[str] = set()
    for path, case in CASES:
        result = run_case(expert, path, case)
        (firing if result.fired else silent).add(case.rule)
    rules = set(expert.ruleset.rules)
    assert not rules - firing, f"rules without a firing case: {sorted(rules - firing)}"
    assert not rules - silent, f"rules without a silent case: {sorted(rules - silent)}"


@pytest.mark.parametrize(("expect", "mismatch"), [
    ({"state": "verdict"}, "state: expected verdict, got conflicting evidence"),
    ({"strength": "likely"}, "strength: expected likely, got no verdict"),
    ({"max_strength": "suspect"}, None),
    ({"state": "conflicting evidence", "strength": "suspect"}, "strength: expected suspect, got no verdict"),
])
def test_verdict_expectations_can_fail(expect: dict[str, str], mismatch: str | None) -> None:
    """`expect.state`, `expect.strength` and `expect.max_strength` compare with the report (MFU 90 % against an
    achieved 20 % of the peak: the compute vote rests on the disputed MFU, so it is withheld, suspect)."""
    case = RuleTestCase.model_validate({
        "name": "mfu-disputed", "rule": "conflict-mfu-vs-achieved",
        "facts": {"hardware": "h100-sxm", "dtype": "bf16", "mfu": 0.9, "flops": 1e14, "step_time_s": 0.5},
        "expect": expect})
    result = run_case(Expert(engine="pure"), Path("inline.test.yaml"), case)
    assert result.false_negatives == ([mismatch] if mismatch else [])
    stronger = case.model_copy(update={"expect": case.expect.model_copy(update={"max_strength": "suspect",
                                                                                 "state": None,
                                                                                 "strength": None})})
    healthy = stronger.model_copy(update={"facts": {"hardware": "h100-sxm", "dtype": "bf16", "mfu": 0.6,
                                                    "gpu_util": 0.98, "sm_active": 0.9}})
    assert any(n.startswith("max_strength: compute is") for n in run_case(Expert(engine="pure"), Path("x"),
                                                                           healthy).false_negatives)
