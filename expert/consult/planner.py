"""The consultation's planner: which questions could still change the answer, and which to ask next.

`State` is one state of the session: the answers, the derived facts, what is still open (a fact the user could give,
a derivation that could still apply, a rule that could still fire: a three-valued possibility analysis) and the
decision now (`expert.diagnosis.decide`, the diagnosis's own). `make_plan` runs three kinds of what-if probe on it,
each on a copy of the facts run through the derivations (`expert.derive.graph`) and the rules (the pure engine):

* leaf probes: a fact some rule tests (observed or derived, e.g. ``io_overhead``) is set to one value in each region
  the rules' thresholds cut it into (below, at, between, above);
* rule probes: the facts an undecided rule needs are set so that it fires (through the findings it reads), from a
  witness (`expert.consult.witness`);
* regime probes: every undecided rule voting for one regime fires at once (their votes add up).

A probe *changes the answer* when the verdict or the set of recommended optimizations differs from now. An askable
fact earns the value of every probe it could settle: itself, or as an input of the formula that derives a tested
fact, weighted by how much of the shortest way to that quantity it completes when answered and how many of the ways
it closes when unknown, divided by the fact's cost (knowledge_base/facts.yaml). Cheap `ask_first` facts go first,
but only when they pass the same value test (`choose`: a cheaper context fact tested with one of them goes before it
when some answer to it would leave that fact without value: `workload` before `phase`, as training drops phase).
When no rule that can still change can reach the verdict or the recommendations, nothing is left to ask but, while
something is recommended, which of it the job already uses (`already_applied`: no rule tests that fact).

Cost: a what-if derives again only what its changed facts feed (`DerivationGraph.revalue`), re-runs only the rules
they reach, once in dependency order and only those reading a changed fact or finding that the possibility analysis
leaves able to change (`_DeltaRules`, `State.settled`; the others keep the state's own outcome), and decides again
only when the fired rules or a fact `decide` reads changed (and then only for a set of fired rules and values of
those facts not decided before, `Index.decide`); its decision is memoised by the facts it was asked on
(`Index.what_ifs`), and a whole state and its plan are memoised by the answers and unknowns (`analysis`), so
sessions that start alike plan their first turns once. The possibility analysis
reads the rules' conditions compiled (`expert.consult.outcomes`), and a rule's first witness is memoised by what its
search reads of the state (`rule_witness`). All of these give exactly what the long way gives
(tests/test_consult_planner.py, tests/test_fast_paths.py, the golden transcripts).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from ..derive.formulas import DerivedValue
from ..derive.graph import GRAPH, derive
from ..derive.registry import Derivation
from ..diagnosis.decide import Decision
from ..observations.normalise import format_value
from ..rules.evaluate import Evaluator, compile_condition, evaluate
from ..rules.logic import OUTCOMES, Constraints, Outcome, possible
from ..rules.model import Condition, FactTest, FindingRef
from ..rules.ruleset import LoadedRule
from .outcomes import ALL, BIT, FALSE, TRUE, TWO, Possible, compile_possible, state_outcomes
from .rule_index import Index, decision_on, decisive
from .witness import MAX_WITNESSES, Witness, domain

Value = int | float | str

# Question-ordering weights (not domain thresholds): how much a probe that changes each part of the answer is worth.
_VERDICT_WEIGHT = 3.0
_RECOMMEND_WEIGHT = 2.0
_SCORECARD_WEIGHT = 0.25
_MAX_ROUTES = 12


_TWO_VALUED: frozenset[Outcome] = frozenset({"true", "false"})


class State:
    """One state of the session: the answers, the derived facts, what is open and the answer now."""

    def __init__(self, ix: Index, answers: Mapping[str, Value], unknowns: set[str]) -> None:
        self.ix = ix
        self.answers = dict(answers)
        self.unknowns = set(unknowns)
        self.items = frozenset((name, type(value), value) for name, value in self.answers.items())  # 1 != 1.0
        workload = self.answers.get("workload")
        self._askable = frozenset(  # `askable_open`, worked out once: a state asks it a few hundred times
            name for name, spec in ix.kb.facts.items()
            if spec.askable and name not in self.answers and name not in self.unknowns
            and spec.applies_to(workload))
        self.derived: dict[str, DerivedValue] = derive(self.answers, ix.kb)
        self.facts: dict[str, Value] = {**self.answers, **{n: d.value for n, d in self.derived.items()}}
        self.now = decision_on(ix, self.facts)
        self.findings = self.now.findings  # what the generated conditions read (`outcomes.StateReading`)
        self._open: dict[str, bool] = {}
        self._states: dict[int, Literal["fixed", "open", "impossible"]] = {}
        self._routes: dict[str, list[frozenset[str]]] = {}
        self.open_findings: set[str] = set()
        self.live: set[str] = set()
        self.settled: frozenset[str] = frozenset()  # the rules that cannot change: every rule not live
        self.relevant = ix.relevant | {rule for rule, readings in ix.conflict_readings.items()
                                       if not readings.isdisjoint(self.answers)}
        self._possibility()

    # which facts could still change ------------------------------------------------------------------------------

    def askable_open(self, name: str) -> bool:
        """The user could still be asked for it: askable, not answered, not unknown. A fact the expert derived
        (kind `both`) stays askable: a measured value overrides the estimate and may differ from it. A fact the
        job's workload does not have (the optimizer step of a service) is not."""
        return name in self._askable

    def _derivation_state(self, d: Derivation) -> Literal["fixed", "open", "impossible"]:
        """Whether a derivation is settled ("fixed": it produced the value and nothing it reads can change), could
        still produce or change its output ("open"), or cannot apply. Its declared gate (LLM decode only, a link
        the GPU has) is read like a rule's condition: when it does not hold on what is known, the derivation stays
        open only if the open facts could still make it hold."""
        key = id(d)
        if key in self._states:
            return self._states[key]
        self._states[key] = "impossible"  # guards against cycles
        state: Literal["fixed", "open", "impossible"]
        kb = self.ix.kb
        gate = GRAPH.gate(d, kb)
        if any(not (i in self.facts or self.is_open(i)) for i in d.inputs):
            state = "impossible"
        elif gate is not None and (compiled := self._gate(gate))[0](self.facts, (), None, False) != "true":
            state = "open" if compiled[1](self) & TRUE else "impossible"
        elif any(i not in self.facts for i in d.inputs) or any(self.is_open(k) for k in GRAPH.reads(d, kb)):
            state = "open"
        else:
            done = self.derived.get(d.output)
            state = "fixed" if done is not None and done.formula == d.formula else "impossible"
        self._states[key] = state
        return state

    def _gate(self, gate: Condition) -> tuple[Evaluator, Possible]:
        """A derivation's gate compiled: evaluated, and its possible outcomes (`outcomes.compile_possible`)."""
        found = self.ix.gates.get(id(gate))
        if found is None or found[0] is not gate:
            found = self.ix.gates[id(gate)] = (gate, compile_condition(gate), compile_possible(gate))
        return found[1], found[2]

    def is_open(self, name: str) -> bool:
        """Whether the value of `name` (observed or derived) could still change with more answers."""
        if name in self._open:
            return self._open[name]
        self._open[name] = False  # guards against cycles
        result = False
        if name not in self.answers:
            if self.askable_open(name):
                result = True
            else:
                for d in GRAPH.producers(name):
                    state = self._derivation_state(d)
                    if state == "fixed":
                        break
                    if state == "open":
                        result = True
                        break
        self._open[name] = result
        return result

    def routes(self, name: str) -> list[frozenset[str]]:
        """Minimal sets of open askable facts that, answered, would settle `name`."""
        if name in self._routes:
            return self._routes[name]
        self._routes[name] = []
        out: list[frozenset[str]]
        if not self.is_open(name):
            out = [frozenset()]
        else:
            out = [frozenset({name})] if self.askable_open(name) else []
            for d in GRAPH.producers(name):
                state = self._derivation_state(d)
                if state == "fixed":
                    break
                if state != "open":
                    continue
                combos = [frozenset[str]()]
                for inp in d.inputs:
                    combos = _first_unions(combos, self.routes(inp))
                out.extend(combos)
            out = _minimal(out)
        self._routes[name] = out
        return out

    # which rules could still change ------------------------------------------------------------------------------

    def possible(self, node: Condition) -> frozenset[str]:
        """Every outcome the condition could still take as open facts get answered (three-valued, rules.logic)."""
        return possible(node, fact=self._fact_outcomes, finding=self._finding_outcomes)

    def _fact_outcomes(self, node: FactTest) -> frozenset[Outcome]:
        if not self.is_open(node.fact):
            return frozenset({evaluate(node, self.facts, self.now.findings)})
        return OUTCOMES if node.ops() else _TWO_VALUED

    def _finding_outcomes(self, node: FindingRef) -> frozenset[Outcome]:
        if node.finding in self.open_findings:
            return _TWO_VALUED
        return frozenset({"true" if node.finding in self.now.findings else "false"})

    def fact_mask(self, node: FactTest, settled: Evaluator) -> int:
        """`_fact_outcomes` as a mask (`expert.consult.outcomes`); `settled` is the test compiled."""
        if not self.is_open(node.fact):
            return BIT[settled(self.facts, self.now.findings, None, False)]
        return ALL if node.ops() else TWO

    def finding_mask(self, node: FindingRef) -> int:
        """`_finding_outcomes` as a mask."""
        if node.finding in self.open_findings:
            return TWO
        return TRUE if node.finding in self.now.findings else FALSE

    def _possibility(self) -> None:
        """Which rules can still change (`live`) and which findings could still be concluded (`open_findings`): a
        fixpoint. Opening a finding widens only the outcomes of the rules that refer to it, so each round after the
        first re-reads just those rules. The rules' conditions are read generated (`outcomes.state_outcomes`)."""
        always: set[str] = set()
        can_change: set[str] = set()
        todo: list[LoadedRule] = self.ix.rules
        compiled = state_outcomes(self.ix.ruleset)
        concludes = self.ix.delta.concludes
        while True:
            for lr in todo:
                outcomes = compiled[lr.id](self)
                always.discard(lr.id)
                can_change.discard(lr.id)
                if outcomes == TRUE:
                    always.add(lr.id)
                elif outcomes & TRUE:
                    can_change.add(lr.id)
            # a finding opens when a rule concluding it can change and none always fires
            producers = self.ix.producers
            opened = {f for r in can_change if (f := concludes[r]) is not None and r in producers.get(f, ())
                      and not any(p in always for p in producers[f])}
            new = opened - self.open_findings
            if not new:
                self.live = can_change
                self.settled = self.ix.rule_ids - can_change
                return
            self.open_findings |= new
            again = {lr.id: lr for f in new for lr in self.ix.finding_readers.get(f, [])}
            todo = list(again.values())

    def open_leaves(self) -> list[str]:
        """Open facts tested by rules that can still change and can reach the verdict or the recommendations."""
        out: dict[str, None] = {}  # ordered
        facts_of, live, relevant = self.ix.facts_of, self.live, self.relevant
        for lr in self.ix.rules:
            if lr.id not in live or lr.id not in relevant:
                continue
            for fact in facts_of[lr.id]:
                if fact not in out and self.is_open(fact):
                    out[fact] = None
        return list(out)


