"""Guided consultation: one question at a time, and only questions whose answer can still change the verdict or
the recommendations.

`Consultation` keeps the user's answers (and "unknown"s) and, before each question, asks the rules what could still
change. Three kinds of what-if probe run on the rules (the shared `expert.engine.pure.PureEngine` over each rule's
compiled condition), each on a copy of the current facts:

* leaf probes: a fact some rule tests (observed or derived, e.g. ``io_overhead``) is set to one value in each region
  the rules' thresholds cut it into (below, at, between, above);
* rule probes: the facts an undecided rule needs are set so that it fires (through the findings it reads);
* regime probes: every undecided rule voting for one regime fires at once (their votes add up).

A probe *changes the answer* when the verdict or the set of recommended optimizations differs from now. An askable
fact earns the value of every probe it could settle: itself, or as an input of the formula that derives a tested
fact (`expert.derive.DERIVATIONS`), weighted by how much of the shortest way to that quantity it completes when
answered and how many of the ways it closes when unknown, divided by the fact's cost (knowledge_base/facts.yaml).
Cheap `ask_first` facts go first, but only when they pass the same value test (a cheaper context fact tested with
one of them goes before it when some answer to it would leave that fact without value: `workload` before `phase`,
as training drops phase). Before probing, a three-valued possibility analysis finds the rules that can still change
at all; when none of those can reach the verdict or the recommendations, nothing is left to ask. Otherwise the
session stops when no probe changes the answer, and says why. The lookahead is one probe deep, not a proof over
every combination of answers: tests/test_consult.py checks on every example, every rule-test case and random cases
that the questions asked reach the verdict and recommendations of the full facts.

Once the kind of job is settled (tools.yaml `consultation.available_tools.after`), one multiple-choice question
(`available_tools`) asks which of the tools measuring the questions still worth asking the user can run; the open
questions of every offered tool not chosen are closed at once (as "unknown"), so a user is never asked one by one for
measurements they cannot make. Facts an expert asks for in one breath (facts.yaml `questions`, e.g. the kind of job,
or the accelerator and its precision) are asked as one combined question when more than one of them is worth asking
(`expert.combined` reads the answer).

The class never prints: `Question`, `Why`, `Status` and `Turn` are pydantic models with a `text()` for front ends.
"""

from __future__ import annotations

import itertools
import math
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, StrictFloat, StrictInt, StrictStr, ValidationError

from . import combined
from .derive import DERIVATIONS, Derivation, DerivedValue, ReadTracking, check_consistency, could_apply, derive
from .engine.pure import PureEngine
from .errors import ObservationError, Problem
from .evaluate import LeafTrace, evaluate, negate_op
from .expert import Expert
from .knowledge import CombinedQuestion, FactSpec, KnowledgeBase
from .observations import Observation, Observations, convert, format_value, is_unknown
from .report import Report
from .rulebook import AllOf, Condition, FactTest, FindingRef, LoadedRule, NotOf, facts_used, findings_used, walk

Value = int | float | str
_Scalar = StrictInt | StrictFloat | StrictStr
Outcome3 = Literal["true", "false", "unknown"]

# Question-ordering weights (not domain thresholds): how much a probe that changes each part of the answer is worth.
_VERDICT_WEIGHT = 3.0
_RECOMMEND_WEIGHT = 2.0
_SCORECARD_WEIGHT = 0.25
_MAX_ROUTES = 12
_MAX_WITNESSES = 4
_MAX_FINDING_DEPTH = 4
_WHY_RULES = 8
_SOURCE = "consultation"
AVAILABLE_TOOLS = "available_tools"  # the one question that is not a fact: which tools the user can run
_ALL_WORDS = frozenset({"all", "every", "everything"})
_NONE_WORDS = frozenset({"none", "no-tool", "notool", "no tool", "nothing", "no"})


# ---- public models -------------------------------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Effect(_Model):
    """What one what-if would do to the answer: "io_overhead > 10 %: verdict undecided -> input"."""

    condition: str
    verdict_before: str | None
    verdict_after: str | None
    added: list[str] = []
    removed: list[str] = []
    scorecard: list[str] = []  # "mfu: n/a -> pass"
    rules: list[str] = []
    via: str | None = None  # the tested quantity the asked fact feeds ("io_overhead"), when it is not the fact itself

    @property
    def changes_answer(self) -> bool:
        return self.verdict_before != self.verdict_after or bool(self.added or self.removed)

    def text(self) -> str:
        parts: list[str] = []
        if self.verdict_before != self.verdict_after:
            parts.append(f"the verdict would become {self.verdict_after or 'undecided'} "
                         f"(now {self.verdict_before or 'undecided'})")
        if self.added:
            parts.append("it would recommend " + ", ".join(self.added))
        if self.removed:
            parts.append("it would withdraw " + ", ".join(self.removed))
        if not parts and self.scorecard:
            parts.append("only the scorecard would change (" + "; ".join(self.scorecard) + ")")
        if not parts:
            parts.append("the verdict and the recommendations would stay as they are")
        rules = f" [{', '.join(self.rules)}]" if self.rules and self.changes_answer else ""
        via = f" (it feeds {self.via})" if self.via else ""
        return f"{self.condition}{via}: {'; '.join(parts)}{rules}"


class Question(_Model):
    """The next question: which fact, how to ask for it, what is accepted, and why it is worth asking. For a
    combined question `fact` is the question's id (facts.yaml `questions`) and `facts` its member facts."""

    number: int  # 1 for the first question of the session
    fact: str
    text: str
    kind: Literal["fraction", "number", "integer", "enum", "hardware", "tools", "combined"]
    facts: list[str] = []  # the facts a combined question asks for
    unit: str | None = None
    choices: list[str] | None = None
    choice_help: dict[str, str] = {}  # what each choice means (for the tools question: the questions it answers)
    example: str | None = None
    accepted: str
    why: str
    effects: list[Effect] = []
    rules: list[str] = []
    measure: str | None = None  # "DCGM (dcgmi dmon): dcgmi dmon -e 1005 (DRAMA)"
    group: str | None = None  # the tool that measures it, when other open questions share it
    group_facts: list[str] = []
    ask_first: bool = False
    cost: int = 3
    score: float = 0.0

    def prompt(self) -> str:
        """The question with its unit or choices and an example, as one line."""
        hints: list[str] = []
        if self.kind == "tools":
            hints.append("list them, comma-separated: " + ", ".join(self.choices or []) + "; or all, or none")
        elif self.choices:
            hints.append("one of " + ", ".join(self.choices))
        elif self.kind == "fraction":
            hints.append("a share: 0.62 or 62%")
        elif self.unit:
            hints.append(f"in {self.unit}")
        if self.example:
            hints.append(f"e.g. {self.example}")
        return f"{self.text} ({'; '.join(hints)})" if hints else self.text


class Turn(_Model):
    """One entry of the transcript: the question, what was typed, the value kept, and why it was asked."""

    step: int
    fact: str
    question: str
    reason: str
    asked: bool = True  # False when the user volunteered the fact
    raw: str | None = None
    value: _Scalar | None = None  # canonical value (a combined question: its choice or values); None means unknown
    sets: dict[str, _Scalar] = {}  # a combined question: the member facts it set
    closes: list[str] = []  # facts this turn marked unknown (the fact, or every fact its tool measures)
    undone: bool = False
    verdict_after: str | None = None

    def text(self) -> str:
        shown = "unknown" if self.value is None else _show(self.value)
        mark = " [undone]" if self.undone else ""
        return f"{self.step}. {self.question} -> {shown}{self.closed()}{mark}\n   why asked: {self.reason}"

    def closed(self) -> str:
        """What the turn closed besides its own fact, as " (also unknown: a, b)"; "" when nothing."""
        others = [f for f in self.closes if f != self.fact]
        if not others:
            return ""
        if self.value is None and self.fact not in self.closes:  # a combined question answered "unknown"
            return f" ({', '.join(others)})"
        return f" (also unknown: {', '.join(others)})"


class RuleNeed(_Model):
    """A rule that reads the fact (directly or through a derived quantity), as it stands now."""

    rule_id: str
    title: str
    outcome: Outcome3
    concludes: str
    tests: list[str]  # every comparison of the rule with its current state ("gpu_util 0.97 > 0.95 (holds)")


