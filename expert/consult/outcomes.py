"""The planner's possibility analysis (`rules.logic.possible`) compiled once per rule set: every rule's condition
becomes a closure that returns the outcomes it can still take as a three-bit mask (true 1, false 2, unknown 4), with
the Kleene tables over masks looked up, not rebuilt as sets. Same results as `possible`, for the rules a state
re-reads on every turn.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import product
from typing import Protocol

from .._weakcache import PerObject
from ..rules.evaluate import Evaluator, compile_condition
from ..rules.logic import FLIP, ConditionVisitor, Outcome, and3, or3
from ..rules.model import AllOf, AnyOf, Condition, FactTest, FindingRef, NotOf
from ..rules.ruleset import RuleSet

TRUE, FALSE, UNKNOWN = 1, 2, 4
ALL = TRUE | FALSE | UNKNOWN
TWO = TRUE | FALSE
BIT: dict[Outcome, int] = {"true": TRUE, "false": FALSE, "unknown": UNKNOWN}


class Leaves(Protocol):
    """What a compiled condition asks of the state: the outcomes one fact test or finding can still take."""

    def fact_mask(self, node: FactTest, settled: Evaluator) -> int: ...

    def finding_mask(self, node: FindingRef) -> int: ...


Possible = Callable[[Leaves], int]


def _outcomes(mask: int) -> list[Outcome]:
    return [o for o, bit in BIT.items() if mask & bit]


def _table(combine: Callable[[str, str], Outcome]) -> list[list[int]]:
    """mask x mask -> the mask of every combination, as `possible` builds it from sets."""
    return [[sum({BIT[combine(a, b)] for a, b in product(_outcomes(m1), _outcomes(m2))}) for m2 in range(8)]
            for m1 in range(8)]


_AND, _OR = _table(and3), _table(or3)
_NOT = [sum({BIT[FLIP[o]] for o in _outcomes(m)}) for m in range(8)]


class _Compiler(ConditionVisitor[Possible]):
    def fact(self, node: FactTest) -> Possible:
        settled = compile_condition(node)
        return lambda leaves: leaves.fact_mask(node, settled)

    def finding(self, node: FindingRef) -> Possible:
        return lambda leaves: leaves.finding_mask(node)

    def not_of(self, node: NotOf) -> Possible:
        inner = self.visit(node.not_)
        return lambda leaves: _NOT[inner(leaves)]

    def group(self, node: AllOf | AnyOf, parts: list[Condition], conjunctive: bool) -> Possible:
        first, *rest = [self.visit(part) for part in parts]
        table = _AND if conjunctive else _OR
        settled = FALSE if conjunctive else TRUE  # absorbs whatever follows

        def run(leaves: Leaves) -> int:
            acc = first(leaves)
            for part in rest:
                if acc == settled:
                    break
                acc = table[acc][part(leaves)]
            return acc

        return run


def compile_possible(node: Condition) -> Possible:
    """`possible(node, fact, finding)` as a closure over a `Leaves` (a resolved condition)."""
    return _Compiler().visit(node)


rule_outcomes: PerObject[RuleSet, dict[str, Possible]] = PerObject(
    lambda ruleset: {lr.id: compile_possible(lr.condition) for lr in ruleset.rules.values()})
"""rule id -> its compiled condition, once per rule set: `rule_outcomes(ruleset)`."""
