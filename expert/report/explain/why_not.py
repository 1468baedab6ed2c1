"""why_not: every rule that could conclude a bottleneck, finding, optimization or rule, and what kept it from firing."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from ...derive.registry import DERIVATIONS
from ...rules.conclusions import describe_conclusions
from ...rules.evaluate import LeafTrace, Outcome
from ...rules.logic import FLIP, ConditionVisitor, kleene_and, kleene_or
from ...rules.model import AllOf, AnyOf, Condition, FactTest, FindingRef, NotOf
from ..model import Report, RuleEvaluation
from ._shared import _STRENGTHS, Value, _count, _fmt, _indent, _Model, _ranking_notes, _suggest


class Blocker(_Model):
    """One reason a rule did not fire: a comparison that failed, a missing fact, or a finding (not) concluded."""

    kind: Literal["failed", "missing", "finding"]
    name: str
    test: str  # the comparison as the rule needs it, with the observed value
    value: Value | None = None
    threshold: Value | list[Value] | bool | None = None
    message: str
    ask: list[str] = []  # for a missing fact: observable facts that would settle it
    because: WhyNot | None = None  # for a finding that was not concluded: why not, in turn

    def text(self) -> str:
        return self.message


class Attempt(_Model):
    """A rule that could conclude the asked-about id, and why it did not (or that it did)."""

    rule_id: str
    title: str
    source: str
    outcome: Outcome
    fired: bool
    would_conclude: str
    blockers: list[Blocker] = []

    def text(self) -> str:
        return "\n".join(self._lines())

    def _lines(self) -> list[str]:
        state = "fired" if self.fired else ("cannot decide (facts missing)" if self.outcome == "unknown"
                                            else "did not fire")
        out = [f"rule {self.rule_id} ({self.title}) would conclude {self.would_conclude}: {state}",
               f"  source: {self.source}"]
        for b in self.blockers:
            out.append(f"  - {b.message}")
            if b.because is not None:
                out.extend(_indent(b.because._lines(), "      "))
        return out


class WhyNot(_Model):
    """Why a bottleneck, finding, optimization or rule was not concluded: every rule that could, and what failed."""

    question: str
    kind: Literal["bottleneck", "finding", "optimization", "rule", "unknown"]
    concluded: bool
    summary: str
    notes: list[str] = []
    attempts: list[Attempt] = []
    wasted_for_verdict: bool | None = None  # optimizations only
    wasted_reason: str | None = None

    def text(self) -> str:
        return "\n".join(self._lines())

    def _lines(self) -> list[str]:
        out = [self.summary, *_indent(self.notes)]
        for attempt in self.attempts:
            out.extend(_indent(attempt._lines()))
        return out


@dataclass
class _Tree:
    """A rule's condition tree with the recorded leaf outcomes attached (no re-evaluation)."""

    op: Literal["all", "any", "not", "leaf"]
    outcome: Outcome
    children: list[_Tree] = field(default_factory=list)
    leaves: list[LeafTrace] = field(default_factory=list)


class _Mismatch(Exception):
    pass


class _Attach(ConditionVisitor[_Tree]):
    """Attaches the recorded leaves, in order, to the condition tree they were recorded from."""

    def __init__(self, leaves: Iterator[LeafTrace]) -> None:
        self.leaves = leaves

    def group(self, node: AllOf | AnyOf, parts: list[Condition], conjunctive: bool) -> _Tree:
        children = [self.visit(c) for c in parts]
        outcomes = [c.outcome for c in children]
        if conjunctive:
            return _Tree("all", kleene_and(outcomes), children)
        return _Tree("any", kleene_or(outcomes), children)

    def not_of(self, node: NotOf) -> _Tree:
        child = self.visit(node.not_)
        return _Tree("not", FLIP[child.outcome], [child])

    def finding(self, node: FindingRef) -> _Tree:
        leaf = next(self.leaves, None)
        if leaf is None or leaf.kind != "finding" or leaf.name != node.finding:
            raise _Mismatch
        return _Tree("leaf", leaf.outcome, leaves=[leaf])

    def fact(self, node: FactTest) -> _Tree:
        count = (node.known is not None) + len(node.ops())
        leaves = [next(self.leaves, None) for _ in range(count)]
        if any(leaf is None or leaf.name != node.fact for leaf in leaves):
            raise _Mismatch
        found = [leaf for leaf in leaves if leaf is not None]
        return _Tree("leaf", kleene_and([leaf.outcome for leaf in found]), leaves=found)

    def default(self, node: Condition) -> _Tree:
        raise _Mismatch