class Why(_Model):
    """The MYCIN-style answer to "why do you ask?"."""

    fact: str
    question: str
    goal: str  # what the session is trying to settle
    hypotheses: list[str]
    rules: list[RuleNeed]
    via: list[str] = []  # "io_overhead = data_wait_s / step_time_s"
    known: dict[str, str] = {}
    effects: list[Effect] = []
    measure: str | None = None
    tools: list[str] = []  # for the tools question: "nvidia_smi (nvidia-smi): gpu_util"

    def text(self) -> str:
        lines = [f"Why ask about {self.fact}? {self.goal}"]
        if self.tools:
            lines.append("The tools offered and the questions each one answers:")
            lines.extend(f"  - {t}" for t in self.tools)
        lines.append("Hypotheses: " + ("; ".join(self.hypotheses) if self.hypotheses else "none yet"))
        if self.via:
            lines.append("It enters the rules through: " + "; ".join(self.via))
        if self.rules:
            lines.append("Rules that need it:")
            for r in self.rules:
                lines.append(f"  - {r.rule_id} ({r.title}) is {r.outcome}; if it fires: {r.concludes}")
                for t in r.tests:
                    lines.append(f"      {t}")
        if self.known:
            lines.append("Known so far: " + ", ".join(f"{k} = {v}" for k, v in self.known.items()))
        if self.effects:
            lines.append("What each answer would mean:")
            lines.extend(f"  - {e.text()}" for e in self.effects)
        if self.measure:
            lines.append(f"How to measure it: {self.measure}")
        return "\n".join(lines)


class Status(_Model):
    """Where the consultation stands: leading hypotheses, what is known and unknown, how many questions so far."""

    verdict: str | None
    verdict_title: str | None
    hypotheses: list[str]
    possible: list[str]  # regimes some undecided rule could still vote for
    recommended: list[str]
    answered: dict[str, str]
    unknown: list[str]
    questions_asked: int
    available_tools: list[str] | None = None  # the answer to the tools question, when it was asked
    finished: bool
    stop_reason: str | None = None

    def text(self) -> str:
        lines = [f"Verdict so far: {self.verdict_title or 'undecided'}"]
        if self.hypotheses:
            lines.append("Hypotheses: " + "; ".join(self.hypotheses))
        if self.possible:
            lines.append("Still possible: " + ", ".join(self.possible))
        if self.recommended:
            lines.append("Recommended so far: " + ", ".join(self.recommended))
        lines.append("Known: " + (", ".join(f"{k} = {v}" for k, v in self.answered.items()) or "nothing yet"))
        if self.available_tools is not None:
            lines.append("Tools available: " + (", ".join(self.available_tools) or "none"))
        if self.unknown:
            lines.append("Unknown: " + ", ".join(self.unknown))
        lines.append(f"Questions asked: {self.questions_asked}")
        if self.stop_reason:
            lines.append(f"Finished: {self.stop_reason}")
        return "\n".join(lines)


class SessionFile(_Model):
    """The saved session (`Consultation.to_json`): every turn in order; the state is replayed from them."""

    schema_version: Literal[1] = 1
    kind: Literal["dam-consultation"] = "dam-consultation"
    created: str
    updated: str
    turns: list[Turn] = []
    finished: bool = False
    stop_reason: str | None = None
    stopped_by_user: bool = False
    verdict: str | None = None
    questions_asked: int = 0


# ---- static index of the rules (one per Expert) --------------------------------------------------------------------


