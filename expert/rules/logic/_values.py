"""Values of conditions: the three-valued (Kleene) tables, the operator table, and conditions and constants as text."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, Literal, NamedTuple

from ..model import OPS, AllOf, AnyOf, Condition, ConditionRef, FactTest, FindingRef, KnowledgeValue, NotOf
from ._tree import ConditionVisitor, Value

Outcome = Literal["true", "false", "unknown"]


# ---- three-valued (Kleene) logic ------------------------------------------------------------------------------------

OUTCOMES: frozenset[Outcome] = frozenset({"true", "false", "unknown"})
FLIP: dict[Outcome, Outcome] = {"true": "false", "false": "true", "unknown": "unknown"}


def kleene_and(outcomes: Collection[str]) -> Outcome:
    """false if any is false, else unknown if any is unknown, else true."""
    if "false" in outcomes:
        return "false"
    return "unknown" if "unknown" in outcomes else "true"


def kleene_or(outcomes: Collection[str]) -> Outcome:
    """true if any is true, else unknown if any is unknown, else false."""
    if "true" in outcomes:
        return "true"
    return "unknown" if "unknown" in outcomes else "false"


def kleene_not(outcome: Outcome) -> Outcome:
    return FLIP[outcome]


def and3(a: str, b: str) -> Outcome:
    return kleene_and((a, b))


def or3(a: str, b: str) -> Outcome:
    return kleene_or((a, b))


class _Possible(ConditionVisitor[frozenset[Outcome]]):
    def __init__(self, fact: Callable[[FactTest], frozenset[Outcome]],
                 finding: Callable[[FindingRef], frozenset[Outcome]]) -> None:
        self.on_fact, self.on_finding = fact, finding

    def fact(self, node: FactTest) -> frozenset[Outcome]:
        return self.on_fact(node)

    def finding(self, node: FindingRef) -> frozenset[Outcome]:
        return self.on_finding(node)

    def not_of(self, node: NotOf) -> frozenset[Outcome]:
        return frozenset(FLIP[o] for o in self.visit(node.not_))

    def group(self, node: AllOf | AnyOf, parts: list[Condition], conjunctive: bool) -> frozenset[Outcome]:
        combine = and3 if conjunctive else or3
        settled: frozenset[Outcome] = frozenset({"false" if conjunctive else "true"})  # absorbs whatever follows
        acc = self.visit(parts[0])
        for child in parts[1:]:
            if acc == settled:
                break
            other = self.visit(child)
            acc = frozenset(combine(a, b) for a in acc for b in other)
        return acc


def possible(node: Condition, fact: Callable[[FactTest], frozenset[Outcome]],
             finding: Callable[[FindingRef], frozenset[Outcome]]) -> frozenset[Outcome]:
    """Every outcome a resolved condition can still take, given every outcome each fact test and finding reference
    can still take (e.g. ``{evaluated}`` for a settled fact, all three for an open one)."""
    return _Possible(fact, finding).visit(node)


# ---- operators ----------------------------------------------------------------------------------------------------


class Operator(NamedTuple):
    """One operator of a fact test: its symbol, its words, and the operator true exactly when it is false."""

    name: str
    symbol: str
    negation: str
    words: str
    ordered: bool = False  # lt/le/gt/ge: compares numbers
    members: bool = False  # in/not_in: the constant is a list


OPERATORS: dict[str, Operator] = {op.name: op for op in (
    Operator("lt", "<", "ge", "is below", ordered=True),
    Operator("le", "<=", "gt", "is at most", ordered=True),
    Operator("gt", ">", "le", "is above", ordered=True),
    Operator("ge", ">=", "lt", "is at least", ordered=True),
    Operator("eq", "==", "ne", "is"),
    Operator("ne", "!=", "eq", "is not"),
    Operator("in", "in", "not_in", "is one of", members=True),
    Operator("not_in", "not in", "in", "is none of", members=True),
    Operator("known", "known", "known", "is known"),  # the constant says known (true) or unknown; negate_test flips it
)}
assert tuple(OPERATORS)[:len(OPS)] == OPS, "the operator table follows the schema's operators"
SYMBOLS: dict[str, str] = {name: OPERATORS[name].symbol for name in OPS}
NEGATION: dict[str, str] = {name: op.negation for name, op in OPERATORS.items()}  # negate_op as a table
ORDERED = frozenset(name for name, op in OPERATORS.items() if op.ordered)


def negate_op(op: str) -> str:
    """The comparison that is true exactly when `op` is false (for a known value)."""
    return OPERATORS[op].negation


def negate_test(op: str, constant: Any) -> tuple[str, Any]:
    """The (operator, constant) true exactly when (op, constant) is false; `known` flips its constant."""
    if op == "known":
        return op, not constant
    return OPERATORS[op].negation, constant


def compare(op: str, value: Value, constant: object) -> bool:
    """Whether a known value passes one comparison (never true between a string and a number)."""
    if op == "in":
        return value in constant  # type: ignore[operator]
    if op == "not_in":
        return value not in constant  # type: ignore[operator]
    if op == "eq":
        return value == constant
    if op == "ne":
        return value != constant
    if isinstance(value, str) or isinstance(constant, str):
        return False
    limit = float(constant)  # type: ignore[arg-type]
    if op == "lt":
        return value < limit
    if op == "le":
        return value <= limit
    if op == "gt":
        return value > limit
    return value >= limit


def comparator(op: str, constant: object) -> Callable[[Value], bool]:
    """`compare(op, ·, constant)` as a function built once (for compiled conditions)."""
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


# ---- formatting ---------------------------------------------------------------------------------------------------


def format_constant(value: object, precision: int = 4) -> str:
    """A constant or value as text: floats to `precision` significant digits, lists bracketed, None as unknown, a
    knowledge value (not yet bound) by its name."""
    if isinstance(value, float):
        return f"{value:.4g}" if precision == 4 else f"{value:.{precision}g}"  # the common case, without a nested spec
    if isinstance(value, list):
        return "[" + ", ".join(format_constant(v, precision) for v in value) + "]"
    if isinstance(value, KnowledgeValue):
        return value.kb
    return "unknown" if value is None else str(value)


def _fmt(value: object) -> str:
    return format_constant(value, 6)


class _Text(ConditionVisitor[str]):
    def fact(self, node: FactTest) -> str:
        parts = []
        if node.known is not None:
            parts.append(f"{node.fact} {'is known' if node.known else 'is unknown'}")
        parts += [f"{node.fact} {SYMBOLS[op]} {_fmt(value)}" for op, value in node.ops()]
        return " and ".join(parts)

    def finding(self, node: FindingRef) -> str:
        return f"finding {node.finding}"

    def ref(self, node: ConditionRef) -> str:
        return f"ref {node.ref}"

    def not_of(self, node: NotOf) -> str:
        return f"not({self.visit(node.not_)})"

    def group(self, node: AllOf | AnyOf, parts: list[Condition], conjunctive: bool) -> str:
        return ("all(" if conjunctive else "any(") + ", ".join(self.visit(c) for c in parts) + ")"


def condition_text(node: Condition) -> str:
    """A compact one-line rendering: ``all(gpu_util < 0.8, finding data_starved)``."""
    return _Text().visit(node)
