"""The regression gate: `--fail-if` conditions in a small expression language, parsed by hand (never eval).

Grammar (keywords are case-sensitive; spaces separate tokens)::

    condition := or
    or        := and ("or" and)*
    and       := unary ("and" unary)*
    unary     := "not" unary | "(" or ")" | test
    test      := ("verdict" | "bottleneck") "changed"
               | ("verdict" | "bottleneck") ("==" | "!=") REGIME          (the after verdict; `none` for no verdict)
               | ("new" | "cleared") "finding" [FINDING_ID]               (any finding, or that one)
               | FACT "changed"                                           (moved beyond its noise; settings: differ)
               | FACT OP VALUE
               | "speedup" OP NUMBER                                      (before step time / after step time)
    OP        := ">" | ">=" | "<" | "<=" | "==" | "!="  ("=" means "==")

VALUE decides what is compared:

- a signed percentage (`+5%`, `-10%`): the relative change, after / before - 1;
- a signed number, with an optional unit of the fact's dimension (`+20ms`, `-0.05`, `+3 points` for fractions):
  the absolute change, after - before;
- an unsigned number or percentage (`0.2 s`, `50%`) or a name for enum/hardware facts (`bf16`): the after value.

`step_time_s > +5%` fails the gate when the step got more than 5 % slower; `mfu < -10% or verdict changed` when MFU
fell by more than a tenth or the bottleneck moved. A condition that needs a fact one side does not have cannot be
evaluated: the gate then fails too (fails closed), with the reason, so a trace that lost its ProfilerStep spans
cannot pass a step-time gate unnoticed. Conditions are checked against the fact vocabulary, the regimes and the
rules' findings when they are parsed, before any trace is read.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from ..errors import ObservationError, Problem
from ..kb.knowledge import FactSpec, KnowledgeBase
from ..observations.normalise import convert, format_value
from .model import Comparison, FactChange, Gate

Op = Literal[">", ">=", "<", "<=", "==", "!="]
Mode = Literal["relative", "delta", "value"]
Truth = bool | None

KEYWORDS = frozenset({"and", "or", "not", "changed", "new", "cleared", "finding", "verdict", "bottleneck",
                      "speedup"})
_POINTS = frozenset({"points", "point", "pts", "pt"})
_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?%?)
  | (?P<op>>=|<=|==|!=|>|<|=)
  | (?P<lparen>\()
  | (?P<rparen>\))
  | (?P<name>[A-Za-z_][A-Za-z0-9_./-]*)
""", re.VERBOSE)
_HINT = "e.g. 'step_time_s > +5%', 'verdict changed', 'mfu < -10% or new finding' (see dam compare --help)"


@dataclass(frozen=True)
class Token:
    kind: Literal["number", "op", "lparen", "rparen", "name", "end"]
    text: str
    col: int  # 1-based


def tokenize(text: str) -> list[Token]:
    """The tokens of a condition; an unexpected character is an ObservationError naming its column."""
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise _error(text, pos + 1, f"unexpected character {text[pos]!r}")
        kind = match.lastgroup
        if kind != "ws":
            tokens.append(Token(kind, match.group(), pos + 1))  # type: ignore[arg-type]
        pos = match.end()
    tokens.append(Token("end", "", len(text) + 1))
    return tokens


def _error(text: str, col: int, message: str) -> ObservationError:
    return ObservationError([Problem(f"--fail-if {text!r}", f"column {col}: {message}", _HINT)],
                            title="invalid --fail-if condition")


# ---- the syntax tree --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    text: str  # the source of this node, for reasons


@dataclass(frozen=True)
class AnyOf(Node):
    items: tuple[Node, ...]


@dataclass(frozen=True)
class AllOf(Node):
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Negation(Node):
    item: Node


@dataclass(frozen=True)
class VerdictChanged(Node):
    pass


@dataclass(frozen=True)
class VerdictIs(Node):
    op: Literal["==", "!="]
    regime: str | None


@dataclass(frozen=True)
class FindingTest(Node):
    kind: Literal["new", "cleared"]
    finding: str | None


@dataclass(frozen=True)
class FactChanged(Node):
    fact: str