def _first_unions(firsts: list[frozenset[str]], seconds: list[frozenset[str]]) -> list[frozenset[str]]:
    """The first _MAX_ROUTES unions of one set of each list, in order (the rest are never made)."""
    return list(itertools.islice((a | b for a in firsts for b in seconds), _MAX_ROUTES))


def _minimal(sets: list[frozenset[str]]) -> list[frozenset[str]]:
    out: list[frozenset[str]] = []
    for s in sorted(set(sets), key=lambda s: (len(s), sorted(s))):
        if not any(o <= s for o in out):
            out.append(s)
    return out[:_MAX_ROUTES]


class Probe(NamedTuple):  # a tuple: made ~100 times a state, cheaper than a frozen dataclass
    """One what-if the planner ran: what it set (`overrides`), its answer and the rules it probes."""

    kind: Literal["leaf", "rule", "regime"]
    condition: str
    overrides: tuple[tuple[str, Value | None], ...]
    answer: Decision
    rules: tuple[str, ...] = ()
    subject: str | None = None  # the leaf fact of a leaf probe
    regions: int = 1  # how many regions the leaf probe's fact has

    @property
    def leaves(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.overrides)


def fact_regions(ix: Index, name: str) -> list[tuple[str, Value]]:
    """One (label, value) per region the rules' thresholds cut this fact into (computed once per Index; callers
    must not change the list)."""
    found = ix.regions.get(name)
    if found is None:
        found = ix.regions[name] = _fact_regions(ix, name)
    return found


