"""Condition trees: the one module that knows their node types and their logic.

A condition (rules/model.py) is a tree of FactTest, AllOf, AnyOf, NotOf, ConditionRef and FindingRef nodes. Every
walk, evaluation, negation, normal form and constraint analysis of one goes through this module; no other module
tests node types. Public API:

Traversal
    ``ConditionVisitor[R]``  ``visit(node, *args)`` calls the hook for the node's type: ``fact``, ``all_of`` /
        ``any_of`` (both default to ``group``), ``not_of``, ``ref``, ``finding``; every hook defaults to ``default``,
        which raises TypeError. Subclasses override the hooks they need, with their own extra arguments.
    ``LeafVisitor[T]``  yields from ``fact`` / ``finding`` / ``ref`` hooks for every leaf, in order, with its YAML path.
    ``children(node)``, ``walk(node)``, ``walk_paths(node, path)`` (with YAML paths; refs are not entered),
    ``fact_tests``, ``fact_tests_at``, ``finding_refs_at``, ``condition_refs_at``, ``conjunctions``,
    ``facts_used``, ``findings_used``, ``finding_uses`` and ``refs_used`` (through named conditions),
    ``resolve(node, lookup)`` (named conditions inlined).
Three-valued (Kleene) logic
    ``Outcome``, ``OUTCOMES``, ``FLIP``, ``kleene_and``, ``kleene_or``, ``kleene_not``, ``and3``, ``or3``;
    ``possible(node, fact, finding)``: the outcomes a condition can still take, given what each leaf still can
    (a planner's view of partial knowledge).
Operators
    ``Operator``, ``OPERATORS`` (lt, le, gt, ge, eq, ne, in, not_in, known: symbol, words, negation), ``SYMBOLS``,
    ``ORDERED`` (the operators that compare numbers), ``negate_op``, ``negate_test``, ``compare(op, value, constant)``
    and ``comparator(op, constant)`` (the same test built once, for compiled conditions).
Negation normal form
    ``NnfFold[T]``: a fold that sees only leaves ``(fact, op, constant)``, findings ``(id, positive)``, ``conj`` and
    ``disj`` (``not`` pushed to the leaves); ``finding_branches(node, leaf, conj, disj)``: the condition as
    alternatives, each fact-only expressions plus findings that must be concluded or absent.
Constraint boxes
    ``Span`` (one fact: an interval, allowed and excluded values, known or unknown), ``span_of(op, constant)``,
    ``Span.narrow(op, constant, domain)`` (a span intersected with one test; None when empty), ``Span.contains``;
    ``Box`` (spans per fact plus findings), ``BoxAlgebra`` (a condition as a union of boxes, findings optionally
    expanded into the conditions of the rules concluding them), ``TooComplex``, ``Unresolvable``;
    ``Witness``: fact constraints (``Constraints = dict[str, Span]``) under which a condition is true, or false;
    hooks ``settled`` (a known fact's outcome), ``concluded`` and ``through`` (findings) adapt it to a planner.
Formatting
    ``format_constant(value, precision)``, ``condition_text(node)``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from .model import OPS, AllOf, AnyOf, Condition, ConditionRef, FactTest, FindingRef, NotOf

Outcome = Literal["true", "false", "unknown"]
Value = int | float | str
YamlPath = tuple[str | int, ...]
R = TypeVar("R")
T = TypeVar("T")

__all__ = [
    "FLIP", "OPERATORS", "ORDERED", "OUTCOMES", "SYMBOLS", "Box", "BoxAlgebra", "ConditionVisitor", "Constraints",
    "FindingBranch", "LeafVisitor", "NnfFold", "Operator", "Outcome", "Span", "TooComplex", "Unresolvable", "Value",
    "Witness", "YamlPath", "and3", "children", "comparator", "compare", "condition_refs_at", "condition_text",
    "conjunctions", "fact_tests", "fact_tests_at", "facts_used", "finding_branches", "finding_refs_at",
    "finding_uses", "findings_used", "format_constant", "kleene_and", "kleene_not", "kleene_or", "negate_op",
    "negate_test", "or3", "possible", "refs_used", "resolve", "span_of", "walk", "walk_paths",
]

# ---- traversal ----------------------------------------------------------------------------------------------------

_HOOK: dict[type, str] = {FactTest: "fact", AllOf: "all_of", AnyOf: "any_of", NotOf: "not_of", ConditionRef: "ref",
                          FindingRef: "finding"}


class ConditionVisitor(Generic[R]):
    """Dispatch on the node type: `visit(node, *args)` calls the hook for it with the same extra arguments."""

    def visit(self, node: Condition, *args: Any) -> R:
        hook = _HOOK.get(type(node))
        if hook is None:
            raise TypeError(f"not a condition: {node!r}")
        result: R = getattr(self, hook)(node, *args)
        return result

    def default(self, node: Condition, *args: Any, **kwargs: Any) -> R:
        """What a hook that is not overridden does: refuse the node."""
        raise TypeError(f"{type(self).__name__} cannot visit {node!r}")

    def fact(self, node: FactTest, *args: Any, **kwargs: Any) -> R:
        return self.default(node, *args)

    def all_of(self, node: AllOf, *args: Any, **kwargs: Any) -> R:
        return self.group(node, node.all, True, *args)

    def any_of(self, node: AnyOf, *args: Any, **kwargs: Any) -> R:
        return self.group(node, node.any, False, *args)

    def group(self, node: AllOf | AnyOf, parts: list[Condition], conjunctive: bool, *args: Any, **kwargs: Any) -> R:
        """An `all` (conjunctive) or an `any`, with its parts."""
        return self.default(node, *args)

    def not_of(self, node: NotOf, *args: Any, **kwargs: Any) -> R:
        return self.default(node, *args)

    def ref(self, node: ConditionRef, *args: Any, **kwargs: Any) -> R:
        return self.default(node, *args)

    def finding(self, node: FindingRef, *args: Any, **kwargs: Any) -> R:
        return self.default(node, *args)


def children(node: Condition) -> Sequence[Condition]:
    """The direct sub-conditions of a node (none for leaves and refs)."""
    if isinstance(node, AllOf):
        return node.all
    if isinstance(node, AnyOf):
        return node.any
    if isinstance(node, NotOf):
        return (node.not_,)
    return ()


def walk(node: Condition) -> Iterator[Condition]:
    """Every node of a condition tree, depth first."""
    yield node
    for child in children(node):
        yield from walk(child)


def walk_paths(node: Condition, path: YamlPath = ()) -> Iterator[tuple[Condition, YamlPath]]:
    """Every node with its YAML path (``all``/``any`` and an index, ``not``); named conditions are not entered."""
    yield node, path
    if isinstance(node, AllOf):
        for i, child in enumerate(node.all):
            yield from walk_paths(child, (*path, "all", i))
    elif isinstance(node, AnyOf):
        for i, child in enumerate(node.any):
            yield from walk_paths(child, (*path, "any", i))
    elif isinstance(node, NotOf):
        yield from walk_paths(node.not_, (*path, "not"))


class LeafVisitor(ConditionVisitor[Iterator[T]]):
    """Visits the leaves (fact tests, finding references, named-condition references) of a tree in order, each with
    its YAML path; the `fact`, `finding` and `ref` hooks yield items (nothing unless overridden)."""

    def leaves(self, node: Condition, path: YamlPath = ()) -> Iterator[T]:
        return self.visit(node, path)

    def fact(self, node: FactTest, path: YamlPath) -> Iterator[T]:
        return iter(())

    def finding(self, node: FindingRef, path: YamlPath) -> Iterator[T]:
        return iter(())

    def ref(self, node: ConditionRef, path: YamlPath) -> Iterator[T]:
        return iter(())

    def group(self, node: AllOf | AnyOf, parts: list[Condition], conjunctive: bool, path: YamlPath) -> Iterator[T]:
        key = "all" if conjunctive else "any"
        for i, child in enumerate(parts):
            yield from self.visit(child, (*path, key, i))

    def not_of(self, node: NotOf, path: YamlPath) -> Iterator[T]:
        return self.visit(node.not_, (*path, "not"))


def fact_tests(node: Condition) -> Iterator[FactTest]:
    """Every fact test, depth first."""
    return (n for n in walk(node) if isinstance(n, FactTest))


def conjunctions(node: Condition) -> Iterator[AllOf]:
    """Every `all`, depth first."""
    return (n for n in walk(node) if isinstance(n, AllOf))


def fact_tests_at(node: Condition, path: YamlPath = ()) -> Iterator[tuple[FactTest, YamlPath]]:
    """Every fact test with its YAML path."""
    return ((n, p) for n, p in walk_paths(node, path) if isinstance(n, FactTest))


def finding_refs_at(node: Condition, path: YamlPath = ()) -> Iterator[tuple[FindingRef, YamlPath]]:
    """Every finding reference with its YAML path."""
    return ((n, p) for n, p in walk_paths(node, path) if isinstance(n, FindingRef))


def condition_refs_at(node: Condition, path: YamlPath = ()) -> Iterator[tuple[ConditionRef, YamlPath]]:
    """Every reference to a named condition with its YAML path."""
    return ((n, p) for n, p in walk_paths(node, path) if isinstance(n, ConditionRef))


def facts_used(node: Condition) -> list[str]:
    """Fact names a resolved condition reads, in first-use order."""
    seen: list[str] = []
    for n in fact_tests(node):
        if n.fact not in seen:
            seen.append(n.fact)
    return seen


def finding_uses(node: Condition, conditions: Mapping[str, Condition] | None = None,
                 stack: tuple[str, ...] = ()) -> list[tuple[str, bool]]:
    """(finding, negated) for every finding reference, in order; named conditions are entered through
    `conditions` (name -> its `when`), except undefined ones and those already being entered (a cycle)."""
    out: list[tuple[str, bool]] = []

    def visit(n: Condition, negated: bool, inside: tuple[str, ...]) -> None:
        if isinstance(n, FindingRef):
            out.append((n.finding, negated))
        elif isinstance(n, ConditionRef):
            if conditions is not None and n.ref in conditions and n.ref not in inside:
                visit(conditions[n.ref], negated, (*inside, n.ref))
        else:
            flip = isinstance(n, NotOf)
            for child in children(n):
                visit(child, negated != flip, inside)

    visit(node, False, stack)
    return out


def findings_used(node: Condition) -> tuple[set[str], set[str]]:
    """(positively, negatively) referenced findings of a resolved condition."""
    pos: set[str] = set()
    neg: set[str] = set()
    for name, negated in finding_uses(node):
        (neg if negated else pos).add(name)
    return pos, neg


def refs_used(node: Condition, conditions: Mapping[str, Condition], stack: tuple[str, ...] = ()) -> set[str]:
    """Named conditions a condition uses, transitively (undefined and cyclic ones included, not entered)."""
    out: set[str] = set()
    for n, _ in condition_refs_at(node):
        out.add(n.ref)
        if n.ref in conditions and n.ref not in stack:
            out |= refs_used(conditions[n.ref], conditions, (*stack, n.ref))
    return out


class _Resolver(ConditionVisitor[Condition]):
    def __init__(self, lookup: Callable[[ConditionRef, tuple[str, ...]], Condition]) -> None:
        self.lookup = lookup

    def fact(self, node: FactTest, stack: tuple[str, ...]) -> Condition:
        return node

    def finding(self, node: FindingRef, stack: tuple[str, ...]) -> Condition:
        return node

    def all_of(self, node: AllOf, stack: tuple[str, ...]) -> Condition:
        return AllOf(all=[self.visit(c, stack) for c in node.all])

    def any_of(self, node: AnyOf, stack: tuple[str, ...]) -> Condition:
        return AnyOf(any=[self.visit(c, stack) for c in node.any])

    def not_of(self, node: NotOf, stack: tuple[str, ...]) -> Condition:
        return NotOf(not_=self.visit(node.not_, stack))

    def ref(self, node: ConditionRef, stack: tuple[str, ...]) -> Condition:
        return self.visit(self.lookup(node, stack), (*stack, node.ref))


def resolve(node: Condition, lookup: Callable[[ConditionRef, tuple[str, ...]], Condition]) -> Condition:
    """The condition with named conditions inlined: `lookup(ref, stack)` gives the condition a reference names
    (`stack`: the names being inlined around it), or raises."""
    return _Resolver(lookup).visit(node, ())


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
        acc = self.visit(parts[0])
        for child in parts[1:]:
            other = self.visit(child)
            acc = frozenset(combine(a, b) for a in acc for b in other)
        return acc


def possible(node: Condition, fact: Callable[[FactTest], frozenset[Outcome]],
             finding: Callable[[FindingRef], frozenset[Outcome]]) -> frozenset[Outcome]:
    """Every outcome a resolved condition can still take, given every outcome each fact test and finding reference
    can still take (e.g. ``{evaluated}`` for a settled fact, all three for an open one)."""
    return _Possible(fact, finding).visit(node)


# ---- operators ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Operator:
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
    """A constant or value as text: floats to `precision` significant digits, lists bracketed, None as unknown."""
    if isinstance(value, float):
        return f"{value:.{precision}g}"
    if isinstance(value, list):
        return "[" + ", ".join(format_constant(v, precision) for v in value) + "]"
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


# ---- negation normal form -----------------------------------------------------------------------------------------


class NnfFold(ConditionVisitor[T]):
    """A fold over a condition in negation normal form: `not` is pushed to the leaves (De Morgan), so subclasses see
    leaves ``(fact, op, constant)`` (a negated test becomes its negated operators, any of which refutes it),
    findings that must be concluded (positive) or absent, and conjunctions and disjunctions.

    A fact test with several operators is the conjunction of its leaves (negated: the disjunction); with one
    operator it is that leaf. A named condition goes to `named`, which refuses it unless overridden.
    """

    def fold(self, node: Condition, negated: bool = False) -> T:
        return self.visit(node, negated)

    def leaf(self, fact: str, op: str, constant: Any) -> T:
        raise NotImplementedError

    def found(self, finding: str, positive: bool) -> T:
        raise NotImplementedError

    def conj(self, parts: list[T]) -> T:
        raise NotImplementedError

    def disj(self, parts: list[T]) -> T:
        raise NotImplementedError

    def named(self, ref: str, negated: bool) -> T:
        raise TypeError(f"unresolved condition node ref={ref!r}")

    def fact(self, node: FactTest, negated: bool) -> T:
        leaves: list[T] = []
        if node.known is not None:
            leaves.append(self.leaf(node.fact, "known", node.known != negated))
        for op, constant in node.ops():
            leaves.append(self.leaf(node.fact, OPERATORS[op].negation if negated else op, constant))
        if len(leaves) == 1:
            return leaves[0]
        return self.disj(leaves) if negated else self.conj(leaves)

    def finding(self, node: FindingRef, negated: bool) -> T:
        return self.found(node.finding, not negated)

    def group(self, node: AllOf | AnyOf, parts: list[Condition], conjunctive: bool, negated: bool) -> T:
        folded = [self.visit(c, negated) for c in parts]
        return self.conj(folded) if conjunctive != negated else self.disj(folded)

    def not_of(self, node: NotOf, negated: bool) -> T:
        return self.visit(node.not_, not negated)

    def ref(self, node: ConditionRef, negated: bool) -> T:
        return self.named(node.ref, negated)


@dataclass
class FindingBranch(Generic[T]):
    """One alternative of a condition: fact-only expressions, findings it needs concluded and findings it needs
    absent (all must hold)."""

    facts: list[T] = field(default_factory=list)
    pos: list[str] = field(default_factory=list)
    neg: list[str] = field(default_factory=list)


@dataclass
class _Part(Generic[T]):
    expr: T | None  # the folded expression of a fact-only part
    branches: list[FindingBranch[T]]  # the alternatives of a part that reads findings

    def alternatives(self) -> list[FindingBranch[T]]:
        return self.branches if self.expr is None else [FindingBranch([self.expr])]


class _Branches(NnfFold[_Part[T]]):
    def __init__(self, leaf: Callable[[str, str, Any], T], conj: Callable[[list[T]], T],
                 disj: Callable[[list[T]], T]) -> None:
        self.on_leaf, self.on_conj, self.on_disj = leaf, conj, disj

    def leaf(self, fact: str, op: str, constant: Any) -> _Part[T]:
        return _Part(self.on_leaf(fact, op, constant), [])

    def found(self, finding: str, positive: bool) -> _Part[T]:
        return _Part(None, [FindingBranch(pos=[finding]) if positive else FindingBranch(neg=[finding])])

    def _fact_only(self, parts: list[_Part[T]]) -> list[T] | None:
        exprs = [p.expr for p in parts]
        return None if any(e is None for e in exprs) else exprs  # type: ignore[return-value]

    def conj(self, parts: list[_Part[T]]) -> _Part[T]:
        exprs = self._fact_only(parts)
        if exprs is not None:
            return _Part(self.on_conj(exprs), [])
        branches: list[FindingBranch[T]] = [FindingBranch()]
        for part in parts:
            branches = [FindingBranch(a.facts + b.facts, a.pos + b.pos, a.neg + b.neg)
                        for a in branches for b in part.alternatives()]
        return _Part(None, branches)

    def disj(self, parts: list[_Part[T]]) -> _Part[T]:
        exprs = self._fact_only(parts)
        if exprs is not None:
            return _Part(self.on_disj(exprs), [])
        return _Part(None, [b for part in parts for b in part.alternatives()])


def finding_branches(node: Condition, leaf: Callable[[str, str, Any], T], conj: Callable[[list[T]], T],
                     disj: Callable[[list[T]], T]) -> list[FindingBranch[T]]:
    """A resolved condition as alternative branches (disjunctive normal form over its findings only): each branch
    holds fact-only sub-expressions, in negation normal form folded with `leaf`/`conj`/`disj`, and the findings it
    needs concluded or absent. A condition that reads no finding is one branch of one expression."""
    return _Branches(leaf, conj, disj).fold(node).alternatives()


# ---- constraint boxes ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    """Constraints on one fact: an interval, allowed and excluded values, and whether it must be known."""

    lo: float = -math.inf
    lo_open: bool = True
    hi: float = math.inf
    hi_open: bool = True
    only: frozenset[Value] | None = None
    never: frozenset[Value] = frozenset()
    known: bool | None = None
    void: bool = False

    def meet(self, other: Span) -> Span:
        """The intersection of two spans (see `empty`)."""
        if self.lo > other.lo or (self.lo == other.lo and self.lo_open):
            lo, lo_open = self.lo, self.lo_open
        else:
            lo, lo_open = other.lo, other.lo_open
        if self.hi < other.hi or (self.hi == other.hi and self.hi_open):
            hi, hi_open = self.hi, self.hi_open
        else:
            hi, hi_open = other.hi, other.hi_open
        only = other.only if self.only is None else (self.only if other.only is None else self.only & other.only)
        void = self.void or other.void or (
            self.known is not None and other.known is not None and self.known != other.known)
        known = self.known if self.known is not None else other.known
        return Span(lo, lo_open, hi, hi_open, only, self.never | other.never, known, void)

    def narrow(self, op: str, constant: Any, domain: frozenset[Value] | None = None) -> Span | None:
        """This span intersected with one test (op, constant), or None when nothing satisfies both."""
        met = self.meet(span_of(op, constant))
        return None if met.empty(domain) else met

    def _ranged(self) -> bool:
        return self.lo > -math.inf or self.hi < math.inf

    def contains(self, v: float) -> bool:
        """Whether a number lies inside the interval."""
        above = v > self.lo or (v == self.lo and not self.lo_open)
        below = v < self.hi or (v == self.hi and not self.hi_open)
        return above and below

    def allowed(self, domain: frozenset[Value] | None = None) -> frozenset[Value] | None:
        """The values still allowed, when the constraints (or the fact's domain) enumerate them."""
        only = self.only if domain is None else (domain if self.only is None else self.only & domain)
        if only is None:
            return None
        out: set[Value] = set()
        for v in only:
            if v in self.never:
                continue
            if isinstance(v, str):
                if not self._ranged():
                    out.add(v)
            elif self.contains(float(v)):
                out.add(v)
        return frozenset(out)

    def empty(self, domain: frozenset[Value] | None = None) -> bool:
        """True when no value (within the enumerated `domain`, when given) satisfies the constraints."""
        if self.void:
            return True
        if self.known is False and (self._ranged() or self.only is not None or self.never):
            return True
        if self.lo > self.hi or (self.lo == self.hi and (self.lo_open or self.hi_open)):
            return True
        allowed = self.allowed(domain)
        if allowed is not None:
            return not allowed
        return self.lo == self.hi and self.lo in self.never

    def describe(self, fact: str) -> str:
        if self.known is False:
            return f"{fact} unknown"
        allowed = self.allowed()
        if allowed is not None:
            values = sorted(allowed, key=str)
            return f"{fact} = {_fmt(values[0])}" if len(values) == 1 else f"{fact} in {_fmt(values)}"
        parts = []
        if self.lo > -math.inf and self.hi < math.inf:
            parts.append(f"{_fmt(self.lo)} {'<' if self.lo_open else '<='} {fact} "
                         f"{'<' if self.hi_open else '<='} {_fmt(self.hi)}")
        elif self.lo > -math.inf:
            parts.append(f"{fact} {'>' if self.lo_open else '>='} {_fmt(self.lo)}")
        elif self.hi < math.inf:
            parts.append(f"{fact} {'<' if self.hi_open else '<='} {_fmt(self.hi)}")
        parts += [f"{fact} != {_fmt(v)}" for v in sorted(self.never, key=str)]
        return ", ".join(parts) or f"{fact} known"


def span_of(op: str, value: Any) -> Span:
    """The span of one test (op, constant); `known` takes a bool, every other operator needs the fact known."""
    if op == "known":
        return Span(known=bool(value))
    if op == "lt":
        return Span(hi=float(value), hi_open=True, known=True)
    if op == "le":
        return Span(hi=float(value), hi_open=False, known=True)
    if op == "gt":
        return Span(lo=float(value), lo_open=True, known=True)
    if op == "ge":
        return Span(lo=float(value), lo_open=False, known=True)
    if op == "eq":
        return Span(only=frozenset([value]), known=True)
    if op == "ne":
        return Span(never=frozenset([value]), known=True)
    if op == "in":
        return Span(only=frozenset(value), known=True)
    return Span(never=frozenset(value), known=True)  # not_in


@dataclass(frozen=True)
class Box:
    """One way a condition can hold: constraints per fact, findings concluded and findings absent."""

    facts: tuple[tuple[str, Span], ...] = ()
    pos: frozenset[str] = frozenset()
    neg: frozenset[str] = frozenset()

    def meet(self, other: Box, domains: Mapping[str, frozenset[Value]]) -> Box | None:
        """The intersection, or None when it is empty."""
        if (self.pos & other.neg) or (self.neg & other.pos):
            return None
        merged = dict(self.facts)
        for fact, span in other.facts:
            merged[fact] = merged[fact].meet(span) if fact in merged else span
            if merged[fact].empty(domains.get(fact)):
                return None
        return Box(tuple(sorted(merged.items())), self.pos | other.pos, self.neg | other.neg)

    def describe(self) -> str:
        parts = [span.describe(fact) for fact, span in self.facts]
        return ", ".join(parts) or "always"


class TooComplex(Exception):
    """The condition expands to too many boxes to analyse (the check is skipped)."""


class Unresolvable(Exception):
    """The condition refers to an undefined or cyclic named condition (reported elsewhere)."""


class _BoxFold(NnfFold[list[Box]]):
    def __init__(self, algebra: BoxAlgebra, refs: tuple[str, ...], findings: tuple[str, ...]) -> None:
        self.algebra, self.refs, self.findings = algebra, refs, findings

    def leaf(self, fact: str, op: str, constant: Any) -> list[Box]:
        span = span_of(op, constant)
        return [] if span.empty(self.algebra.domains.get(fact)) else [Box(((fact, span),))]

    def found(self, finding: str, positive: bool) -> list[Box]:
        algebra = self.algebra
        if not positive:
            return [Box(neg=frozenset([finding]))]
        if algebra.producers is None:
            return [Box(pos=frozenset([finding]))]
        if finding in self.findings:
            return []  # least fixpoint: a finding cannot support its own conclusion
        out: list[Box] = []
        inner = _BoxFold(algebra, (), (*self.findings, finding))
        for cond in algebra.producers.get(finding, []):
            out += algebra._meet_all([inner.fold(cond), [Box(pos=frozenset([finding]))]])
        if len(out) > algebra.LIMIT:
            raise TooComplex
        return out

    def named(self, ref: str, negated: bool) -> list[Box]:
        conditions = self.algebra.conditions
        if ref in self.refs or ref not in conditions:
            raise Unresolvable
        return _BoxFold(self.algebra, (*self.refs, ref), self.findings).fold(conditions[ref], negated)

    def conj(self, parts: list[list[Box]]) -> list[Box]:
        return self.algebra._meet_all(parts)

    def disj(self, parts: list[list[Box]]) -> list[Box]:
        union = [box for group in parts for box in group]
        if len(union) > self.algebra.LIMIT:
            raise TooComplex
        return union


class BoxAlgebra:
    """Conditions as unions of boxes (disjunctive normal form), optionally expanding findings into the conditions
    of their producers. Named conditions are inlined on the way (`conditions`: name -> its `when`); `domains`
    enumerate facts' values (enum choices)."""

    LIMIT = 4096

    def __init__(self, conditions: Mapping[str, Condition], domains: Mapping[str, frozenset[Value]],
                 producers: Mapping[str, Sequence[Condition]] | None = None) -> None:
        self.conditions = conditions
        self.domains = domains
        self.producers = producers

    def boxes(self, node: Condition, negated: bool = False) -> list[Box]:
        """The boxes in which the condition holds (or, negated, fails for a known reason)."""
        return _BoxFold(self, (), ()).fold(node, negated)

    def _meet_all(self, groups: list[list[Box]]) -> list[Box]:
        acc = [Box()]
        for group in groups:
            nxt: list[Box] = []
            for a in acc:
                for b in group:
                    m = a.meet(b, self.domains)
                    if m is not None:
                        nxt.append(m)
            if len(nxt) > self.LIMIT:
                raise TooComplex
            acc = nxt
            if not acc:
                return []
        return acc

    def meet(self, a: list[Box], b: list[Box]) -> list[Box]:
        """The boxes in both unions."""
        return self._meet_all([a, b])


# ---- witnesses ----------------------------------------------------------------------------------------------------

Constraints = dict[str, Span]


class Witness(ConditionVisitor[Iterator[Constraints]]):
    """Searches fact constraints under which a condition takes a wanted value (best effort, lazily).

    `of(node, want)` yields ``{fact: Span}`` dicts, each narrowing the given ones: for `want` true every test of an
    `all` holds together, for `want` false one refuting operator of a test suffices. Hooks: `settled` gives the
    outcome of a test whose fact is already known (default: none is), `through` the witnesses of a finding
    reference that is not already as wanted (default: none; a planner expands the rules concluding it). Each part
    of a conjunction contributes at most `limit` alternatives.
    """

    limit = 4

    def __init__(self, domains: Mapping[str, frozenset[Value]] | None = None) -> None:
        self.domains = domains or {}

    def of(self, node: Condition, want: bool, boxes: Constraints | None = None,
           stack: tuple[str, ...] = ()) -> Iterator[Constraints]:
        return self.visit(node, want, {} if boxes is None else boxes, stack)

    def settled(self, node: FactTest) -> Outcome | None:
        """The outcome of a test whose fact is known already (None: the fact is open)."""
        return None

    def concluded(self, node: FindingRef) -> bool:
        """Whether the finding is concluded already."""
        return False

    def through(self, node: FindingRef, want: bool, boxes: Constraints,
                stack: tuple[str, ...]) -> Iterator[Constraints]:
        """Witnesses that make the finding reference take `want`, when it does not already."""
        return iter(())

    def fact(self, node: FactTest, want: bool, boxes: Constraints, stack: tuple[str, ...]) -> Iterator[Constraints]:
        outcome = self.settled(node)
        if outcome is not None:
            if outcome == ("true" if want else "false"):
                yield boxes
            return
        name = node.fact
        domain = self.domains.get(name)
        span = boxes.get(name, Span())
        if want:
            if node.known is not None:
                span = span.meet(Span(known=node.known))
            for op, constant in node.ops():
                span = span.meet(span_of(op, constant))
            if not span.empty(domain):
                yield {**boxes, name: span}
            return
        if node.known is not None:
            flipped = span.meet(Span(known=not node.known))
            if not flipped.empty(domain):
                yield {**boxes, name: flipped}
        for op, constant in node.ops():
            narrowed = span.narrow(OPERATORS[op].negation, constant, domain)
            if narrowed is not None:
                yield {**boxes, name: narrowed}

    def finding(self, node: FindingRef, want: bool, boxes: Constraints,
                stack: tuple[str, ...]) -> Iterator[Constraints]:
        if want == self.concluded(node):
            yield boxes
            return
        yield from self.through(node, want, boxes, stack)

    def not_of(self, node: NotOf, want: bool, boxes: Constraints, stack: tuple[str, ...]) -> Iterator[Constraints]:
        yield from self.visit(node.not_, not want, boxes, stack)

    def group(self, node: AllOf | AnyOf, parts: list[Condition], conjunctive: bool, want: bool, boxes: Constraints,
              stack: tuple[str, ...]) -> Iterator[Constraints]:
        if conjunctive == want:
            yield from self._chain(list(parts), want, boxes, stack)
        else:
            for child in parts:
                yield from self.visit(child, want, boxes, stack)

    def _chain(self, parts: list[Condition], want: bool, boxes: Constraints,
               stack: tuple[str, ...]) -> Iterator[Constraints]:
        if not parts:
            yield boxes
            return
        for partial in itertools.islice(self.visit(parts[0], want, boxes, stack), self.limit):
            yield from self._chain(parts[1:], want, partial, stack)
