"""Conditions generated as plain code (`generate_condition`, what a warm engine runs) give the outcomes of the
closures they replace, on the shipped rules and on hostile shapes; too deep a condition keeps the closures; a warm
engine's reports are the reports of a cold one. Generated truth (`generate_truth`, what a consultation's what-ifs
ask) holds exactly where the closures give "true"."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import expert
from expert.rules.evaluate import WARM_RUNS, LeafTrace, compile_condition, generate_condition, generate_truth
from expert.rules.model import AllOf, AnyOf, FactTest, FindingRef, NotOf
from tests.strategies import CONDITION_FACTS, CONDITION_VALUES, conditions, observations


@pytest.fixture(scope="module")
def pure() -> expert.Expert:
    return expert.Expert(engine="pure")


def _facts(ex: expert.Expert, raw: dict[str, Any]) -> dict[str, Any]:
    from expert.derive.graph import derive

    obs = ex.observations(raw)
    return {**obs.values(), **{n: d.value for n, d in derive(obs.values(), ex.kb, check=False).items()}}


@settings(max_examples=60, deadline=None)
@given(raw=observations(), seed=st.integers(0, 2**16))
def test_generated_conditions_match_the_closures_on_the_shipped_rules(pure: expert.Expert, raw: dict[str, Any],
                                                                      seed: int) -> None:
    try:
        facts = _facts(pure, raw)
    except expert.ObservationError:
        return
    producers = sorted(pure.ruleset.producers)
    findings = set(random.Random(seed).sample(producers, k=min(len(producers), seed % 12)))
    for lr in pure.ruleset.rules.values():
        assert generate_truth(lr.condition)(facts, findings) == (lr.evaluator(facts, findings, None, False) == "true")
        generated = generate_condition(lr.condition)
        assert generated is not lr.evaluator
        assert generated(facts, findings, None, False) == lr.evaluator(facts, findings, None, False), lr.id
        traced: list[LeafTrace] = []
        closures: list[LeafTrace] = []
        assert generated(facts, findings, traced, False) == lr.evaluator(facts, findings, closures, False)
        assert traced == closures  # the traced path is the closures'


def test_edge_shapes_match_the_closures() -> None:
    shapes = [
        FactTest(fact="gpu_util", known=False),
        FactTest(fact="gpu_util", known=True, lt=0.5),
        FactTest(fact="hardware", **{"in": ["h100-sxm", "a100-sxm-80gb"]}),
        FactTest(fact="hardware", not_in=["h100-sxm"]),
        FactTest(fact="hardware", gt=1.5),  # an ordered comparison of a string value is never true
        NotOf(**{"not": AnyOf(any=[FindingRef(finding="x"), FactTest(fact="mfu", ge=0.3)])}),
        AllOf(all=[FactTest(fact="gpu_util", le=0.8), NotOf(**{"not": FindingRef(finding="x")}),
                   AnyOf(any=[FactTest(fact="mfu", eq=0.25), FactTest(fact="sm_active", ne=1)])]),
    ]
    values: list[dict[str, Any]] = [{}, {"gpu_util": 0.4}, {"gpu_util": 0.9, "mfu": 0.25}, {"hardware": "h100-sxm"},
                                    {"hardware": "l40s", "mfu": 0.5, "sm_active": 1}, {"hardware": "abd"}]
    shapes += [FactTest(fact="gpu_util", known=True), FactTest(fact="gpu_util", known=False, lt=0.5),
               NotOf(**{"not": FactTest(fact="gpu_util", known=True, lt=0.5)}),
               NotOf(**{"not": FactTest(fact="gpu_util", known=False, lt=0.5)})]
    for shape in shapes:
        generated, closures, truth = generate_condition(shape), compile_condition(shape), generate_truth(shape)
        for facts in values:
            for findings in (set(), {"x"}):
                assert generated(facts, findings, None, False) == closures(facts, findings, None, False), shape
                assert truth(facts, findings) == (closures(facts, findings, None, False) == "true"), (shape, facts)


@settings(max_examples=300, deadline=None)
@given(condition=conditions(), values=st.fixed_dictionaries({name: CONDITION_VALUES for name in CONDITION_FACTS}),
       findings=st.sets(st.sampled_from(["x", "y"])))
def test_generated_truth_holds_where_the_closures_are_true(condition: Any, values: dict[str, Any],
                                                           findings: set[str]) -> None:
    facts = {name: value for name, value in values.items() if value is not None}
    assert generate_truth(condition)(facts, findings) == (
        compile_condition(condition)(facts, findings, None, False) == "true")


def test_a_condition_nested_too_deep_keeps_the_closures() -> None:
    node: Any = FactTest(fact="gpu_util", lt=0.5)
    for i in range(40):
        node = AllOf(all=[node, FactTest(fact="mfu", gt=0.01 * i)]) if i % 2 else NotOf(**{"not": node})
    generated = generate_condition(node)
    closures = compile_condition(node)
    truth = generate_truth(node)  # too deep to generate too: asked through the closures
    for facts in ({}, {"gpu_util": 0.1, "mfu": 0.9}, {"gpu_util": 0.9}):
        assert generated(facts, set(), None, False) == closures(facts, set(), None, False)
        assert truth(facts, set()) == (closures(facts, set(), None, False) == "true")


def test_a_warm_engine_reports_what_a_cold_one_does() -> None:
    raw = {"hardware": "h100-sxm", "dtype": "bf16", "gpu_util": 0.45, "data_wait_s": 0.12, "step_time_s": 0.3}
    for engine in ("pure", "durable"):
        ex = expert.Expert(engine=engine)  # type: ignore[arg-type]
        cold = ex.diagnose(raw).to_json()
        for _ in range(WARM_RUNS + 1):
            ex.diagnose({**raw, "gpu_util": 0.9})
        assert ex.diagnose(raw).to_json() == cold