class _Index:
    """What the question planner needs from the rules and the vocabulary, computed once per Expert."""

    def __init__(self, expert: Expert) -> None:
        self.kb: KnowledgeBase = expert.kb
        self.ruleset = expert.ruleset
        self.rules: list[LoadedRule] = sorted(expert.ruleset.rules.values(), key=lambda lr: (lr.stratum, lr.id))
        self.engine = PureEngine(expert.ruleset)
        self.askable = [name for name, spec in self.kb.facts.items() if spec.askable]
        self.order = {name: i for i, name in enumerate(self.kb.facts)}
        self.derivations: dict[str, list[Derivation]] = {}
        for d in DERIVATIONS:
            self.derivations.setdefault(d.output, []).append(d)
        self.tests: dict[str, list[tuple[str, Any]]] = {}
        self.readers: dict[str, list[str]] = {}  # fact -> rules testing it
        for lr in self.rules:
            for node in _fact_tests(lr.condition):
                ops = self.tests.setdefault(node.fact, [])
                for op_const in node.ops():
                    if op_const not in ops:
                        ops.append(op_const)
            for fact in facts_used(lr.condition):
                self.readers.setdefault(fact, []).append(lr.id)
        self.producers = expert.ruleset.producers
        # evidence caps (knowledge_base/regimes.yaml) can take a verdict away, so the rules concluding them decide too
        self.caps = [(c.finding, self.kb.regimes.strengths[c.max_strength]) for c in self.kb.regimes.evidence_caps]
        capping = {finding for finding, _ in self.caps}
        direct = {lr.id for lr in self.rules if _decisive(lr)
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
        self.tables = {regime: table for regime, (_, table) in expert.ruleset.tables.items()}
        regimes = self.kb.regimes
        # what each rule concludes that `_answer_of` reads: (regime, strength) vote, recommended and wasted ids
        self.outcomes: dict[str, tuple[tuple[str, int] | None, tuple[str, ...], tuple[str, ...]]] = {}
        for lr in self.rules:
            then = lr.rule.then
            vote = (then.bottleneck.regime, regimes.strengths[then.bottleneck.strength]) if then.bottleneck else None
            self.outcomes[lr.id] = (vote, tuple(r.id for r in then.recommend), tuple(w.id for w in then.waste))
        self.precedence = {name: i for i, name in enumerate(regimes.precedence)}
        self.strength_names = {v: k for k, v in regimes.strengths.items()}
        self.verdict_threshold = regimes.strengths[regimes.verdict_min_strength]
        self.conjoined: dict[str, set[str]] = {}  # fact -> facts tested in the same `all` of some rule
        for lr in self.rules:
            for conjunction in _all_nodes(lr.condition):
                together = {t.fact for t in _fact_tests(conjunction)}
                for name in together:
                    self.conjoined.setdefault(name, set()).update(together - {name})
        self.question_of: dict[str, CombinedQuestion] = {
            name: q for q in self.kb.questions.values() for name in q.facts}
        self.tool_of: dict[str, str] = {}
        for name, spec in self.kb.facts.items():
            m = self.kb.tools.measurements.get(spec.measure or name)
            if spec.askable and m is not None:
                self.tool_of[name] = m.tool


def _decisive(lr: LoadedRule) -> bool:
    then = lr.rule.then
    return bool(then.bottleneck or then.recommend or then.waste)


def _fact_tests(node: Condition) -> Iterator[FactTest]:
    return (n for n in walk(node) if isinstance(n, FactTest))


def _all_nodes(node: Condition) -> Iterator[AllOf]:
    return (n for n in walk(node) if isinstance(n, AllOf))


_INDEXES: weakref.WeakKeyDictionary[Expert, _Index] = weakref.WeakKeyDictionary()


def _index(expert: Expert) -> _Index:
    found = _INDEXES.get(expert)
    if found is None:
        found = _INDEXES[expert] = _Index(expert)
    return found


# ---- the answer as the planner sees it -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Answer:
    """What the user cares about: the verdict, the recommended set, the scorecard bands (and the fired rules)."""

    verdict: str | None
    recommended: frozenset[str]
    bands: tuple[str, ...]
    candidates: tuple[tuple[str, str, int], ...]  # (regime, strength, score), best first
    fired: frozenset[str]
    findings: frozenset[str]


def _answer_of(ix: _Index, facts: Mapping[str, Value]) -> _Answer:
    """Verdict, recommended set and scorecard bands, decided exactly as `expert.diagnosis.build_report` decides them
    (tests/test_consult.py checks the two agree), without building a Report."""
    result = ix.engine.run(facts)
    fired_ids, findings = result.fired, result.findings
    votes: dict[str, list[int]] = {}
    proposals: set[str] = set()
    wasted: set[str] = set()
    for rule_id in fired_ids:
        vote, recommends, wastes = ix.outcomes[rule_id]
        if vote is not None:
            votes.setdefault(vote[0], []).append(vote[1])
        proposals.update(recommends)
        wasted.update(wastes)
    order = ix.precedence
    cap = min((strength for finding, strength in ix.caps if finding in findings), default=max(ix.strength_names))
    ranked = sorted(votes.items(), key=lambda kv: (-min(cap, max(kv[1])), -sum(kv[1]), order[kv[0]]))
    names = ix.strength_names
    candidates = tuple((regime, names[min(cap, max(s))], sum(s)) for regime, s in ranked)
    verdict = ranked[0][0] if ranked and min(cap, max(ranked[0][1])) >= ix.verdict_threshold else None
    table = ix.tables.get(verdict) if verdict else None
    if table is not None:
        proposals.update(table.effective)
        wasted.update(w.id for w in table.wasted)
    bands = []
    for metric in ix.kb.scorecard.metrics:
        raw = facts.get(metric.fact)
        bands.append(metric.band(float(raw) if isinstance(raw, (int, float)) else None))
    return _Answer(verdict, frozenset(proposals - wasted), tuple(bands), candidates, frozenset(fired_ids),
                   frozenset(findings))


# ---- what is still open --------------------------------------------------------------------------------------------


def _and3(a: str, b: str) -> str:
    if "false" in (a, b):
        return "false"
    return "unknown" if "unknown" in (a, b) else "true"


def _or3(a: str, b: str) -> str:
    if "true" in (a, b):
        return "true"
    return "unknown" if "unknown" in (a, b) else "false"


_FLIP3 = {"true": "false", "false": "true", "unknown": "unknown"}
_ALL3 = frozenset({"true", "false", "unknown"})


class _State:
    """One state of the session: the answers, the derived facts, what is open and the answer now."""

    def __init__(self, ix: _Index, answers: Mapping[str, Value], unknowns: set[str]) -> None:
        self.ix = ix
        self.answers = dict(answers)
        self.unknowns = set(unknowns)
        self.derived: dict[str, DerivedValue] = derive(self.answers, ix.kb)
        self.facts: dict[str, Value] = {**self.answers, **{n: d.value for n, d in self.derived.items()}}
        self.now = _answer_of(ix, self.facts)
        self._open: dict[str, bool] = {}
        self._states: dict[int, Literal["fixed", "open", "impossible"]] = {}
        self._routes: dict[str, list[frozenset[str]]] = {}
        self.open_findings: set[str] = set()
        self.live: set[str] = set()
        self._possibility()

    # which facts could still change ------------------------------------------------------------------------------

    def askable_open(self, name: str) -> bool:
        """The user could still be asked for it: askable, not answered, not unknown. A fact the expert derived
        (kind `both`) stays askable: a measured value overrides the estimate and may differ from it."""
        spec = self.ix.kb.facts.get(name)
        return spec is not None and spec.askable and name not in self.answers and name not in self.unknowns

    def _derivation_state(self, d: Derivation) -> Literal["fixed", "open", "impossible"]:
        """Whether a derivation is settled ("fixed": it produced the value and nothing it reads can change), could
        still produce or change its output ("open"), or cannot apply. It is run on a view of the facts that records
        every fact it reads, so gates inside the formula (LLM decode only) count as inputs too."""
        key = id(d)
        if key in self._states:
            return self._states[key]
        self._states[key] = "impossible"  # guards against cycles
        state: Literal["fixed", "open", "impossible"]
        if any(not (i in self.facts or self.is_open(i)) for i in d.inputs):
            state = "impossible"
        else:
            missing = any(i not in self.facts for i in d.inputs)
            view = ReadTracking(self.facts)
            try:
                result = d.compute(view, self.ix.kb)
                complete = True
            except (KeyError, ArithmeticError, ValueError, TypeError):
                result, complete = None, False
            if complete and result is None:  # the formula declined with what it read
                state = "open" if could_apply(d, self.facts, self.ix.kb, self.is_open) else "impossible"
            elif missing:
                state = "open"
            elif not complete:
                state = "impossible"
            elif any(self.is_open(k) for k in (*d.inputs, *view.read)):
                state = "open"
            else:
                done = self.derived.get(d.output)
                state = "fixed" if done is not None and done.formula == d.formula else "impossible"
        self._states[key] = state
        return state

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
                for d in self.ix.derivations.get(name, []):
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
            for d in self.ix.derivations.get(name, []):
                state = self._derivation_state(d)
                if state == "fixed":
                    break
                if state != "open":
                    continue
                combos = [frozenset[str]()]
                for inp in d.inputs:
                    combos = [c | r for c in combos for r in self.routes(inp)][:_MAX_ROUTES]
                out.extend(combos)
            out = _minimal(out)
        self._routes[name] = out
        return out

    # which rules could still change ------------------------------------------------------------------------------

    def possible(self, node: Condition) -> frozenset[str]:
        """Every outcome the condition could still take as open facts get answered (three-valued)."""
        if isinstance(node, FactTest):
            if not self.is_open(node.fact):
                return frozenset({evaluate(node, self.facts, self.now.findings)})
            return _ALL3 if node.ops() else frozenset({"true", "false"})
        if isinstance(node, FindingRef):
            if node.finding in self.open_findings:
                return frozenset({"true", "false"})
            return frozenset({"true" if node.finding in self.now.findings else "false"})
        if isinstance(node, NotOf):
            return frozenset(_FLIP3[o] for o in self.possible(node.not_))
        children = node.all if isinstance(node, AllOf) else node.any  # type: ignore[union-attr]
        combine = _and3 if isinstance(node, AllOf) else _or3
        acc = self.possible(children[0])
        for child in children[1:]:
            other = self.possible(child)
            acc = frozenset(combine(a, b) for a in acc for b in other)
        return acc

    def _possibility(self) -> None:
        while True:
            always: set[str] = set()
            can_change: set[str] = set()
            for lr in self.ix.rules:
                outcomes = self.possible(lr.condition)
                if outcomes == {"true"}:
                    always.add(lr.id)
                elif "true" in outcomes:
                    can_change.add(lr.id)
            opened = {f for f, producers in self.ix.producers.items()
                      if not any(p in always for p in producers) and any(p in can_change for p in producers)}
            if opened <= self.open_findings:
                self.live = can_change
                return
            self.open_findings |= opened

    def open_leaves(self) -> list[str]:
        """Open facts tested by rules that can still change and can reach the verdict or the recommendations."""
        out: list[str] = []
        for lr in self.ix.rules:
            if lr.id not in self.live or lr.id not in self.ix.relevant:
                continue
            for fact in facts_used(lr.condition):
                if fact not in out and self.is_open(fact):
                    out.append(fact)
        return out


def _minimal(sets: list[frozenset[str]]) -> list[frozenset[str]]:
    out: list[frozenset[str]] = []
    for s in sorted(set(sets), key=lambda s: (len(s), sorted(s))):
        if not any(o <= s for o in out):
            out.append(s)
    return out[:_MAX_ROUTES]


# ---- what-if probes ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Probe:
    kind: Literal["leaf", "rule", "regime"]
    condition: str
    overrides: tuple[tuple[str, Value | None], ...]
    answer: _Answer
    rules: tuple[str, ...] = ()
    subject: str | None = None  # the leaf fact of a leaf probe
    regions: int = 1  # how many regions the leaf probe's fact has

    @property
    def leaves(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.overrides)


def _domain(spec: FactSpec | None) -> tuple[float | None, float | None, bool]:
    """(low, high, integer) of a numeric fact; derived quantities are never negative."""
    if spec is None:
        return 0.0, None, False
    if spec.type == "fraction":
        return 0.0, 1.0, False
    low = spec.min if spec.min is not None else 0.0
    return low, spec.max, spec.type == "integer"


def _regions(ix: _Index, name: str) -> list[tuple[str, Value]]:
    """One (label, value) per region the rules' thresholds cut this fact into."""
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
    low, high, integer = _domain(spec)
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
class _Box:
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

    def with_op(self, op: str, const: Any) -> _Box | None:
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


def _example(spec: FactSpec | None, kb: KnowledgeBase) -> float | None:
    if spec is None or spec.example is None:
        return None
    try:
        value = convert(spec, spec.example, kb)
    except ValueError:
        return None
    return float(value) if isinstance(value, (int, float)) else None


def _pick(spec: FactSpec | None, box: _Box, kb: KnowledgeBase) -> tuple[bool, Value | None]:
    """A value satisfying the box: (ok, value); value None means "leave the fact unknown"."""
    if box.present is False:
        return True, None
    if spec is not None and spec.type in ("enum", "hardware"):
        pool = [c for c in (box.allowed or spec.choices or []) if c not in box.excluded]
        return (True, pool[0]) if pool else (False, None)
    if box.allowed is not None:
        nums = [v for v in box.allowed if isinstance(v, (int, float)) and v not in box.excluded]
        return (True, nums[0]) if nums else (False, None)
    low, high, integer = _domain(spec)
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
        example = _example(spec, kb)
        middle = (lo + hi) / 2 if lo is not None and hi is not None else 1.0
        value = example if example is not None else middle
    above_low = lo is None or value > lo or (value == lo and lo_incl)
    below_high = hi is None or value < hi or (value == hi and hi_incl)
    ok = above_low and below_high and value not in box.excluded
    return ok, (int(value) if integer else value)


class _Witness:
    """Searches fact values that make a rule fire (best effort; the engine run decides what really happens)."""

    def __init__(self, state: _State) -> None:
        self.state = state

    def of(self, node: Condition, want: bool, boxes: dict[str, _Box],
           stack: tuple[str, ...]) -> Iterator[dict[str, _Box]]:
        st = self.state
        if isinstance(node, FactTest):
            name = node.fact
            if not st.is_open(name):
                if evaluate(node, st.facts, st.now.findings) == ("true" if want else "false"):
                    yield boxes
                return
            box = boxes.get(name, _Box())
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

    def _chain(self, children: list[Condition], want: bool, boxes: dict[str, _Box],
               stack: tuple[str, ...]) -> Iterator[dict[str, _Box]]:
        if not children:
            yield boxes
            return
        for partial in itertools.islice(self.of(children[0], want, boxes, stack), _MAX_WITNESSES):
            yield from self._chain(children[1:], want, partial, stack)

    def overrides(self, boxes: dict[str, _Box]) -> dict[str, Value | None] | None:
        out: dict[str, Value | None] = {}
        for name, box in boxes.items():
            ok, value = _pick(self.state.ix.kb.facts.get(name), box, self.state.ix.kb)
            if not ok:
                return None
            out[name] = value
        return out


@dataclass
class _Plan:
    """The planner's view of one state: the answer now, every probe, and the ranked questions."""

    state: _State
    probes: list[_Probe] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)
    minor: dict[str, float] = field(default_factory=dict)  # scorecard-only value
    credited: dict[str, list[tuple[float, _Probe, str]]] = field(default_factory=dict)  # (value, probe, via leaf)
    settled_soundly: bool = False
    ranked: list[str] = field(default_factory=list)


