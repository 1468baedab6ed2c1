"""The consultation planner's shortcuts give what the long way gives: a what-if re-runs only the rules its changed
facts reach (`_DeltaRules`), and session states are shared between sessions that reach the same answers."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import expert
from expert._resources import examples_dir
from expert.consult.planner import State, analysis, fact_regions, make_plan, what_if
from expert.consult.rule_index import index
from expert.consult.session import Consultation, answer_from, play
from expert.derive.graph import GRAPH
from expert.diagnosis.decide import Decision, decide
from expert.observations.file import read_observation_file
from expert.rules.model import AllOf, FactTest, NotOf
from tests.strategies import CONDITION_FACTS, CONDITION_VALUES, conditions

EXPERT = expert.default_expert()
IX = index(EXPERT)
EXAMPLES = {p.stem: dict(read_observation_file(p).observations) for p in sorted(examples_dir().glob("*.yaml"))}


def _fields(d: Decision) -> tuple[Any, ...]:
    """Every field of a decision, and its axes."""
    return (d.fired, d.findings, d.candidates, d.verdict, d.table, d.proposed, d.wasted, d.recommended, d.bands,
            d.caps, d.withheld, d._axis_votes, d.axes)


def _full(facts: dict[str, Any]) -> Decision:
    """The decision of a whole engine run, decided afresh (no memo)."""
    result = IX.engine.run(facts)
    return decide(IX.ruleset, result.fired, result.findings, facts)


def _state(facts: dict[str, Any], drop: int) -> State:
    """The state after answering all but the last `drop` facts of a case (they stay open)."""
    observed = EXPERT.observations(facts).values()
    names = list(observed)
    kept = {n: observed[n] for n in names[: max(1, len(names) - drop)]}
    return State(IX, kept, set())


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_a_what_if_reaches_the_full_engine_run(name: str) -> None:
    """Every probe value of every open fact: the incremental re-run concludes what a full run concludes."""
    state = _state(EXAMPLES[name], drop=4)
    open_facts = [f for f in IX.askable if state.askable_open(f)] + state.open_leaves()
    checked = 0
    for fact in dict.fromkeys(open_facts):
        for _, value in fact_regions(IX, fact)[:5]:
            IX.what_ifs.clear()
            got = what_if(state, {fact: value})
            full = _full(GRAPH.values({**state.answers, fact: value}, IX.kb))
            assert (got.verdict, got.recommended, got.fired, got.findings, got.bands) == (
                full.verdict, full.recommended, full.fired, full.findings, full.bands), (fact, value)
            checked += 1
    unknown = next(iter(state.answers))
    IX.what_ifs.clear()
    dropped = what_if(state, {unknown: None})  # leaving an answered fact out is a what-if too
    facts = GRAPH.values({k: v for k, v in state.answers.items() if k != unknown}, IX.kb)
    facts.pop(unknown, None)
    full = _full(facts)
    assert (dropped.verdict, dropped.fired, dropped.findings) == (full.verdict, full.fired, full.findings)
    assert checked > 0


def test_every_what_if_of_whole_sessions_reaches_the_full_engine_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probes sessions really make (several facts at once, leaves of derived facts, facts left out), each run
    incrementally, with the rules a state cannot change not evaluated (`State.settled`): what a full run of the
    engine on the same facts concludes."""
    import expert.consult.planner as planner

    seen: list[tuple[State, dict[str, Any], Decision]] = []
    original = planner.what_if

    def recorded(state: State, overrides: Any) -> Decision:
        got = original(state, overrides)
        seen.append((state, dict(overrides), got))
        return got

    IX.what_ifs.clear()
    getattr(IX.local, "plans", {}).clear()
    monkeypatch.setattr(planner, "what_if", recorded)
    for name in ("data_starved_training", "ddp_exposed_allreduce_pcie", "llm_decode_kv_cache", "partial_evidence"):
        play(EXAMPLES[name], EXPERT)
    assert len(seen) > 500 and any(len(o) > 1 for _, o, _ in seen) and any(s.settled for s, _, _ in seen)
    for state, overrides, got in seen:
        answers = {k: v for k, v in {**state.answers, **overrides}.items() if v is not None}
        facts = GRAPH.values(answers, IX.kb)
        for name, value in overrides.items():
            if value is None:
                facts.pop(name, None)
        full = _full(facts)
        assert (got.verdict, got.recommended, got.fired, got.findings, got.bands) == (
            full.verdict, full.recommended, full.fired, full.findings, full.bands), overrides


