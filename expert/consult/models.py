"""The consultation's public records: a question, a turn of the transcript, why a question is asked, where the
session stands, and the saved session. Pydantic models with a `text()` for front ends; nothing here prints."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, StrictFloat, StrictInt, StrictStr

_Scalar = StrictInt | StrictFloat | StrictStr
Outcome3 = Literal["true", "false", "unknown"]


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
    kind: Literal["fraction", "number", "integer", "enum", "hardware", "tools", "optimizations", "combined"]
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
        elif self.kind == "optimizations":  # choices: the ones about to be recommended
            hints.append("optimization ids, comma-separated, or none; recommended now: "
                         + ", ".join(self.choices or []))
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


class WhyAsk(_Model):
    """The MYCIN-style answer to "why do you ask?" (`Consultation.why`); not the explanation's why-chain of a
    conclusion (`expert.report.explain.Why`)."""

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


def _show(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)

