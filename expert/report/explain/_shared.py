"""What the explanations share: the base model, formatting, and finding ids and candidates in a report."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from ...derive.registry import DERIVATIONS
from ...rules.logic import format_constant
from ..model import Candidate, Report

if TYPE_CHECKING:
    from ...expert import Expert

Value = int | float | str
_STRENGTHS = ("suspect", "likely", "confirmed")  # the order of the Candidate.strength vocabulary
_LOOKUP_ORDER = ("finding", "bottleneck", "recommendation", "wasted", "rule", "measurement", "derived", "obs")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def text(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.text()


def _fmt(value: object) -> str:
    return format_constant(value)


def _indent(lines: list[str], prefix: str = "  ") -> list[str]:
    return [prefix + line for line in lines]


def _node_id(report: Report, ident: str) -> str | None:
    """The provenance node an id names: a node id, a bare finding/regime/optimization/rule/fact id, or "verdict"."""
    ids = {n.id for n in report.graph.nodes}
    if ident in ids:
        return ident
    if ident == "verdict":
        return f"bottleneck:{report.bottleneck}" if report.bottleneck else None
    for prefix in _LOOKUP_ORDER:
        if f"{prefix}:{ident}" in ids:
            return f"{prefix}:{ident}"
    return None


def _universe(report: Report) -> set[str]:
    """Every id this report (its rules, tables, graph and facts) can talk about."""
    names: set[str] = set(report.observations) | set(report.derived)
    for n in report.graph.nodes:
        names.add(n.id.split(":", 1)[1] if ":" in n.id else n.id)
    for e in report.evaluations:
        names.add(e.rule_id)
        c = e.concludes
        names.update(x for x in (c.finding, c.bottleneck) if x)
        names.update(c.recommend + c.waste)
        names.update(leaf.name for leaf in e.leaves)
    for t in report.tables:
        names.add(t.regime)
        names.update(t.effective + list(t.wasted))
    names.update(d.output for d in DERIVATIONS)
    return names


def unknown_id(report: Report, ident: str) -> str | None:
    """None when `ident` is something this report can explain (a node, a rule, a fact, "verdict"); otherwise what
    it can explain instead: the report's findings, regimes and optimizations by name, and a close match."""
    if ident == "verdict" or _node_id(report, ident) is not None or ident in _universe(report):
        return None
    kinds = {"findings": [f.id for f in report.findings], "bottlenecks": [c.regime for c in report.candidates],
             "recommended": [r.id for r in report.recommended], "wasted": [w.id for w in report.wasted],
             "already applied": [a.id for a in report.applied]}
    listed = "; ".join(f"{kind}: {', '.join(ids)}" for kind, ids in kinds.items() if ids)
    return (f"nothing in this report is called {ident!r}{_suggest(report, ident)}; known ids: 'verdict'"
            + (f"; {listed}" if listed else "") + "; any rule id (dam rules list) or fact of the report "
            "(dam explain REPORT --how FACT)")


def _suggest(report: Report, ident: str) -> str:
    close = difflib.get_close_matches(ident, sorted(_universe(report)), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def _rank(c: Candidate) -> int:
    return _STRENGTHS.index(c.strength)


def _ranking_notes(report: Report, regime: str) -> list[str]:
    ranking = ", ".join(f"{c.regime} ({c.strength}, score {c.score})" for c in report.candidates)
    notes = [f"candidates, strongest first: {ranking}"] if report.candidates else []
    cand = next((c for c in report.candidates if c.regime == regime), None)
    if cand is None:
        return notes
    if report.bottleneck is None:
        notes.append(f"no verdict: even the strongest candidate ({report.candidates[0].strength}) is below the "
                     "strength a verdict needs (knowledge_base/regimes.yaml verdict_min_strength)")
    elif regime != report.bottleneck:
        notes.append(_why_lower(report, cand))
    return notes


def _why_lower(report: Report, cand: Candidate) -> str:
    lead = report.candidates[0]
    if _rank(lead) > _rank(cand):
        return f"{lead.regime} has stronger evidence ({lead.strength} vs {cand.strength})"
    if lead.score > cand.score:
        return f"same strength, but {lead.regime} has more supporting evidence (score {lead.score} vs {cand.score})"
    return (f"a tie with {lead.regime}, broken by regime precedence (knowledge_base/regimes.yaml: a starved GPU "
            "makes machine readings look like something else, so input is judged first)")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _expert(expert: Expert | None) -> Expert:
    if expert is not None:
        return expert
    from ..._default import default_expert

    return default_expert()


def _raw(report: Report) -> dict[str, dict[str, Any]]:
    return {name: {"value": o.value, "source": o.source, "detail": dict(o.detail)}
            for name, o in report.observations.items()}
