"""The tools question: once the kind of job is settled (tools.yaml `consultation.available_tools.after`), one
multiple-choice question (`available_tools`) asks which of the tools measuring the questions still worth asking the
user can run; the open questions of every offered tool not chosen are then closed at once (as "unknown"), so a user
is never asked one by one for measurements they cannot make."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ObservationError, Problem
from ..expert import Expert
from ..observations.normalise import is_unknown
from .models import Question
from .planner import Plan, State
from .rule_index import Index, index

AVAILABLE_TOOLS = "available_tools"  # the one question that is not a fact: which tools the user can run
_ALL_WORDS = frozenset({"all", "every", "everything"})
_NONE_WORDS = frozenset({"none", "no-tool", "notool", "no tool", "nothing", "no"})


def tool_offer(ix: Index, plan: Plan) -> dict[str, list[str]]:
    """Tool id -> the questions still worth asking that it answers, in the order of tools.yaml."""
    found: dict[str, list[str]] = {}
    for fact in plan.ranked:
        tool = ix.tool_of.get(fact)
        if tool:
            found.setdefault(tool, []).append(fact)
    return {t: found[t] for t in ix.kb.tools.tools if t in found}


def tools_due(ix: Index, state: State, plan: Plan) -> dict[str, list[str]] | None:
    """The offer, when the tools question is due (the caller knows it is wanted and not answered yet): the facts it
    waits for are settled (tools.yaml `consultation.available_tools.after`), and at least two questions worth asking
    need a tool."""
    if any(name in plan.scores and state.askable_open(name)
           for name in ix.kb.tools.consultation.available_tools.after):
        return None
    offer = tool_offer(ix, plan)
    return offer if sum(len(facts) for facts in offer.values()) >= 2 else None


def tools_question(ix: Index, offer: Mapping[str, list[str]], number: int) -> Question:
    """The tools question offering these tools (each with the open questions it answers)."""
    tools = ix.kb.tools.tools
    wording = ix.kb.tools.consultation.available_tools
    n = sum(len(facts) for facts in offer.values())
    return Question(
        number=number, fact=AVAILABLE_TOOLS, text=wording.question, kind="tools",
        choices=list(offer), choice_help={t: f"{tools[t].name}: {', '.join(f)}" for t, f in offer.items()},
        example=", ".join(list(offer)[:2]), accepted=tools_accepted(list(offer)),
        why=wording.why.format(questions=n, tools=len(offer)),
        group_facts=[f for facts in offer.values() for f in facts], cost=1,
    )


def tools_accepted(offered: Sequence[str]) -> str:
    """What an answer to the tools question may be."""
    return f"tool ids or names, comma-separated, from {', '.join(offered)}; or all; or none"


def parse_tools(ix: Index, value: Any, offered: Sequence[str]) -> list[str] | None:
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
                                        f"accepted: {tools_accepted(offered)}")],
                               title="that answer is not valid")
    lookup: dict[str, str] = {}
    for tool_id, tool in ix.kb.tools.tools.items():
        for key in (tool_id, tool_id.replace("_", "-"), tool_id.replace("_", " "), tool.name,
                    tool.name.split(" (")[0]):
            lookup.setdefault(key.casefold(), tool_id)
    chosen: list[str] = []
    bad = [item for item in items if item.casefold() not in lookup]
    if bad:
        raise ObservationError([Problem(AVAILABLE_TOOLS, f"unknown tool {', '.join(repr(b) for b in bad)}",
                                        f"accepted: {tools_accepted(offered)}")],
                               title="that answer is not valid")
    for item in items:
        tool_id = lookup[item.casefold()]
        if tool_id not in chosen:
            chosen.append(tool_id)
    return chosen


def tools_for(answers: Mapping[str, Any], offered: Sequence[str], expert: Expert | None = None) -> list[str]:
    """The offered tools that measure a fact the answers give: what a user holding those answers can run."""
    if expert is None:
        from .._default import default_expert

        expert = default_expert()
    tool_of = index(expert).tool_of
    have = {tool_of.get(name) for name, raw in answers.items() if raw is not None and not is_unknown(raw)}
    return [t for t in offered if t in have]
