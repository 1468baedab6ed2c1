"""rules.logic, the one owner of condition trees: its visitor, Kleene tables, operators, normal forms and boxes agree
with evaluation on random conditions and facts."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from expert.rules.evaluate import LeafTrace, compile_condition, evaluate
from expert.rules.logic import (
    FLIP,
    OPERATORS,
    OUTCOMES,
    SYMBOLS,
    Box,
    BoxAlgebra,
    ConditionVisitor,
    Outcome,
    Span,
    Witness,
    compare,
    condition_text,
    finding_branches,
    finding_uses,
    kleene_and,
    kleene_or,
    negate_op,
    negate_test,
    possible,
    refs_used,
    resolve,
    span_of,
    walk_paths,
)
from expert.rules.model import OPS, AllOf, AnyOf, Condition, ConditionRef, FactTest, FindingRef, NotOf

NUMBERS = [-1, 0, 0.5, 1, 2, 3.5]
WORDS = ["a", "b", "c"]
DOMAINS = {"s": frozenset(WORDS)}


def _numeric_test(draw: st.DrawFn) -> FactTest:
    ops = draw(st.lists(st.sampled_from(["lt", "le", "gt", "ge", "eq", "ne"]), min_size=0, max_size=2, unique=True))
    known = draw(st.sampled_from([None, True, False])) if ops else draw(st.booleans())
    spec: dict[str, Any] = {"fact": draw(st.sampled_from(["x", "y"])), **{op: draw(st.sampled_from(NUMBERS))
                                                                        for op in ops}}
    if known is not None:
        spec["known"] = known
    return FactTest.model_validate(spec)


def _word_test(draw: st.DrawFn) -> FactTest:
    op = draw(st.sampled_from(["eq", "ne", "in", "not_in"]))
    members = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=2, unique=True))
    return FactTest.model_validate({"fact": "s", op: members if op in ("in", "not_in") else members[0]})


@st.composite
def leaves(draw: st.DrawFn) -> Condition:
    kind = draw(st.sampled_from(["number", "number", "word", "finding"]))
    if kind == "finding":
        return FindingRef(finding=draw(st.sampled_from(["f", "g"])))
    return _numeric_test(draw) if kind == "number" else _word_test(draw)


conditions = st.recursive(leaves(), lambda kids: st.one_of(
    st.lists(kids, min_size=1, max_size=3).map(lambda cs: AllOf(all=cs)),
    st.lists(kids, min_size=1, max_size=3).map(lambda cs: AnyOf(any=cs)),
    kids.map(lambda c: NotOf(not_=c)),
), max_leaves=8)


@st.composite
def worlds(draw: st.DrawFn) -> tuple[dict[str, Any], set[str]]:
    facts = {"x": draw(st.sampled_from([None, *NUMBERS])), "y": draw(st.sampled_from([None, *NUMBERS])),
             "s": draw(st.sampled_from([None, *WORDS]))}
    findings = set(draw(st.lists(st.sampled_from(["f", "g"]), unique=True)))
    return {k: v for k, v in facts.items() if v is not None}, findings


def admits(span: Span, value: Any) -> bool:
    """Whether a fact's value (None: unknown) satisfies a span's constraints."""
    if value is None:
        return span.known is not True and not span.void
    if span.known is False or span.void or value in span.never:
        return False
    if span.only is not None and value not in span.only:
        return False
    if isinstance(value, str):
        return not (span.lo > float("-inf") or span.hi < float("inf"))
    return span.contains(float(value))


def box_admits(box: Box, facts: dict[str, Any], findings: set[str]) -> bool:
    return (box.pos <= findings and not (box.neg & findings)
            and all(admits(span, facts.get(fact)) for fact, span in box.facts))


# ---- evaluation ---------------------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(conditions, worlds())
def test_interpreter_and_compiler_agree_with_and_without_a_trace(node: Condition, world: Any) -> None:
    facts, findings = world
    traced: list[LeafTrace] = []
    compiled: list[LeafTrace] = []
    outcome = evaluate(node, facts, findings, traced)
    run = compile_condition(node)
    assert run(facts, findings, compiled, False) == outcome
    assert run(facts, findings, None, False) == outcome
    assert evaluate(node, facts, findings) == outcome
    assert compiled == traced


def test_kleene_tables() -> None:
    for a in OUTCOMES:
        assert FLIP[FLIP[a]] == a
        for b in OUTCOMES:
            assert FLIP[kleene_and([a, b])] == kleene_or([FLIP[a], FLIP[b]])  # De Morgan
    assert kleene_and([]) == "true" and kleene_or([]) == "false"
    assert kleene_and(["true", "unknown"]) == "unknown" and kleene_and(["unknown", "false"]) == "false"
    assert kleene_or(["false", "unknown"]) == "unknown" and kleene_or(["unknown", "true"]) == "true"


@pytest.mark.parametrize("op", OPS)
def test_every_operator_negates_exactly(op: str) -> None:
    assert negate_op(negate_op(op)) == op and op in SYMBOLS and OPERATORS[op].words
    ordered = OPERATORS[op].ordered
    constants: list[Any] = [WORDS[:2]] if OPERATORS[op].members else [*NUMBERS, *([] if ordered else ["a"])]
    for constant in constants:
        for value in [*NUMBERS, *WORDS]:
            if isinstance(value, str) and (ordered or not isinstance(constant, (str, list))):
                assert not (compare(op, value, constant) and compare(negate_op(op), value, constant))
                continue  # strings are not ordered, and never equal a number
            assert compare(op, value, constant) != compare(negate_op(op), value, constant)
    assert negate_test("known", True) == ("known", False)


# ---- normal forms and boxes ---------------------------------------------------------------------------------------


def _holds(fact: str, op: str, constant: Any, facts: dict[str, Any]) -> bool:
    value = facts.get(fact)
    if op == "known":
        return (value is not None) == constant
    return value is not None and compare(op, value, constant)


@settings(max_examples=300, deadline=None)
@given(conditions, worlds())
def test_finding_branches_fire_exactly_when_the_condition_is_true(node: Condition, world: Any) -> None:
    facts, findings = world

    def leaf(fact: str, op: str, constant: Any) -> bool:
        return _holds(fact, op, constant, facts)

    branches = finding_branches(node, leaf, all, any)
    fires = any(all(b.facts) and set(b.pos) <= findings and not set(b.neg) & findings for b in branches)
    assert fires == (evaluate(node, facts, findings) == "true")


@settings(max_examples=300, deadline=None)
@given(conditions, worlds())
def test_boxes_cover_every_world_where_the_condition_is_true_or_false(node: Condition, world: Any) -> None:
    facts, findings = world
    algebra = BoxAlgebra({}, DOMAINS)
    outcome = evaluate(node, facts, findings)
    if outcome == "true":
        assert any(box_admits(b, facts, findings) for b in algebra.boxes(node))
    if outcome == "false":
        assert any(box_admits(b, facts, findings) for b in algebra.boxes(node, negated=True))


@settings(max_examples=300, deadline=None)
@given(conditions, worlds(), st.booleans())
def test_witnesses_force_the_outcome_they_promise(node: Condition, world: Any, want: bool) -> None:
    facts, _ = world
    pool: list[Any] = [None, *NUMBERS, *WORDS, -2, -0.5, 0.25, 0.75, 1.5, 2.5, 5]  # a point in every region
    for constraints in Witness(DOMAINS).of(node, want):
        choices = [[(fact, v) for v in pool if admits(span, v)] for fact, span in constraints.items()]
        assert all(choices), f"an empty witness: {constraints}"
        for combo in itertools.product(*choices):
            world_facts = {k: v for k, v in {**facts, **dict(combo)}.items() if v is not None}
            assert evaluate(node, world_facts, set()) == ("true" if want else "false"), (constraints, combo)


@settings(max_examples=300, deadline=None)
@given(conditions, worlds(), worlds())
def test_possible_outcomes_contain_every_completion(node: Condition, known: Any, completion: Any) -> None:
    facts, findings = known
    later, _ = completion
    open_facts = {f for f in ("x", "y", "s") if f not in facts}

    def on_fact(test: FactTest) -> frozenset[Outcome]:
        if test.fact in open_facts:
            return OUTCOMES
        return frozenset({evaluate(test, facts, findings)})

    outcomes = possible(node, on_fact, lambda ref: frozenset({"true" if ref.finding in findings else "false"}))
    completed = {**facts, **{f: v for f, v in later.items() if f in open_facts}}
    assert evaluate(node, completed, findings) in outcomes


def test_span_algebra() -> None:
    assert span_of("lt", 1).meet(span_of("gt", 1)).empty()
    assert not span_of("le", 1).meet(span_of("ge", 1)).empty()
    assert Span().narrow("eq", 1) is not None and span_of("ne", 1).narrow("eq", 1) is None
    assert span_of("known", False).narrow("gt", 0) is None
    assert span_of("in", ["a", "b"]).narrow("not_in", ["a", "b"], DOMAINS["s"]) is None
    assert Span(lo=0, lo_open=False, hi=1, hi_open=True).contains(0) and not Span(hi=1).contains(1)


# ---- traversal ----------------------------------------------------------------------------------------------------


def test_visitor_dispatches_on_the_node_type_and_refuses_what_it_does_not_handle() -> None:
    class Count(ConditionVisitor[int]):
        def fact(self, node: FactTest) -> int:
            return 1

        def group(self, node: AllOf | AnyOf, parts: list[Condition], conjunctive: bool) -> int:
            return sum(self.visit(c) for c in parts)

    node = AllOf(all=[FactTest(fact="x", lt=1), AnyOf(any=[FactTest(fact="y", gt=0), FactTest(fact="x", ge=2)])])
    assert Count().visit(node) == 3
    with pytest.raises(TypeError):
        Count().visit(NotOf(not_=FactTest(fact="x", lt=1)))


def test_named_conditions_resolve_and_are_walked_with_paths() -> None:
    named: dict[str, Condition] = {"low": FactTest(fact="x", lt=1), "both": AllOf(all=[ConditionRef(ref="low"),
                                                                                       FindingRef(finding="f")])}
    node = AnyOf(any=[ConditionRef(ref="both"), NotOf(not_=FindingRef(finding="g"))])

    def lookup(ref: ConditionRef, stack: tuple[str, ...]) -> Condition:
        if ref.ref in stack:
            raise ValueError("cycle")
        return named[ref.ref]

    resolved = resolve(node, lookup)
    assert condition_text(resolved) == "any(all(x < 1, finding f), not(finding g))"
    assert finding_uses(node, named) == [("f", False), ("g", True)] and finding_uses(node) == [("g", True)]
    assert refs_used(node, named) == {"both", "low"}
    assert [p for _, p in walk_paths(node, ("when",))] == [
        ("when",), ("when", "any", 0), ("when", "any", 1), ("when", "any", 1, "not")]
    named["loop"] = ConditionRef(ref="loop")
    with pytest.raises(ValueError):
        resolve(ConditionRef(ref="loop"), lookup)
