"""Witness search for the consultation's what-if probes: fact values that would make a rule fire (or not).

A witness is a set of constraints on facts (`Box`: present or not, bounds, allowed and excluded values) that some way
through a rule's condition needs; `pick` turns each into one value a user could report. The search is best effort,
a few witnesses per branch: the engine run on the picked values decides what really happens.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Set
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ..diagnosis.decide import Decision
from ..kb.knowledge import FactSpec, KnowledgeBase
from ..observations.normalise import convert
from ..rules.evaluate import evaluate, negate_op
from ..rules.model import AllOf, Condition, FactTest, FindingRef, NotOf
from ..rules.ruleset import RuleSet

Value = int | float | str
MAX_WITNESSES = 4  # witnesses tried per branch of a condition
_MAX_FINDING_DEPTH = 4  # findings followed back through the rules that conclude them


class _Rules(Protocol):
    @property
    def kb(self) -> KnowledgeBase: ...

    @property
    def ruleset(self) -> RuleSet: ...

    @property
    def producers(self) -> Mapping[str, list[str]]: ...


class Situation(Protocol):
    """What a witness search reads from the consultation's state: the facts now, which could still change, the
    findings concluded now and those that could still be."""

    @property
    def ix(self) -> _Rules: ...

    @property
    def facts(self) -> Mapping[str, Value]: ...

    @property
    def now(self) -> Decision: ...

    @property
    def open_findings(self) -> Set[str]: ...

    def is_open(self, name: str) -> bool: ...


def domain(spec: FactSpec | None) -> tuple[float | None, float | None, bool]:
    """(low, high, integer) of a numeric fact; derived quantities are never negative."""
    if spec is None:
        return 0.0, None, False
    if spec.type == "fraction":
        return 0.0, 1.0, False
    low = spec.min if spec.min is not None else 0.0
    return low, spec.max, spec.type == "integer"


@dataclass
class Box:
    """Constraints a witness puts on one fact."""

    present: bool | None = None
    lo: float | None = None
    lo_incl: bool = True
    hi: float | None = None
    hi_incl: bool = True
    allowed: frozenset[Value] | None = None
    excluded: frozenset[Value] = frozenset()

    def feasible(self) -> bool:
        if self.present is False and (self.lo is not None or self.hi is not None or self.allowed is not None):
            return False
        if (self.lo is not None and self.hi is not None
                and (self.lo > self.hi or (self.lo == self.hi and not (self.lo_incl and self.hi_incl)))):
            return False
        return not (self.allowed is not None and not (self.allowed - self.excluded))

    def with_op(self, op: str, const: Any) -> Box | None:
        box = replace(self, present=True if self.present is None else self.present)
        if op in ("lt", "le") and isinstance(const, (int, float)):
            if box.hi is None or const < box.hi or (const == box.hi and op == "lt"):
                box = replace(box, hi=float(const), hi_incl=op == "le")
        elif op in ("gt", "ge") and isinstance(const, (int, float)):
            if box.lo is None or const > box.lo or (const == box.lo and op == "gt"):
                box = replace(box, lo=float(const), lo_incl=op == "ge")
        elif op == "eq":
            if isinstance(const, (int, float)) and not isinstance(const, bool):
                box = replace(box, lo=float(const), hi=float(const), lo_incl=True, hi_incl=True)
            else:
                box = replace(box, allowed=frozenset({const}) & box.allowed if box.allowed is not None
                              else frozenset({const}))
        elif op == "in":
            values = frozenset(const)
            box = replace(box, allowed=values & box.allowed if box.allowed is not None else values)
        elif op == "ne":
            box = replace(box, excluded=box.excluded | {const})
        elif op == "not_in":
            box = replace(box, excluded=box.excluded | frozenset(const))
        return box if box.feasible() and box.present is not False else None


def example(spec: FactSpec | None, kb: KnowledgeBase) -> float | None:
    """The vocabulary's own example value of a numeric fact, canonical (None when it has none)."""
    if spec is None or spec.example is None:
        return None
    try:
        value = convert(spec, spec.example, kb)
    except ValueError:
        return None
    return float(value) if isinstance(value, (int, float)) else None