def _fact_regions(ix: Index, name: str) -> list[tuple[str, Value]]:
    spec = ix.kb.facts.get(name)
    tests = ix.tests.get(name, [])
    if spec is not None and spec.type == "enum":
        named: list[Value] = []
        for _op, const in tests:
            for v in const if isinstance(const, list) else [const]:
                if v not in named:
                    named.append(v)
        others = [c for c in (spec.choices or []) if c not in named]
        values = named + others[:1]
        return [(f"{name} = {v}" if v in named else f"{name} = {v} (or another value)", v) for v in values]
    scalars = {float(c) for op, c in tests if op in ("lt", "le", "gt", "ge", "eq", "ne")
               and isinstance(c, (int, float))}
    members = {float(v) for op, c in tests if op in ("in", "not_in") for v in c if isinstance(v, (int, float))}
    thresholds = sorted(scalars | members)
    if not thresholds:
        return []
    low, high, integer = domain(spec)
    points: list[tuple[str, float]] = []
    first, last = thresholds[0], thresholds[-1]
    if integer:
        below = first - 1
    else:
        below = (low + first) / 2 if low is not None and low < first else first - max(1.0, abs(first))
    points.append((f"< {format_value(spec, first)}", below))
    for i, t in enumerate(thresholds):
        points.append((f"= {format_value(spec, t)}", t))
        if i + 1 < len(thresholds):
            nxt = thresholds[i + 1]
            points.append((f"between {format_value(spec, t)} and {format_value(spec, nxt)}", (t + nxt) / 2))
    if integer:
        above = last + 1
    else:
        above = (last + high) / 2 if high is not None and high > last else (last * 2 if last > 0 else last + 1)
    points.append((f"> {format_value(spec, last)}", above))
    out: list[tuple[str, Value]] = []
    seen: set[float] = set()
    for label, value in points:
        if integer:
            value = float(math.floor(value)) if label.startswith("<") else float(math.ceil(value))
        if (low is not None and (value < low or (spec is not None and spec.exclusive_min and value == low))) or (
                high is not None and value > high) or value in seen:
            continue
        seen.add(value)
        out.append((f"{name} {label}", int(value) if integer else value))
    return out


