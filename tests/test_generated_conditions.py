"""Conditions generated as plain code (`generate_condition`, what a warm engine runs) give the outcomes of the
closures they replace, on the shipped rules and on hostile shapes; too deep a condition keeps the closures; a warm
engine's reports are the reports of a cold one. Generated truth (`generate_truth`, what a consultation's what-ifs
ask) holds exactly where the closures give "true"."""

from __future__ import annotations

import random
from pathlib import Path
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


def _same_run(a: Any, b: Any) -> None:
    assert (a.fired, a.findings, a.matched, a.outcomes) == (b.fired, b.findings, b.matched, b.outcomes)


@settings(max_examples=60, deadline=None)
@given(raw=observations())
def test_a_warm_pure_engine_runs_each_stratum_as_a_cold_one_does(pure: expert.Expert, raw: dict[str, Any]) -> None:
    """The generated first pass of each stratum (one function for all its rules) fires the same rules in the same
    order, concludes the same findings and records the same outcomes as the per-rule closures."""
    from expert.engine.pure import PureEngine

    try:
        facts = _facts(pure, raw)
    except expert.ObservationError:
        return
    engine = pure.engine
    assert isinstance(engine, PureEngine)
    cold, warm = engine._compile(generated=False), engine._compile(generated=True)
    assert all(first is None for _, _, first in cold) and all(first is not None for _, _, first in warm)
    _same_run(PureEngine._run(warm, facts), PureEngine._run(cold, facts))


def test_a_stratum_pass_chains_findings_and_calls_a_condition_too_deep_to_generate(tmp_path: Path) -> None:
    """Within one stratum a finding concluded late in the first pass re-runs the earlier rules that read it, and a
    condition too deep to generate is evaluated through its closures inside the generated pass."""
    import json

    from expert.engine.pure import PureEngine

    deep: dict[str, Any] = {"fact": "gpu_util", "lt": 0.5}
    for i in range(30):
        deep = {"all": [deep, {"fact": "mfu", "gt": round(0.001 * i, 3)}]}
    rules = [
        {"id": "a-reads-z", "title": "reads a later rule's finding", "source": "test", "rationale": "test",
         "when": {"finding": "z_found"}, "then": {"finding": {"id": "a_found", "message": "a"}}},
        {"id": "m-deep", "title": "too deep to generate", "source": "test", "rationale": "test", "when": deep,
         "then": {"finding": {"id": "m_found", "message": "m"}}},
        {"id": "z-concludes", "title": "concludes z", "source": "test", "rationale": "test",
         "when": {"fact": "gpu_util", "lt": 0.5}, "then": {"finding": {"id": "z_found", "message": "z"}}},
    ]
    (tmp_path / "chain.yaml").write_text(json.dumps({"schema_version": 1, "rules": rules}), encoding="utf-8")
    engine = expert.Expert(rules_dirs=[tmp_path], engine="pure").engine
    assert isinstance(engine, PureEngine)
    cold, warm = engine._compile(generated=False), engine._compile(generated=True)
    for facts in ({}, {"gpu_util": 0.2, "mfu": 0.9}, {"gpu_util": 0.2, "mfu": 0.01}, {"gpu_util": 0.7}):
        _same_run(PureEngine._run(warm, facts), PureEngine._run(cold, facts))
    chained = PureEngine._run(warm, {"gpu_util": 0.2, "mfu": 0.9})
    assert chained.fired == ["m-deep", "z-concludes", "a-reads-z"]
    assert chained.findings == {"a_found", "m_found", "z_found"} and chained.matched["a-reads-z"] == ["z_found"]
    assert PureEngine._run(warm, {"gpu_util": 0.2, "mfu": 0.01}).outcomes == {"m-deep": "false"}
