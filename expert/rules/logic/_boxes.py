"""Constraint boxes: per-fact spans (intervals, allowed and excluded values, known or unknown), unions of boxes
for whole conditions, and witnesses (fact constraints under which a condition takes a wanted value)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..model import AllOf, AnyOf, Condition, FactTest, FindingRef, NotOf
from ._nnf import NnfFold
from ._tree import ConditionVisitor, Value
from ._values import OPERATORS, Outcome, format_constant


def _fmt(value: object) -> str:
    return format_constant(value, 6)


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