def test_without_a_dependency_order_a_what_if_runs_stratum_by_stratum(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule set whose findings feed back within a stratum has no dependency order (`_dependency_order` gives
    None): the re-run goes stratum by stratum to a fixpoint, and still concludes what a full run concludes."""
    monkeypatch.setattr(IX.delta, "order", None)
    monkeypatch.setattr(IX.delta, "_plans", {})
    checked = 0
    for name in ("data_starved_training", "ddp_exposed_allreduce_pcie", "llm_decode_kv_cache"):
        state = _state(EXAMPLES[name], drop=4)
        for fact in dict.fromkeys([f for f in IX.askable if state.askable_open(f)] + state.open_leaves()):
            for _, value in fact_regions(IX, fact)[:3]:
                IX.what_ifs.clear()
                got = what_if(state, {fact: value})
                full = _full(GRAPH.values({**state.answers, fact: value}, IX.kb))
                assert (got.verdict, got.recommended, got.fired, got.findings) == (
                    full.verdict, full.recommended, full.fired, full.findings), (name, fact, value)
                checked += 1
    assert checked > 20
    IX.what_ifs.clear()


def test_memoised_decisions_are_decided_afresh() -> None:
    """`Index.decide` (memoised by the fired rules and the facts `decide` reads) gives, field by field, what a fresh
    `decide` gives on every what-if of whole sessions, with the memos emptied first."""
    import expert.consult.planner as planner

    seen: list[tuple[list[str], set[str], dict[str, Any], Decision]] = []
    original = IX.decide

    def checked(fired: Any, findings: Any, facts: Any) -> Decision:
        got = original(fired, findings, facts)
        seen.append((list(fired), set(findings), dict(facts), got))
        return got

    IX.what_ifs.clear()
    IX.decisions.clear()
    getattr(IX.local, "plans", {}).clear()
    IX.decide = checked  # type: ignore[method-assign]
    try:
        for name in ("ddp_exposed_allreduce_pcie", "well_scaled_cluster", "llm_decode_kv_cache"):
            play(EXAMPLES[name], EXPERT)
    finally:
        del IX.decide
    assert planner.what_if is what_if and len(seen) > 100
    for fired, findings, facts, got in seen:
        assert _fields(got) == _fields(decide(IX.ruleset, fired, findings, facts))
    assert len({id(d) for *_, d in seen}) < len(seen)  # some were memo hits


def test_sessions_share_states_without_sharing_answers() -> None:
    """Two sessions with the same answers get the same state; a third that differs gets its own; the shared state
    is the one a fresh planner computes."""
    facts = EXAMPLES["storage_bound_input"]
    first, second = play(facts, EXPERT), play(facts, EXPERT)
    assert [t.fact for t in first.transcript] == [t.fact for t in second.transcript]
    assert first._analysis()[0] is second._analysis()[0]
    other = Consultation(EXPERT)
    other.answer("job", "llm-decode")
    assert other._analysis()[0] is not first._analysis()[0]
    answers, unknowns = first._replay()
    fresh = State(IX, answers, unknowns)
    assert make_plan(fresh).ranked == first._analysis()[1].ranked
    assert fresh.now.verdict == first._analysis()[0].now.verdict


def test_states_are_not_shared_across_threads() -> None:
    """A state fills its caches lazily, so each thread keeps its own."""
    found: list[object] = []
    worker = threading.Thread(target=lambda: found.append(analysis(IX, {"workload": "training"}, set())[0]))
    worker.start()
    worker.join()
    assert found and found[0] is not analysis(IX, {"workload": "training"}, set())[0]


def test_compiled_possibility_is_possible() -> None:
    """Every rule's compiled condition (`outcomes.compile_possible`) gives the outcomes `rules.logic.possible` gives,
    whatever outcomes its fact tests and findings can still take."""
    import random

    from expert.consult.outcomes import BIT, compile_possible
    from expert.rules.logic import OUTCOMES, possible

    class Leaves:
        """Each leaf's outcomes drawn at random, once per leaf."""

        def __init__(self, seed: int) -> None:
            self.rng = random.Random(seed)
            self.chosen: dict[int, int] = {}

        def mask(self, node: object) -> int:
            return self.chosen.setdefault(id(node), self.rng.randint(1, 7))

        def fact_mask(self, node: object, settled: object) -> int:
            return self.mask(node)

        def finding_mask(self, node: object) -> int:
            return self.mask(node)

        def outcomes(self, node: object) -> frozenset[str]:
            return frozenset(o for o in OUTCOMES if self.mask(node) & BIT[o])

    checked = 0
    for lr in IX.rules:
        compiled = compile_possible(lr.condition)
        for seed in range(12):
            leaves = Leaves(seed)
            got = compiled(leaves)  # type: ignore[arg-type]
            want = possible(lr.condition, fact=leaves.outcomes, finding=leaves.outcomes)  # type: ignore[arg-type]
            assert got == sum(BIT[o] for o in want), lr.id
            checked += 1
    assert checked > 100


class _Reading:
    """A session state as the possibility analysis reads it: open facts, the facts, concluded and open findings."""

    def __init__(self, open_facts: set[str], facts: dict[str, Any], findings: set[str], opened: set[str]) -> None:
        self.open_facts, self.facts, self.findings, self.open_findings = open_facts, facts, findings, opened

    def is_open(self, name: str) -> bool:
        return name in self.open_facts

    def fact_mask(self, node: Any, settled: Any) -> int:  # as planner.State reads a fact test
        from expert.consult.outcomes import ALL, BIT, TWO

        if not self.is_open(node.fact):
            return BIT[settled(self.facts, self.findings, None, False)]
        return ALL if node.ops() else TWO

    def finding_mask(self, node: Any) -> int:  # as planner.State reads a finding
        from expert.consult.outcomes import FALSE, TRUE, TWO

        return TWO if node.finding in self.open_findings else (TRUE if node.finding in self.findings else FALSE)


def _generated_is_compiled(condition: Any, reading: _Reading) -> None:
    from expert.consult.outcomes import compile_possible, generate_possible

    assert generate_possible(condition)(reading) == (
        compile_possible(condition)(reading))  # type: ignore[arg-type]


def test_generated_possibility_is_the_compiled_one_on_every_state_of_whole_sessions() -> None:
    """Each rule generated for a state (`outcomes.state_outcomes`, what `State._possibility` runs) gives the mask the
    closures give over the state's own `fact_mask` and `finding_mask`, on every state of the bundled sessions."""
    from expert.consult.outcomes import compile_possible, state_outcomes

    generated = state_outcomes(IX.ruleset)
    states = 0
    for name in ("data_starved_training", "llm_decode_kv_cache", "partial_evidence", "well_scaled_cluster"):
        session = play(EXAMPLES[name], EXPERT)
        answers, unknowns = session._replay()
        for n in range(len(answers) + 1):
            state = State(IX, dict(list(answers.items())[:n]), unknowns)
            states += 1
            for lr in IX.rules:
                got = generated[lr.id](state)
                assert got == compile_possible(lr.condition)(state), (name, n, lr.id)
    assert states > 20


@settings(max_examples=300, deadline=None)
@given(condition=conditions(), values=st.fixed_dictionaries({name: CONDITION_VALUES for name in CONDITION_FACTS}),
       open_facts=st.sets(st.sampled_from(CONDITION_FACTS)), findings=st.sets(st.sampled_from(["x", "y"])),
       opened=st.sets(st.sampled_from(["x", "y"])))
def test_generated_possibility_is_the_compiled_one_on_random_conditions(
        condition: Any, values: dict[str, Any], open_facts: set[str], findings: set[str], opened: set[str]) -> None:
    facts = {name: value for name, value in values.items() if value is not None and name not in open_facts}
    _generated_is_compiled(condition, _Reading(open_facts, facts, findings, opened))


def test_a_condition_too_deep_to_generate_keeps_the_closures_for_a_state() -> None:
    node: Any = FactTest(fact="gpu_util", lt=0.5)
    for i in range(40):
        node = AllOf(all=[node, FactTest(fact="mfu", gt=0.01 * i)]) if i % 2 else NotOf(**{"not": node})
    for open_facts in (set(), {"mfu"}, {"gpu_util", "mfu"}):
        for facts in ({}, {"gpu_util": 0.1, "mfu": 0.9}, {"gpu_util": 0.9}):
            visible = {k: v for k, v in facts.items() if k not in open_facts}
            _generated_is_compiled(node, _Reading(set(open_facts), visible, set(), set()))


def test_memoised_witnesses_are_searched_afresh() -> None:
    """`rule_witness` (memoised by what the search reads of the state) gives on every state of whole sessions what
    a fresh search gives, for every rule a plan asks it about."""
    import itertools

    from expert.consult.planner import rule_witness
    from expert.consult.rule_index import decisive
    from expert.consult.witness import MAX_WITNESSES, Witness

    IX.witnesses.clear()
    checked = hits = 0
    for name in ("ddp_exposed_allreduce_pcie", "well_scaled_cluster", "llm_decode_kv_cache", "large_gemm"):
        session = Consultation(EXPERT)
        while (q := session.next_question()) is not None:
            state = session._analysis()[0]
            witness = Witness(state)
            for lr in IX.rules:
                if lr.id not in state.live or lr.id in state.now.fired or not decisive(lr):
                    continue
                before = len(IX.witnesses)
                got = rule_witness(state, witness, lr)
                hits += len(IX.witnesses) == before
                fresh = next((o for boxes in itertools.islice(witness.of(lr.condition, True, {}, (lr.id,)),
                                                              MAX_WITNESSES) if (o := witness.overrides(boxes))), None)
                assert got == fresh, (name, lr.id)
                checked += 1
            raw = answer_from(q, EXAMPLES[name], EXPERT)
            session.answer(q.fact, raw) if raw is not None else session.unknown(q.fact)
    assert checked > 100 and hits > 0
