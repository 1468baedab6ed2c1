"""Answers to combined questions (knowledge_base/facts.yaml `questions`): one answer, several member facts.

An answer is a choice label ("llm-decode"), the member values in order ("h100-sxm bf16", "H100 SXM, bf16"), a
mapping from member to value, or "unknown". A member the answer leaves out is unknown.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from ..kb.knowledge import CombinedQuestion, KnowledgeBase
from ..observations.normalise import convert, format_value, is_unknown

Value = int | float | str
_MAX_TOKENS = 12  # free-text answers longer than this must separate the members with commas


def accepted(question: CombinedQuestion, kb: KnowledgeBase) -> str:
    """What an answer to the question may be, in words."""
    members = "; ".join(f"{name}: {kb.facts[name].range_text()}" for name in question.facts)
    order = f"the values of {', '.join(question.facts)} in that order (e.g. {question.example!r}; {members})"
    choices = [c.answer for c in question.choices or []]
    head = f"one of {', '.join(choices)}; or " if choices else ""
    return f"{head}{order}; leave out what you do not know, or answer unknown"


def parse(question: CombinedQuestion, value: Any, kb: KnowledgeBase) -> dict[str, Value | None]:
    """Member fact -> canonical value (None: unknown). Raises ValueError saying what was wrong."""
    if isinstance(value, Mapping):
        return _from_mapping(question, value, kb)
    if isinstance(value, (list, tuple)):
        return _from_words(question, [str(v).strip() for v in value if str(v).strip()], kb, ordered=True)
    if not isinstance(value, str):
        raise ValueError(f"expected text or a mapping of {', '.join(question.facts)}, got {value!r}")
    text = value.strip()
    if not text or is_unknown(text):
        return dict.fromkeys(question.facts)
    label = text.casefold().replace("_", "-").replace(" ", "-")
    for choice in question.choices or []:
        if choice.answer == label:
            values = {name: convert(kb.facts[name], raw, kb) for name, raw in choice.sets.items()}
            return {name: values.get(name) for name in question.facts}
    if "," in text or ";" in text:
        parts = [p.strip() for p in text.replace(";", ",").split(",") if p.strip()]
        return _from_words(question, parts, kb, ordered=True)
    tokens = text.split()
    if len(tokens) > _MAX_TOKENS:
        raise ValueError(f"too many words; separate the values of {', '.join(question.facts)} with commas")
    return _from_words(question, tokens, kb, ordered=False)


def _from_mapping(question: CombinedQuestion, value: Mapping[Any, Any], kb: KnowledgeBase) -> dict[str, Value | None]:
    extra = [str(k) for k in value if k not in question.facts]
    if extra:
        raise ValueError(f"{', '.join(extra)} {'is' if len(extra) == 1 else 'are'} not asked by this question "
                         f"(it asks {', '.join(question.facts)})")
    out: dict[str, Value | None] = {}
    for name in question.facts:
        raw = value.get(name)
        out[name] = None if raw is None or is_unknown(raw) else _convert(kb, name, raw)
    return out


def _convert(kb: KnowledgeBase, name: str, raw: Any) -> Value:
    try:
        return convert(kb.facts[name], raw, kb)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from exc


def _from_words(question: CombinedQuestion, words: Sequence[str], kb: KnowledgeBase, *,
                ordered: bool) -> dict[str, Value | None]:
    """Read the words as the members' values in order. `ordered`: each word is one value (comma-separated parts);
    otherwise neighbouring words may form one value ("H100 SXM"). Every reading that fits is found; when two
    readings give the same members different values the answer is ambiguous."""
    if len(words) > len(question.facts) and ordered:
        raise ValueError(f"{len(words)} values for {len(question.facts)} facts ({', '.join(question.facts)})")
    readings: list[tuple[int, dict[str, Value | None]]] = []
    for groups in _groupings(words, len(question.facts), joined=not ordered):
        for members in itertools.combinations(question.facts, len(groups)):  # in order, leaving members out
            reading = _read(kb, members, groups)
            if reading is not None:
                readings.append((len(groups), {name: reading.get(name) for name in question.facts}))
    if not readings:
        shown = (", " if ordered else " ").join(words)
        raise ValueError(f"cannot read {shown!r} as {', '.join(question.facts)}"
                         f"{_first_error(question, words, kb, whole=not ordered)}")
    # the reading with the fewest values wins ("H100 SXM" is one value); among those, the first in member order, so
    # that values fill the members from the first one ("15%" answers the first of two fractions)
    fewest = min(n for n, _ in readings)
    distinct: list[dict[str, Value | None]] = []
    for n, reading in readings:
        if n == fewest and reading not in distinct:
            distinct.append(reading)
    if len({tuple(k for k, v in r.items() if v is not None) for r in distinct}) < len(distinct):
        raise ValueError(f"{' '.join(words)!r} can be read more than one way; separate the values of "
                         f"{', '.join(question.facts)} with commas")
    return min(distinct, key=lambda r: [i for i, name in enumerate(question.facts) if r[name] is not None])


def _groupings(words: Sequence[str], most: int, *, joined: bool) -> list[list[str]]:
    """Ways to cut the words into at most `most` consecutive groups (each group one value)."""
    if not joined:
        return [list(words)]
    out: list[list[str]] = []
    for n in range(1, min(most, len(words)) + 1):
        for cuts in itertools.combinations(range(1, len(words)), n - 1):
            bounds = (0, *cuts, len(words))
            out.append([" ".join(words[a:b]) for a, b in itertools.pairwise(bounds)])
    return out


def _first_error(question: CombinedQuestion, words: Sequence[str], kb: KnowledgeBase, *, whole: bool) -> str:
    """Why the words fail as one value per member (or, with `whole`, all as the first member): a hint."""
    attempts = [(question.facts[0], " ".join(words))] if whole else []
    attempts += [(name, text) for name, text in zip(question.facts, words, strict=False) if not is_unknown(text)]
    for name, text in attempts:
        try:
            convert(kb.facts[name], text, kb)
        except ValueError as exc:
            return f" ({name}: {exc})"
    return ""


def _read(kb: KnowledgeBase, members: Sequence[str], groups: Sequence[str]) -> dict[str, Value | None] | None:
    out: dict[str, Value | None] = {}
    for name, text in zip(members, groups, strict=True):
        if is_unknown(text):
            out[name] = None
            continue
        try:
            out[name] = convert(kb.facts[name], text, kb)
        except ValueError:
            return None
    return out


def label(question: CombinedQuestion, values: Mapping[str, Value | None], kb: KnowledgeBase) -> str | None:
    """How to show an answer: the choice it equals, else "h100-sxm, dtype unknown"; None when all are unknown."""
    given = {k: v for k, v in values.items() if v is not None}
    if not given:
        return None
    for choice in question.choices or []:
        if {name: convert(kb.facts[name], raw, kb) for name, raw in choice.sets.items()} == given:
            return choice.answer
    return ", ".join(format_value(kb.facts[n], values[n]) if values.get(n) is not None else f"{n} unknown"
                     for n in question.facts)
