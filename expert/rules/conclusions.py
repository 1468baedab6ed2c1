"""What a rule concludes, in words: one reading of a rule's `then` for every place that shows it.

`conclusion_phrases(source, phrases)` reads a rule's `then` (or the compact record a report keeps of it,
`expert.report.model.Concludes`) and words it for one audience: `REPORT` (explanations of a report), `CONSULT` (the
consultation's account of a rule), `DOCS` (the rule reference, as markdown list items). A phrasebook fixes the order
of the parts, their words, and whether `measure` shows beside other conclusions; what a rule concludes is read here
only. `describe_conclusions` joins the phrases into one line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from .model import Then

Kind = Literal["finding", "bottleneck", "axis", "recommend", "waste", "measure"]


class ConcludesLike(Protocol):
    """The compact record of a rule's conclusions (report.model.Concludes)."""

    @property
    def finding(self) -> str | None: ...
    @property
    def bottleneck(self) -> str | None: ...
    @property
    def strength(self) -> str | None: ...
    @property
    def axis(self) -> str | None: ...
    @property
    def recommend(self) -> Sequence[str]: ...
    @property
    def waste(self) -> Sequence[str]: ...
    @property
    def measure(self) -> Sequence[str]: ...


@dataclass(frozen=True)
class _Item:
    id: str
    strength: str | None = None
    text: str = ""  # the finding's message, a recommendation's why, a waste's reason (from a `then` only)


@dataclass(frozen=True)
class Phrases:
    """How one audience words what a rule concludes.

    Templates take ``{id}``, ``{strength}``, ``{text}`` and ``{title}`` (kinds in `each`, worded once per item) or
    ``{ids}`` (the other kinds, worded once, each id written with `quote`, joined by ", ").
    """

    order: tuple[Kind, ...]
    templates: Mapping[Kind, str]
    each: frozenset[Kind] = frozenset({"finding", "bottleneck", "axis"})
    quote: str = "{}"
    measure_alone: bool = True  # `measure` only when the rule concludes nothing else
    nothing: str = ""  # the line when it concludes nothing


REPORT = Phrases(
    order=("finding", "bottleneck", "axis", "recommend", "waste", "measure"),
    templates={"finding": "finding {id}", "bottleneck": "bottleneck {id} ({strength})", "axis": "axis {id}",
               "recommend": "recommend {ids}", "waste": "waste {ids}", "measure": "measure {ids}"},
    nothing="nothing recorded",
)
CONSULT = Phrases(
    order=("bottleneck", "recommend", "waste", "finding", "axis", "measure"),
    templates={"bottleneck": "votes {id} ({strength})", "recommend": "recommends {ids}", "waste": "rules out {ids}",
               "finding": "concludes {id}", "axis": "points at the {id} axis", "measure": "asks to measure {ids}"},
    nothing="nothing",
)
DOCS = Phrases(
    order=("finding", "bottleneck", "axis", "recommend", "waste", "measure"),
    templates={"finding": '- finding `{id}`: "{text}"',
               "bottleneck": "- bottleneck **{id}** ({title}), strength {strength}",
               "axis": "- D·A·M axis **{id}**, strength {strength}", "recommend": "- recommends `{id}`: {text}",
               "waste": "- marks `{id}` wasted: {text}", "measure": "- asks to measure {ids}"},
    each=frozenset({"finding", "bottleneck", "axis", "recommend", "waste"}),
    quote="`{}`",
    measure_alone=False,
)


def _items(source: Then | ConcludesLike) -> dict[Kind, list[_Item]]:
    if isinstance(source, Then):
        b, a = source.bottleneck, source.axis
        return {
            "finding": [_Item(source.finding.id, text=source.finding.message)] if source.finding else [],
            "bottleneck": [_Item(b.regime, b.strength)] if b else [],
            "axis": [_Item(a.axis, a.strength)] if a else [],
            "recommend": [_Item(r.id, text=r.why) for r in source.recommend],
            "waste": [_Item(w.id, text=w.reason) for w in source.waste],
            "measure": [_Item(m) for m in source.measure],
        }
    return {
        "finding": [_Item(source.finding)] if source.finding else [],
        "bottleneck": [_Item(source.bottleneck, source.strength)] if source.bottleneck else [],
        "axis": [_Item(source.axis)] if source.axis else [],
        "recommend": [_Item(r) for r in source.recommend],
        "waste": [_Item(w) for w in source.waste],
        "measure": [_Item(m) for m in source.measure],
    }


def conclusion_phrases(source: Then | ConcludesLike, phrases: Phrases = REPORT,
                       titles: Mapping[str, str] | None = None) -> list[str]:
    """What a rule concludes, one phrase per part in the phrasebook's order (`titles`: regime id -> title)."""
    items = _items(source)
    others = any(found for kind, found in items.items() if kind != "measure")
    out: list[str] = []
    for kind in phrases.order:
        found = items[kind]
        if not found or (kind == "measure" and phrases.measure_alone and others):
            continue
        template = phrases.templates[kind]
        if kind in phrases.each:
            out += [template.format(id=i.id, strength=i.strength, text=i.text,
                                    title=(titles or {}).get(i.id, i.id)) for i in found]
        else:
            out.append(template.format(ids=", ".join(phrases.quote.format(i.id) for i in found)))
    return out


def describe_conclusions(source: Then | ConcludesLike, phrases: Phrases = REPORT) -> str:
    """What a rule concludes on one line ("finding x; recommend a, b"), or the phrasebook's `nothing`."""
    return "; ".join(conclusion_phrases(source, phrases)) or phrases.nothing