def _what_if(state: _State, overrides: Mapping[str, Value | None]) -> _Answer | None:
    observed = dict(state.answers)
    dropped = [name for name, value in overrides.items() if value is None]
    for name, value in overrides.items():
        if value is None:
            observed.pop(name, None)
        else:
            observed[name] = value
    try:
        facts = derive_values(observed, state.ix.kb)
    except (ArithmeticError, ValueError, KeyError):
        return None
    for name in dropped:
        facts.pop(name, None)
    return _answer_of(state.ix, facts)


_DERIVATION_INPUTS = tuple((d, frozenset(d.inputs)) for d in DERIVATIONS)


def derive_values(observed: Mapping[str, Value], kb: KnowledgeBase) -> dict[str, Value]:
    """The observed facts with every derived value, as `expert.derive.derive` computes them (same order, observed
    values never overwritten), without the provenance records or the consistency check: what-if probes need values."""
    facts: dict[str, Value] = dict(observed)
    for d, inputs in _DERIVATION_INPUTS:
        if d.output in facts or not inputs <= facts.keys():
            continue
        result = d.compute(facts, kb)
        if result is not None:
            facts[d.output] = result.value
    return facts


def _plan(state: _State) -> _Plan:
    plan = _Plan(state)
    ix = state.ix
    live_decisive = [lr for lr in ix.rules if lr.id in state.live and lr.id in ix.relevant]
    if not live_decisive:
        plan.settled_soundly = True
        return plan
    cache: dict[tuple[tuple[str, Value | None], ...], _Answer | None] = {}

    def answer_for(overrides: Mapping[str, Value | None]) -> _Answer | None:
        key = tuple(sorted(overrides.items(), key=lambda kv: kv[0]))
        if key not in cache:
            cache[key] = _what_if(state, overrides)
        return cache[key]

    def run(kind: Literal["leaf", "rule", "regime"], condition: str, overrides: dict[str, Value | None],
            rules: tuple[str, ...] = (), subject: str | None = None, regions: int = 1) -> None:
        answer = answer_for(overrides)
        if answer is None:
            return
        if kind != "leaf" and _weight(state.now, answer)[0]:
            # keep only the overrides the change needs, so that facts along for the ride earn no credit
            for name in list(overrides):
                if len(overrides) == 1:
                    break
                trial = {k: v for k, v in overrides.items() if k != name}
                smaller = answer_for(trial)
                if smaller is not None and _weight(state.now, smaller)[0]:
                    overrides, answer = trial, smaller
            if not set(rules) <= answer.fired:  # the change no longer comes from these rules: say only what was set
                condition = "if " + _describe(state, overrides)
        if kind != "leaf":
            condition = condition.format(_describe(state, overrides))
        key = tuple(sorted(overrides.items(), key=lambda kv: kv[0]))
        plan.probes.append(_Probe(kind, condition, key, answer, rules, subject, regions))

    for leaf in state.open_leaves():
        regions = _regions(ix, leaf)
        for label, value in regions:
            run("leaf", label, {leaf: value}, tuple(ix.readers.get(leaf, [])), leaf, len(regions))
    witness = _Witness(state)
    by_regime: dict[str, list[LoadedRule]] = {}
    for lr in live_decisive:
        if lr.id in state.now.fired or not _decisive(lr):
            continue
        if lr.rule.then.bottleneck:
            by_regime.setdefault(lr.rule.then.bottleneck.regime, []).append(lr)
        for boxes in itertools.islice(witness.of(lr.condition, True, {}, (lr.id,)), _MAX_WITNESSES):
            overrides = witness.overrides(boxes)
            if overrides:
                run("rule", f"if rule {lr.id} fired ({{}})", overrides, (lr.id,))
                break
    for regime, rules in by_regime.items():
        if len(rules) < 2:
            continue
        merged: dict[str, _Box] = {}
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
    return plan


def _describe(state: _State, overrides: Mapping[str, Value | None]) -> str:
    facts = state.ix.kb.facts
    return ", ".join(f"{name} unknown" if value is None else f"{name} = {format_value(facts.get(name), value)}"
                     for name, value in overrides.items())


def _weight(before: _Answer, after: _Answer) -> tuple[float, float]:
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


def _credit(plan: _Plan) -> None:
    state = plan.state
    for probe in plan.probes:
        weight, minor = _weight(state.now, probe.answer)
        if weight == 0 and minor == 0:
            continue
        share = 1.0 / probe.regions if probe.kind == "leaf" else 1.0 / max(1, len(probe.leaves))
        routes = [frozenset[str]()]
        for leaf in sorted(probe.leaves):
            routes = [a | b for a in routes for b in state.routes(leaf)][:_MAX_ROUTES]
        credit = _route_credit(routes)
        for fact, c in credit.items():
            if weight:
                link = next((leaf for leaf in sorted(probe.leaves) if any(fact in r for r in state.routes(leaf))), fact)
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


# ---- formatting ----------------------------------------------------------------------------------------------------


def _context_clause(fact: str, credited: list[tuple[float, _Probe, str]], name: str = "it") -> str:
    """Why the rules need a context fact: "the rules test it directly" or "... need it to work out mfu, ..."."""
    leaves = list(dict.fromkeys(link for _, _, link in credited))
    if fact in leaves:
        return f"the rules test {name} directly"
    return f"the rules need {name} to work out {', '.join(leaves[:4])}"