@functools.cache
def _conditions() -> TypeAdapter[Condition]:
    return TypeAdapter(Condition)


# Reports of one Expert share each rule's `when` tree: parse it once (keyed by identity; the entry holds the tree, so
# its id is not reused while cached). Bounded, for reports read back from JSON, whose trees are new each time.
_PARSED: dict[int, tuple[dict[str, Any], Condition | None]] = {}
_PARSED_MAX = 4096


def _condition(when: dict[str, Any]) -> Condition | None:
    hit = _PARSED.get(id(when))
    if hit is not None and hit[0] is when:
        return hit[1]
    try:
        condition: Condition | None = _conditions().validate_python(when)
    except ValidationError:
        condition = None
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.clear()
    _PARSED[id(when)] = (when, condition)
    return condition


def _tree(ev: RuleEvaluation) -> _Tree | None:
    """The evaluation's condition (rebuilt from the report once) with its recorded leaves attached, or None when
    the report has no condition tree or its leaves do not match it."""
    if ev.when is None:
        return None
    condition = _condition(ev.when)
    if condition is None:
        return None
    it = iter(ev.leaves)
    try:
        tree = _Attach(it).visit(condition)
    except _Mismatch:
        return None
    return tree if next(it, None) is None else None


def _reasons(node: _Tree, want: bool) -> list[LeafTrace]:
    """The leaves that keep `node` from being `want`: the first failing branch of an `all`, every one of an `any`."""
    if node.op == "leaf":
        return [leaf for leaf in node.leaves if not leaf.supports]
    if node.op == "not":
        return _reasons(node.children[0], not want)
    conjunctive = (node.op == "all") == want  # all wanting true, or any wanting false: one bad child suffices
    bad: Outcome = "false" if want else "true"
    if conjunctive:
        first = next((c for c in node.children if c.outcome == bad), None)
        if first is not None:
            return _reasons(first, want)
        return [leaf for c in node.children if c.outcome == "unknown" for leaf in _reasons(c, want)]
    good: Outcome = "true" if want else "false"
    return [leaf for c in node.children if c.outcome != good for leaf in _reasons(c, want)]


@functools.cache
def _inputs_closure(name: str) -> frozenset[str]:
    """The fact and every fact it is derived from, transitively."""
    out = {name}
    frontier = [name]
    while frontier:
        current = frontier.pop()
        for d in DERIVATIONS:
            if d.output == current:
                for inp in d.inputs:
                    if inp not in out:
                        out.add(inp)
                        frontier.append(inp)
    return frozenset(out)


def _blocker(report: Report, ev: RuleEvaluation, leaf: LeafTrace, depth: int, seen: set[str]) -> Blocker:
    if leaf.kind == "finding":
        if leaf.negated:
            return Blocker(kind="finding", name=leaf.name, test=leaf.comparison(),
                           message=f"finding {leaf.name} was concluded, and this rule needs it absent")
        nested = None
        if depth > 0 and leaf.name not in seen:
            nested = _why_not(report, leaf.name, depth - 1, seen | {leaf.name})
        return Blocker(kind="finding", name=leaf.name, test=leaf.comparison(), because=nested,
                       message=f"needs finding {leaf.name}, which was not concluded")
    if leaf.value is None and leaf.op != "known":
        closure = _inputs_closure(leaf.name)
        ask = [m.fact for m in report.missing if ev.rule_id in m.rules and m.fact in closure]
        if not ask:
            ask = [m.fact for m in report.missing if m.fact in closure]
        hint = f"; measure {', '.join(ask)} to settle it" if ask else ""
        derived = f" (derived: {', '.join(d.formula for d in DERIVATIONS if d.output == leaf.name)})" \
            if any(d.output == leaf.name for d in DERIVATIONS) else ""
        needs = leaf.comparison().replace(" unknown", "")
        return Blocker(kind="missing", name=leaf.name, test=leaf.comparison(), threshold=leaf.threshold, ask=ask,
                       message=f"{leaf.name} is unknown{derived}; the rule needs {needs}{hint}")
    if leaf.op == "known":
        want = "known" if bool(leaf.threshold) != leaf.negated else "unknown"
        state = f"was measured ({_fmt(leaf.value)})" if leaf.value is not None else "is unknown"
        return Blocker(kind="failed", name=leaf.name, test=leaf.comparison(), value=leaf.value,
                       threshold=leaf.threshold, message=f"the rule needs {leaf.name} to be {want}, but it {state}")
    return Blocker(kind="failed", name=leaf.name, test=leaf.comparison(), value=leaf.value, threshold=leaf.threshold,
                   message=f"{leaf.comparison()} fails (observed {leaf.name} = {_fmt(leaf.value)})")