@dataclass
class Plan:
    """The planner's view of one state: the answer now, every probe, and the ranked questions."""

    state: State
    probes: list[Probe] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)
    minor: dict[str, float] = field(default_factory=dict)  # scorecard-only value
    credited: dict[str, list[tuple[float, Probe, str]]] = field(default_factory=dict)  # (value, probe, via leaf)
    settled_soundly: bool = False
    ranked: list[str] = field(default_factory=list)


_WHAT_IFS_KEPT = 8192  # decisions kept per Expert (a few KiB each); a session asks a few hundred distinct ones


def what_if(state: State, overrides: Mapping[str, Value | None]) -> Decision:
    """The decision if the answers were these, with `overrides` set (None: left unknown). Memoised per set of
    answers (`Index.what_ifs`: the state's answers, then the overrides; a state's answers are hashed once, so a
    memo hit builds only the overrides' small key). Decisions are shared: callers must not change them."""
    ix = state.ix
    memo = ix.what_ifs.get(state.items)
    if memo is None:
        memo = ix.what_ifs.setdefault(state.items, {})
    key = frozenset([(name, type(value), value) for name, value in overrides.items()])  # 1 != 1.0; None: unknown
    found = memo.get(key)
    if found is not None:
        return found
    dropped = [name for name, value in overrides.items() if value is None]
    observed = _with(state.answers, overrides)
    facts, reached = GRAPH.revalue(state.facts, observed, frozenset(overrides), ix.kb)
    for name in dropped:
        facts.pop(name, None)
    # the rules that cannot change keep their outcome when only open facts get values (the possibility analysis
    # covers every value they could take); a fact dropped or answered otherwise may change any rule
    settled = state.settled if not dropped and all(state.is_open(name) for name in overrides) else ()
    rerun = ix.delta.run(state.facts, state.now, facts, reached, settled)
    decision = state.now if rerun is None or _same_decision(state, rerun[0], reached) else ix.decide(
        rerun[0], rerun[1], facts)
    if ix.what_ifs_kept >= _WHAT_IFS_KEPT:
        ix.what_ifs.clear()
        ix.what_ifs_kept = 0
    memo[key] = decision
    ix.what_ifs_kept += 1
    return decision


