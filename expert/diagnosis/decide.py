"""The decision: from the rules that fired to the verdict, the axes, the recommended set and the scorecard bands.

One function, `decide`, used by the diagnosis (`expert.diagnosis.build.build_report` turns its result into a Report)
and by the consultation (which runs it on every what-if, so it builds no report objects). Everything it weighs is
data: the rules' conclusions, the regime tables, strengths and precedence (knowledge_base/regimes.yaml) and the
scorecard bands.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from .._lazy import cached_property
from .._weakcache import PerObject
from ..kb.knowledge import Axis, KnowledgeBase, Strength
from ..observations.normalise import applied_optimizations
from ..rules.logic import facts_used
from ..rules.model import RegimeTable
from ..rules.ruleset import RuleSet

Value = int | float | str


class Vote(NamedTuple):
    """A regime some fired rules voted for: its strongest vote, the sum of the votes, the voting rules (sorted)."""

    regime: str
    strength: Strength
    score: int
    rules: tuple[str, ...]


class AxisShare(NamedTuple):
    """One implicated D·A·M axis: its share of the weight, the weight, the rules behind it (sorted)."""

    axis: Axis
    share: float
    strength: float
    rules: tuple[str, ...]


_Concludes = tuple["tuple[str, int] | None", "tuple[Axis, int] | None", tuple[str, ...], tuple[str, ...]]


@dataclass(frozen=True)
class _Conclusions:
    """What every rule of a rule set concludes, in the form `decide` reads it (built once per rule set)."""

    kb: KnowledgeBase
    position: dict[str, int]  # rule id -> place in (stratum, id) order
    concludes: dict[str, _Concludes]  # rule id -> (regime, strength) vote, (axis, strength) vote, recommends, wastes
    tables: dict[str, RegimeTable]
    precedence: dict[str, int]
    share_fact: dict[str, str]  # regime -> the derived fact holding its term's share of the step
    strength_names: dict[int, Strength]
    threshold: int
    bands: tuple[tuple[str, Callable[[float | None], str]], ...]  # (fact, its band function) per scorecard metric
    reads: dict[str, tuple[frozenset[str], bool]]  # rule id -> (the facts its condition tests, reads a finding)
    caps: tuple[tuple[str, int, frozenset[str]], ...]  # (finding, strength value it caps at, conflict facts) per cap
    weakest: int  # the weakest strength's value: a suspicion
    table_lists: dict[str, tuple[tuple[str, ...], tuple[str, ...]]]  # regime -> (its table's wasted, effective ids)
    outside: dict[str, frozenset[str]]  # workload -> the optimizations that do not apply to it (optimizations.yaml)


def _build(ruleset: RuleSet) -> _Conclusions:
    kb = ruleset.kb
    regimes = kb.regimes
    concludes: dict[str, _Concludes] = {}
    for lr in ruleset.rules.values():
        then = lr.rule.then
        vote = (then.bottleneck.regime, regimes.strengths[then.bottleneck.strength]) if then.bottleneck else None
        axis = (then.axis.axis, regimes.strengths[then.axis.strength]) if then.axis else None
        concludes[lr.id] = (vote, axis, tuple(r.id for r in then.recommend), tuple(w.id for w in then.waste))
    return _Conclusions(
        kb=kb,
        position={lr.id: i for i, lr in enumerate(ruleset.by_stratum)},
        concludes=concludes,
        tables={regime: table for regime, (_, table) in ruleset.tables.items()},
        precedence={name: i for i, name in enumerate(regimes.precedence)},
        share_fact={name: share for name, r in regimes.regimes.items() if (share := regimes.terms[r.term].share)},
        strength_names={v: k for k, v in regimes.strengths.items()},
        threshold=regimes.strengths[regimes.verdict_min_strength],
        bands=tuple((metric.fact, metric.band) for metric in kb.scorecard.metrics),
        reads={rule_id: (frozenset(facts_used(lr.condition)), bool(pos or neg))
               for rule_id, lr in ruleset.rules.items() for pos, neg in [ruleset.findings_read[rule_id]]},
        caps=tuple((cap.finding, regimes.strengths[cap.max_strength], frozenset(cap.conflict))
                   for cap in regimes.evidence_caps),
        weakest=min(regimes.strengths.values()),
        table_lists={regime: (tuple(entry.id for entry in table.wasted), tuple(table.effective))
                     for regime, (_, table) in ruleset.tables.items()},
        outside={workload: frozenset(o.id for o in kb.optimizations.values() if o.workloads
                                     and workload not in o.workloads) for workload in ("training", "inference")},
    )


_conclusions: PerObject[RuleSet, _Conclusions] = PerObject(_build)


def table_id(regime: str) -> str:
    """How a regime table is named among the rules behind a recommendation or a ruled-out optimization."""
    return f"table/{regime}"


@dataclass
class Decision:
    """What the rules that fired decide, before any wording: the answer a user cares about (not to be changed)."""

    fired: frozenset[str]
    findings: frozenset[str]
    candidates: tuple[Vote, ...]  # best first
    verdict: str | None  # the best candidate, when its strength reaches the verdict threshold
    table: RegimeTable | None  # the verdict's regime table, if it has one
    proposed: dict[str, list[str]]  # optimization -> rules proposing it (the verdict's table last), in proposal order
    wasted: dict[str, list[str]]  # optimization -> rules ruling it out (the verdict's table first)
    recommended: frozenset[str]  # proposed and not ruled out
    bands: tuple[str, ...]  # one scorecard band per metric, in scorecard order
    caps: tuple[str, ...]  # findings of thin evidence that capped the candidates' strength (regimes.yaml evidence_caps)
    withheld: tuple[tuple[str, str], ...]  # (conflict finding, regime) whose every voting rule rests on its facts
    _axis_votes: tuple[tuple[str, Axis, int], ...]  # (rule, axis, strength value) of the fired rules, stratum order
    _kb: KnowledgeBase

    @cached_property
    def axes(self) -> tuple[AxisShare, ...]:
        """The implicated axes, heaviest first: each candidate's strength spread over its regime's axes, plus the
        rules' own axis votes."""
        regimes = self._kb.regimes
        strengths = regimes.strengths
        order = list(regimes.axes)  # knowledge_base/regimes.yaml `axes`, in their order
        score: dict[Axis, float] = dict.fromkeys(order, 0.0)
        rules: dict[Axis, set[str]] = {a: set() for a in order}
        for c in self.candidates:
            for axis, weight in regimes.regimes[c.regime].axes.items():
                score[axis] += strengths[c.strength] * weight
                rules[axis].update(c.rules)
        for rule_id, axis, strength in self._axis_votes:
            score[axis] += strength
            rules[axis].add(rule_id)
        total = sum(score.values())
        if total == 0:
            return ()
        axes = [AxisShare(a, round(score[a] / total, 4), score[a], tuple(sorted(rules[a])))
                for a in order if score[a] > 0]
        axes.sort(key=lambda x: (-x.strength, order.index(x.axis)))
        return tuple(axes)