def _attempt(report: Report, ev: RuleEvaluation, what: str, depth: int, seen: set[str]) -> Attempt:
    blockers: list[Blocker] = []
    if not ev.fired:
        tree = _tree(ev)
        # without the condition tree (an older report): every leaf that stands against the rule
        leaves = _reasons(tree, True) if tree is not None else [leaf for leaf in ev.leaves if not leaf.supports]
        if ev.outcome == "true":  # evaluated true but did not fire: only possible with a custom engine
            leaves = []
        unique: list[LeafTrace] = []
        for leaf in leaves:
            if leaf not in unique:
                unique.append(leaf)
        blockers = [_blocker(report, ev, leaf, depth, seen) for leaf in unique]
    return Attempt(rule_id=ev.rule_id, title=ev.title, source=ev.source, outcome=ev.outcome, fired=ev.fired,
                   would_conclude=what, blockers=blockers)


def _kind_of(report: Report, ident: str) -> str:
    evs = report.evaluations
    if any(e.rule_id == ident for e in evs):
        return "rule"
    if (any(c.regime == ident for c in report.candidates) or any(t.regime == ident for t in report.tables)
            or any(e.concludes.bottleneck == ident for e in evs)):
        return "bottleneck"
    if any(f.id == ident for f in report.findings) or any(e.concludes.finding == ident for e in evs):
        return "finding"
    if (any(r.id == ident for r in report.recommended) or any(w.id == ident for w in report.wasted)
            or any(ident in t.effective or ident in t.wasted for t in report.tables)
            or any(ident in e.concludes.recommend or ident in e.concludes.waste for e in evs)):
        return "optimization"
    return "unknown"


def why_not(report: Report, ident: str) -> WhyNot:
    """Why a bottleneck, finding, optimization or rule was not concluded: every rule that could, and what failed."""
    return _why_not(report, ident, 2, {ident})


def _why_not(report: Report, ident: str, depth: int, seen: set[str]) -> WhyNot:
    kind = _kind_of(report, ident)
    if kind == "rule":
        ev = report.evaluation(ident)
        assert ev is not None
        if ev.fired:
            return WhyNot(question=ident, kind="rule", concluded=True,
                          summary=f"rule {ident} fired; see why({ident!r})")
        attempt = _attempt(report, ev, _describe_then(ev), depth, seen)
        return WhyNot(question=ident, kind="rule", concluded=False, attempts=[attempt],
                      summary=f"rule {ident} ({ev.title}) did not fire")
    if kind == "bottleneck":
        return _why_not_regime(report, ident, depth, seen)
    if kind == "finding":
        producers = [e for e in report.evaluations if e.concludes.finding == ident]
        if any(f.id == ident for f in report.findings):
            rule = next(f.rule_id for f in report.findings if f.id == ident)
            return WhyNot(question=ident, kind="finding", concluded=True,
                          summary=f"finding {ident} was concluded (rule {rule}); see why({ident!r})")
        attempts = [_attempt(report, e, f"finding {ident}", depth, seen) for e in producers]
        return WhyNot(question=ident, kind="finding", concluded=False, attempts=attempts,
                      summary=f"finding {ident} was not concluded: "
                              f"{_count(len(attempts), 'rule')} could conclude it, and none fired")
    if kind == "optimization":
        return _why_not_optimization(report, ident, depth, seen)
    return WhyNot(question=ident, kind="unknown", concluded=False,
                  summary=f"no rule or regime table in this report can conclude {ident!r}{_suggest(report, ident)}")


def _describe_then(ev: RuleEvaluation) -> str:
    return describe_conclusions(ev.concludes)


def _why_not_regime(report: Report, regime: str, depth: int, seen: set[str]) -> WhyNot:
    voters = [e for e in report.evaluations if e.concludes.bottleneck == regime]
    voters.sort(key=lambda e: (e.fired, -_STRENGTHS.index(e.concludes.strength or "suspect"), e.rule_id))
    attempts = [_attempt(report, e, f"bottleneck {regime} ({e.concludes.strength})", depth, seen) for e in voters]
    cand = next((c for c in report.candidates if c.regime == regime), None)
    notes = _ranking_notes(report, regime)
    if regime == report.bottleneck:
        return WhyNot(question=regime, kind="bottleneck", concluded=True, notes=notes,
                      summary=f"{regime} is the verdict; see why({regime!r})")
    if cand is not None:
        summary = f"{regime} is a candidate ({cand.strength}, score {cand.score}) but not the verdict"
    else:
        summary = (f"no rule voted for {regime}: {_count(len(attempts), 'rule')} could, and none fired" if attempts
                   else f"no rule of this report can conclude the bottleneck {regime}")
    return WhyNot(question=regime, kind="bottleneck", concluded=False, summary=summary, notes=notes,
                  attempts=[a for a in attempts if not a.fired])


