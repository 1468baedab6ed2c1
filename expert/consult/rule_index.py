"""The consultation's static index of the rules, one per Expert: which rules test which facts, which findings feed
which rules, which rules decide, the conflict readings, the combined questions, and the rules a what-if re-runs
(`_DeltaRules`: only those its changed facts reach). `decision_on` is the diagnosis's own `decide` on a set of facts.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from .._weakcache import PerObject
from ..diagnosis.decide import Decision, decide, facts_read
from ..engine.pure import PureEngine
from ..expert import Expert
from ..kb.knowledge import CombinedQuestion, KnowledgeBase
from ..rules.evaluate import Truth, generate_truth, truth_of
from ..rules.logic import conjunctions, fact_tests, facts_used, findings_used
from ..rules.ruleset import LoadedRule

Value = int | float | str
# A what-if's memo key under its state's answers (`planner.what_if`): its overrides as (name, type, value) items, the
# value None for a fact it leaves unknown
WhatIfKey = frozenset[tuple[str, type, Value | None]]


# ---- static index of the rules (one per Expert) --------------------------------------------------------------------


class Index:
    """What the question planner needs from the rules and the vocabulary, computed once per Expert."""

    def __init__(self, expert: Expert) -> None:
        self.kb: KnowledgeBase = expert.kb
        self.ruleset = expert.ruleset
        self.rules: list[LoadedRule] = sorted(expert.ruleset.rules.values(), key=lambda lr: (lr.stratum, lr.id))
        self.rule_ids = frozenset(lr.id for lr in self.rules)
        self.engine = PureEngine(expert.ruleset)
        # what-if decisions by the answers and then the overrides they were asked on, shared by every turn of every
        # session on this Expert (a turn's what-ifs mostly repeat the previous turn's); bounded (`what_ifs_kept`
        # decisions in all), emptied when full
        self.what_ifs: dict[frozenset[tuple[str, type, Value]], dict[WhatIfKey, Decision]] = {}
        self.what_ifs_kept = 0
        self.regions: dict[str, list[tuple[str, Value]]] = {}  # fact -> its regions (`fact_regions`)
        self.gates: dict[int, tuple[Any, Any, Any]] = {}  # id(gate) -> (gate, compiled, compiled possibility)
        self.local = threading.local()  # per-thread session states (`analysis`)
        self.askable = [name for name, spec in self.kb.facts.items() if spec.askable]
        self.order = {name: i for i, name in enumerate(self.kb.facts)}
        self.tests: dict[str, list[tuple[str, Any]]] = {}
        self.readers: dict[str, list[str]] = {}  # fact -> rules testing it
        self.facts_of: dict[str, list[str]] = {lr.id: facts_used(lr.condition) for lr in self.rules}  # in order
        for lr in self.rules:
            for node in fact_tests(lr.condition):
                ops = self.tests.setdefault(node.fact, [])
                for op_const in node.ops():
                    if op_const not in ops:
                        ops.append(op_const)
            for fact in self.facts_of[lr.id]:
                self.readers.setdefault(fact, []).append(lr.id)
        self.finding_readers: dict[str, list[LoadedRule]] = {}  # finding -> rules whose condition refers to it
        for lr in self.rules:
            pos, neg = findings_used(lr.condition)
            for finding in pos | neg:
                self.finding_readers.setdefault(finding, []).append(lr)
        self.producers = expert.ruleset.producers
        self.delta = _DeltaRules(self)
        # what a rule's witness search reads (`planner.rule_witness`): the facts its condition tests and the findings
        # it refers to, and those of every rule concluding such a finding, transitively
        self.witness_reads: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        for lr in self.rules:
            rules, findings, todo = {lr.id}, set[str](), [lr]
            while todo:
                pos, neg = findings_used(todo.pop().condition)
                for finding in pos | neg:
                    findings.add(finding)
                    for producer in self.producers.get(finding, []):
                        if producer not in rules:
                            rules.add(producer)
                            todo.append(expert.ruleset.rules[producer])
            self.witness_reads[lr.id] = (tuple(sorted({f for r in rules for f in self.facts_of[r]})),
                                         tuple(sorted(findings)))
        # a rule's first witness values by what its search reads of a state (bounded, emptied when full): one answer
        # leaves most rules' searches as they were
        self.witnesses: dict[tuple[str, tuple[tuple[type, Value | None] | None, ...], tuple[tuple[bool, bool], ...]],
                             dict[str, Value | None] | None] = {}
        # a what-if that changes none of these nor the fired rules, while no conflict cap holds, decides as before
        self.decide_reads = facts_read(self.ruleset)
        # the optimizations a job already uses (type `optimizations`): `decide` never recommends them, and no rule tests
        # them, so no other probe reaches them (`planner.already_applied`)
        self.applied_facts = tuple(name for name in sorted(self.decide_reads)
                                   if (spec := self.kb.facts.get(name)) is not None and spec.askable
                                   and spec.type == "optimizations")
        self._decide_keys = tuple(sorted(self.decide_reads))
        self.conflict_caps = frozenset(cap.finding for cap in self.kb.regimes.evidence_caps if cap.conflict)
        # decisions by (fired rules, values of `decide_reads`): what-ifs on different facts often fire the same
        # rules on the same scorecard and shares (bounded, emptied when full; shared like `what_ifs`)
        self.decisions: dict[tuple[frozenset[str], tuple[tuple[type, Value] | None, ...]], Decision] = {}
        # evidence caps (knowledge_base/regimes.yaml) can take a verdict away, so the rules concluding thin evidence
        # decide too; a conflict is checked between the answers given, never a reason to ask for a second reading
        capping = {cap.finding for cap in self.kb.regimes.evidence_caps if not cap.conflict}
        direct = {lr.id for lr in self.rules if decisive(lr)
                  or (lr.rule.then.finding is not None and lr.rule.then.finding.id in capping)}
        relevant = set(direct)
        changed = True
        while changed:  # a rule matters when its finding feeds a rule that matters
            changed = False
            for lr in self.rules:
                if lr.id not in relevant:
                    continue
                pos, neg = findings_used(lr.condition)
                for finding in pos | neg:
                    for producer in self.producers.get(finding, []):
                        if producer not in relevant:
                            relevant.add(producer)
                            changed = True
        self.decisive = direct
        self.relevant = relevant
        # conflict caps: a rule concluding one matters once the user has given one of the readings it checks (the
        # consultation then asks for the other when it could withhold the verdict, never for a pair from scratch);
        # the context (hardware, dtype) and the durations that shares divide by (step_time_s) are not such readings
        # (every conflict can withhold the verdict: one that only caps the strength still withholds a regime whose
        # votes all rest on the disputed readings, expert.diagnosis.decide)
        conflicts = {cap.finding: cap.conflict for cap in self.kb.regimes.evidence_caps if cap.conflict}
        self.conflict_readings: dict[str, frozenset[str]] = {
            lr.id: frozenset(f for f in conflicts[lr.rule.then.finding.id]
                             if self.kb.facts[f].askable and not self.kb.facts[f].ask_first
                             and self.kb.facts[f].dimension != "time")
            for lr in self.rules if lr.rule.then.finding is not None and lr.rule.then.finding.id in conflicts}
        self.conjoined: dict[str, set[str]] = {}  # fact -> facts tested in the same `all` of some rule
        for lr in self.rules:
            for conjunction in conjunctions(lr.condition):
                together = {t.fact for t in fact_tests(conjunction)}
                for name in together:
                    self.conjoined.setdefault(name, set()).update(together - {name})
        self.question_of: dict[str, CombinedQuestion] = {
            name: q for q in self.kb.questions.values() for name in q.facts}
        self.tool_of: dict[str, str] = {}
        for name, spec in self.kb.facts.items():
            m = self.kb.tools.measurements.get(spec.measure or name)
            if spec.askable and m is not None:
                self.tool_of[name] = m.tool


    def decide(self, fired: Collection[str], findings: Collection[str], facts: Mapping[str, Value]) -> Decision:
        """`decide` on these fired rules (and the findings they conclude) and facts, memoised by the fired rules and
        the values of the facts `decide` reads itself (`facts_read`: the same fired rules on the same values of
        these make the same decision), except while a conflict cap's finding holds (then it reads more). The
        decision is shared: callers must not change it."""
        if not self.conflict_caps.isdisjoint(findings):
            return decide(self.ruleset, fired, findings, facts)
        get = facts.get
        key = (frozenset(fired),
               tuple([None if (v := get(name)) is None else (type(v), v) for name in self._decide_keys]))  # 1 != 1.0
        found = self.decisions.get(key)
        if found is None:
            found = decide(self.ruleset, fired, findings, facts)
            if len(self.decisions) >= _DECISIONS_KEPT:
                self.decisions.clear()
            self.decisions[key] = found
        return found


_DECISIONS_KEPT = 8192  # decisions kept per Expert by `Index.decide` (a few KiB each)
_PLANS_KEPT = 4096  # re-run plans kept per Expert, one per set of changed facts seen
_GENERATE_AFTER = 2048  # what-if re-runs after which the rules' conditions are generated code (a few turns' worth;
# building them takes tens of ms, more than a one-question session would save)

_Rule = tuple[str, Truth, str | None, frozenset[str]]  # (id, whether it holds, finding it concludes, findings it reads)
_Pass = tuple[str, Truth, str | None, frozenset[str], bool]  # a _Rule, and whether it reads a changed fact


class _DeltaRules:
    """The rules as a what-if re-runs them: a what-if changes a few facts, and only the rules that read one of them,
    or a finding such a rule concludes (transitively), can change their outcome; the others keep the outcome of the
    state's own run. `reach[fact]` is that set of rules for one fact."""

    def __init__(self, ix: Index) -> None:
        self._rules = ix.rules
        self._producers = ix.producers
        self.concludes: dict[str, str | None] = {
            lr.id: lr.rule.then.finding.id if lr.rule.then.finding else None for lr in ix.rules}
        self.readers = ix.readers
        self._runs = 0
        self._compile({lr.id: truth_of(lr.evaluator) for lr in ix.rules})  # until warm: generate_truth
        readers_of_finding: dict[str, set[str]] = {
            name: {lr.id for lr in rules} for name, rules in ix.finding_readers.items()}
        self.reach: dict[str, frozenset[str]] = {}
        for fact, fact_readers in ix.readers.items():
            seen = set(fact_readers)
            todo = list(fact_readers)
            while todo:
                concluded = self.concludes[todo.pop()]
                for rule in readers_of_finding.get(concluded, ()) if concluded else ():
                    if rule not in seen:
                        seen.add(rule)
                        todo.append(rule)
            self.reach[fact] = frozenset(seen)

    def _compile(self, evaluators: Mapping[str, Truth]) -> None:
        """The rules in the pure engine's order and in dependency order, with these tests of whether each holds."""
        by_stratum: dict[int, list[_Rule]] = {}
        for lr in sorted(self._rules, key=lambda r: (r.stratum, r.id)):  # the pure engine's order
            pos, _ = findings_used(lr.condition)
            by_stratum.setdefault(lr.stratum, []).append((lr.id, evaluators[lr.id], self.concludes[lr.id],
                                                          frozenset(pos)))
        self.strata = [by_stratum[s] for s in sorted(by_stratum)]
        self.order = _dependency_order(self._rules, self._producers, evaluators)
        # each rule's pass in the dependency-order run, not reading / reading a changed fact: made once and shared
        # by every plan below, so a plan kept for long is a few objects for the garbage collector, not one a rule
        self._passes: dict[str, tuple[_Pass, _Pass]] = {
            rule_id: ((rule_id, holds, finding, reads, False), (rule_id, holds, finding, reads, True))
            for rule_id, holds, finding, reads in self.order or ()}
        # a set of changed facts -> (the rules they reach, each stratum's rules among them, or the reached rules in
        # dependency order, each marked with whether it reads a changed fact): the same few sets recur
        self._plans: dict[frozenset[str], tuple[frozenset[str], tuple[tuple[_Rule, ...], ...],
                                                tuple[_Pass, ...]]] = {}

    def run(self, base_facts: Mapping[str, Value], base: Decision, facts: Mapping[str, Value],
            candidates: Iterable[str] | None = None,
            settled: Collection[str] = ()) -> tuple[list[str], set[str]] | None:
        """(fired, findings) of the pure engine on `facts`, from the run on `base_facts` (which gave `base`): only
        the rules the changed facts reach are evaluated again, stratum by stratum to a fixpoint, as the pure engine
        does. `candidates`: the only facts that may differ (default: every fact). `settled`: rules known to keep
        their outcome in `base` on these facts (a session state's rules that cannot change, when `facts` only give
        values to facts still open there: `planner.State.settled`), not evaluated. None when no fact changed."""
        keys = facts.keys() | base_facts.keys() if candidates is None else candidates
        changed = frozenset(k for k in keys if facts.get(k) != base_facts.get(k))
        if not changed:
            return None
        self._runs += 1
        if self._runs == _GENERATE_AFTER:  # warm: whether each holds as generated code (as the pure engine does)
            self._compile({lr.id: generate_truth(lr.condition) for lr in self._rules})
        plan = self._plans.get(changed)
        if plan is None:
            empty: frozenset[str] = frozenset()
            reached = empty.union(*(self.reach.get(k, empty) for k in changed))
            direct = empty.union(*(self.readers.get(k, ()) for k in changed))
            passes = self._passes
            ordered = () if self.order is None else tuple(
                passes[rule[0]][rule[0] in direct] for rule in self.order if rule[0] in reached)
            strata = () if self.order is not None else tuple(  # the stratum-by-stratum run, where there is no order
                tuple(r for r in stratum if r[0] in reached) for stratum in self.strata)
            plan = (reached, strata, ordered)
            if len(self._plans) >= _PLANS_KEPT:
                self._plans.clear()
            self._plans[changed] = plan
        affected, strata, in_order = plan
        fired = [r for r in base.fired if r not in affected]
        findings = {f for r in fired if (f := self.concludes[r]) is not None}
        if self.order is not None:
            # one pass in dependency order: a rule that reads no changed fact and no finding whose presence changed
            # keeps the outcome it had (the stratified fixpoint is monotone, so its outcome depends on those alone)
            was_fired, had = base.fired, base.findings
            flipped = findings ^ had  # the findings whose presence differs from the state's run, kept up to date
            for rule_id, holds, finding, reads, reads_changed in in_order:
                if (reads_changed or (flipped and not flipped.isdisjoint(reads))) and rule_id not in settled:
                    if not holds(facts, findings):
                        continue
                elif rule_id not in was_fired:
                    continue
                fired.append(rule_id)
                if finding is not None and finding not in findings:
                    findings.add(finding)
                    if finding in had:
                        flipped.discard(finding)
                    else:
                        flipped.add(finding)
            return fired, findings
        for stratum in strata:
            pending: Sequence[_Rule] = stratum
            done: set[str] = set()
            while pending:
                new: set[str] = set()
                for rule_id, holds, finding, _ in pending:
                    if not holds(facts, findings):
                        continue
                    fired.append(rule_id)
                    done.add(rule_id)
                    if finding is not None and finding not in findings:
                        findings.add(finding)
                        new.add(finding)
                if not new:
                    break
                pending = [r for r in stratum if r[0] not in done and not new.isdisjoint(r[3])]
        return fired, findings