def _largest_share_first(ranked: list[tuple[str, list[Any]]], c: _Conclusions,
                         facts: Mapping[str, Value]) -> list[tuple[str, list[Any]]]:
    """Equally strong leaders, each with a measured share of the step: the largest share leads (the iron law's
    largest term sets the step); otherwise the order stands (vote weight, then precedence: a starved GPU first)."""
    if len(ranked) < 2 or (ranked[0][1][0], ranked[0][1][3]) != (ranked[1][1][0], ranked[1][1][3]):
        return ranked
    top = ranked[0][1][0], ranked[0][1][3]  # as strong, before and after any cap
    tied = [kv for kv in ranked if (kv[1][0], kv[1][3]) == top]
    # a regime whose term is no share of the step (memory capacity) leaves the order as it stands
    shares = [facts.get(share) if (share := c.share_fact.get(regime)) else None for regime, _ in tied]
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in shares):
        return ranked
    order = sorted(range(len(tied)), key=lambda i: -float(shares[i]))  # type: ignore[arg-type]  # stable
    return [tied[i] for i in order] + ranked[len(tied):]


class _Without(Mapping[str, Value]):
    """The facts less the disputed ones (read by name, as rule conditions read facts)."""

    __slots__ = ("_facts", "_hidden")

    def __init__(self, facts: Mapping[str, Value], hidden: frozenset[str]) -> None:
        self._facts = facts
        self._hidden = hidden

    def __getitem__(self, name: str) -> Value:
        if name in self._hidden:
            raise KeyError(name)
        return self._facts[name]

    def get(self, name: str, default: Any = None) -> Any:
        return default if name in self._hidden else self._facts.get(name, default)

    def __iter__(self) -> Iterator[str]:
        return (name for name in self._facts if name not in self._hidden)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _fired_without(ruleset: RuleSet, fired: list[str], facts: Mapping[str, Value],
                   doubtful: frozenset[str]) -> set[str]:
    """The fired rules that still fire when the facts in question are unknown (and the findings of the rules that
    no longer fire are gone), to a fixpoint: the votes that do not rest on a disputed fact. A fired rule that reads
    neither a disputed fact nor a finding fires again unchanged, so it stands without being evaluated again."""
    reads = _conclusions(ruleset).reads
    rules = ruleset.rules
    standing: set[str] = set()
    findings: set[str] = set()
    pending: list[str] = []
    for rule_id in fired:
        facts_read, reads_finding = reads[rule_id]
        if reads_finding or not facts_read.isdisjoint(doubtful):
            pending.append(rule_id)
        else:
            standing.add(rule_id)
            if (spec := rules[rule_id].rule.then.finding) is not None:
                findings.add(spec.id)
    if not pending:
        return standing
    known = _Without(facts, doubtful)
    changed = True
    while changed:
        changed = False
        for rule_id in pending:
            if rule_id in standing:
                continue
            lr = rules[rule_id]
            if lr.evaluator(known, findings, None, False) == "true":
                standing.add(rule_id)
                if (spec := lr.rule.then.finding) is not None and spec.id not in findings:
                    findings.add(spec.id)
                    changed = True  # a rule passed over may read it
    return standing