def _show(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# ---- the consultation ----------------------------------------------------------------------------------------------


class Consultation:
    """A guided consultation: `next_question()`, then `answer()` / `unknown()` until it returns None.

    >>> c = Consultation()
    >>> q = c.next_question()
    >>> q.fact, q.facts
    ('job', ['workload', 'phase'])
    >>> _ = c.answer("job", "training")
    >>> c.answers, c.status().questions_asked
    ({'workload': 'training'}, 1)
    """

    def __init__(self, expert: Expert | None = None, *, known: Mapping[str, Any] | None = None,
                 ask_tools: bool = True) -> None:
        if expert is None:
            from . import default_expert

            expert = default_expert()
        self.expert = expert
        self._ix = _index(expert)
        self._turns: list[Turn] = []
        self._created = _now()
        self._updated = self._created
        self._pending: Question | None = None
        self._stopped_by_user: str | None = None
        self._cache: tuple[int, _State, _Plan] | None = None
        self._version = 0
        self.ask_tools = ask_tools  # False: never ask which tools the user can run (one fact at a time)
        for name, raw in (known or {}).items():
            if is_unknown(raw):
                self.unknown(name)
            else:
                self.answer(name, raw)

    # state ----------------------------------------------------------------------------------------------------------

    @property
    def transcript(self) -> list[Turn]:
        """Every turn so far, in order, undone ones included (marked)."""
        return [t.model_copy() for t in self._turns]

    @property
    def answers(self) -> dict[str, Value]:
        """The current answers (canonical values), in the order given."""
        return self._replay()[0]

    @property
    def unknowns(self) -> list[str]:
        return sorted(self._replay()[1])

    @property
    def questions_asked(self) -> int:
        """Questions the session asked and the user answered (values or unknown), not counting undone ones."""
        return sum(1 for t in self._turns if t.asked and not t.undone)

    def _replay(self) -> tuple[dict[str, Value], set[str]]:
        answers: dict[str, Value] = {}
        unknowns: set[str] = set()
        for turn in self._turns:
            if turn.undone:
                continue
            if turn.fact == AVAILABLE_TOOLS or turn.fact in self._ix.kb.questions:  # sets members, closes others
                for name, value in turn.sets.items():
                    answers.pop(name, None)
                    answers[name] = value
                    unknowns.discard(name)
                for name in turn.closes:
                    answers.pop(name, None)
                    unknowns.add(name)
                continue
            if turn.value is None:
                for name in turn.closes or [turn.fact]:
                    answers.pop(name, None)
                    unknowns.add(name)
            else:
                answers.pop(turn.fact, None)
                answers[turn.fact] = turn.value
                unknowns.discard(turn.fact)
        return answers, unknowns

    def _analysis(self) -> tuple[_State, _Plan]:
        if self._cache is None or self._cache[0] != self._version:
            answers, unknowns = self._replay()
            state = _State(self._ix, answers, unknowns)
            self._cache = (self._version, state, _plan(state))
        return self._cache[1], self._cache[2]

    def _changed(self) -> None:
        self._version += 1
        self._updated = _now()
        self._pending = None

    # asking ---------------------------------------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        return self.stop_reason is not None

    @property
    def stop_reason(self) -> str | None:
        """Why the session has no more questions (None while it has)."""
        if self._stopped_by_user:
            return self._stopped_by_user
        state, plan = self._analysis()
        if plan.ranked:
            return None
        return self._why_stopped(state, plan)

    def _why_stopped(self, state: _State, plan: _Plan) -> str:
        verdict = state.now.verdict
        title = self._ix.kb.regimes.regimes[verdict].title if verdict else "undecided"
        n_rec = len(state.now.recommended)
        what = f"the verdict ({title}) and the {n_rec} recommendation{'s' if n_rec != 1 else ''}"
        if plan.settled_soundly:
            return (f"no question left can change {what}: every rule that could still fire or stop firing "
                    "only adds findings, axis notes or measurements")
        others = sorted({f for p in plan.probes for f in p.leaves if state.askable_open(f)})
        tail = f" ({len(others)} other facts could only add detail)" if others else ""
        return (f"no answer to the remaining questions can change {what}, alone or with the other facts an "
                f"undecided rule needs{tail}")

    def next_question(self) -> Question | None:
        """The most valuable question now, or None when no answer can change the verdict or the recommendations."""
        if self._stopped_by_user:
            return None
        state, plan = self._analysis()
        if not plan.ranked:
            return None
        offer = self._tools_due(state, plan)
        if offer:
            self._pending = self._tools_question(offer)
            return self._pending
        fact, gated = self._choose(state, plan)
        together = self._combined(state, plan, fact, gated)
        if together is not None:
            self._pending = self._combined_question(state, plan, together, fact, gated)
        else:
            self._pending = self._question(state, plan, fact, gated)
        return self._pending

    # combined questions ---------------------------------------------------------------------------------------------

    def _combined(self, state: _State, plan: _Plan, fact: str, gated: str | None) -> CombinedQuestion | None:
        """The combined question to ask instead of `fact`: every member still open, and another member worth asking
        too (or the one `fact` is asked before)."""
        question = self._ix.question_of.get(fact)
        if question is None or not all(state.askable_open(name) for name in question.facts):
            return None
        others = [name for name in question.facts if name != fact]
        return question if any(name == gated or plan.scores.get(name) for name in others) else None

    def _combined_question(self, state: _State, plan: _Plan, question: CombinedQuestion, fact: str,
                           gated: str | None) -> Question:
        one = self._question(state, plan, fact, gated)
        specs = [self._ix.kb.facts[name] for name in question.facts]
        if specs[question.facts.index(fact)].ask_first:
            clauses = [f"{fact} decides whether {gated} matters" if name == fact and gated is not None
                       else _context_clause(name, plan.credited[name], name)
                       for name in question.facts if (name == fact and gated is not None) or plan.credited.get(name)]
            why = f"a cheap context question, asked first: {'; '.join(clauses)}" if clauses else one.why
        else:
            others = [name for name in question.facts if name != fact]
            why = f"{fact}: {one.why} ({', '.join(others)} in the same breath)"
        shared = self._shared_tool(question) is not None  # one tool measures every member: keep its hints
        group = [name for name in one.group_facts if name not in question.facts] if shared else []
        return one.model_copy(update={
            "fact": question.id, "text": question.question, "kind": "combined", "facts": list(question.facts),
            "unit": None, "choices": [c.answer for c in question.choices] if question.choices else None,
            "choice_help": {c.answer: c.help for c in question.choices or []}, "example": question.example,
            "accepted": combined.accepted(question, self._ix.kb), "why": why,
            "measure": one.measure if shared else None, "group": one.group if group else None, "group_facts": group,
            "ask_first": all(s.ask_first for s in specs), "cost": max(s.cost for s in specs),
            "score": round(sum(plan.scores.get(name, 0.0) for name in question.facts), 4),
        })

    def _shared_tool(self, question: CombinedQuestion) -> str | None:
        """The tool that measures every member of a combined question, if one does."""
        tools = {self._ix.tool_of.get(name) for name in question.facts}
        return next(iter(tools)) if len(tools) == 1 else None

    def _answer_combined(self, question: CombinedQuestion, value: Any, raw: str | None,
                         also: Sequence[str] = ()) -> Turn:
        """Record an answer to a combined question: the members it gives are set, the others (and `also`) become
        unknown."""
        try:
            values = combined.parse(question, value, self._ix.kb)
        except ValueError as exc:
            raise ObservationError([Problem(question.id, str(exc),
                                            f"accepted: {combined.accepted(question, self._ix.kb)}")],
                                   title="that answer is not valid") from exc
        sets = {name: v for name, v in values.items() if v is not None}
        answers, _ = self._replay()
        check_consistency({**{k: v for k, v in answers.items() if k not in values}, **sets})
        pending = self._pending if self._pending is not None and self._pending.fact == question.id else None
        if raw is None:
            raw = ", ".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, Mapping) else str(value)
        turn = Turn(step=len(self._turns) + 1, fact=question.id, question=question.question,
                    reason=pending.why if pending else "volunteered by the user", asked=pending is not None, raw=raw,
                    value=combined.label(question, values, self._ix.kb), sets=sets,
                    closes=[name for name, v in values.items() if v is None] + list(also))
        return self._record(turn)

    def _why_combined(self, question: CombinedQuestion) -> Why:
        """"Why" for a combined question: its members' reasons together."""
        parts = [self.why(name) for name in question.facts]
        rules: dict[str, RuleNeed] = {}
        for part in parts:
            for need in part.rules:
                rules.setdefault(need.rule_id, need)
        state, plan = self._analysis()
        worth = [name for name in question.facts if plan.scores.get(name) and state.askable_open(name)]
        goal = (f"Its answer can still change the verdict or the recommendations (through {', '.join(worth)})."
                if worth else parts[0].goal)
        return Why(fact=question.id, question=question.question, goal=goal, hypotheses=parts[0].hypotheses,
                   rules=list(rules.values())[:_WHY_RULES], via=list(dict.fromkeys(v for p in parts for v in p.via)),
                   known=parts[0].known, effects=[e for p in parts for e in p.effects][:8])

    # the tools question ---------------------------------------------------------------------------------------------

    def _tools_answer(self) -> Turn | None:
        """The answer to the tools question now in force (None when it was not answered or was taken back)."""
        return next((t for t in reversed(self._turns) if t.fact == AVAILABLE_TOOLS and not t.undone), None)

    def _tool_offer(self, plan: _Plan) -> dict[str, list[str]]:
        """Tool id -> the questions still worth asking that it answers, in the order of tools.yaml."""
        found: dict[str, list[str]] = {}
        for fact in plan.ranked:
            tool = self._ix.tool_of.get(fact)
            if tool:
                found.setdefault(tool, []).append(fact)
        return {t: found[t] for t in self._ix.kb.tools.tools if t in found}

    def _tools_due(self, state: _State, plan: _Plan) -> dict[str, list[str]] | None:
        """The offer, when the tools question is due: not answered yet, the facts it waits for settled (tools.yaml
        `consultation.available_tools.after`), and at least two questions worth asking need a tool."""
        if not self.ask_tools or self._tools_answer() is not None:
            return None
        if any(name in plan.scores and state.askable_open(name)
               for name in self._ix.kb.tools.consultation.available_tools.after):
            return None
        offer = self._tool_offer(plan)
        return offer if sum(len(facts) for facts in offer.values()) >= 2 else None

    def _tools_question(self, offer: Mapping[str, list[str]]) -> Question:
        tools = self._ix.kb.tools.tools
        wording = self._ix.kb.tools.consultation.available_tools
        n = sum(len(facts) for facts in offer.values())
        return Question(
            number=self.questions_asked + 1, fact=AVAILABLE_TOOLS, text=wording.question, kind="tools",
            choices=list(offer), choice_help={t: f"{tools[t].name}: {', '.join(f)}" for t, f in offer.items()},
            example=", ".join(list(offer)[:2]), accepted=self._tools_accepted(list(offer)),
            why=wording.why.format(questions=n, tools=len(offer)),
            group_facts=[f for facts in offer.values() for f in facts], cost=1,
        )

    @staticmethod
    def _tools_accepted(offered: Sequence[str]) -> str:
        return f"tool ids or names, comma-separated, from {', '.join(offered)}; or all; or none"

    def _parse_tools(self, value: Any, offered: Sequence[str]) -> list[str] | None:
        """The tool ids named in an answer (ids or names, any case); None for "unknown"."""
        if isinstance(value, str):
            word = value.strip().casefold()
            if word in _NONE_WORDS:
                return []
            if is_unknown(value):
                return None
            if word in _ALL_WORDS:
                return list(offered)
            items = [part.strip() for part in value.replace(";", ",").split(",") if part.strip()]
        elif isinstance(value, (list, tuple, set, frozenset)):
            items = [str(v).strip() for v in value if str(v).strip()]
            if len(items) == 1 and items[0].casefold() in _ALL_WORDS:
                return list(offered)
            if len(items) == 1 and items[0].casefold() in _NONE_WORDS:
                return []
        else:
            raise ObservationError([Problem(AVAILABLE_TOOLS, f"expected a list of tools, got {value!r}",
                                            f"accepted: {self._tools_accepted(offered)}")],
                                   title="that answer is not valid")
        lookup: dict[str, str] = {}
        for tool_id, tool in self._ix.kb.tools.tools.items():
            for key in (tool_id, tool_id.replace("_", "-"), tool_id.replace("_", " "), tool.name,
                        tool.name.split(" (")[0]):
                lookup.setdefault(key.casefold(), tool_id)
        chosen: list[str] = []
        bad = [item for item in items if item.casefold() not in lookup]
        if bad:
            raise ObservationError([Problem(AVAILABLE_TOOLS, f"unknown tool {', '.join(repr(b) for b in bad)}",
                                            f"accepted: {self._tools_accepted(offered)}")],
                                   title="that answer is not valid")
        for item in items:
            tool_id = lookup[item.casefold()]
            if tool_id not in chosen:
                chosen.append(tool_id)
        return chosen

    def _answer_tools(self, value: Any, raw: str | None) -> Turn:
        """Record the answer to the tools question: every open question of an offered tool not chosen is closed."""
        pending = self._pending if self._pending is not None and self._pending.fact == AVAILABLE_TOOLS else None
        state, plan = self._analysis()
        offered = list(pending.choices or []) if pending else list(self._tool_offer(plan))
        chosen = self._parse_tools(value, offered)
        closes: list[str] = []
        if chosen is not None:
            closes = [f for f in self._ix.askable if state.askable_open(f)
                      and self._ix.tool_of.get(f) in offered and self._ix.tool_of.get(f) not in chosen]
        if raw is None:
            raw = ", ".join(str(v) for v in value) if isinstance(value, (list, tuple, set, frozenset)) else str(value)
        shown = None if chosen is None else (", ".join(chosen) or "none")
        turn = Turn(step=len(self._turns) + 1, fact=AVAILABLE_TOOLS,
                    question=pending.text if pending else self._ix.kb.tools.consultation.available_tools.question,
                    reason=pending.why if pending else "volunteered by the user", asked=pending is not None,
                    raw=raw, value=shown, closes=closes)
        return self._record(turn)

    def _why_tools(self) -> Why:
        state, plan = self._analysis()
        offer = self._tool_offer(plan)
        tools = self._ix.kb.tools.tools
        wording = self._ix.kb.tools.consultation.available_tools
        answered = self._tools_answer()
        if answered is not None:
            goal = wording.goal_answered.format(answer=answered.value or "unknown")
        else:
            goal = wording.goal
        known = {name: format_value(self._ix.kb.facts.get(name), value) for name, value in state.answers.items()}
        return Why(fact=AVAILABLE_TOOLS, question=wording.question, goal=goal, hypotheses=self._hypotheses(state),
                   rules=[], known=known,
                   tools=[f"{t} ({tools[t].name}): {', '.join(facts)}" for t, facts in offer.items()])

    def _choose(self, state: _State, plan: _Plan) -> tuple[str, str | None]:
        """The best-ranked fact. A cheap context fact tested together with it goes first when some answer to it
        would leave the best fact without value (workload before phase: training drops phase)."""
        ix = self._ix
        best = plan.ranked[0]
        spec = ix.kb.facts[best]
        if spec.ask_first:
            for gate in ix.askable:
                if ix.order[gate] >= ix.order[best]:
                    break
                gate_spec = ix.kb.facts[gate]
                if (gate_spec.ask_first and gate_spec.cost <= spec.cost and gate in ix.conjoined.get(best, ())
                        and state.askable_open(gate) and self._gate_closes(state, gate, best)):
                    return gate, best
        return best, None

    def _gate_closes(self, state: _State, gate: str, gated: str) -> bool:
        """Whether some answer to `gate` would leave `gated` with no value: no longer on the way to any fact a rule
        that can still change the answer tests (cheap), or else no value in the planner run on that answer."""
        spec = self._ix.kb.facts[gate]
        values: list[Value] = (list(spec.choices or []) if spec.type == "enum"
                               else [v for _, v in _regions(self._ix, gate)])
        trials: list[_State] = []
        for value in values:
            trial = _State(self._ix, {**state.answers, gate: value}, state.unknowns)
            if not any(gated in route for leaf in trial.open_leaves() for route in trial.routes(leaf)):
                return True
            trials.append(trial)
        return any(not _plan(trial).scores.get(gated) for trial in trials)

    def _question(self, state: _State, plan: _Plan, fact: str, gated: str | None = None) -> Question:
        ix = self._ix
        spec = ix.kb.facts[fact]
        credited = sorted(plan.credited.get(fact, []) or plan.credited.get(gated or "", []), key=lambda c: -c[0])
        effects = self._effects(state, fact, credited)
        rules = sorted({r for _, p, _ in credited for r in p.rules})
        if gated is not None:
            why = (f"a cheap context question asked before {gated}: the rules that need {gated} also test {fact}, "
                   f"so its answer decides whether {gated} matters")
            effects = []
        else:
            why = self._reason(state, fact, credited)
        tool = ix.tool_of.get(fact)
        group = [f for f in ix.askable if tool and f != fact and ix.tool_of.get(f) == tool and state.askable_open(f)]
        return Question(
            number=self.questions_asked + 1, fact=fact, text=spec.question or spec.description,
            kind=spec.type, unit=spec.unit,
            choices=spec.choices if spec.type == "enum" else None, example=spec.example, accepted=spec.range_text(),
            why=why, effects=effects[:6], rules=rules, measure=self._measure(fact),
            group=ix.kb.tools.tools[tool].name if tool and group else None, group_facts=group,
            ask_first=spec.ask_first, cost=spec.cost, score=round(plan.scores.get(fact, 0.0), 4),
        )

    def _reason(self, state: _State, fact: str, credited: list[tuple[float, _Probe, str]]) -> str:
        """One sentence: what the best what-if involving this fact would change, and how the fact gets there."""
        if not credited:
            return "its answer can change the verdict or the recommendations"
        if self._ix.kb.facts[fact].ask_first:
            return f"a cheap context question, asked first: {_context_clause(fact, credited)}"
        _, probe, link = credited[0]
        effect = self._effect(state, probe).text()
        if link == fact:
            return effect
        return f"it is needed to work out {link} ({self._formula(fact, link)}); {effect}"

    def _formula(self, fact: str, output: str) -> str:
        """The formula of the first derivation of `output` that (transitively) reads `fact`."""

        def reads(d: Derivation, depth: int = 0) -> bool:
            return fact in d.inputs or (depth < 6 and any(
                reads(inner, depth + 1) for name in d.inputs for inner in self._ix.derivations.get(name, [])))

        found = next((d for d in self._ix.derivations.get(output, []) if reads(d)), None)
        return f"{output} = {found.formula}" if found else output

    def _effects(self, state: _State, fact: str, credited: list[tuple[float, _Probe, str]]) -> list[Effect]:
        """The distinct what-ifs behind a fact's value, best first, each naming the quantity the fact feeds."""
        out: list[Effect] = []
        for probe in _distinct([p for _, p, _ in credited]):
            link = next(link for _, p, link in credited if p is probe)
            effect = self._effect(state, probe)
            out.append(effect.model_copy(update={"via": link}) if link != fact else effect)
        return out

    def _effect(self, state: _State, probe: _Probe) -> Effect:
        kb = self._ix.kb
        before, after = state.now, probe.answer
        bands = zip(kb.scorecard.metrics, before.bands, after.bands, strict=True)
        scorecard = [f"{m.id}: {b} -> {a}" for m, b, a in bands if a != b]
        fired = sorted((after.fired - before.fired) | (before.fired - after.fired))
        decisive = [r for r in fired if r in self._ix.decisive] or fired
        return Effect(condition=f"if {probe.condition}" if probe.kind == "leaf" else probe.condition,
                      verdict_before=before.verdict, verdict_after=after.verdict,
                      added=sorted(after.recommended - before.recommended),
                      removed=sorted(before.recommended - after.recommended), scorecard=scorecard,
                      rules=decisive[:4])

    def _measure(self, fact: str) -> str | None:
        kb = self._ix.kb
        spec = kb.facts[fact]
        m = kb.tools.measurements.get(spec.measure or fact)
        return f"{kb.tools.tools[m.tool].name}: {m.how}" if m else None

    def _via(self, state: _State, fact: str) -> list[str]:
        """The derived quantities this fact feeds, as formulas ("io_overhead = data_wait_s / step_time_s")."""
        out: list[str] = []
        frontier = [fact]
        seen = {fact}
        while frontier:
            name = frontier.pop(0)
            for d in DERIVATIONS:
                if name in d.inputs and d.output not in seen:
                    seen.add(d.output)
                    if d.output in self._ix.tests or d.output in self._ix.readers:
                        out.append(f"{d.output} = {d.formula}")
                    frontier.append(d.output)
        return out

    # answering ------------------------------------------------------------------------------------------------------

    def _spec(self, fact: str) -> FactSpec:
        import difflib

        spec = self._ix.kb.facts.get(fact)
        if spec is None:
            close = difflib.get_close_matches(fact, list(self._ix.kb.facts), n=3, cutoff=0.6)
            raise ObservationError([Problem(fact, "unknown fact", f"did you mean {', '.join(close)}?" if close
                                            else "see knowledge_base/facts.yaml for the vocabulary")])
        if not spec.askable:
            raise ObservationError([Problem(fact, "is derived by the expert and cannot be given",
                                            "give its inputs instead")])
        return spec

    def _reason_for(self, fact: str) -> tuple[str, bool, str]:
        """(question text, asked?, reason) for a turn about `fact`."""
        pending = self._pending
        spec = self._ix.kb.facts[fact]
        if pending is not None and pending.fact == fact:
            return pending.text, True, pending.why
        return spec.question or spec.description, False, "volunteered by the user"

    def answer(self, fact: str, value: Any, *, raw: str | None = None, source: str | None = None) -> Turn:
        """Record an answer; "unknown"/"skip" mean unknown. Raises ObservationError (naming the accepted range).
        `source` says where a fact nobody asked for came from ("kineto:trace.json"); it becomes the turn's reason.
        For `available_tools` the value is a list of tool ids or names (or one comma-separated string, "all",
        "none"). For a combined question (its id, e.g. "job") it is one of its choices, the member values in order
        ("h100-sxm bf16"), or a mapping of member fact to value; members left out become unknown."""
        if fact == AVAILABLE_TOOLS:
            return self._answer_tools(value, raw)
        if fact in self._ix.kb.questions:
            return self._answer_combined(self._ix.kb.questions[fact], "unknown" if value is None else value, raw)
        spec = self._spec(fact)
        if value is None or is_unknown(value):
            return self.unknown(fact)
        try:
            canonical = convert(spec, value, self._ix.kb)
        except ValueError as exc:
            raise ObservationError([Problem(fact, str(exc), f"accepted: {spec.range_text()}")],
                                   title="that answer is not valid") from exc
        answers, _ = self._replay()
        trial = {**answers, fact: canonical}
        check_consistency(trial)
        question, asked, reason = self._reason_for(fact)
        if source is not None and not asked:
            reason = f"from {source}"
        turn = Turn(step=len(self._turns) + 1, fact=fact, question=question, reason=reason, asked=asked,
                    raw=raw if raw is not None else str(value), value=canonical)
        return self._record(turn)

    def unknown(self, fact: str, *, whole_group: bool = False) -> Turn:
        """Record that the user does not know `fact` (with `whole_group`, nor anything its tool measures)."""
        if fact == AVAILABLE_TOOLS:
            return self._answer_tools("none" if whole_group else "unknown", "no-tool" if whole_group else "unknown")
        together = self._ix.kb.questions.get(fact)
        members = together.facts if together else [self._spec(fact).name]
        tool = None
        if whole_group:
            tool = self._shared_tool(together) if together else self._ix.tool_of.get(fact)
        also: list[str] = []
        if tool:
            state, _ = self._analysis()
            also = [f for f in self._ix.askable if f not in members and self._ix.tool_of.get(f) == tool
                    and state.askable_open(f)]
        raw = "no-tool" if whole_group else "unknown"
        if together:
            return self._answer_combined(together, "unknown", raw, also)
        question, asked, reason = self._reason_for(fact)
        turn = Turn(step=len(self._turns) + 1, fact=fact, question=question, reason=reason, asked=asked,
                    raw=raw, value=None, closes=[fact, *also])
        return self._record(turn)

    def _record(self, turn: Turn) -> Turn:
        self._turns.append(turn)
        self._stopped_by_user = None
        self._changed()
        state, _ = self._analysis()
        turn.verdict_after = state.now.verdict
        return turn.model_copy()

    def undo(self) -> Turn | None:
        """Take back the last answer still in force; returns it (marked undone), or None when there is none."""
        for turn in reversed(self._turns):
            if not turn.undone:
                turn.undone = True
                self._stopped_by_user = None
                self._changed()
                return turn.model_copy()
        return None

    def stop(self, reason: str = "stopped by the user before every question was settled") -> None:
        """End the session early (the report then rests on what is known); any later answer resumes it."""
        self._stopped_by_user = reason
        self._changed()

    # explaining -----------------------------------------------------------------------------------------------------

    def why(self, fact: str | None = None) -> Why:
        """Why a fact is (or would be) asked: the hypotheses, the rules that need it, what each answer would mean."""
        if fact is None:
            pending = self._pending or self.next_question()
            if pending is None:
                raise ObservationError([Problem("why", "there is no open question", "name a fact: why FACT")])
            fact = pending.fact
        if fact == AVAILABLE_TOOLS:
            return self._why_tools()
        if fact in self._ix.kb.questions:
            return self._why_combined(self._ix.kb.questions[fact])
        spec = self._spec(fact)
        state, plan = self._analysis()
        ix = self._ix
        via = self._via(state, fact)
        through = {fact} | {line.split(" = ", 1)[0] for line in via}
        needs: list[RuleNeed] = []
        for lr in ix.rules:
            used = set(facts_used(lr.condition))
            if not used & through:
                continue
            if lr.id not in state.live and lr.id not in state.now.fired:
                continue
            trace: list[LeafTrace] = []
            outcome = evaluate(lr.condition, state.facts, state.now.findings, trace)
            needs.append(RuleNeed(rule_id=lr.id, title=lr.rule.title, outcome=outcome,
                                  concludes=_concludes(self._ix, lr), tests=[t.describe() for t in trace]))
        # the rules that decide something and are still undecided first; a handful is enough to answer "why"
        needs.sort(key=lambda r: (r.rule_id not in ix.decisive, r.outcome != "unknown", r.rule_id))
        needs = needs[:_WHY_RULES]
        credited = sorted(plan.credited.get(fact, []), key=lambda c: -c[0])
        credited += [(0.0, p, p.subject or fact) for p in plan.probes  # regions that change nothing, for completeness
                     if p.kind == "leaf" and p.subject in through and _weight(state.now, p.answer)[0] == 0]
        effects = self._effects(state, fact, credited)
        known = {name: format_value(ix.kb.facts.get(name), value) for name, value in state.answers.items()}
        if fact in state.answers:
            goal = f"It is already answered ({known[fact]}); a different answer would be weighed like this."
        elif fact in state.unknowns:
            goal = "It is recorded as unknown."
        elif plan.scores.get(fact):
            goal = "Its answer can still change the verdict or the recommendations."
        else:
            goal = "No answer to it can change the verdict or the recommendations now."
        return Why(fact=fact, question=spec.question or spec.description, goal=goal,
                   hypotheses=self._hypotheses(state), rules=needs, via=via, known=known, effects=effects[:8],
                   measure=self._measure(fact))

    def _hypotheses(self, state: _State) -> list[str]:
        regimes = self._ix.kb.regimes.regimes
        out = [f"{regimes[r].title} ({strength}, score {score})" for r, strength, score in state.now.candidates]
        return out

    def status(self) -> Status:
        """The leading hypotheses, what is known and unknown, and how far the session has come."""
        state, _ = self._analysis()
        ix = self._ix
        votes = [ix.ruleset.rules[r].rule.then.bottleneck for r in state.live if r not in state.now.fired]
        possible = sorted({vote.regime for vote in votes if vote is not None})
        verdict = state.now.verdict
        return Status(
            verdict=verdict, verdict_title=ix.kb.regimes.regimes[verdict].title if verdict else None,
            hypotheses=self._hypotheses(state), possible=possible, recommended=sorted(state.now.recommended),
            answered={n: format_value(ix.kb.facts.get(n), v) for n, v in state.answers.items()},
            unknown=sorted(state.unknowns), questions_asked=self.questions_asked,
            finished=self.finished, stop_reason=self.stop_reason, available_tools=self._available_tools(),
        )

    def _available_tools(self) -> list[str] | None:
        turn = self._tools_answer()
        if turn is None or not isinstance(turn.value, str):
            return None
        return [] if turn.value == "none" else [t.strip() for t in turn.value.split(",")]

    # results --------------------------------------------------------------------------------------------------------

    def observations(self) -> Observations:
        """The answers as Observations (source "consultation")."""
        return Observations(facts={n: Observation(value=v, source=_SOURCE) for n, v in self.answers.items()})

    def report(self) -> Report:
        """The diagnosis of everything answered so far: the same Report `expert.diagnose` gives on these facts."""
        return self.expert.diagnose(self.observations())

    def to_json(self, indent: int | None = 2) -> str:
        """The session as JSON (every turn, undone ones included); `Consultation.from_json` continues it."""
        state, _ = self._analysis()
        data = SessionFile(created=self._created, updated=self._updated, turns=self._turns,
                           finished=self.finished, stop_reason=self.stop_reason,
                           stopped_by_user=self._stopped_by_user is not None, verdict=state.now.verdict,
                           questions_asked=self.questions_asked)
        return data.model_dump_json(indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes, expert: Expert | None = None, *, where: str = "session") -> Consultation:
        """Continue a saved session; every saved answer is validated again against the vocabulary."""
        try:
            data = SessionFile.model_validate_json(text)
        except ValidationError as exc:
            problems = [Problem(f"{where}: {'.'.join(str(p) for p in e['loc']) or 'top level'}", e["msg"])
                        for e in exc.errors()[:8]]
            raise ObservationError(problems, title="cannot read the saved consultation") from exc
        consultation = cls(expert)
        consultation._created = data.created
        bad: list[Problem] = []
        for turn in data.turns:
            if turn.fact == AVAILABLE_TOOLS:
                bad += consultation._check_tools_turn(turn, where)
                consultation._turns.append(turn.model_copy())
                continue
            if turn.fact in consultation._ix.kb.questions:
                bad += consultation._check_combined_turn(turn, where)
                consultation._turns.append(turn.model_copy())
                continue
            spec = consultation._ix.kb.facts.get(turn.fact)
            if spec is None or not spec.askable:
                bad.append(Problem(f"{where}: turn {turn.step}", f"{turn.fact!r} is not an askable fact"))
                continue
            if turn.value is not None:
                try:
                    turn.value = convert(spec, turn.value, consultation._ix.kb)
                except ValueError as exc:
                    bad.append(Problem(f"{where}: turn {turn.step} ({turn.fact})", str(exc),
                                            f"accepted: {spec.range_text()}"))
            consultation._turns.append(turn.model_copy())
        if bad:
            raise ObservationError(bad, title="the saved consultation does not fit the fact vocabulary")
        try:
            check_consistency(consultation._replay()[0])
        except ObservationError as exc:
            raise ObservationError([Problem(f"{where}: {p.where}", p.message, p.hint) for p in exc.problems],
                                   title="the saved consultation contradicts itself") from exc
        if data.stopped_by_user:
            consultation._stopped_by_user = data.stop_reason or "stopped by the user"
        consultation._updated = data.updated
        consultation._version += 1
        return consultation

    def _check_combined_turn(self, turn: Turn, where: str) -> list[Problem]:
        """Problems of a saved answer to a combined question (members it does not ask, values out of range); the
        values it keeps are made canonical again."""
        question = self._ix.kb.questions[turn.fact]
        at = f"{where}: turn {turn.step} ({turn.fact})"
        problems = [Problem(at, f"{name!r} is not asked by this question (it asks {', '.join(question.facts)})")
                    for name in [*turn.sets, *turn.closes] if name not in question.facts]
        for name, value in turn.sets.items():
            if name in question.facts:
                try:
                    turn.sets[name] = convert(self._ix.kb.facts[name], value, self._ix.kb)
                except ValueError as exc:
                    problems.append(Problem(f"{at}: {name}", str(exc),
                                            f"accepted: {self._ix.kb.facts[name].range_text()}"))
        return problems

    def _check_tools_turn(self, turn: Turn, where: str) -> list[Problem]:
        """Problems of a saved answer to the tools question (unknown tools, closed facts that are not askable)."""
        at = f"{where}: turn {turn.step} ({AVAILABLE_TOOLS})"
        problems: list[Problem] = []
        if turn.value is not None:
            names = [] if turn.value == "none" else [t.strip() for t in str(turn.value).split(",")]
            unknown = [t for t in names if t not in self._ix.kb.tools.tools]
            if unknown:
                problems.append(Problem(at, f"unknown tool {', '.join(map(repr, unknown))}",
                                        "tools are listed in knowledge_base/tools.yaml"))
        not_askable = [f for f in turn.closes if f not in self._ix.askable]
        if not_askable:
            problems.append(Problem(at, f"closes {', '.join(map(repr, not_askable))}, not askable facts"))
        return problems


