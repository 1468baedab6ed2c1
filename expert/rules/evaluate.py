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
__all__ = ["WARM_RUNS", "Evaluator", "LeafTrace", "Outcome", "Value", "compile_condition", "evaluate",
           "generate_condition", "negate_op"]


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


# ---- generated evaluation -------------------------------------------------------------------------------------
# The untraced path (the engine's) as one plain Python function per condition: the tree becomes nested blocks of
# straight-line code, with no call per node. The trace path stays `compile_condition`'s closures.

WARM_RUNS = 64  # uses after which an engine generates its conditions (a one-off command never pays to build them)
MAX_GENERATED_DEPTH = 12  # groups nested deeper than this keep the closures (Python limits nested blocks to 20)
MAX_GENERATED_LINES = 4000


class TooLarge(Exception):
    """The condition is too deep or too large to generate code for."""


class ConditionSource(ConditionVisitor[None]):
    """Writes a condition as statements that set a variable to its outcome (Kleene logic, stopping at the first
    decisive part, as the untraced closures do)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.env: dict[str, object] = {"_FLIP": FLIP}
        self.names = 0

    def name(self, prefix: str) -> str:
        self.names += 1
        return f"{prefix}{self.names}"

    def const(self, value: object) -> str:
        name = self.name("_k")
        self.env[name] = value
        return name

    def emit(self, indent: int, line: str) -> None:
        if len(self.lines) > MAX_GENERATED_LINES:
            raise TooLarge
        self.lines.append("    " * indent + line)

    def fact(self, node: FactTest, out: str, indent: int, depth: int) -> None:
        v = self.name("v")
        self.emit(indent, f"{v} = get({self.const(node.fact)})")
        tests = [self.comparison(v, op, constant) for op, constant in node.ops()]
        passes = " and ".join(tests) if tests else "True"
        if node.known is not None:
            if not tests:
                self.emit(indent, f"{out} = 'true' if ({v} is not None) == {node.known!r} else 'false'")
                return
            self.emit(indent, f"if ({v} is not None) != {node.known!r}: {out} = 'false'")
            self.emit(indent, f"elif {v} is None: {out} = 'unknown'")
        else:
            self.emit(indent, f"if {v} is None: {out} = {'unknown' if tests else 'true'!r}")
        self.emit(indent, f"elif {passes}: {out} = 'true'")
        self.emit(indent, f"else: {out} = 'false'")

    def comparison(self, v: str, op: str, constant: object) -> str:
        """`comparator(op, constant)` as an expression."""
        if op in ("in", "not_in"):
            return f"({v} {'in' if op == 'in' else 'not in'} {self.const(list(constant))})"  # type: ignore[call-overload]
        if op in ("eq", "ne"):
            return f"({v} {'==' if op == 'eq' else '!='} {self.const(constant)})"
        if isinstance(constant, str):
            return "False"
        symbol = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}[op]
        return f"(not isinstance({v}, str) and {v} {symbol} {self.const(float(constant))})"  # type: ignore[arg-type]

    def finding(self, node: FindingRef, out: str, indent: int, depth: int) -> None:
        self.emit(indent, f"{out} = 'true' if {self.const(node.finding)} in findings else 'false'")

    def not_of(self, node: NotOf, out: str, indent: int, depth: int) -> None:
        inner = self.name("c")
        self.visit(node.not_, inner, indent, depth)
        self.emit(indent, f"{out} = _FLIP[{inner}]")

    def group(self, node: AllOf | AnyOf, parts: list[Condition], conjunctive: bool, out: str, indent: int,
              depth: int) -> None:
        if depth >= MAX_GENERATED_DEPTH:
            raise TooLarge
        decisive, neutral = ("false", "true") if conjunctive else ("true", "false")
        self.emit(indent, f"{out} = {neutral!r}")
        self.emit(indent, "while True:")
        for child in parts:
            c = self.name("c")
            self.visit(child, c, indent + 1, depth + 1)
            self.emit(indent + 1, f"if {c} == {decisive!r}:")
            self.emit(indent + 2, f"{out} = {decisive!r}")
            self.emit(indent + 2, "break")
            self.emit(indent + 1, f"if {c} == 'unknown': {out} = 'unknown'")
        self.emit(indent + 1, "break")

    def ref(self, node: ConditionRef, *args: object, **kwargs: object) -> None:
        raise TypeError(f"unresolved condition node {node!r}")  # refs are inlined at load time


def generate_condition(node: Condition) -> Evaluator:
    """`compile_condition(node)`, with the untraced path generated as one plain function (the traced path, and a
    condition too deep or too large to generate, use the closures)."""
    traced = compile_condition(node)
    source = ConditionSource()
    try:
        source.visit(node, "r", 1, 0)
    except (TooLarge, RecursionError):
        return traced
    source.env["_traced"] = traced
    text = "\n".join([
        "def condition(facts, findings, trace, negated):",
        "    if trace is not None:",
        "        return _traced(facts, findings, trace, negated)",
        "    get = facts.get",
        *source.lines,
        "    return r",
    ])
    try:
        exec(compile(text, "<condition>", "exec"), source.env)  # names and constants are bound in env, not written
    except (SyntaxError, RecursionError, MemoryError):
        return traced
    function: Evaluator = source.env.pop("condition")  # type: ignore[assignment]  # (so no cycle via its globals)
    return function


# ---- generated truth ------------------------------------------------------------------------------------------
# Where a caller only asks whether a condition holds (its outcome is "true"), not which of the three outcomes it has:
# one boolean expression, short-circuiting as Python's `and`/`or` do. Kleene logic splits into two questions per
# node, "is it true" and "is it false" (a negation asks its part the other one), so the expression reads each node
# once.

Truth = Callable[[Mapping[str, Value], Collection[str]], bool]


class _TruthSource(ConditionVisitor[str]):
    """Writes `outcome == "true"` (or, with `want` False, `outcome == "false"`) of a condition as one expression."""

    def __init__(self) -> None:
        self.comparisons = ConditionSource()  # its names, constants and comparison expressions
        self.size = 0

    def fact(self, node: FactTest, want: bool, depth: int) -> str:
        source = self.comparisons
        v = source.name("v")
        got = f"({v} := get({source.const(node.fact)}))"
        passes = " and ".join(source.comparison(v, op, constant) for op, constant in node.ops())
        self._grow()
        if node.known is not None and not passes:  # only whether it is known: two-valued
            return f"(({got} is not None) {'==' if want else '!='} {node.known!r})"
        if node.known is False:  # known: false, with comparisons: never true; false once it is known
            return f"({got} is not None)" if not want else "False"
        if not passes:  # no comparison: always true
            return "True" if want else "False"
        # with comparisons: true when known and passing; false when known and failing, and with known: true also
        # when unknown (without it, unknown is "unknown")
        if node.known is True:
            return f"({got} is not None and {passes})" if want else f"({got} is None or not ({passes}))"
        return f"({got} is not None and {passes})" if want else f"({got} is not None and not ({passes}))"

    def finding(self, node: FindingRef, want: bool, depth: int) -> str:
        self._grow()
        return f"({self.comparisons.const(node.finding)} {'in' if want else 'not in'} findings)"

    def not_of(self, node: NotOf, want: bool, depth: int) -> str:
        return self.visit(node.not_, not want, depth)

    def group(self, node: AllOf | AnyOf, parts: list[Condition], conjunctive: bool, want: bool, depth: int) -> str:
        if depth >= MAX_GENERATED_DEPTH:
            raise TooLarge
        # all: true when every part is, false when some part is; any: the other way round
        joiner = " and " if conjunctive == want else " or "
        inner = [self.visit(part, want, depth + 1) for part in parts]
        if not inner:
            return "True" if conjunctive == want else "False"  # an empty all holds, an empty any does not
        return "(" + joiner.join(inner) + ")"

    def ref(self, node: ConditionRef, *args: object, **kwargs: object) -> str:
        raise TypeError(f"unresolved condition node {node!r}")  # refs are inlined at load time

    def _grow(self) -> None:
        self.size += 1
        if self.size > MAX_GENERATED_LINES:
            raise TooLarge


def truth_of(evaluator: Evaluator) -> Truth:
    """Whether a condition holds, asked through its compiled evaluator."""

    def holds(facts: Mapping[str, Value], findings: Collection[str]) -> bool:
        return evaluator(facts, findings, None, False) == "true"

    return holds


def generate_truth(node: Condition) -> Truth:
    """Whether the condition holds (`evaluate` gives "true"), as one generated boolean expression; a condition too
    deep or too large to generate is asked through `compile_condition`."""
    source = _TruthSource()
    try:
        expression = source.visit(node, True, 0)
        code = compile(f"def holds(facts, findings):\n    get = facts.get\n    return {expression}\n",
                       "<truth>", "exec")
    except (TooLarge, RecursionError, SyntaxError, MemoryError):
        return truth_of(compile_condition(node))
    env = source.comparisons.env
    exec(code, env)  # names and constants are bound in env, not written
    function: Truth = env.pop("holds")  # type: ignore[assignment]
    return function
