"""Three-valued (Kleene) evaluation of conditions, with a trace of every leaf.

An unknown fact makes its comparisons unknown; `known: false` is the only test that is true for a missing fact.
A rule fires only when its condition is definitely true. The trace (every leaf with its value and the threshold)
is what why / why-not explanations are built from, for firing and silent rules alike (as CLIPS `matches`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Literal

from .model import AllOf, AnyOf, Condition, FactTest, FindingRef, NotOf

Outcome = Literal["true", "false", "unknown"]
Value = int | float | str

_SYMBOL = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=", "in": "in", "not_in": "not in"}
_NEGATED = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq", "in": "not_in", "not_in": "in"}


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
        op = _SYMBOL[_NEGATED[self.op] if self.negated else self.op]
        shown = "unknown" if self.value is None else _fmt(self.value)
        return f"{self.name} {shown} {op} {_fmt(self.threshold)}"

    def describe(self) -> str:
        """The comparison and whether it held: "gpu_util 0.55 < 0.8 (holds)"."""
        state = "holds" if self.supports else ("unknown" if self.outcome == "unknown" else "fails")
        return f"{self.comparison()} ({state})"


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


def _compare(op: str, value: Value, constant: object) -> bool:
    if op in ("in", "not_in"):
        inside = value in constant  # type: ignore[operator]
        return inside if op == "in" else not inside
    if op == "eq":
        return value == constant
    if op == "ne":
        return value != constant
    if isinstance(value, str) or isinstance(constant, str):
        return False
    number = float(value)
    limit = float(constant)  # type: ignore[arg-type]
    return {"lt": number < limit, "le": number <= limit, "gt": number > limit, "ge": number >= limit}[op]


def _and(outcomes: list[Outcome]) -> Outcome:
    if "false" in outcomes:
        return "false"
    return "unknown" if "unknown" in outcomes else "true"


def _or(outcomes: list[Outcome]) -> Outcome:
    if "true" in outcomes:
        return "true"
    return "unknown" if "unknown" in outcomes else "false"


_FLIP: dict[Outcome, Outcome] = {"true": "false", "false": "true", "unknown": "unknown"}


def evaluate(
    node: Condition,
    facts: Mapping[str, Value],
    findings: Collection[str],
    trace: list[LeafTrace] | None = None,
    negated: bool = False,
) -> Outcome:
    """Evaluate a resolved condition; when `trace` is given, append every leaf (no short-circuit)."""
    if isinstance(node, FactTest):
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
            outcome = "unknown" if value is None else ("true" if _compare(op, value, constant) else "false")
            results.append(outcome)
            if trace is not None:
                trace.append(LeafTrace(kind="fact", name=node.fact, op=op, threshold=constant,
                                                       value=value, outcome=outcome, negated=negated))
        return _and(results)
    if isinstance(node, FindingRef):
        outcome = "true" if node.finding in findings else "false"
        if trace is not None:
            trace.append(LeafTrace(kind="finding", name=node.finding, op="concluded", threshold=None,
                                                   value=None, outcome=outcome, negated=negated))
        return outcome
    if isinstance(node, AllOf):
        return _and([evaluate(c, facts, findings, trace, negated) for c in node.all])
    if isinstance(node, AnyOf):
        return _or([evaluate(c, facts, findings, trace, negated) for c in node.any])
    if isinstance(node, NotOf):
        return _FLIP[evaluate(node.not_, facts, findings, trace, not negated)]
    raise TypeError(f"unresolved condition node {node!r}")  # refs are inlined at load time


def negate_op(op: str) -> str:
    """The comparison that is true exactly when `op` is false (for a known value)."""
    return _NEGATED[op]


# ---- compiled evaluation --------------------------------------------------------------------------------------
# The same semantics as `evaluate`, compiled once per rule into closures (no isinstance dispatch per node).

Evaluator = Callable[[Mapping[str, Value], Collection[str], "list[LeafTrace] | None", bool], Outcome]


def _comparator(op: str, constant: object) -> Callable[[Value], bool]:
    if op in ("in", "not_in"):
        members = list(constant)  # type: ignore[call-overload]
        return (lambda v: v in members) if op == "in" else (lambda v: v not in members)
    if op == "eq":
        return lambda v: v == constant
    if op == "ne":
        return lambda v: v != constant
    if isinstance(constant, str):
        return lambda v: False
    limit = float(constant)  # type: ignore[arg-type]
    if op == "lt":
        return lambda v: not isinstance(v, str) and v < limit
    if op == "le":
        return lambda v: not isinstance(v, str) and v <= limit
    if op == "gt":
        return lambda v: not isinstance(v, str) and v > limit
    return lambda v: not isinstance(v, str) and v >= limit


def compile_condition(node: Condition) -> Evaluator:
    """Compile a resolved condition into a function with `evaluate`'s signature and results."""
    if isinstance(node, FactTest):
        fact, known = node.fact, node.known
        tests = [(op, constant, _comparator(op, constant)) for op, constant in node.ops()]

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
    if isinstance(node, FindingRef):
        finding = node.finding

        def finding_ref(facts: Mapping[str, Value], findings: Collection[str], trace: list[LeafTrace] | None,
                        negated: bool) -> Outcome:
            outcome: Outcome = "true" if finding in findings else "false"
            if trace is not None:
                trace.append(LeafTrace("finding", finding, "concluded", outcome, None, None, negated))
            return outcome

        return finding_ref
    if isinstance(node, NotOf):
        inner = compile_condition(node.not_)

        def not_of(facts: Mapping[str, Value], findings: Collection[str], trace: list[LeafTrace] | None,
                   negated: bool) -> Outcome:
            return _FLIP[inner(facts, findings, trace, not negated)]

        return not_of
    if isinstance(node, (AllOf, AnyOf)):
        children = [compile_condition(c) for c in (node.all if isinstance(node, AllOf) else node.any)]
        combine = _and if isinstance(node, AllOf) else _or
        decisive: Outcome = "false" if isinstance(node, AllOf) else "true"
        neutral: Outcome = "true" if isinstance(node, AllOf) else "false"

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
    raise TypeError(f"unresolved condition node {node!r}")  # refs are inlined at load time