def pick(spec: FactSpec | None, box: Box, kb: KnowledgeBase) -> tuple[bool, Value | None]:
    """A value satisfying the box: (ok, value); value None means "leave the fact unknown"."""
    if box.present is False:
        return True, None
    # sets iterate in hash order, which changes from one interpreter to the next: pick in the vocabulary's order
    if spec is not None and spec.type in ("enum", "hardware"):
        choices = list(spec.choices or [])
        allowed = (choices if box.allowed is None
                   else [c for c in choices if c in box.allowed] + sorted(box.allowed - set(choices), key=repr))
        pool = [c for c in allowed if c not in box.excluded]
        return (True, pool[0]) if pool else (False, None)
    if box.allowed is not None:
        nums = sorted(v for v in box.allowed if isinstance(v, (int, float)) and v not in box.excluded)
        return (True, nums[0]) if nums else (False, None)
    low, high, integer = domain(spec)
    exclusive = spec is not None and spec.exclusive_min
    lo, lo_incl = (box.lo, box.lo_incl) if box.lo is not None else (low, not exclusive)
    if lo is not None and low is not None and lo < low:
        lo, lo_incl = low, not exclusive
    hi, hi_incl = (box.hi, box.hi_incl) if box.hi is not None else (high, True)
    if hi is not None and high is not None and hi > high:
        hi, hi_incl = high, True
    value: float
    if integer:
        first = 1 if lo is None else (math.floor(lo) + 1 if lo == math.floor(lo) and not lo_incl else math.ceil(lo))
        value = float(first)
    elif box.lo is not None and box.hi is not None and lo is not None and hi is not None:
        value = lo if lo == hi else (lo + hi) / 2
    elif box.lo is not None and lo is not None:  # just past the threshold, as a user would report it
        value = lo * 2 if lo > 0 else lo + 1
        if hi is not None and value >= hi:
            value = (lo + hi) / 2
    elif box.hi is not None and hi is not None:
        value = hi / 2 if hi > 0 else hi - 1
        if lo is not None and value <= lo:
            value = (lo + hi) / 2
    else:  # only "known" is asked for: the vocabulary's own example is a realistic value
        sample = example(spec, kb)
        middle = (lo + hi) / 2 if lo is not None and hi is not None else 1.0
        value = sample if sample is not None else middle
    above_low = lo is None or value > lo or (value == lo and lo_incl)
    below_high = hi is None or value < hi or (value == hi and hi_incl)
    ok = above_low and below_high and value not in box.excluded
    return ok, (int(value) if integer else value)


class Witness:
    """Searches fact values that make a rule fire (best effort; the engine run decides what really happens)."""

    def __init__(self, state: Situation) -> None:
        self.state = state

    def of(self, node: Condition, want: bool, boxes: dict[str, Box],
           stack: tuple[str, ...]) -> Iterator[dict[str, Box]]:
        st = self.state
        if isinstance(node, FactTest):
            name = node.fact
            if not st.is_open(name):
                if evaluate(node, st.facts, st.now.findings) == ("true" if want else "false"):
                    yield boxes
                return
            box = boxes.get(name, Box())
            if want:
                if node.known is not None:
                    if (not node.known and node.ops()) or (box.present is not None and box.present != node.known):
                        return
                    box = replace(box, present=node.known)
                for op, const in node.ops():
                    narrowed = box.with_op(op, const)
                    if narrowed is None:
                        return
                    box = narrowed
                if box.feasible():
                    yield {**boxes, name: box}
                return
            if node.known is not None and box.present in (None, not node.known):
                flipped = replace(box, present=not node.known)
                if flipped.feasible():
                    yield {**boxes, name: flipped}
            for op, const in node.ops():
                narrowed = box.with_op(negate_op(op), const)
                if narrowed is not None:
                    yield {**boxes, name: narrowed}
            return
        if isinstance(node, FindingRef):
            concluded = node.finding in st.now.findings
            if want == concluded:
                yield boxes
                return
            if not want or len(stack) >= _MAX_FINDING_DEPTH or node.finding not in st.open_findings:
                return
            for producer in st.ix.producers.get(node.finding, []):
                if producer in stack:
                    continue
                yield from self.of(st.ix.ruleset.rules[producer].condition, True, boxes, (*stack, producer))
            return
        if isinstance(node, NotOf):
            yield from self.of(node.not_, not want, boxes, stack)
            return
        children = list(node.all if isinstance(node, AllOf) else node.any)  # type: ignore[union-attr]
        conjunctive = isinstance(node, AllOf) == want
        if conjunctive:
            yield from self._chain(children, want, boxes, stack)
        else:
            for child in children:
                yield from self.of(child, want, boxes, stack)

    def _chain(self, children: list[Condition], want: bool, boxes: dict[str, Box],
               stack: tuple[str, ...]) -> Iterator[dict[str, Box]]:
        if not children:
            yield boxes
            return
        for partial in itertools.islice(self.of(children[0], want, boxes, stack), MAX_WITNESSES):
            yield from self._chain(children[1:], want, partial, stack)

    def overrides(self, boxes: dict[str, Box]) -> dict[str, Value | None] | None:
        out: dict[str, Value | None] = {}
        for name, box in boxes.items():
            ok, value = pick(self.state.ix.kb.facts.get(name), box, self.state.ix.kb)
            if not ok:
                return None
            out[name] = value
        return out