def decide(ruleset: RuleSet, fired: Iterable[str], findings: Collection[str], facts: Mapping[str, Value]) -> Decision:
    """The decision of the rules that fired on these facts (their order does not matter)."""
    c = _conclusions(ruleset)
    ordered = sorted(fired, key=c.position.__getitem__)
    votes: dict[str, list[Any]] = {}  # regime -> [strongest vote (capped), sum of votes, voting rules, strongest vote]
    proposed: dict[str, list[str]] = {}
    wastes: list[tuple[str, str]] = []
    axis_votes: list[tuple[str, Axis, int]] = []
    for rule_id in ordered:
        vote, axis, recommends, wasted_ids = c.concludes[rule_id]
        if vote is not None:
            tally = votes.get(vote[0])
            if tally is None:
                votes[vote[0]] = [vote[1], vote[1], [rule_id], vote[1]]
            else:
                tally[0] = tally[3] = max(tally[0], vote[1])
                tally[1] += vote[1]
                tally[2].append(rule_id)
        if axis is not None:
            axis_votes.append((rule_id, *axis))
        for opt in recommends:
            proposed.setdefault(opt, []).append(rule_id)
        for opt in wasted_ids:
            wastes.append((opt, rule_id))
    # thin evidence (a handful of kernels, one step): while a capping finding holds, no candidate is stronger
    held = [cap for cap in c.caps if cap[0] in findings]
    caps = tuple(finding for finding, _, _ in held)
    withheld: list[tuple[str, str]] = []
    if held:
        ceiling = min(strength for _, strength, _ in held)
        for tally in votes.values():
            tally[0] = min(tally[0], ceiling)
        # conflicting evidence: a regime none of whose votes stands without the facts in question gets the weakest
        # strength (a suspicion, knowledge_base/regimes.yaml `strengths`)
        suspect = c.weakest
        for finding, _, conflict in held:
            if not conflict:
                continue
            if all(tally[0] <= suspect for tally in votes.values()):
                continue  # nothing to withhold
            standing = _fired_without(ruleset, ordered, facts, conflict)
            for regime, tally in votes.items():
                if tally[0] > suspect and not standing.intersection(tally[2]):
                    tally[0] = suspect
                    withheld.append((finding, regime))
    # a cap lowers the ceiling, it does not reorder: among equally capped regimes the one whose own evidence was
    # stronger leads (an input wait measured outright is not overtaken by a vote resting on a disputed utilization)
    ranked = sorted(votes.items(), key=lambda kv: (-kv[1][0], -kv[1][3], -kv[1][1], c.precedence[kv[0]]))
    ranked = _largest_share_first(ranked, c, facts)
    candidates = tuple(Vote(regime, c.strength_names[top], total, tuple(sorted(rules)))
                       for regime, (top, total, rules, _) in ranked)
    verdict = ranked[0][0] if ranked and ranked[0][1][0] >= c.threshold else None
    table = c.tables.get(verdict) if verdict else None
    wasted: dict[str, list[str]] = {}
    if table is not None and verdict is not None:
        from_table = table_id(table.regime)
        table_wasted, table_effective = c.table_lists[verdict]
        for opt in table_wasted:
            wasted[opt] = [from_table]
        for opt in table_effective:
            proposed.setdefault(opt, []).append(from_table)
    for opt, rule_id in wastes:
        wasted.setdefault(opt, []).append(rule_id)
    outside = c.outside.get(facts.get("workload"))  # type: ignore[arg-type]  # a str, or None when unknown
    if outside:  # what does not apply to this workload is neither recommended nor ruled out
        proposed = {opt: rules for opt, rules in proposed.items() if opt not in outside}
        wasted = {opt: rules for opt, rules in wasted.items() if opt not in outside}
    bands = tuple([band(float(raw) if isinstance(raw := facts.get(fact), (int, float)) else None)
                   for fact, band in c.bands])
    applied = applied_optimizations(facts.get("applied_optimizations"))  # already used: never recommended
    return Decision(frozenset(ordered), frozenset(findings), candidates, verdict, table, proposed, wasted,
                    frozenset(proposed.keys() - wasted.keys() - set(applied)), bands, caps, tuple(withheld),
                    tuple(axis_votes), c.kb)


def facts_read(ruleset: RuleSet) -> frozenset[str]:
    """The facts `decide` reads itself: the scorecard's, the regimes' shares of the step, the optimizations already
    applied, the workload (what applies to it). Besides these it reads only what the fired rules read, and only while
    a conflict cap's finding holds (`_fired_without`): otherwise the same fired rules on the same values of these facts
    make the same decision (tests/test_decide_reads.py holds `decide` to it)."""
    c = _conclusions(ruleset)
    return frozenset({fact for fact, _ in c.bands} | set(c.share_fact.values()) | {"applied_optimizations", "workload"})
