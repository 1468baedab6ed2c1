"""Guided consultation: one question at a time, and only questions whose answer can still change the verdict or
the recommendations.

`Consultation` keeps the user's answers (and "unknown"s) in a transcript and, before each question, asks the planner
(`expert.consult.planner`) what could still change: what-if probes on the rules, each decided by the diagnosis's own
`decide`, rank the open questions by what their answers could change, over their cost. The session stops when no
answer can change the verdict or the recommendations, and says why. The lookahead is one probe deep, not a proof over
every combination of answers: tests/test_consult.py checks on every example, every rule-test case and random cases
that the questions asked reach the verdict and recommendations of the full facts.

Once the kind of job is settled, one multiple-choice question asks which tools the user can run
(`expert.consult.tools`); facts an expert asks for in one breath are asked as one combined question
(`expert.consult.questions`, `expert.consult.combined`).

The class never prints: `Question`, `WhyAsk`, `Status` and `Turn` (`expert.consult.models`) are pydantic models with a
`text()` for front ends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from ..derive.formulas import check_consistency
from ..derive.graph import GRAPH
from ..errors import ObservationError, Problem
from ..expert import Expert
from ..kb.knowledge import CombinedQuestion, FactSpec
from ..observations.normalise import (
    Observation,
    Observations,
    accepted_hint,
    check_implications,
    convert,
    format_value,
    is_unknown,
)
from ..report.model import Report
from . import combined
from .models import Effect, Question, RuleNeed, SessionFile, Status, Turn, WhyAsk, _Scalar
from .planner import Plan, State, analysis, choose
from .questions import (
    combined_for,
    combined_question,
    hypotheses,
    question_for,
    shared_tool,
    why_combined,
    why_fact,
    why_stopped,
    why_tools,
)
from .rule_index import index
from .tools import AVAILABLE_TOOLS, parse_tools, tool_offer, tools_due, tools_for, tools_question

Value = int | float | str
_SOURCE = "consultation"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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
            from .._default import default_expert

            expert = default_expert()
        self.expert = expert
        self._ix = index(expert)
        self._turns: list[Turn] = []
        self._created = _now()
        self._updated = self._created
        self._pending: Question | None = None
        self._stopped_by_user: str | None = None
        self._cache: tuple[int, State, Plan] | None = None
        self._version = 0
        self.ask_tools = ask_tools  # False: never ask which tools the user can run (one fact at a time)
        for name, raw in (known or {}).items():
            if is_unknown(raw):
                self.unknown(name)
            else:
                self.answer(name, raw)

    # state ------------------------------------------------------------------------------------------------------------

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

    def _analysis(self) -> tuple[State, Plan]:
        if self._cache is None or self._cache[0] != self._version:
            answers, unknowns = self._replay()
            self._cache = (self._version, *analysis(self._ix, answers, unknowns))
        return self._cache[1], self._cache[2]

    def _changed(self) -> None:
        self._version += 1
        self._updated = _now()
        self._pending = None

    # asking -----------------------------------------------------------------------------------------------------------

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
        return why_stopped(self._ix, state, plan)

    def next_question(self) -> Question | None:
        """The most valuable question now, or None when no answer can change the verdict or the recommendations."""
        if self._stopped_by_user:
            return None
        state, plan = self._analysis()
        if not plan.ranked:
            return None
        number = self.questions_asked + 1
        offer = tools_due(self._ix, state, plan) if self.ask_tools and self._tools_answer() is None else None
        if offer:
            self._pending = tools_question(self._ix, offer, number)
            return self._pending
        fact, gated = choose(self._ix, state, plan)
        together = combined_for(self._ix, state, plan, fact, gated)
        if together is not None:
            self._pending = combined_question(self._ix, state, plan, together, fact, gated, number)
        else:
            self._pending = question_for(self._ix, state, plan, fact, gated, number)
        return self._pending

    # combined questions and the tools question ------------------------------------------------------------------------

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
        self._check({**{k: v for k, v in answers.items() if k not in values}, **sets})
        pending = self._pending if self._pending is not None and self._pending.fact == question.id else None
        if raw is None:
            raw = ", ".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, Mapping) else str(value)
        turn = Turn(step=len(self._turns) + 1, fact=question.id, question=question.question,
                    reason=pending.why if pending else "volunteered by the user", asked=pending is not None, raw=raw,
                    value=combined.label(question, values, self._ix.kb), sets=sets,
                    closes=[name for name, v in values.items() if v is None] + list(also))
        return self._record(turn)

    def _tools_answer(self) -> Turn | None:
        """The answer to the tools question now in force (None when it was not answered or was taken back)."""
        return next((t for t in reversed(self._turns) if t.fact == AVAILABLE_TOOLS and not t.undone), None)

    def _answer_tools(self, value: Any, raw: str | None) -> Turn:
        """Record the answer to the tools question: every open question of an offered tool not chosen is closed."""
        pending = self._pending if self._pending is not None and self._pending.fact == AVAILABLE_TOOLS else None
        state, plan = self._analysis()
        offered = list(pending.choices or []) if pending else list(tool_offer(self._ix, plan))
        chosen = parse_tools(self._ix, value, offered)
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

    # answering --------------------------------------------------------------------------------------------------------

    def _spec(self, fact: str) -> FactSpec:
        import difflib

        spec = self._ix.kb.facts.get(fact)
        if spec is None:
            close = difflib.get_close_matches(fact, list(self._ix.kb.facts), n=3, cutoff=0.6)
            raise ObservationError([Problem(fact, "unknown fact", f"did you mean {', '.join(close)}?" if close
                                            else "see knowledge_base/facts.yaml for the vocabulary")])
        if not spec.askable:
            raise ObservationError([Problem(fact, "is derived by the expert and cannot be given",
                                            GRAPH.given_instead(fact))])
        return spec

    def _reason_for(self, fact: str) -> tuple[str, bool, str]:
        """(question text, asked?, reason) for a turn about `fact`."""
        pending = self._pending
        spec = self._ix.kb.facts[fact]
        if pending is not None and pending.fact == fact:
            return pending.text, True, pending.why
        return spec.question or spec.description, False, "volunteered by the user"

    def _check(self, answers: Mapping[str, Value]) -> None:
        """Raise ObservationError where these answers contradict each other: a cross-fact check
        (`check_consistency`) or a value against what an applied optimization implies (`check_implications`)."""
        check_consistency(answers)
        check_implications(self._ix.kb, answers)

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
            raise ObservationError([Problem(fact, str(exc), accepted_hint(spec, str(exc)))],
                                   title="that answer is not valid") from exc
        answers, _ = self._replay()
        self._check({**answers, fact: canonical})
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
            tool = shared_tool(self._ix, together) if together else self._ix.tool_of.get(fact)
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

    # explaining -------------------------------------------------------------------------------------------------------

    def why(self, fact: str | None = None) -> WhyAsk:
        """Why a fact is (or would be) asked: the hypotheses, the rules that need it, what each answer would mean."""
        if fact is None:
            pending = self._pending or self.next_question()
            if pending is None:
                raise ObservationError([Problem("why", "there is no open question", "name a fact: why FACT")])
            fact = pending.fact
        state, plan = self._analysis()
        if fact == AVAILABLE_TOOLS:
            return why_tools(self._ix, state, plan, self._tools_answer())
        together = self._ix.kb.questions.get(fact)
        if together is not None:
            return why_combined(together, [self.why(name) for name in together.facts], state, plan)
        return why_fact(self._ix, state, plan, fact, self._spec(fact))

    def status(self) -> Status:
        """The leading hypotheses, what is known and unknown, and how far the session has come."""
        state, _ = self._analysis()
        ix = self._ix
        votes = [ix.ruleset.rules[r].rule.then.bottleneck for r in state.live if r not in state.now.fired]
        possible = sorted({vote.regime for vote in votes if vote is not None})
        verdict = state.now.verdict
        return Status(
            verdict=verdict, verdict_title=ix.kb.regimes.regimes[verdict].title if verdict else None,
            hypotheses=hypotheses(ix, state), possible=possible, recommended=sorted(state.now.recommended),
            answered={n: format_value(ix.kb.facts.get(n), v) for n, v in state.answers.items()},
            unknown=sorted(state.unknowns), questions_asked=self.questions_asked,
            finished=self.finished, stop_reason=self.stop_reason, available_tools=self._available_tools(),
        )

    def _available_tools(self) -> list[str] | None:
        turn = self._tools_answer()
        if turn is None or not isinstance(turn.value, str):
            return None
        return [] if turn.value == "none" else [t.strip() for t in turn.value.split(",")]

    # results ----------------------------------------------------------------------------------------------------------

    def observations(self) -> Observations:
        """The answers as Observations (source "consultation"); a hardware family name keeps the note saying which
        variant it was read as (as `expert.diagnose` records it)."""
        details = self._hardware_choices()
        return Observations(facts={n: Observation(value=v, source=_SOURCE, detail=details.get(n, {}))
                                   for n, v in self.answers.items()})

    def _hardware_choices(self) -> dict[str, dict[str, _Scalar]]:
        """Hardware fact -> {resolved_from, note} when the answer in force named a family ("h100 bf16")."""
        kb, answers = self._ix.kb, self.answers
        out: dict[str, dict[str, _Scalar]] = {}
        for turn in self._turns:
            names = list(turn.sets) if turn.sets else [turn.fact]
            for name in [n for n in names if n in kb.facts and kb.facts[n].type == "hardware"]:
                if turn.undone or not turn.raw:
                    continue
                out.pop(name, None)
                raw = turn.raw
                for piece in [raw, *raw.replace(";", ",").split(","), *raw.split()]:
                    found = kb.hardware_resolution(piece)
                    if found is not None and found.note and found.id == answers.get(name):
                        out[name] = {"resolved_from": piece.strip(), "note": found.note}
                        break
        return out

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
            bad += consultation._check_closes(turn, where)
            consultation._turns.append(turn.model_copy())
        if bad:
            raise ObservationError(bad, title="the saved consultation does not fit the fact vocabulary")
        try:
            consultation._check(consultation._replay()[0])
        except ObservationError as exc:
            raise ObservationError([Problem(f"{where}: {p.where}", p.message, p.hint) for p in exc.problems],
                                   title="the saved consultation contradicts itself") from exc
        if data.stopped_by_user:
            consultation._stopped_by_user = data.stop_reason or "stopped by the user"
        consultation._updated = data.updated
        consultation._version += 1
        return consultation

    def _check_closes(self, turn: Turn, where: str) -> list[Problem]:
        """Problems of what a saved one-fact turn marks unknown: only askable facts (its own, or those its tool
        measures), and never the fact it answers with a value."""
        at = f"{where}: turn {turn.step} ({turn.fact})"
        problems = []
        unknown = [f for f in turn.closes if f not in self._ix.askable]
        if unknown:
            problems.append(Problem(at, f"closes {', '.join(map(repr, unknown))}, not askable facts",
                                    "a turn closes only facts the consultation asks"))
        if turn.value is not None and turn.fact in turn.closes:
            problems.append(Problem(at, f"answers {turn.fact} and also marks it unknown",
                                    "a turn either gives a value or closes its fact"))
        return problems

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


def __getattr__(name: str) -> Any:
    """`Why`, the old name of `WhyAsk` (deprecated: the explanation's why-chain is `expert.report.explain.Why`)."""
    if name == "Why":
        import warnings

        warnings.warn("expert.consult.session.Why is deprecated: use WhyAsk (the answer to \"why do you ask?\")",
                      DeprecationWarning, stacklevel=2)
        return WhyAsk
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["AVAILABLE_TOOLS", "Consultation", "Effect", "Question", "RuleNeed", "SessionFile", "Status", "Turn",
           "WhyAsk", "answer_from", "play", "tools_for"]
