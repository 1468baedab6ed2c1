"""Three-valued (Kleene) evaluation of conditions, with a trace of every leaf.

An unknown fact makes its comparisons unknown; `known: false` is the only test that is true for a missing fact.
A rule fires only when its condition is definitely true. The trace (every leaf with its value and the threshold)
is what why / why-not explanations are built from, for firing and silent rules alike (as CLIPS `matches`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Literal

from .logic import (
    FLIP,
    NEGATION,
    SYMBOLS,
    ConditionVisitor,
    Outcome,
    comparator,
    compare,
    format_constant,
    kleene_and,
    kleene_or,
    negate_op,
)
from .model import AllOf, AnyOf, Condition, ConditionRef, FactTest, FindingRef, NotOf

Value = int | float | str
__all__ = ["Evaluator", "LeafTrace", "Outcome", "Value", "compile_condition", "evaluate", "negate_op"]


@dataclass
class LeafTrace:
    """One comparison (or finding reference) of a rule, as it evaluated.

    A plain dataclass (pydantic validates and serialises it inside the Report): a report holds about a hundred.
    """

    kind: Literal["fact", "finding"]
    name: str
    op: str  # lt/le/gt/ge/eq/ne/in/not_in/known/concluded
    outcome: Outcome
    threshold: Value | list[Value] | bool | None = None
    value: Value | None = None
    negated: bool = False  # under an odd number of `not`s: the rule needs this leaf to be false

    @property
    def supports(self) -> bool:
        """True when this leaf pushed the rule towards firing."""
        return self.outcome == ("false" if self.negated else "true")

    @property
    def blocks(self) -> bool:
        """True when this leaf, as evaluated, stands against the rule firing."""
        return self.outcome == ("true" if self.negated else "false")

    def comparison(self) -> str:
        """The test as the rule needs it, with the observed value: "gpu_util 0.55 < 0.8"."""
        if self.kind == "finding":
            return f"{'no ' if self.negated else ''}finding {self.name}"
        if self.op == "known":
            want = bool(self.threshold) != self.negated
            return f"{self.name} {'is known' if want else 'is unknown'}"
        op = SYMBOLS[NEGATION[self.op] if self.negated else self.op]
        return f"{self.name} {format_constant(self.value)} {op} {format_constant(self.threshold)}"

    def describe(self) -> str:
        """The comparison and whether it held: "gpu_util 0.55 < 0.8 (holds)"."""
        state = "holds" if self.supports else ("unknown" if self.outcome == "unknown" else "fails")
        return f"{self.comparison()} ({state})"


class _Interpreter(ConditionVisitor[Outcome]):
    """Evaluates a resolved condition node by node; appends every leaf to `trace` when one is given."""

    def fact(self, node: FactTest, facts: Mapping[str, Value], findings: Collection[str],
             trace: list[LeafTrace] | None, negated: bool) -> Outcome:
        value = facts.get(node.fact)
        results: list[Outcome] = []
        if node.known is not None:
            present = value is not None
            outcome: Outcome = "true" if present == node.known else "false"
            results.append(outcome)
            if trace is not None:
                trace.append(LeafTrace(kind="fact", name=node.fact, op="known", threshold=node.known,
                                       value=value, outcome=outcome, negated=negated))
        for op, constant in node.ops():
            outcome = "unknown" if value is None else ("true" if compare(op, value, constant) else "false")
            results.append(outcome)
            if trace is not None:
                trace.append(LeafTrace(kind="fact", name=node.fact, op=op, threshold=constant,
                                       value=value, outcome=outcome, negated=negated))
        return kleene_and(results)

    def finding(self, node: FindingRef, facts: Mapping[str, Value], findings: Collection[str],
                trace: list[LeafTrace] | None, negated: bool) -> Outcome:
        outcome: Outcome = "true" if node.finding in findings else "false"
        if trace is not None:
            trace.append(LeafTrace(kind="finding", name=node.finding, op="concluded", threshold=None,
                                   value=None, outcome=outcome, negated=negated))
        return outcome

    def group(self, node: AllOf | AnyOf, parts: list[Condition], conjunctive: bool, facts: Mapping[str, Value],
              findings: Collection[str], trace: list[LeafTrace] | None, negated: bool) -> Outcome:
        outcomes = [self.visit(c, facts, findings, trace, negated) for c in parts]
        return kleene_and(outcomes) if conjunctive else kleene_or(outcomes)

    def not_of(self, node: NotOf, facts: Mapping[str, Value], findings: Collection[str],
               trace: list[LeafTrace] | None, negated: bool) -> Outcome:
        return FLIP[self.visit(node.not_, facts, findings, trace, not negated)]

    def ref(self, node: ConditionRef, *args: object, **kwargs: object) -> Outcome:
        raise TypeError(f"unresolved condition node {node!r}")  # refs are inlined at load time


_INTERPRETER = _Interpreter()


def evaluate(
    node: Condition,
    facts: Mapping[str, Value],
    findings: Collection[str],
    trace: list[LeafTrace] | None = None,
    negated: bool = False,
) -> Outcome:
    """Evaluate a resolved condition; when `trace` is given, append every leaf (no short-circuit)."""
    return _INTERPRETER.visit(node, facts, findings, trace, negated)


# ---- compiled evaluation --------------------------------------------------------------------------------------
# The same semantics as `evaluate`, compiled once per rule into closures (no dispatch per node at run time).

Evaluator = Callable[[Mapping[str, Value], Collection[str], "list[LeafTrace] | None", bool], Outcome]


class _Compiler(ConditionVisitor[Evaluator]):
    def fact(self, node: FactTest) -> Evaluator:
        fact, known = node.fact, node.known
        tests = [(op, constant, comparator(op, constant)) for op, constant in node.ops()]

        def fact_test(facts: Mapping[str, Value], findings: Collection[str], trace: list[LeafTrace] | None,
                      negated: bool) -> Outcome:
            value = facts.get(fact)
            if trace is None:  # no trace wanted: stop at the first comparison that fails
                if known is not None and (value is not None) != known:
                    return "false"
                if value is None:
                    return "unknown" if tests else "true"
                for _, _, compare in tests:
                    if not compare(value):
                        return "false"
                return "true"
            result: Outcome = "true"
            if known is not None:
                outcome: Outcome = "true" if (value is not None) == known else "false"
                if trace is not None:
                    trace.append(LeafTrace("fact", fact, "known", outcome, known, value, negated))
                if outcome == "false":
                    result = "false"
            for op, constant, compare in tests:
                outcome = "unknown" if value is None else ("true" if compare(value) else "false")
                if trace is not None:
                    trace.append(LeafTrace("fact", fact, op, outcome, constant, value, negated))
                if outcome == "false":
                    result = "false"
                elif outcome == "unknown" and result == "true":
                    result = "unknown"
            return result

        return fact_test

    def finding(self, node: FindingRef) -> Evaluator:
        finding = node.finding

        def finding_ref(facts: Mapping[str, Value], findings: Collection[str], trace: list[LeafTrace] | None,
                        negated: bool) -> Outcome:
            outcome: Outcome = "true" if finding in findings else "false"
            if trace is not None:
                trace.append(LeafTrace("finding", finding, "concluded", outcome, None, None, negated))
            return outcome

        return finding_ref

    def not_of(self, node: NotOf) -> Evaluator:
        inner = self.visit(node.not_)

        def not_of(facts: Mapping[str, Value], findings: Collection[str], trace: list[LeafTrace] | None,
                   negated: bool) -> Outcome:
            return FLIP[inner(facts, findings, trace, not negated)]

        return not_of

    def group(self, node: AllOf | AnyOf, parts: list[Condition], conjunctive: bool) -> Evaluator:
        children = [self.visit(c) for c in parts]
        combine = kleene_and if conjunctive else kleene_or
        decisive: Outcome = "false" if conjunctive else "true"
        neutral: Outcome = "true" if conjunctive else "false"

        def group(facts: Mapping[str, Value], findings: Collection[str], trace: list[LeafTrace] | None,
                  negated: bool) -> Outcome:
            if trace is not None:  # a trace records every leaf, so no short-circuit
                return combine([child(facts, findings, trace, negated) for child in children])
            result = neutral
            for child in children:
                outcome = child(facts, findings, None, negated)
                if outcome == decisive:
                    return decisive
                if outcome == "unknown":
                    result = "unknown"
            return result

        return group

    def ref(self, node: ConditionRef, *args: object, **kwargs: object) -> Evaluator:
        raise TypeError(f"unresolved condition node {node!r}")  # refs are inlined at load time


def compile_condition(node: Condition) -> Evaluator:
    """Compile a resolved condition into a function with `evaluate`'s signature and results."""
    return _Compiler().visit(node)