def _why_not_optimization(report: Report, opt: str, depth: int, seen: set[str]) -> WhyNot:
    rec = next((r for r in report.recommended if r.id == opt), None)
    if rec is not None:
        return WhyNot(question=opt, kind="optimization", concluded=True, wasted_for_verdict=False,
                      summary=f"{opt} is recommended (rules: {', '.join(rec.rules)}); see why({opt!r})")
    wasted = next((w for w in report.wasted if w.id == opt), None)
    verdict = report.bottleneck
    notes: list[str] = []
    for t in report.tables:
        if opt in t.effective and t.regime != verdict:
            notes.append(f"the {t.regime} regime table lists it as effective ({t.source}), but the verdict is "
                         f"{verdict or 'undecided'}")
        if opt in t.wasted and t.regime != verdict:
            notes.append(f"it would be wasted if {t.regime}-bound: {t.wasted[opt]}")
    table = next((t for t in report.tables if t.regime == verdict), None)
    if verdict is not None and table is not None and opt not in table.effective and opt not in table.wasted:
        notes.append(f"the {verdict} regime table (the verdict's) neither recommends nor rules it out")
    proposers = [e for e in report.evaluations if opt in e.concludes.recommend]
    wasters = [e for e in report.evaluations if opt in e.concludes.waste]
    attempts = [_attempt(report, e, f"recommend {opt}", depth, seen) for e in proposers if not e.fired]
    attempts += [_attempt(report, e, f"waste {opt}", depth, seen) for e in wasters if not e.fired]
    if wasted is not None:
        summary = f"{opt} is wasted for the diagnosed bottleneck ({verdict or 'no verdict'}): {wasted.reason} " \
                  f"(rules: {', '.join(wasted.rules)})"
        if any(e.fired for e in proposers):
            notes.insert(0, "a rule proposed it, but being wasted overrides the proposal")
        return WhyNot(question=opt, kind="optimization", concluded=False, summary=summary, notes=notes,
                      attempts=attempts, wasted_for_verdict=True, wasted_reason=wasted.reason)
    applied = next((a for a in report.applied if a.id == opt), None)
    if applied is not None:
        summary = (f"{opt} is already applied (applied_optimizations, from {applied.source}): an optimization the "
                   "job uses is never recommended again")
        return WhyNot(question=opt, kind="optimization", concluded=False, summary=summary, notes=notes,
                      attempts=attempts, wasted_for_verdict=False)
    if any(e.fired for e in proposers + wasters) or (table is not None and (opt in table.effective
                                                                             or opt in table.wasted)):
        # concluded (proposed or ruled out) and yet neither recommended, wasted nor applied: the catalog says it does
        # not apply to the job's workload (optimizations.yaml `workloads`); `decide` drops it before anything else
        workload = report.observations.get("workload")
        job = {"training": "a training job", "inference": "an inference service"}.get(
            str(workload.value) if workload is not None else "", "this job")
        summary = (f"{opt} does not apply to {job} (knowledge_base/optimizations.yaml `workloads`), so no rule or "
                   "regime table recommends it or rules it out here")
        return WhyNot(question=opt, kind="optimization", concluded=False, summary=summary, attempts=attempts,
                      wasted_for_verdict=False)
    tables = [t.regime for t in report.tables if opt in t.effective]
    if not proposers and not tables:
        summary = f"no rule or regime table can recommend {opt}"
    else:
        sources = [_count(len(proposers), "rule")] if proposers else []
        sources += [f"the {', '.join(tables)} regime table{'s' if len(tables) > 1 else ''}"] if tables else []
        summary = f"{opt} is not recommended: {' and '.join(sources)} could, and none applies on this evidence"
    verdict_note = (f"it is not wasted for the diagnosed bottleneck ({verdict})" if verdict
                    else "there is no verdict, so no regime table applies")
    notes.append(verdict_note)
    return WhyNot(question=opt, kind="optimization", concluded=False, summary=summary, notes=notes,
                  attempts=attempts, wasted_for_verdict=False if verdict else None)


Blocker.model_rebuild()
WhyNot.model_rebuild()
