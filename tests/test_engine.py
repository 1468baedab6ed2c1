"""Engine tests: durable-rules hazards defused, stratified negation, and agreement with the reference engine."""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from expert import EngineError, Expert, KnowledgeBaseError
from expert._resources import data_dir
from expert.engine.durable import DurableEngine, durable_number

# Rules that exercise what the shipped rules do not: negated findings (strata), not over all/any with
# findings inside, chains three deep, `in`, `ne`, `known`.
TRICKY_RULES = """
schema_version: 1
conditions:
  busy: {description: busy GPU, when: {fact: gpu_util, ge: 0.5}}
rules:
  - id: t-base
    title: base
    source: test
    rationale: test
    when: {ref: busy}
    then: {finding: {id: base, message: base}}
  - id: t-chain-1
    title: chain 1
    source: test
    rationale: test
    when: {all: [{finding: base}, {fact: sm_active, gt: 0.3}]}
    then: {finding: {id: chain1, message: c1}}
  - id: t-chain-2
    title: chain 2
    source: test
    rationale: test
    when: {any: [{finding: chain1}, {all: [{fact: dtype, in: [fp8, int8]}, {finding: base}]}]}
    then: {finding: {id: chain2, message: c2}, bottleneck: {regime: compute, strength: likely}}
  - id: t-not-chain
    title: negates a derived finding
    source: test
    rationale: test
    when: {all: [{fact: gpu_util, known: true}, {not: {finding: chain2}}]}
    then: {finding: {id: not_chain, message: nc}, bottleneck: {regime: latency, strength: likely}}
  - id: t-not-mixed
    title: not over a mixed all
    source: test
    rationale: test
    when:
      all:
        - {fact: workload, ne: inference}
        - not: {all: [{finding: base}, {fact: mem_bw_util, lt: 0.7}]}
    then: {finding: {id: not_mixed, message: nm}}
  - id: t-second-stratum
    title: negates a negating rule
    source: test
    rationale: test
    when: {all: [{not: {finding: not_chain}}, {fact: batch_size, known: true}]}
    then: {finding: {id: second, message: s}, bottleneck: {regime: memory, strength: suspect}}
  - id: t-same-finding-twice
    title: one finding in two alternatives of a conjunction (a DNF branch names it twice)
    source: test
    rationale: test
    when:
      all:
        - any: [{finding: base}, {finding: chain1}]
        - any: [{finding: base}, {fact: sm_active, lt: 0.2}]
    then: {finding: {id: twice, message: tw}}
  - id: t-unknown
    title: fires on a missing fact
    source: test
    rationale: test
    when: {all: [{fact: host_cpu_util, known: false}, {fact: batch_size, le: 4}]}
    then: {finding: {id: unknown_cpu, message: u}}
"""


# the facts the tricky rules read, each possibly missing (None)
TRICKY_FACTS: dict[str, st.SearchStrategy[Any]] = {
    "gpu_util": st.one_of(st.none(), st.floats(0, 1)),
    "sm_active": st.one_of(st.none(), st.floats(0, 1)),
    "mem_bw_util": st.one_of(st.none(), st.floats(0, 1)),
    "dtype": st.one_of(st.none(), st.sampled_from(["fp8", "bf16", "int8"])),
    "workload": st.one_of(st.none(), st.sampled_from(["training", "inference"])),
    "batch_size": st.one_of(st.none(), st.integers(1, 16)),
    "host_cpu_util": st.one_of(st.none(), st.floats(0, 1)),
}


@pytest.fixture(scope="module")
def tricky_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tricky_rules")
    (directory / "tricky.yaml").write_text(TRICKY_RULES, encoding="utf-8")
    return directory


@pytest.fixture(scope="module")
def tricky(tricky_dir: Path) -> tuple[Expert, Expert]:
    return Expert(rules_dirs=[tricky_dir], engine="durable"), Expert(rules_dirs=[tricky_dir], engine="pure")


def test_tricky_rules_are_stratified(tricky: tuple[Expert, Expert]) -> None:
    rules = tricky[0].ruleset.rules
    assert rules["t-base"].stratum == 0
    assert rules["t-not-chain"].stratum == 1
    assert rules["t-second-stratum"].stratum == 2


@settings(max_examples=300, deadline=None)
@given(**TRICKY_FACTS)
def test_engines_agree_on_negation_and_chains(tricky: tuple[Expert, Expert], **facts: Any) -> None:
    obs = {k: v for k, v in facts.items() if v is not None}
    durable, pure = (e.diagnose(obs) for e in tricky)
    assert sorted(e.rule_id for e in durable.evaluations if e.fired) == sorted(
        e.rule_id for e in pure.evaluations if e.fired
    )
    assert durable.bottleneck == pure.bottleneck
    for evaluation in durable.evaluations:
        assert evaluation.fired == (evaluation.outcome == "true"), evaluation.rule_id


def test_negation_waits_for_the_lower_stratum(tricky: tuple[Expert, Expert]) -> None:
    """No truth maintenance in durable-rules: without phase gating, t-not-chain would fire before chain2."""
    report = tricky[0].diagnose({"gpu_util": 0.9, "sm_active": 0.9, "batch_size": 2})
    fired = {e.rule_id for e in report.evaluations if e.fired}
    assert {"t-base", "t-chain-1", "t-chain-2", "t-second-stratum"} <= fired
    assert "t-not-chain" not in fired


def test_more_than_1024_sessions_in_sequence() -> None:
    engine = Expert(engine="durable")
    for i in range(1500):
        report = engine.diagnose({"gpu_util": (i % 100) / 100, "batch_size": 1 + i % 3})
    assert report.engine == "durable-rules"