@dataclass(frozen=True)
class Threshold(Node):
    quantity: str  # a fact name or "speedup"
    op: Op
    mode: Mode
    value: float | str


@dataclass(frozen=True)
class Condition:
    """One parsed --fail-if condition."""

    text: str
    root: Node


class _Parser:
    def __init__(self, text: str, kb: KnowledgeBase, findings: Collection[str] | None) -> None:
        self.text, self.kb, self.findings = text, kb, findings
        self.tokens = tokenize(text)
        self.i = 0

    # -- helpers
    def peek(self) -> Token:
        return self.tokens[self.i]

    def take(self) -> Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def fail(self, token: Token, expected: str) -> ObservationError:
        got = "the end" if token.kind == "end" else repr(token.text)
        return _error(self.text, token.col, f"expected {expected}, got {got}")

    def is_word(self, word: str) -> bool:
        token = self.peek()
        return token.kind == "name" and token.text == word

    def span(self, start: Token) -> str:
        end = self.tokens[self.i - 1]
        return self.text[start.col - 1: end.col - 1 + len(end.text)].strip()

    # -- grammar
    def parse(self) -> Condition:
        if self.peek().kind == "end":
            raise _error(self.text, 1, "empty condition")
        root = self.parse_or()
        if self.peek().kind != "end":
            raise self.fail(self.peek(), "'and', 'or' or the end of the condition")
        return Condition(self.text.strip(), root)

    def parse_or(self) -> Node:
        start = self.peek()
        items = [self.parse_and()]
        while self.is_word("or"):
            self.take()
            items.append(self.parse_and())
        return items[0] if len(items) == 1 else AnyOf(self.span(start), tuple(items))

    def parse_and(self) -> Node:
        start = self.peek()
        items = [self.parse_unary()]
        while self.is_word("and"):
            self.take()
            items.append(self.parse_unary())
        return items[0] if len(items) == 1 else AllOf(self.span(start), tuple(items))

    def parse_unary(self) -> Node:
        start = self.peek()
        if self.is_word("not"):
            self.take()
            item = self.parse_unary()
            return Negation(self.span(start), item)
        if start.kind == "lparen":
            self.take()
            inner = self.parse_or()
            if self.peek().kind != "rparen":
                raise self.fail(self.peek(), "')'")
            self.take()
            return inner
        return self.parse_test()

    def parse_test(self) -> Node:
        start = self.take()
        if start.kind != "name" or start.text in ("and", "or", "changed", "finding"):
            raise self.fail(start, "a fact name, 'verdict', 'new finding', 'cleared finding', 'speedup', 'not' or '('")
        word = start.text
        if word in ("verdict", "bottleneck"):
            return self.parse_verdict(start)
        if word in ("new", "cleared"):
            token = self.take()
            if token.kind != "name" or token.text not in ("finding", "findings"):
                raise self.fail(token, "'finding'")
            finding = None
            if self.peek().kind == "name" and self.peek().text not in KEYWORDS:
                finding = self.take().text
                self.check_finding(finding, self.tokens[self.i - 1])
            return FindingTest(self.span(start), "new" if word == "new" else "cleared", finding)
        if word == "speedup":
            op = self.parse_op()
            token = self.take()
            if token.kind != "number" or token.text[0] in "+-" or token.text.endswith("%"):
                raise self.fail(token, "a plain number (speedup is a ratio: e.g. speedup < 0.95)")
            return Threshold(self.span(start), "speedup", op, "value", float(token.text))
        spec = self.fact(start)
        if self.is_word("changed"):
            self.take()
            return FactChanged(self.span(start), spec.name)
        op = self.parse_op()
        mode, value = self.parse_value(spec, op)
        return Threshold(self.span(start), spec.name, op, mode, value)

    def parse_verdict(self, start: Token) -> Node:
        if self.is_word("changed"):
            self.take()
            return VerdictChanged(self.span(start))
        op = self.parse_op()
        if op not in ("==", "!="):
            raise _error(self.text, self.tokens[self.i - 1].col, "a verdict is compared with == or !=")
        token = self.take()
        regimes = sorted(self.kb.regimes.regimes)
        if token.kind != "name" or (token.text != "none" and token.text not in regimes):
            raise self.fail(token, f"a regime ({', '.join(regimes)}) or none")
        return VerdictIs(self.span(start), op, None if token.text == "none" else token.text)

    def parse_op(self) -> Op:
        token = self.take()
        if token.kind != "op":
            raise self.fail(token, "a comparison (>, >=, <, <=, ==, !=) or 'changed'")
        return "==" if token.text == "=" else token.text  # type: ignore[return-value]

    def fact(self, token: Token) -> FactSpec:
        spec = self.kb.facts.get(token.text)
        if spec is None:
            close = difflib.get_close_matches(token.text, list(self.kb.facts), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else " (knowledge_base/facts.yaml)"
            raise _error(self.text, token.col, f"unknown fact {token.text!r}{hint}")
        return spec

    def check_finding(self, finding: str, token: Token) -> None:
        if self.findings is not None and finding not in self.findings:
            close = difflib.get_close_matches(finding, list(self.findings), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise _error(self.text, token.col, f"no rule concludes finding {finding!r}{hint}")

    def parse_value(self, spec: FactSpec, op: Op) -> tuple[Mode, float | str]:
        token = self.take()
        if spec.type in ("enum", "hardware"):
            if token.kind != "name" or op not in ("==", "!="):
                raise self.fail(token, f"== or != and a value ({spec.range_text()})" if op not in ("==", "!=")
                                else f"a value: {spec.range_text()}")
            try:
                return "value", str(convert(spec, token.text, self.kb))
            except ValueError as exc:
                raise _error(self.text, token.col, str(exc)) from exc
        if token.kind != "number":
            raise self.fail(token, "a number, a percentage or a signed change such as +5%")
        text = token.text
        signed = text[0] in "+-"
        if signed and text.endswith("%"):
            return "relative", float(text[:-1]) / 100
        unit = ""
        if text.endswith("%"):
            text, unit = text[:-1], "%"
        elif self.peek().kind == "name" and self.peek().text not in KEYWORDS:
            unit = self.take().text
        number = float(text)
        if unit in _POINTS:
            if spec.type != "fraction" or not signed:
                raise _error(self.text, token.col, "points are for signed changes of fractions (e.g. -5 points)")
            return "delta", number / 100
        try:
            factor = float(convert(spec, f"1{unit}", self.kb)) if unit else 1.0
        except ValueError as exc:
            raise _error(self.text, token.col, f"{spec.name}: {exc}") from exc
        return ("delta" if signed else "value"), number * factor


def parse(text: str, kb: KnowledgeBase, findings: Collection[str] | None = None) -> Condition:
    """Parse one --fail-if condition; `findings` (the finding ids the rules can conclude) checks finding names."""
    return _Parser(text, kb, findings).parse()


def parse_all(texts: Sequence[str], kb: KnowledgeBase, findings: Collection[str] | None = None) -> list[Condition]:
    """Parse every condition, reporting all the bad ones at once."""
    conditions: list[Condition] = []
    problems: list[Problem] = []
    for text in texts:
        try:
            conditions.append(parse(text, kb, findings))
        except ObservationError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ObservationError(problems, title="invalid --fail-if condition")
    return conditions


# ---- evaluation (Kleene three-valued logic: None is "cannot be evaluated") -----------------------------------------


def _compare(left: float | str, op: Op, right: float | str) -> bool:
    if op == "==":
        return left == right
    if op == "!=":
        return left != right
    if isinstance(left, str) or isinstance(right, str):
        return False
    return {">": left > right, ">=": left >= right, "<": left < right, "<=": left <= right}[op]


def _show(kb: KnowledgeBase, name: str, value: object) -> str:
    return "?" if value is None else format_value(kb.facts.get(name), value)


def _describe(kb: KnowledgeBase, fc: FactChange) -> str:
    moved = f"{_show(kb, fc.name, fc.before)} → {_show(kb, fc.name, fc.after)}"
    return f"{fc.name} {moved} ({fc.change:+.1%})" if fc.change is not None else f"{fc.name} {moved}"


class _Evaluator:
    def __init__(self, comparison: Comparison, kb: KnowledgeBase) -> None:
        self.c, self.kb = comparison, kb

    def eval(self, node: Node) -> tuple[Truth, list[str]]:
        """(truth, the explanations of the tests that decided it)."""
        if isinstance(node, AnyOf):
            results = [self.eval(n) for n in node.items]
            held = [why for truth, whys in results if truth for why in whys]
            if held:
                return True, held
            unknown = [why for truth, whys in results if truth is None for why in whys]
            return (None, unknown) if unknown else (False, [])
        if isinstance(node, AllOf):
            results = [self.eval(n) for n in node.items]
            if any(truth is False for truth, _ in results):
                return False, []
            whys = [why for _, ws in results for why in ws]
            return (None, [w for t, ws in results if t is None for w in ws]) if any(
                truth is None for truth, _ in results) else (True, whys)
        if isinstance(node, Negation):
            truth, whys = self.eval(node.item)
            if truth is None:
                return None, whys
            return (not truth), [f"not ({why})" for why in whys] or [f"not ({node.item.text})"]
        return self.test(node)

    def test(self, node: Node) -> tuple[Truth, list[str]]:
        c = self.c
        if isinstance(node, VerdictChanged):
            before, after = c.before.bottleneck or "none", c.after.bottleneck or "none"
            return before != after, [f"verdict {before} → {after}"]
        if isinstance(node, VerdictIs):
            verdict = c.after.bottleneck
            held = (verdict == node.regime) if node.op == "==" else (verdict != node.regime)
            return held, [f"the verdict after is {verdict or 'none'}"]
        if isinstance(node, FindingTest):
            found = c.findings_new if node.kind == "new" else c.findings_cleared
            hits = [f.id for f in found if node.finding is None or f.id == node.finding]
            word = "appeared" if node.kind == "new" else "cleared"
            return bool(hits), [f"{', '.join(hits)} {word}"] if hits else []
        if isinstance(node, FactChanged):
            fc = c.fact(node.fact)
            missing = self.missing(node.fact, fc)
            if missing or fc is None:
                return None, [missing]
            return fc.significant, [f"{_describe(self.kb, fc)}; {fc.basis}"]
        assert isinstance(node, Threshold)
        if node.quantity == "speedup":
            if c.speedup is None:
                return None, ["speedup is not known (step_time_s is missing on a side)"]
            return _compare(c.speedup, node.op, node.value), [f"speedup {c.speedup:.3g}×"]
        fc = c.fact(node.quantity)
        missing = self.missing(node.quantity, fc, need_before=node.mode != "value")
        if missing or fc is None:
            return None, [missing]
        if node.mode == "value":
            assert fc.after is not None
            shown = _show(self.kb, fc.name, fc.after)
            return _compare(fc.after, node.op, node.value), [f"{node.quantity} after is {shown}"]
        amount = fc.change if node.mode == "relative" else fc.delta
        if amount is None:
            why = "the before value is 0, so it has no relative change" if node.mode == "relative" else "not a number"
            return None, [f"{node.quantity}: {why}"]
        return _compare(amount, node.op, node.value), [_describe(self.kb, fc)]

    def missing(self, name: str, fc: FactChange | None, *, need_before: bool = True) -> str:
        if fc is None:
            return f"{name} is not known before or after"
        if need_before and fc.before is None:
            return f"{name} is not known before"
        if fc.after is None:
            return f"{name} is not known after"
        return ""


def evaluate(conditions: Sequence[Condition], comparison: Comparison, kb: KnowledgeBase) -> Gate:
    """The gate: failed when any condition holds, or cannot be evaluated (with the reason)."""
    evaluator = _Evaluator(comparison, kb)
    failed: list[str] = []
    for condition in conditions:
        truth, whys = evaluator.eval(condition.root)
        if truth is None:
            failed.append(f"{condition.text}: cannot be evaluated ({'; '.join(whys)})")
        elif truth:
            failed.append(f"{condition.text}: {'; '.join(whys)}")
    return Gate(passed=not failed, failed=failed, conditions=[c.text for c in conditions])