def _same_decision(state: State, fired: list[str], reached: frozenset[str]) -> bool:
    """Whether `decide` must give the state's own decision: the same rules fired, no fact `decide` reads itself
    changed (`facts_read`) and no conflict cap holds (then it reads what the fired rules read)."""
    now = state.now
    ix = state.ix
    return (len(fired) == len(now.fired) and now.fired.issuperset(fired) and reached.isdisjoint(ix.decide_reads)
            and ix.conflict_caps.isdisjoint(now.findings))


def _with(answers: Mapping[str, Value], overrides: Mapping[str, Value | None]) -> dict[str, Value]:
    """The answers with `overrides` set (None: left out)."""
    observed = dict(answers)
    for name, value in overrides.items():
        if value is None:
            observed.pop(name, None)
        else:
            observed[name] = value
    return observed


_PLANS_KEPT = 256  # session states kept per Expert and thread (tens of KiB each; sessions start alike)


def analysis(ix: Index, answers: Mapping[str, Value], unknowns: set[str]) -> tuple[State, Plan]:
    """The state and the plan for these answers (in this order) and unknowns. Both are shared by every session on
    this Expert in this thread that reaches the same answers (sessions start alike: the kind of job, the tools, the
    accelerator): callers must not change them. Per thread, because a State fills its caches lazily."""
    memo: dict[tuple[tuple[tuple[str, type, Value], ...], frozenset[str]], tuple[State, Plan]] | None
    memo = getattr(ix.local, "plans", None)
    if memo is None:
        memo = ix.local.plans = {}
    key = (tuple((name, type(value), value) for name, value in answers.items()), frozenset(unknowns))
    found = memo.get(key)
    if found is None:
        state = State(ix, answers, unknowns)
        found = (state, make_plan(state))
        if len(memo) >= _PLANS_KEPT:
            memo.clear()
        memo[key] = found
    return found


def make_plan(state: State) -> Plan:
    plan = Plan(state)
    ix = state.ix
    live_decisive = [lr for lr in ix.rules if lr.id in state.live and lr.id in state.relevant]
    if not live_decisive:
        plan.settled_soundly = True
        already_applied(plan)
        return plan
    cache: dict[tuple[tuple[str, Value | None], ...], Decision] = {}

    def answer_for(overrides: Mapping[str, Value | None]) -> Decision:
        key = tuple(sorted(overrides.items(), key=lambda kv: kv[0]))
        if key not in cache:
            cache[key] = what_if(state, overrides)
        return cache[key]

    def run(kind: Literal["leaf", "rule", "regime"], condition: str, overrides: dict[str, Value | None],
            rules: tuple[str, ...] = (), subject: str | None = None, regions: int = 1) -> None:
        answer = answer_for(overrides)
        if kind != "leaf" and weigh(state.now, answer)[0]:
            # keep only the overrides the change needs, so that facts along for the ride earn no credit
            for name in list(overrides):
                if len(overrides) == 1:
                    break
                trial = {k: v for k, v in overrides.items() if k != name}
                smaller = answer_for(trial)
                if weigh(state.now, smaller)[0]:
                    overrides, answer = trial, smaller
            if not set(rules) <= answer.fired:  # the change no longer comes from these rules: say only what was set
                condition = "if " + _describe(state, overrides)
        if kind != "leaf":
            condition = condition.format(_describe(state, overrides))
        key = tuple(sorted(overrides.items(), key=lambda kv: kv[0]))
        plan.probes.append(Probe(kind, condition, key, answer, rules, subject, regions))

    for leaf in state.open_leaves():  # `run` for a leaf probe, inlined: one override, nothing to describe or trim
        regions = fact_regions(ix, leaf)
        readers = tuple(ix.readers.get(leaf, []))
        for label, value in regions:
            key = ((leaf, value),)
            answer = cache.get(key)
            if answer is None:
                answer = cache[key] = what_if(state, {leaf: value})
            plan.probes.append(Probe("leaf", label, key, answer, readers, leaf, len(regions)))
    witness = Witness(state)
    by_regime: dict[str, list[LoadedRule]] = {}
    for lr in live_decisive:
        if lr.id in state.now.fired or not decisive(lr):
            continue
        if lr.rule.then.bottleneck:
            by_regime.setdefault(lr.rule.then.bottleneck.regime, []).append(lr)
        overrides = rule_witness(state, witness, lr)
        if overrides:
            run("rule", f"if rule {lr.id} fired ({{}})", dict(overrides), (lr.id,))
    for regime, rules in by_regime.items():
        if len(rules) < 2:
            continue
        merged: Constraints = {}
        used: list[str] = []
        for lr in sorted(rules, key=lambda r: -ix.kb.regimes.strengths[r.rule.then.bottleneck.strength]):  # type: ignore[union-attr]
            found = next(iter(itertools.islice(witness.of(lr.condition, True, merged, (lr.id,)), 1)), None)
            if found is not None:
                merged = found
                used.append(lr.id)
        overrides = witness.overrides(merged) if len(used) > 1 else None
        if overrides:
            run("regime", f"if the rules voting {regime} fired ({{}})", overrides, tuple(used))
    _credit(plan)
    already_applied(plan)
    return plan