def _dependency_order(rules: list[LoadedRule], producers: Mapping[str, list[str]],
                      evaluators: Mapping[str, Truth]) -> list[_Rule] | None:
    """(id, whether it holds, finding it concludes, findings it reads) of every rule, stratum by stratum, each
    after every rule concluding a finding it reads; None when, within a stratum, findings feed back into a rule."""
    by_id = {lr.id: lr for lr in rules}
    reads: dict[str, frozenset[str]] = {}
    for lr in rules:
        pos, neg = findings_used(lr.condition)
        reads[lr.id] = frozenset(pos | neg)
    out: list[_Rule] = []
    placed: set[str] = set()
    for stratum in sorted({lr.stratum for lr in rules}):
        todo = sorted(lr.id for lr in rules if lr.stratum == stratum)
        while todo:
            ready = [r for r in todo if all(p in placed for f in reads[r] for p in producers.get(f, ()))]
            if not ready:
                return None
            for rule_id in ready:
                lr = by_id[rule_id]
                out.append((rule_id, evaluators[rule_id], lr.rule.then.finding.id if lr.rule.then.finding else None,
                            reads[rule_id]))
                placed.add(rule_id)
            todo = [r for r in todo if r not in placed]
    return out


def decisive(lr: LoadedRule) -> bool:
    then = lr.rule.then
    return bool(then.bottleneck or then.recommend or then.waste)


index: PerObject[Expert, Index] = PerObject(Index)  # one index per Expert: `index(expert)`


def decision_on(ix: Index, facts: Mapping[str, Value]) -> Decision:
    """What the user cares about on these facts (verdict, recommended set, scorecard bands, fired rules): the
    diagnosis's own `decide`, without building a Report."""
    result = ix.engine.run(facts)
    return ix.decide(result.fired, result.findings, facts)
