"""The planner's possibility analysis (`rules.logic.possible`) compiled: a condition becomes a closure that returns
the outcomes it can still take as a three-bit mask (true 1, false 2, unknown 4), with the Kleene tables over masks
looked up, not rebuilt as sets (`compile_possible`: derivation gates, and what the generated form is held to); every
rule's condition, once per rule set, becomes one generated function over what a session state knows
(`state_outcomes`), for the rules a state re-reads on every turn. Same results as `possible`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from itertools import product
from typing import Protocol

from .._weakcache import PerObject
from ..rules.evaluate import MAX_GENERATED_DEPTH, ConditionSource, Evaluator, TooLarge, Value, compile_condition
from ..rules.logic import FLIP, ConditionVisitor, Outcome, and3, or3
from ..rules.model import AllOf, AnyOf, Condition, ConditionRef, FactTest, FindingRef, NotOf
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


class StateReading(Leaves, Protocol):
    """What a generated condition reads of a session state directly (`planner.State`): whether a fact is open, the
    facts, the findings concluded and those still open; its `fact_mask` and `finding_mask` read the same."""

    @property
    def facts(self) -> Mapping[str, Value]: ...

    @property
    def findings(self) -> Collection[str]: ...

    @property
    def open_findings(self) -> Collection[str]: ...

    def is_open(self, name: str) -> bool: ...


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



# ---- generated, for a session state ---------------------------------------------------------------------------
# What a state's possibility analysis runs on every turn: each rule's condition as one generated function over what
# the state knows, with the leaves read inline (no call per node): a fact test is "whatever its operators allow"
# while its fact is open, else the outcome it has on the facts; a finding is true or false while open, else whether
# it holds. Same results as `compile_possible` over the state's `fact_mask` and `finding_mask`.

StatePossible = Callable[[StateReading], int]


class _PossibleSource(ConditionVisitor[None]):
    """Writes `compile_possible(node)(state)` as statements that set a variable to the outcome mask."""

    def __init__(self) -> None:
        self.code = ConditionSource()  # names, constants, the emitter and the settled fact tests
        self.code.env.update({"_AND": _AND, "_OR": _OR, "_NOT": _NOT, "_BIT": BIT})

    def fact(self, node: FactTest, out: str, indent: int, depth: int) -> None:
        code = self.code
        code.emit(indent, f"if is_open({code.const(node.fact)}): {out} = {ALL if node.ops() else TWO}")
        code.emit(indent, "else:")
        outcome = code.name("o")
        code.fact(node, outcome, indent + 1, depth)
        code.emit(indent + 1, f"{out} = _BIT[{outcome}]")

    def finding(self, node: FindingRef, out: str, indent: int, depth: int) -> None:
        name = self.code.const(node.finding)
        self.code.emit(indent, f"{out} = {TWO} if {name} in opened else ({TRUE} if {name} in findings else {FALSE})")

    def not_of(self, node: NotOf, out: str, indent: int, depth: int) -> None:
        inner = self.code.name("c")
        self.visit(node.not_, inner, indent, depth)
        self.code.emit(indent, f"{out} = _NOT[{inner}]")

    def group(self, node: AllOf | AnyOf, parts: list[Condition], conjunctive: bool, out: str, indent: int,
              depth: int) -> None:
        if depth >= MAX_GENERATED_DEPTH:
            raise TooLarge
        code = self.code
        table, absorbing = ("_AND", FALSE) if conjunctive else ("_OR", TRUE)
        first, *rest = parts
        self.visit(first, out, indent, depth + 1)
        if not rest:
            return
        code.emit(indent, "while True:")
        for part in rest:
            code.emit(indent + 1, f"if {out} == {absorbing}: break")
            c = code.name("c")
            self.visit(part, c, indent + 1, depth + 1)
            code.emit(indent + 1, f"{out} = {table}[{out}][{c}]")
        code.emit(indent + 1, "break")

    def ref(self, node: ConditionRef, *args: object, **kwargs: object) -> None:
        raise TypeError(f"unresolved condition node {node!r}")  # refs are inlined at load time


def generate_possible(node: Condition) -> StatePossible:
    """`compile_possible(node)` over a state, reading the state's facts, open facts and findings itself (as its
    `fact_mask` and `finding_mask` do); a condition too deep or too large to generate keeps the closures."""
    source = _PossibleSource()
    try:
        source.visit(node, "r", 1, 0)
        text = "\n".join(["def possible(state):", "    is_open, facts = state.is_open, state.facts",
                          "    findings, opened = state.findings, state.open_findings", "    get = facts.get",
                          *source.code.lines, "    return r"])
        code = compile(text, "<possible>", "exec")
    except (TooLarge, RecursionError, SyntaxError, MemoryError):
        return compile_possible(node)
    env = source.code.env
    exec(code, env)  # names and constants are bound in env, not written
    function: StatePossible = env.pop("possible")  # type: ignore[assignment]
    return function


state_outcomes: PerObject[RuleSet, dict[str, StatePossible]] = PerObject(
    lambda ruleset: {lr.id: generate_possible(lr.condition) for lr in ruleset.rules.values()})
"""rule id -> its condition generated for a state (`generate_possible`), once per rule set."""
