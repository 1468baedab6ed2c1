"""Witness search for the consultation's what-if probes: fact values that would make a rule fire (or not).

A witness is a set of constraints on facts (`rules.logic.Span` per fact: known or not, bounds, allowed and excluded
values) that some way through a rule's condition needs; the search is `rules.logic.Witness`, adapted here to the
consultation's state, and `pick` turns each span into one value a user could report. The search is best effort, a
few witnesses per branch: the engine run on the picked values decides what really happens.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Set
from typing import Protocol

from ..diagnosis.decide import Decision
from ..kb.knowledge import FactSpec, KnowledgeBase
from ..observations.normalise import convert
from ..rules import logic
from ..rules.evaluate import evaluate
from ..rules.logic import Constraints, Outcome, Span
from ..rules.model import FactTest, FindingRef
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


def example(spec: FactSpec | None, kb: KnowledgeBase) -> float | None:
    """The vocabulary's own example value of a numeric fact, canonical (None when it has none)."""
    if spec is None or spec.example is None:
        return None
    try:
        value = convert(spec, spec.example, kb)
    except ValueError:
        return None
    return float(value) if isinstance(value, (int, float)) else None


def pick(spec: FactSpec | None, span: Span, kb: KnowledgeBase) -> tuple[bool, Value | None]:
    """A value satisfying the span: (ok, value); value None means "leave the fact unknown"."""
    if span.known is False:
        return True, None
    # sets iterate in hash order, which changes from one interpreter to the next: pick in the vocabulary's order
    if spec is not None and spec.type in ("enum", "hardware"):
        choices = list(spec.choices or [])
        allowed = (choices if span.only is None
                   else [c for c in choices if c in span.only] + sorted(span.only - set(choices), key=repr))
        pool = [c for c in allowed if c not in span.never]
        return (True, pool[0]) if pool else (False, None)
    low, high, integer = domain(spec)
    if span.only is not None:
        nums = sorted(v for v in span.allowed() or () if isinstance(v, (int, float)))
        return (True, int(nums[0]) if integer else nums[0]) if nums else (False, None)
    exclusive = spec is not None and spec.exclusive_min
    bounded_lo, bounded_hi = span.lo > -math.inf, span.hi < math.inf
    lo, lo_incl = (span.lo, not span.lo_open) if bounded_lo else (low, not exclusive)
    if lo is not None and low is not None and lo < low:
        lo, lo_incl = low, not exclusive
    hi, hi_incl = (span.hi, not span.hi_open) if bounded_hi else (high, True)
    if hi is not None and high is not None and hi > high:
        hi, hi_incl = high, True
    value: float
    if integer:
        first = 1 if lo is None else (math.floor(lo) + 1 if lo == math.floor(lo) and not lo_incl else math.ceil(lo))
        value = float(first)
    elif bounded_lo and bounded_hi and lo is not None and hi is not None:
        value = lo if lo == hi else (lo + hi) / 2
    elif bounded_lo and lo is not None:  # just past the threshold, as a user would report it
        value = lo * 2 if lo > 0 else lo + 1
        if hi is not None and value >= hi:
            value = (lo + hi) / 2
    elif bounded_hi and hi is not None:
        value = hi / 2 if hi > 0 else hi - 1
        if lo is not None and value <= lo:
            value = (lo + hi) / 2
    else:  # only "known" is asked for: the vocabulary's own example is a realistic value
        sample = example(spec, kb)
        middle = (lo + hi) / 2 if lo is not None and hi is not None else 1.0
        value = sample if sample is not None else middle
    above_low = lo is None or value > lo or (value == lo and lo_incl)
    below_high = hi is None or value < hi or (value == hi and hi_incl)
    ok = above_low and below_high and value not in span.never
    return ok, (int(value) if integer else value)


class Witness(logic.Witness):
    """Searches fact values that make a rule fire, through the consultation's state: facts already known are
    settled, findings are followed back through the rules concluding them (best effort; the engine run decides
    what really happens)."""

    limit = MAX_WITNESSES

    def __init__(self, state: Situation) -> None:
        super().__init__()
        self.state = state

    def settled(self, node: FactTest) -> Outcome | None:
        st = self.state
        return None if st.is_open(node.fact) else evaluate(node, st.facts, st.now.findings)

    def concluded(self, node: FindingRef) -> bool:
        return node.finding in self.state.now.findings

    def through(self, node: FindingRef, want: bool, boxes: Constraints,
                stack: tuple[str, ...]) -> Iterator[Constraints]:
        st = self.state
        if not want or len(stack) >= _MAX_FINDING_DEPTH or node.finding not in st.open_findings:
            return
        for producer in st.ix.producers.get(node.finding, []):
            if producer not in stack:
                yield from self.of(st.ix.ruleset.rules[producer].condition, True, boxes, (*stack, producer))

    def overrides(self, boxes: Constraints) -> dict[str, Value | None] | None:
        """One value per constrained fact (None: leave it unknown), or None when some span has no value to pick."""
        out: dict[str, Value | None] = {}
        for name, span in boxes.items():
            ok, value = pick(self.state.ix.kb.facts.get(name), span, self.state.ix.kb)
            if not ok:
                return None
            out[name] = value
        return out