def test_a_diagnosis_where_no_rule_fires_is_safe() -> None:
    engine = Expert(engine="durable")
    for _ in range(50):  # delete_state on a session where no rule action ran used to segfault
        report = engine.diagnose({})
        assert report.bottleneck is None and not report.findings


@pytest.mark.parametrize("value", [1e-05, 2e17, 1e16, 5e-324, 3.0, 7, 2**70])
def test_numbers_durable_rules_cannot_parse_are_nudged(value: float) -> None:
    fixed = durable_number(value)
    text = repr(fixed)
    assert "e" not in text or "." in text
    assert math.isclose(float(fixed), float(value), rel_tol=1e-12) or abs(float(fixed) - value) < 1e-300


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), True])
def test_numbers_durable_rules_compares_wrongly_are_refused(bad: Any) -> None:
    with pytest.raises((ValueError, TypeError)):
        durable_number(bad)


def test_exponent_values_compare_like_the_reference() -> None:
    obs = {"hardware": "h100-sxm", "dtype": "bf16", "flops": 2e17, "bytes_moved": 1e16, "gpu_util": 1e-05,
           "step_time_s": 1.0}
    durable, pure = Expert(engine="durable").diagnose(obs), Expert(engine="pure").diagnose(obs)
    assert durable.bottleneck == pure.bottleneck
    assert {f.id for f in durable.findings} == {f.id for f in pure.findings}


def test_two_experts_coexist() -> None:
    """Ruleset names cannot be redefined in durable-rules; each engine registers its own."""
    a, b = Expert(engine="durable"), Expert(engine="durable")
    assert a.diagnose({"gpu_util": 0.5}).findings == b.diagnose({"gpu_util": 0.5}).findings


def test_an_action_failure_is_raised_not_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    original = DurableEngine._action

    def failing_action(self: DurableEngine, rule_id: str, finding: str | None, assert_back: bool) -> Any:
        inner = original(self, rule_id, finding, assert_back)
        if rule_id != "screen-low-gpu-util":
            return inner

        def action(run: Any, c: Any) -> None:
            inner(run, c)
            run.errors.append(f"{rule_id}: injected failure")

        return action

    monkeypatch.setattr(DurableEngine, "_action", failing_action)
    engine = Expert(engine="durable")
    with pytest.raises(EngineError, match="injected failure"):
        engine.diagnose({"gpu_util": 0.3})
    assert engine.diagnose({"gpu_util": 0.99}).findings  # the failed session was cleaned up


def test_eight_threads_give_the_sequential_results() -> None:
    shared = Expert(engine="durable")
    inputs = [{"hardware": "h100-sxm", "dtype": "bf16", "gpu_util": (i % 20) / 20, "data_wait_s": 0.001 * (i % 7),
               "step_time_s": 0.05, "mem_bw_util": (i % 11) / 11, "sm_active": (i % 13) / 13} for i in range(160)]
    expected = [shared.diagnose(obs).to_json() for obs in inputs]
    results: dict[int, str] = {}
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(offset, len(inputs), 8):
                results[i] = shared.diagnose(inputs[i]).to_json()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert [results[i] for i in range(len(inputs))] == expected


def test_negation_through_a_cycle_is_refused(tmp_path: Path) -> None:
    (tmp_path / "cycle.yaml").write_text("""
schema_version: 1
rules:
  - {id: a, title: a, source: t, rationale: t, when: {all: [{fact: gpu_util, gt: 0.1}, {not: {finding: fb}}]},
     then: {finding: {id: fa, message: a}}}
  - {id: b, title: b, source: t, rationale: t, when: {all: [{fact: gpu_util, gt: 0.1}, {not: {finding: fa}}]},
     then: {finding: {id: fb, message: b}}}
""", encoding="utf-8")
    with pytest.raises(KnowledgeBaseError, match="cycle"):
        Expert(rules_dirs=[tmp_path])


def test_shipped_rules_directory_is_found() -> None:
    assert (data_dir("rules") / "screening.yaml").is_file()


@settings(max_examples=300, deadline=None)
@given(
    **TRICKY_FACTS,
    findings=st.sets(st.sampled_from(["base", "chain1", "chain2", "not_chain"])),
)
def test_compiled_conditions_match_the_interpreter(tricky: tuple[Expert, Expert], findings: set[str],
                                                   **facts: Any) -> None:
    from expert.rules.evaluate import LeafTrace, evaluate

    present = {k: v for k, v in facts.items() if v is not None}
    for lr in tricky[1].ruleset.rules.values():
        slow: list[LeafTrace] = []
        fast: list[LeafTrace] = []
        assert lr.evaluator(present, findings, fast, False) == evaluate(lr.condition, present, findings, slow)
        assert fast == slow


def test_fallback_to_the_pure_engine_is_announced_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where durable-rules cannot load (e.g. Python 3.13), "auto" uses the reference engine and says so once."""
    import warnings

    import expert.engine as engines
    from expert.engine import durable

    monkeypatch.setattr(durable, "available", lambda: (False, "ImportError: undefined symbol PyEval_CallObject"))
    monkeypatch.setattr(engines, "_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, second = Expert(engine="auto"), Expert(engine="auto")
    assert first.engine_name == second.engine_name == "pure"
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and "PyEval_CallObject" in messages[0] and "pure-Python engine" in messages[0]
    with pytest.raises(EngineError, match="cannot be loaded"):
        Expert(engine="durable")