def _concludes(ix: _Index, lr: LoadedRule) -> str:
    then = lr.rule.then
    parts: list[str] = []
    if then.bottleneck:
        parts.append(f"votes {then.bottleneck.regime} ({then.bottleneck.strength})")
    if then.recommend:
        parts.append("recommends " + ", ".join(r.id for r in then.recommend))
    if then.waste:
        parts.append("rules out " + ", ".join(w.id for w in then.waste))
    if then.finding:
        parts.append(f"concludes {then.finding.id}")
    if then.axis:
        parts.append(f"points at the {then.axis.axis} axis")
    if then.measure and not parts:
        parts.append("asks to measure " + ", ".join(then.measure))
    return "; ".join(parts) or "nothing"


def _distinct(probes: Sequence[_Probe]) -> list[_Probe]:
    """Probes in order, each set of what-if values once."""
    out: list[_Probe] = []
    seen: set[tuple[tuple[str, Value | None], ...]] = set()
    for probe in probes:
        if probe.overrides not in seen:
            seen.add(probe.overrides)
            out.append(probe)
    return out


def tools_for(answers: Mapping[str, Any], offered: Sequence[str], expert: Expert | None = None) -> list[str]:
    """The offered tools that measure a fact the answers give: what a user holding those answers can run."""
    if expert is None:
        from . import default_expert

        expert = default_expert()
    tool_of = _index(expert).tool_of
    have = {tool_of.get(name) for name, raw in answers.items() if raw is not None and not is_unknown(raw)}
    return [t for t in offered if t in have]