def already_applied(plan: Plan) -> None:
    """The last question: which of the optimizations about to be recommended the job already uses (a fact of type
    `optimizations`, e.g. applied_optimizations; `decide` never recommends one already applied). No rule tests it,
    and its answer can only take recommendations away, so it is asked once no other answer can change the verdict or
    the recommendations, and only while something is recommended: one probe per recommended optimization, each the
    answer naming that one."""
    state = plan.state
    if plan.ranked or not state.now.recommended:
        return
    fact = next((name for name in state.ix.applied_facts if state.askable_open(name)), None)
    if fact is None:
        return
    recommended = sorted(state.now.recommended)
    share = 1.0 / len(recommended)
    for opt in recommended:
        probe = Probe("leaf", f"{fact} includes {opt}", ((fact, opt),), what_if(state, {fact: opt}), (), fact,
                      len(recommended))
        plan.probes.append(probe)
        weight = weigh(state.now, probe.answer)[0]
        if weight:
            plan.scores[fact] = plan.scores.get(fact, 0.0) + weight * share
            plan.credited.setdefault(fact, []).append((weight * share, probe, fact))
    if plan.scores.get(fact):
        plan.ranked = [fact]


_WITNESSES_KEPT = 8192  # rule witnesses kept per Expert (`rule_witness`)
_NOT_SEARCHED = object()


def rule_witness(state: State, witness: Witness, lr: LoadedRule) -> dict[str, Value | None] | None:
    """The values of the first of a rule's witnesses (at most MAX_WITNESSES tried) that sets some fact, or None.
    Memoised (`Index.witnesses`) by all the search reads of the state (`Index.witness_reads`): whether each fact
    it may test is open and, if not, its value; whether each finding it may follow is open and whether it holds.
    Shared: callers must not change it."""
    ix = state.ix
    facts, findings = ix.witness_reads[lr.id]
    known, concluded, opened = state.facts, state.now.findings, state.open_findings
    key = (lr.id, tuple([None if state.is_open(f) else (type(v := known.get(f)), v) for f in facts]),
           tuple([(f in opened, f in concluded) for f in findings]))
    memo = ix.witnesses
    cached = memo.get(key, _NOT_SEARCHED)  # one lookup: another thread may empty the memo in between
    if cached is not _NOT_SEARCHED:
        return cached  # type: ignore[return-value]
    found = None
    for boxes in itertools.islice(witness.of(lr.condition, True, {}, (lr.id,)), MAX_WITNESSES):
        overrides = witness.overrides(boxes)
        if overrides:
            found = overrides
            break
    if len(memo) >= _WITNESSES_KEPT:
        memo.clear()
    memo[key] = found
    return found


def _describe(state: State, overrides: Mapping[str, Value | None]) -> str:
    facts = state.ix.kb.facts
    return ", ".join(f"{name} unknown" if value is None else f"{name} = {format_value(facts.get(name), value)}"
                     for name, value in overrides.items())


