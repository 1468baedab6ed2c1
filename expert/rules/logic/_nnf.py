"""Negation normal form: a fold that sees leaves, findings, conjunctions and disjunctions; DNF over findings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..model import AllOf, AnyOf, Condition, ConditionRef, FactTest, FindingRef, NotOf
from ._tree import ConditionVisitor
from ._values import OPERATORS

T = TypeVar("T")


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


# a part of a condition, folded: (the expression of a fact-only part, None) or (None, the alternatives of a part
# that reads findings)
_Part = tuple[T | None, list[FindingBranch[T]]]


def _alternatives(part: _Part[T]) -> list[FindingBranch[T]]:
    expr, branches = part
    return branches if expr is None else [FindingBranch([expr])]


class _Branches(NnfFold[_Part[T]]):
    def __init__(self, leaf: Callable[[str, str, Any], T], conj: Callable[[list[T]], T],
                 disj: Callable[[list[T]], T]) -> None:
        self.on_leaf, self.on_conj, self.on_disj = leaf, conj, disj

    def leaf(self, fact: str, op: str, constant: Any) -> _Part[T]:
        return self.on_leaf(fact, op, constant), []

    def found(self, finding: str, positive: bool) -> _Part[T]:
        return None, [FindingBranch(pos=[finding]) if positive else FindingBranch(neg=[finding])]

    def _fact_only(self, parts: list[_Part[T]]) -> list[T] | None:
        exprs = [p[0] for p in parts]
        return None if any(e is None for e in exprs) else exprs  # type: ignore[return-value]

    def conj(self, parts: list[_Part[T]]) -> _Part[T]:
        exprs = self._fact_only(parts)
        if exprs is not None:
            return self.on_conj(exprs), []
        branches: list[FindingBranch[T]] = [FindingBranch()]
        for part in parts:
            # a finding named twice in one conjunction joins once (a rule engine such as durable-rules matches each
            # pattern against a distinct fact, so a repeated one would need two copies and never match)
            branches = [FindingBranch(a.facts + b.facts, list(dict.fromkeys(a.pos + b.pos)),
                                      list(dict.fromkeys(a.neg + b.neg)))
                        for a in branches for b in _alternatives(part)]
        return None, [b for b in branches if not set(b.pos) & set(b.neg)]  # "f and not f" never holds

    def disj(self, parts: list[_Part[T]]) -> _Part[T]:
        exprs = self._fact_only(parts)
        if exprs is not None:
            return self.on_disj(exprs), []
        return None, [b for part in parts for b in _alternatives(part)]


def finding_branches(node: Condition, leaf: Callable[[str, str, Any], T], conj: Callable[[list[T]], T],
                     disj: Callable[[list[T]], T]) -> list[FindingBranch[T]]:
    """A resolved condition as alternative branches (disjunctive normal form over its findings only): each branch
    holds fact-only sub-expressions, in negation normal form folded with `leaf`/`conj`/`disj`, and the findings it
    needs concluded or absent. A condition that reads no finding is one branch of one expression."""
    return _alternatives(_Branches(leaf, conj, disj).fold(node))