def answer_from(question: Question, answers: Mapping[str, Any], expert: Expert | None = None) -> Any:
    """The answer a mapping of facts gives to a question, as a scripted user would give it; None means unknown.

    The tools question: the offered tools that measure a fact the mapping gives (unless it names them itself);
    a combined question: its member facts the mapping gives (or the mapping's own answer to it)."""
    raw = answers.get(question.fact)
    if raw is not None:
        return raw
    if question.fact == AVAILABLE_TOOLS:
        return tools_for(answers, question.choices or [], expert)
    if question.kind == "combined":
        given = {name: answers[name] for name in question.facts
                 if answers.get(name) is not None and not is_unknown(answers[name])}
        return given or None
    return None


def play(answers: Mapping[str, Any], expert: Expert | None = None, *, max_questions: int = 200) -> Consultation:
    """Run a whole consultation from a mapping of answers ("unknown" for every fact it lacks), as a script would."""
    consultation = Consultation(expert)
    for _ in range(max_questions):
        question = consultation.next_question()
        if question is None:
            break
        raw = answer_from(question, answers, consultation.expert)
        if raw is None or is_unknown(raw):
            consultation.unknown(question.fact)
        else:
            consultation.answer(question.fact, raw)
    return consultation


__all__ = ["AVAILABLE_TOOLS", "Consultation", "Effect", "Question", "RuleNeed", "SessionFile", "Status", "Turn", "Why",
           "answer_from", "play", "tools_for"]