def weigh(before: Decision, after: Decision) -> tuple[float, float]:
    """(decisive weight, scorecard-only weight) of a probe's answer against the answer now."""
    weight = 0.0
    if after.verdict != before.verdict:
        weight += _VERDICT_WEIGHT
    if after.recommended != before.recommended:
        weight += _RECOMMEND_WEIGHT
    minor = _SCORECARD_WEIGHT if after.bands != before.bands else 0.0
    return weight, minor


def _route_credit(routes: list[frozenset[str]]) -> dict[str, float]:
    """How much asking each fact settles a quantity with these minimal routes, whichever way the user answers: a value
    completes a share of its shortest route (1/size); "unknown" closes the share of routes that need the fact."""
    credit: dict[str, float] = {}
    for fact in {f for route in routes for f in route}:
        holding = [route for route in routes if fact in route]
        known = 1.0 / min(len(route) for route in holding)
        unknown = len(holding) / len(routes)
        credit[fact] = (known + unknown) / 2
    return credit


def _credit(plan: Plan) -> None:
    state = plan.state
    # (fact, its credit, the leaf it settles) per set of probed leaves: every region of a leaf probes the same set
    settles: dict[frozenset[str], list[tuple[str, float, str]]] = {}
    now = state.now
    for probe in plan.probes:
        if probe.answer is now:  # a what-if that kept the state's own decision changes nothing
            continue
        weight, minor = weigh(now, probe.answer)
        if weight == 0 and minor == 0:
            continue
        share = 1.0 / probe.regions if probe.kind == "leaf" else 1.0 / max(1, len(probe.leaves))
        leaves = probe.leaves
        credits = settles.get(leaves)
        if credits is None:
            ordered = sorted(leaves)
            routes = [frozenset[str]()]
            for leaf in ordered:
                routes = _first_unions(routes, state.routes(leaf))
            credits = settles[leaves] = [
                (fact, c, next((leaf for leaf in ordered if any(fact in r for r in state.routes(leaf))), fact))
                for fact, c in _route_credit(routes).items()]
        for fact, c, link in credits:
            if weight:
                plan.scores[fact] = plan.scores.get(fact, 0.0) + weight * share * c
                plan.credited.setdefault(fact, []).append((weight * share * c, probe, link))
            else:
                plan.minor[fact] = plan.minor.get(fact, 0.0) + minor * share * c
    ix = state.ix
    candidates = [f for f in plan.scores if state.askable_open(f)]

    def key(fact: str) -> tuple[int, float, int, int]:
        spec = ix.kb.facts[fact]
        first = 0 if spec.ask_first else 1
        priority = 0.0 if spec.ask_first else -(plan.scores[fact] + plan.minor.get(fact, 0.0)) / spec.cost
        return first, priority, spec.cost, ix.order[fact]

    plan.ranked = sorted(candidates, key=key)


def choose(ix: Index, state: State, plan: Plan) -> tuple[str, str | None]:
    """The best-ranked fact. A cheap context fact tested together with it goes first when some answer to it
    would leave the best fact without value (workload before phase: training drops phase)."""
    best = plan.ranked[0]
    spec = ix.kb.facts[best]
    if spec.ask_first:
        for gate in ix.askable:
            if ix.order[gate] >= ix.order[best]:
                break
            gate_spec = ix.kb.facts[gate]
            if (gate_spec.ask_first and gate_spec.cost <= spec.cost and gate in ix.conjoined.get(best, ())
                    and state.askable_open(gate) and _gate_closes(ix, state, gate, best)):
                return gate, best
    return best, None

def _gate_closes(ix: Index, state: State, gate: str, gated: str) -> bool:
    """Whether some answer to `gate` would leave `gated` with no value: no longer on the way to any fact a rule
    that can still change the answer tests (cheap), or else no value in the planner run on that answer."""
    spec = ix.kb.facts[gate]
    values: list[Value] = (list(spec.choices or []) if spec.type == "enum"
                           else [v for _, v in fact_regions(ix, gate)])
    trials: list[State] = []
    for value in values:
        trial = State(ix, {**state.answers, gate: value}, state.unknowns)
        if not any(gated in route for leaf in trial.open_leaves() for route in trial.routes(leaf)):
            return True
        trials.append(trial)
    return any(not make_plan(trial).scores.get(gated) for trial in trials)
