"""Explanations of a Report: why, how, why-not, what-if and counterfactuals.

why / how / why_not read only what the report recorded (the provenance graph, every rule's leaf trace and condition
tree, derivations, regime tables), so a saved report explains itself. what_if and counterfactuals re-diagnose
changed observations with an Expert (the shared default one unless given). Every result is a pydantic model with a
plain-text `text()` rendering; nothing here prints.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..derive.formulas import DERIVATIONS, derive
from ..errors import ExpertError, ObservationError, Problem
from ..rules.conclusions import describe_conclusions
from ..rules.evaluate import LeafTrace, Outcome
from .model import Candidate, GraphNode, NodeKind, Report, RuleEvaluation

if TYPE_CHECKING:
    from ..expert import Expert
    from ..kb.knowledge import FactSpec, KnowledgeBase

Value = int | float | str
_STRENGTHS = ("suspect", "likely", "confirmed")  # the order of the Candidate.strength vocabulary
_NUMERIC_OPS = ("lt", "le", "gt", "ge")
_LOOKUP_ORDER = ("finding", "bottleneck", "recommendation", "wasted", "rule", "measurement", "derived", "obs")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def text(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.text()


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return "unknown" if value is None else str(value)


def _indent(lines: list[str], prefix: str = "  ") -> list[str]:
    return [prefix + line for line in lines]


# ---- why --------------------------------------------------------------------------------------------------------


class Step(_Model):
    """One node of a why-chain: an observation, a derivation, a rule (with its tests) or a conclusion."""

    id: str
    kind: NodeKind
    label: str
    lines: list[str] = []
    rests_on: list[str] = []  # ids of the steps this one rests on (all inside the chain)


class Why(_Model):
    """The chain from the observations through derived quantities and rules to one conclusion."""

    question: str
    target: str | None
    kind: str
    concluded: bool
    summary: str
    notes: list[str] = []
    steps: list[Step] = []  # dependency order: observations first, the conclusion last

    def step(self, step_id: str) -> Step | None:
        return next((s for s in self.steps if s.id == step_id), None)

    @property
    def observations(self) -> list[str]:
        """The observed facts the chain ends at."""
        return [s.id.removeprefix("obs:") for s in self.steps if s.kind == "observation"]

    def text(self) -> str:
        lines = [self.summary, *_indent(self.notes)]
        if self.target is None or not self.steps:
            return "\n".join(lines)
        by_id = {s.id: s for s in self.steps}
        seen: set[str] = set()

        def visit(step_id: str, depth: int) -> None:
            step = by_id[step_id]
            pad = "  " * depth
            arrow = "" if depth == 0 else "<- "
            if step_id in seen and step.rests_on:
                lines.append(f"{pad}{arrow}{step.label} (see above)")
                return
            seen.add(step_id)
            lines.append(f"{pad}{arrow}{step.label}")
            lines.extend(f"{pad}     {line}" for line in step.lines)
            for parent in step.rests_on:
                visit(parent, depth + 1)

        lines.append("")
        visit(self.target, 0)
        return "\n".join(lines)


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


def _suggest(report: Report, ident: str) -> str:
    close = difflib.get_close_matches(ident, sorted(_universe(report)), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def _step_for(report: Report, node: GraphNode, parents: list[str]) -> Step:
    node_id, kind, attrs = node.id, node.kind, node.attrs
    bare = node_id.split(":", 1)[1]
    lines: list[str] = []
    label = node.label
    if kind == "observation":
        obs = report.observations.get(bare)
        if obs is not None:
            label = f"{bare} = {_fmt(obs.value)}"
            lines.append(f"observed (source: {obs.source})")
            lines.extend(f"{k}: {_fmt(v)}" for k, v in obs.detail.items())
    elif kind == "derived":
        d = report.derived.get(bare)
        if d is not None:
            label = f"{bare} = {_fmt(d.value)}" + (f" {d.unit}" if d.unit else "")
            lines.append(f"= {d.formula}  [{d.source}]")
            lines.extend(f"{k}: {_fmt(v)}" for k, v in d.constants.items() if k != "source")
            if "source" in d.constants:
                lines.append(f"figures from: {d.constants['source']}")
            if d.note:
                lines.append(f"note: {d.note}")
    elif kind == "rule":
        ev = report.evaluation(bare)
        if ev is not None:
            label = f"rule {ev.rule_id}: {ev.title}" + ("" if ev.fired else f" (did not fire: {ev.outcome})")
            if ev.fired:
                lines.extend(leaf.comparison() for leaf in ev.leaves if leaf.supports)
            else:
                lines.extend(leaf.describe() for leaf in ev.leaves)
            lines.append(f"source: {ev.source}")
        else:  # a regime table, e.g. rule:table/input
            label = f"regime table {bare.removeprefix('table/')}: {node.label}"
            lines.append(f"source: {attrs.get('source', '?')}")
    elif kind == "finding":
        finding = next((f for f in report.findings if f.id == bare), None)
        label = f"finding {bare}"
        if finding is not None:
            lines.append(f"{finding.severity}: {finding.message}")
    elif kind == "bottleneck":
        cand = next((c for c in report.candidates if c.regime == bare), None)
        label = f"bottleneck {bare}: {node.label}"
        if cand is not None:
            verdict = "; the verdict" if bare == report.bottleneck else ""
            lines.append(f"{cand.strength}, score {cand.score}{verdict}")
    elif kind == "recommendation":
        rec = next((r for r in report.recommended if r.id == bare), None)
        label = f"recommend {bare}: {node.label}"
        if rec is not None:
            lines.append(f"why: {rec.why}")
            lines.append(f"expected gain: {gain_text(rec.expected_gain)}")
    elif kind == "wasted":
        w = next((w for w in report.wasted if w.id == bare), None)
        label = f"wasted {bare}: {node.label}"
        if w is not None:
            lines.append(f"reason: {w.reason}")
    elif kind == "measurement":
        m = next((m for m in report.next_measurements if m.fact == bare), None)
        if m is not None:
            lines.append(f"{m.tool}: {m.how}")
    return Step(id=node_id, kind=kind, label=label, lines=lines, rests_on=parents)


def gain_text(gain: Any) -> str:
    """An ExpectedGain as text, or "unknown" when the numbers do not allow one."""
    if gain is None:
        return "unknown (the iron-law share of the term it shrinks is not known)"
    return f"at most {gain.max_speedup:.3g}x ({gain.assumptions})"


def why(report: Report, conclusion_id: str) -> Why:
    """The chain behind a finding, bottleneck, recommendation, wasted optimization, rule, measurement or fact."""
    import networkx as nx

    target = _node_id(report, conclusion_id)
    if target is None:
        known = conclusion_id in _universe(report)
        summary = (f"{conclusion_id} was not concluded on this evidence; why_not({conclusion_id!r}) says what "
                   f"would conclude it" if known else
                   f"nothing in this report is called {conclusion_id!r}{_suggest(report, conclusion_id)}")
        if conclusion_id == "verdict":
            summary = "there is no verdict: no candidate bottleneck was strong enough (see why_not on a regime)"
        return Why(question=conclusion_id, target=None, kind="unknown", concluded=False, summary=summary)
    graph = report.provenance
    chain = nx.ancestors(graph, target) | {target}
    sub = graph.subgraph(chain)
    try:
        order = list(nx.lexicographical_topological_sort(sub))
    except nx.NetworkXUnfeasible:  # never expected: provenance is acyclic
        order = sorted(chain)
    nodes = {n.id: n for n in report.graph.nodes}
    steps = [_step_for(report, nodes[n], sorted(sub.predecessors(n))) for n in order]
    kind = str(graph.nodes[target]["kind"])
    bare = target.split(":", 1)[1]
    notes: list[str] = []
    summary = f"{kind} {bare}: concluded"
    if kind == "bottleneck":
        notes = _ranking_notes(report, bare)
        summary = (f"the verdict is {bare} ({report.verdict_title})" if bare == report.bottleneck
                   else f"{bare} is a candidate bottleneck, not the verdict")
    elif kind == "recommendation":
        summary = f"{bare} is recommended"
    elif kind == "wasted":
        summary = f"{bare} is wasted effort for this bottleneck"
    elif kind == "observation":
        summary = f"{bare} was observed"
    elif kind == "derived":
        summary = f"{bare} was derived"
    elif kind == "rule":
        ev = report.evaluation(bare)
        summary = f"rule {bare} fired" if ev is None or ev.fired else f"rule {bare} did not fire ({ev.outcome})"
    elif kind == "measurement":
        summary = f"{bare}: a measurement to take next"
    return Why(question=conclusion_id, target=target, kind=kind, concluded=True, summary=summary, notes=notes,
               steps=steps)


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


# ---- how --------------------------------------------------------------------------------------------------------


class How(_Model):
    """How a fact got its value: observed (with source), derived (formula, inputs, hardware figures), or unknown."""

    fact: str
    kind: Literal["observation", "derived", "unknown"]
    value: Value | None = None
    unit: str | None = None
    source: str | None = None
    formula: str | None = None
    constants: dict[str, Value] = {}
    note: str | None = None
    detail: dict[str, Value] = {}
    inputs: list[How] = []
    alternatives: list[str] = []  # for an unknown fact: the derivations that could produce it
    summary: str = ""

    def text(self) -> str:
        return "\n".join(self._lines(0))

    def _lines(self, depth: int) -> list[str]:
        pad = "  " * depth
        unit = f" {self.unit}" if self.unit else ""
        if self.kind == "unknown":
            out = [f"{pad}{self.fact}: unknown. {self.summary}".rstrip()]
            out += [f"{pad}  could be derived as {alt}" for alt in self.alternatives]
            return out
        if self.kind == "observation":
            out = [f"{pad}{self.fact} = {_fmt(self.value)}{unit}  (observed; source: {self.source})"]
            out += [f"{pad}  {k}: {_fmt(v)}" for k, v in self.detail.items()]
            return out
        out = [f"{pad}{self.fact} = {_fmt(self.value)}{unit}  (derived: {self.formula})",
               f"{pad}  source: {self.source}"]
        figures = {k: v for k, v in self.constants.items() if k != "source"}
        for k, v in figures.items():
            out.append(f"{pad}  uses {k} = {_fmt(v)}")
        if "source" in self.constants:
            out.append(f"{pad}  figures from: {self.constants['source']}")
        if self.note:
            out.append(f"{pad}  note: {self.note}")
        for inp in self.inputs:
            out += inp._lines(depth + 1)
        return out


def how(report: Report, fact_name: str) -> How:
    """How a fact was obtained: its observation, or its derivation down to the observations it rests on."""
    return _how(report, fact_name, set())


def _how(report: Report, name: str, seen: set[str]) -> How:
    if name in report.observations:
        obs = report.observations[name]
        return How(fact=name, kind="observation", value=obs.value, source=obs.source, detail=dict(obs.detail),
                   summary=f"{name} was observed ({obs.source})")
    if name in report.derived and name not in seen:
        d = report.derived[name]
        inputs = [_how(report, inp, seen | {name}) for inp in d.inputs]
        return How(fact=name, kind="derived", value=d.value, unit=d.unit, source=d.source, formula=d.formula,
                   constants=dict(d.constants), note=d.note, inputs=inputs,
                   summary=f"{name} = {d.formula} = {_fmt(d.value)}")
    known = {k for k in report.facts()}
    alternatives = []
    for recipe in DERIVATIONS:
        if recipe.output == name:
            missing = [i for i in recipe.inputs if i not in known]
            alternatives.append(f"{recipe.formula} [{recipe.source}]"
                                + (f"; missing: {', '.join(missing)}" if missing else ""))
    if alternatives:
        summary = "It is derived, but not every input of a derivation is known."
    elif name in _universe(report):
        summary = f"It was not observed; give it (e.g. --set {name}=...)."
    else:
        summary = f"No fact of this report or its rules is called {name!r}{_suggest(report, name)}."
    return How(fact=name, kind="unknown", alternatives=alternatives, summary=summary)


# ---- why not ----------------------------------------------------------------------------------------------------


class Blocker(_Model):
    """One reason a rule did not fire: a comparison that failed, a missing fact, or a finding (not) concluded."""

    kind: Literal["failed", "missing", "finding"]
    name: str
    test: str  # the comparison as the rule needs it, with the observed value
    value: Value | None = None
    threshold: Value | list[Value] | bool | None = None
    message: str
    ask: list[str] = []  # for a missing fact: observable facts that would settle it
    because: WhyNot | None = None  # for a finding that was not concluded: why not, in turn

    def text(self) -> str:
        return self.message


class Attempt(_Model):
    """A rule that could conclude the asked-about id, and why it did not (or that it did)."""

    rule_id: str
    title: str
    source: str
    outcome: Outcome
    fired: bool
    would_conclude: str
    blockers: list[Blocker] = []

    def text(self) -> str:
        return "\n".join(self._lines())

    def _lines(self) -> list[str]:
        state = "fired" if self.fired else ("cannot decide (facts missing)" if self.outcome == "unknown"
                                            else "did not fire")
        out = [f"rule {self.rule_id} ({self.title}) would conclude {self.would_conclude}: {state}",
               f"  source: {self.source}"]
        for b in self.blockers:
            out.append(f"  - {b.message}")
            if b.because is not None:
                out.extend(_indent(b.because._lines(), "      "))
        return out


class WhyNot(_Model):
    """Why a bottleneck, finding, optimization or rule was not concluded: every rule that could, and what failed."""

    question: str
    kind: Literal["bottleneck", "finding", "optimization", "rule", "unknown"]
    concluded: bool
    summary: str
    notes: list[str] = []
    attempts: list[Attempt] = []
    wasted_for_verdict: bool | None = None  # optimizations only
    wasted_reason: str | None = None

    def text(self) -> str:
        return "\n".join(self._lines())

    def _lines(self) -> list[str]:
        out = [self.summary, *_indent(self.notes)]
        for attempt in self.attempts:
            out.extend(_indent(attempt._lines()))
        return out


@dataclass
class _Tree:
    """A rule's condition tree with the recorded leaf outcomes attached (no re-evaluation)."""

    op: Literal["all", "any", "not", "leaf"]
    outcome: Outcome
    children: list[_Tree] = field(default_factory=list)
    leaves: list[LeafTrace] = field(default_factory=list)


_OPS_IN_TEST = ("lt", "le", "gt", "ge", "eq", "ne", "in", "not_in")


def _and(outcomes: list[Outcome]) -> Outcome:
    return "false" if "false" in outcomes else ("unknown" if "unknown" in outcomes else "true")


def _or(outcomes: list[Outcome]) -> Outcome:
    return "true" if "true" in outcomes else ("unknown" if "unknown" in outcomes else "false")


_FLIP: dict[Outcome, Outcome] = {"true": "false", "false": "true", "unknown": "unknown"}


class _Mismatch(Exception):
    pass


def _build(cond: Mapping[str, Any], it: Iterator[LeafTrace]) -> _Tree:
    if "all" in cond:
        children = [_build(c, it) for c in cond["all"]]
        return _Tree("all", _and([c.outcome for c in children]), children)
    if "any" in cond:
        children = [_build(c, it) for c in cond["any"]]
        return _Tree("any", _or([c.outcome for c in children]), children)
    if "not" in cond:
        child = _build(cond["not"], it)
        return _Tree("not", _FLIP[child.outcome], [child])
    if "finding" in cond:
        leaf = next(it, None)
        if leaf is None or leaf.kind != "finding" or leaf.name != cond["finding"]:
            raise _Mismatch
        return _Tree("leaf", leaf.outcome, leaves=[leaf])
    if "fact" in cond:
        count = ("known" in cond) + sum(op in cond for op in _OPS_IN_TEST)
        leaves = [next(it, None) for _ in range(count)]
        if any(leaf is None or leaf.name != cond["fact"] for leaf in leaves):
            raise _Mismatch
        found = [leaf for leaf in leaves if leaf is not None]
        return _Tree("leaf", _and([leaf.outcome for leaf in found]), leaves=found)
    raise _Mismatch


def _tree(ev: RuleEvaluation) -> _Tree | None:
    if ev.when is None:
        return None
    it = iter(ev.leaves)
    try:
        tree = _build(ev.when, it)
    except (_Mismatch, KeyError, TypeError):
        return None
    return tree if next(it, None) is None else None


def _reasons(node: _Tree, want: bool) -> list[LeafTrace]:
    """The leaves that keep `node` from being `want`: the first failing branch of an `all`, every one of an `any`."""
    if node.op == "leaf":
        return [leaf for leaf in node.leaves if not leaf.supports]
    if node.op == "not":
        return _reasons(node.children[0], not want)
    conjunctive = (node.op == "all") == want  # all wanting true, or any wanting false: one bad child suffices
    bad: Outcome = "false" if want else "true"
    if conjunctive:
        first = next((c for c in node.children if c.outcome == bad), None)
        if first is not None:
            return _reasons(first, want)
        return [leaf for c in node.children if c.outcome == "unknown" for leaf in _reasons(c, want)]
    good: Outcome = "true" if want else "false"
    return [leaf for c in node.children if c.outcome != good for leaf in _reasons(c, want)]


def _inputs_closure(name: str) -> set[str]:
    out = {name}
    frontier = [name]
    while frontier:
        current = frontier.pop()
        for d in DERIVATIONS:
            if d.output == current:
                for inp in d.inputs:
                    if inp not in out:
                        out.add(inp)
                        frontier.append(inp)
    return out


def _blocker(report: Report, ev: RuleEvaluation, leaf: LeafTrace, depth: int, seen: set[str]) -> Blocker:
    if leaf.kind == "finding":
        if leaf.negated:
            return Blocker(kind="finding", name=leaf.name, test=leaf.comparison(),
                           message=f"finding {leaf.name} was concluded, and this rule needs it absent")
        nested = None
        if depth > 0 and leaf.name not in seen:
            nested = _why_not(report, leaf.name, depth - 1, seen | {leaf.name})
        return Blocker(kind="finding", name=leaf.name, test=leaf.comparison(), because=nested,
                       message=f"needs finding {leaf.name}, which was not concluded")
    if leaf.value is None and leaf.op != "known":
        closure = _inputs_closure(leaf.name)
        ask = [m.fact for m in report.missing if ev.rule_id in m.rules and m.fact in closure]
        if not ask:
            ask = [m.fact for m in report.missing if m.fact in closure]
        hint = f"; measure {', '.join(ask)} to settle it" if ask else ""
        derived = f" (derived: {', '.join(d.formula for d in DERIVATIONS if d.output == leaf.name)})" \
            if any(d.output == leaf.name for d in DERIVATIONS) else ""
        needs = leaf.comparison().replace(" unknown", "")
        return Blocker(kind="missing", name=leaf.name, test=leaf.comparison(), threshold=leaf.threshold, ask=ask,
                       message=f"{leaf.name} is unknown{derived}; the rule needs {needs}{hint}")
    if leaf.op == "known":
        want = "known" if bool(leaf.threshold) != leaf.negated else "unknown"
        state = f"was measured ({_fmt(leaf.value)})" if leaf.value is not None else "is unknown"
        return Blocker(kind="failed", name=leaf.name, test=leaf.comparison(), value=leaf.value,
                       threshold=leaf.threshold, message=f"the rule needs {leaf.name} to be {want}, but it {state}")
    return Blocker(kind="failed", name=leaf.name, test=leaf.comparison(), value=leaf.value, threshold=leaf.threshold,
                   message=f"{leaf.comparison()} fails (observed {leaf.name} = {_fmt(leaf.value)})")


def _attempt(report: Report, ev: RuleEvaluation, what: str, depth: int, seen: set[str]) -> Attempt:
    blockers: list[Blocker] = []
    if not ev.fired:
        tree = _tree(ev)
        # without the condition tree (an older report): every leaf that stands against the rule
        leaves = _reasons(tree, True) if tree is not None else [leaf for leaf in ev.leaves if not leaf.supports]
        if ev.outcome == "true":  # evaluated true but did not fire: only possible with a custom engine
            leaves = []
        unique: list[LeafTrace] = []
        for leaf in leaves:
            if leaf not in unique:
                unique.append(leaf)
        blockers = [_blocker(report, ev, leaf, depth, seen) for leaf in unique]
    return Attempt(rule_id=ev.rule_id, title=ev.title, source=ev.source, outcome=ev.outcome, fired=ev.fired,
                   would_conclude=what, blockers=blockers)


def _kind_of(report: Report, ident: str) -> str:
    evs = report.evaluations
    if any(e.rule_id == ident for e in evs):
        return "rule"
    regimes = {c.regime for c in report.candidates} | {t.regime for t in report.tables}
    if ident in regimes or any(e.concludes.bottleneck == ident for e in evs):
        return "bottleneck"
    if ident in {f.id for f in report.findings} or any(e.concludes.finding == ident for e in evs):
        return "finding"
    opts = {r.id for r in report.recommended} | {w.id for w in report.wasted}
    for t in report.tables:
        opts |= set(t.effective) | set(t.wasted)
    for e in evs:
        opts |= set(e.concludes.recommend) | set(e.concludes.waste)
    return "optimization" if ident in opts else "unknown"


def why_not(report: Report, ident: str) -> WhyNot:
    """Why a bottleneck, finding, optimization or rule was not concluded: every rule that could, and what failed."""
    return _why_not(report, ident, 2, {ident})


def _why_not(report: Report, ident: str, depth: int, seen: set[str]) -> WhyNot:
    kind = _kind_of(report, ident)
    if kind == "rule":
        ev = report.evaluation(ident)
        assert ev is not None
        if ev.fired:
            return WhyNot(question=ident, kind="rule", concluded=True,
                          summary=f"rule {ident} fired; see why({ident!r})")
        attempt = _attempt(report, ev, _describe_then(ev), depth, seen)
        return WhyNot(question=ident, kind="rule", concluded=False, attempts=[attempt],
                      summary=f"rule {ident} ({ev.title}) did not fire")
    if kind == "bottleneck":
        return _why_not_regime(report, ident, depth, seen)
    if kind == "finding":
        producers = [e for e in report.evaluations if e.concludes.finding == ident]
        if any(f.id == ident for f in report.findings):
            rule = next(f.rule_id for f in report.findings if f.id == ident)
            return WhyNot(question=ident, kind="finding", concluded=True,
                          summary=f"finding {ident} was concluded (rule {rule}); see why({ident!r})")
        attempts = [_attempt(report, e, f"finding {ident}", depth, seen) for e in producers]
        return WhyNot(question=ident, kind="finding", concluded=False, attempts=attempts,
                      summary=f"finding {ident} was not concluded: "
                              f"{_count(len(attempts), 'rule')} could conclude it, and none fired")
    if kind == "optimization":
        return _why_not_optimization(report, ident, depth, seen)
    return WhyNot(question=ident, kind="unknown", concluded=False,
                  summary=f"no rule or regime table in this report can conclude {ident!r}{_suggest(report, ident)}")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _describe_then(ev: RuleEvaluation) -> str:
    return describe_conclusions(ev.concludes)


def _why_not_regime(report: Report, regime: str, depth: int, seen: set[str]) -> WhyNot:
    voters = [e for e in report.evaluations if e.concludes.bottleneck == regime]
    voters.sort(key=lambda e: (e.fired, -_STRENGTHS.index(e.concludes.strength or "suspect"), e.rule_id))
    attempts = [_attempt(report, e, f"bottleneck {regime} ({e.concludes.strength})", depth, seen) for e in voters]
    cand = next((c for c in report.candidates if c.regime == regime), None)
    notes = _ranking_notes(report, regime)
    if regime == report.bottleneck:
        return WhyNot(question=regime, kind="bottleneck", concluded=True, notes=notes,
                      summary=f"{regime} is the verdict; see why({regime!r})")
    if cand is not None:
        summary = f"{regime} is a candidate ({cand.strength}, score {cand.score}) but not the verdict"
    else:
        summary = (f"no rule voted for {regime}: {_count(len(attempts), 'rule')} could, and none fired" if attempts
                   else f"no rule of this report can conclude the bottleneck {regime}")
    return WhyNot(question=regime, kind="bottleneck", concluded=False, summary=summary, notes=notes,
                  attempts=[a for a in attempts if not a.fired])


def _why_not_optimization(report: Report, opt: str, depth: int, seen: set[str]) -> WhyNot:
    rec = next((r for r in report.recommended if r.id == opt), None)
    if rec is not None:
        return WhyNot(question=opt, kind="optimization", concluded=True, wasted_for_verdict=False,
                      summary=f"{opt} is recommended (rules: {', '.join(rec.rules)}); see why({opt!r})")
    wasted = next((w for w in report.wasted if w.id == opt), None)
    verdict = report.bottleneck
    notes: list[str] = []
    for t in report.tables:
        if opt in t.effective and t.regime != verdict:
            notes.append(f"the {t.regime} regime table lists it as effective ({t.source}), but the verdict is "
                         f"{verdict or 'undecided'}")
        if opt in t.wasted and t.regime != verdict:
            notes.append(f"it would be wasted if {t.regime}-bound: {t.wasted[opt]}")
    table = next((t for t in report.tables if t.regime == verdict), None)
    if verdict is not None and table is not None and opt not in table.effective and opt not in table.wasted:
        notes.append(f"the {verdict} regime table (the verdict's) neither recommends nor rules it out")
    proposers = [e for e in report.evaluations if opt in e.concludes.recommend]
    wasters = [e for e in report.evaluations if opt in e.concludes.waste]
    attempts = [_attempt(report, e, f"recommend {opt}", depth, seen) for e in proposers if not e.fired]
    attempts += [_attempt(report, e, f"waste {opt}", depth, seen) for e in wasters if not e.fired]
    if wasted is not None:
        summary = f"{opt} is wasted for the diagnosed bottleneck ({verdict or 'no verdict'}): {wasted.reason} " \
                  f"(rules: {', '.join(wasted.rules)})"
        if any(e.fired for e in proposers):
            notes.insert(0, "a rule proposed it, but being wasted overrides the proposal")
        return WhyNot(question=opt, kind="optimization", concluded=False, summary=summary, notes=notes,
                      attempts=attempts, wasted_for_verdict=True, wasted_reason=wasted.reason)
    tables = [t.regime for t in report.tables if opt in t.effective]
    if not proposers and not tables:
        summary = f"no rule or regime table can recommend {opt}"
    else:
        sources = [_count(len(proposers), "rule")] if proposers else []
        sources += [f"the {', '.join(tables)} regime table{'s' if len(tables) > 1 else ''}"] if tables else []
        summary = f"{opt} is not recommended: {' and '.join(sources)} could, and none applies on this evidence"
    verdict_note = (f"it is not wasted for the diagnosed bottleneck ({verdict})" if verdict
                    else "there is no verdict, so no regime table applies")
    notes.append(verdict_note)
    return WhyNot(question=opt, kind="optimization", concluded=False, summary=summary, notes=notes,
                  attempts=attempts, wasted_for_verdict=False if verdict else None)


# ---- what if ----------------------------------------------------------------------------------------------------


class FactChange(_Model):
    fact: str
    before: Value | None
    after: Value | None
    via: str | None = None  # a derived target realised through one observable input

    def text(self) -> str:
        via = f" ({self.via})" if self.via else ""
        return f"{self.fact}: {_fmt(self.before)} -> {_fmt(self.after)}{via}"


class ScoreChange(_Model):
    id: str
    title: str
    before: float | None
    after: float | None
    band_before: str
    band_after: str

    def text(self) -> str:
        return f"{self.title}: {_fmt(self.before)} ({self.band_before}) -> {_fmt(self.after)} ({self.band_after})"


class WhatIf(_Model):
    """What a re-diagnosis with some facts changed concluded differently."""

    changes: list[FactChange]
    verdict_before: str | None
    verdict_after: str | None
    candidates_before: list[str]
    candidates_after: list[str]
    findings_added: list[str] = []
    findings_removed: list[str] = []
    recommended_added: list[str] = []
    recommended_removed: list[str] = []
    wasted_added: list[str] = []
    wasted_removed: list[str] = []
    scorecard: list[ScoreChange] = []
    after: Report | None = Field(default=None, exclude=True, repr=False)

    @property
    def verdict_changed(self) -> bool:
        return self.verdict_before != self.verdict_after

    @property
    def changed(self) -> bool:
        return (self.verdict_changed or self.candidates_before != self.candidates_after or bool(
            self.findings_added or self.findings_removed or self.recommended_added or self.recommended_removed
            or self.wasted_added or self.wasted_removed or self.scorecard))

    def text(self) -> str:
        lines = ["what if " + ("; ".join(c.text() for c in self.changes) or "nothing changed") + ":"]
        if self.verdict_changed:
            lines.append(f"  verdict: {self.verdict_before or 'undecided'} -> {self.verdict_after or 'undecided'}")
        else:
            lines.append(f"  verdict unchanged: {self.verdict_before or 'undecided'}")
        if self.candidates_before != self.candidates_after:
            lines.append(f"  candidates: {', '.join(self.candidates_before) or 'none'} -> "
                         f"{', '.join(self.candidates_after) or 'none'}")
        for label, added, removed in (("findings", self.findings_added, self.findings_removed),
                                      ("recommended", self.recommended_added, self.recommended_removed),
                                      ("wasted", self.wasted_added, self.wasted_removed)):
            if added:
                lines.append(f"  {label} added: {', '.join(added)}")
            if removed:
                lines.append(f"  {label} removed: {', '.join(removed)}")
        lines.extend(f"  scorecard {s.text()}" for s in self.scorecard)
        if not self.changed:
            lines.append("  nothing else changed")
        return "\n".join(lines)


def _expert(expert: Expert | None) -> Expert:
    if expert is not None:
        return expert
    from .. import default_expert

    return default_expert()


def _raw(report: Report) -> dict[str, dict[str, Any]]:
    return {name: {"value": o.value, "source": o.source, "detail": dict(o.detail)}
            for name, o in report.observations.items()}


def _candidates(report: Report) -> list[str]:
    return [f"{c.regime} ({c.strength})" for c in report.candidates]


def diff(before: Report, after: Report, changes: list[FactChange]) -> WhatIf:
    """The differences between two reports, as a WhatIf."""
    def ids(items: list[Any]) -> list[str]:
        return [i.id for i in items]

    def delta(a: list[str], b: list[str]) -> tuple[list[str], list[str]]:
        return [x for x in b if x not in a], [x for x in a if x not in b]

    f_add, f_rem = delta(ids(before.findings), ids(after.findings))
    r_add, r_rem = delta(ids(before.recommended), ids(after.recommended))
    w_add, w_rem = delta(ids(before.wasted), ids(after.wasted))
    rows_before = {r.id: r for r in before.scorecard}
    scores = []
    for row in after.scorecard:
        old = rows_before.get(row.id)
        if old is None or old.value != row.value or old.band != row.band:
            scores.append(ScoreChange(id=row.id, title=row.title, before=old.value if old else None, after=row.value,
                                      band_before=old.band if old else "n/a", band_after=row.band))
    return WhatIf(changes=changes, verdict_before=before.bottleneck, verdict_after=after.bottleneck,
                  candidates_before=_candidates(before), candidates_after=_candidates(after),
                  findings_added=f_add, findings_removed=f_rem, recommended_added=r_add, recommended_removed=r_rem,
                  wasted_added=w_add, wasted_removed=w_rem, scorecard=scores, after=after)


def what_if(report: Report, changes: Mapping[str, Any], expert: Expert | None = None) -> WhatIf:
    """Re-diagnose the report's observations with `changes` applied ("unknown" removes a fact) and diff.

    A derived fact (io_overhead, ...) cannot be observed; it is realised by solving for one observed input
    (io_overhead=0.05 becomes data_wait_s = 0.05 · step_time_s), and the change says so.
    """
    exp = _expert(expert)
    kb = exp.kb
    raw = _raw(report)
    fact_changes: list[FactChange] = []
    problems: list[Problem] = []
    for name, value in changes.items():
        spec = kb.facts.get(name)
        if spec is not None and spec.kind == "derived":
            try:
                realised = _realise(kb, report, name, value)
            except ObservationError as exc:
                problems.extend(exc.problems)
                continue
            fact, new_value, via = realised
            raw[fact] = {"value": new_value, "source": "what-if"}
            fact_changes.append(FactChange(fact=fact, before=_value(report, fact), after=new_value, via=via))
            continue
        before = _value(report, name)
        if isinstance(value, str) and value.strip().casefold() in ("unknown", "skip", "?", "n/a", "na", ""):
            raw.pop(name, None)
            fact_changes.append(FactChange(fact=name, before=before, after=None))
            continue
        raw[name] = {"value": value, "source": "what-if"}
        fact_changes.append(FactChange(fact=name, before=before, after=value))
    if problems:
        raise ObservationError(problems, title="cannot apply the what-if changes")
    after = exp.diagnose(raw)
    for change in fact_changes:  # show the normalised value ("62%" -> 0.62)
        if change.after is not None and change.fact in after.observations:
            change.after = after.observations[change.fact].value
    return diff(report, after, fact_changes)


def _value(report: Report, name: str) -> Value | None:
    return report.facts().get(name)


def _realise(kb: KnowledgeBase, report: Report, name: str, raw_target: Any) -> tuple[str, Value, str]:
    """Solve for one observed input so that derived fact `name` takes the target value."""
    from ..observations.normalise import convert

    spec = kb.facts[name]
    try:
        target = float(convert(spec, raw_target, kb))
    except ValueError as exc:
        raise ObservationError([Problem(name, str(exc), f"accepted: {spec.range_text()}")]) from exc
    base = report.facts()
    observed = {k: o.value for k, o in report.observations.items()}
    for inp in _numeric_inputs(kb, name):
        solver = _Solver(kb, observed, name, inp)
        roots = solver.boundaries(target)
        if not roots:
            continue
        x0 = observed.get(inp)
        best = min(roots, key=lambda x: abs(x - float(x0)) if isinstance(x0, (int, float)) else 0.0)
        value = _snap(kb.facts[inp], best)
        return inp, value, f"{name} {_fmt(base.get(name))} -> {_fmt(target)} through {inp}"
    inputs = ", ".join(_numeric_inputs(kb, name)) or "its inputs"
    raise ObservationError([Problem(name, f"is derived, and no single observed input can make it {_fmt(target)}",
                                    f"change {inputs} instead")])


def _snap(spec: FactSpec, x: float) -> Value:
    if spec.type == "integer":
        return round(x)
    return float(f"{x:.6g}")


# ---- counterfactuals --------------------------------------------------------------------------------------------


class Counterfactual(_Model):
    """The smallest change of one fact that flips the verdict, verified by re-diagnosis."""

    fact: str
    before: Value | None  # None: the fact was not known, the change is a new measurement
    after: Value
    unit: str | None = None
    verdict_before: str | None
    verdict_after: str | None
    crosses: str  # the decisive rule and the tests that changed, e.g. "input-io-overhead-fail stops firing: ..."
    via: list[str] = []  # derived facts moved by the change: "io_overhead 0.4 -> 0.09667"
    magnitude: float | None = None  # |after - before| / |before|; None for a new measurement or a change from 0

    @property
    def changes(self) -> dict[str, Value]:
        """The change to apply (`report.what_if(cf.changes)`)."""
        return {self.fact: self.after}

    def text(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        if self.before is None:
            head = f"if {self.fact} were measured at {_fmt(self.after)}{unit}"
        else:
            direction = "" if isinstance(self.before, str) or isinstance(self.after, str) else (
                " (lower)" if float(self.after) < float(self.before) else " (higher)")
            head = f"if {self.fact} were {_fmt(self.after)}{unit} instead of {_fmt(self.before)}{unit}{direction}"
        via = f" ({'; '.join(self.via)})" if self.via else ""
        after = self.verdict_after or "undecided (no verdict)"
        return f"{head}{via}, the bottleneck would be {after} instead of {self.verdict_before or 'undecided'}: " \
               f"{self.crosses}"


class Counterfactuals(_Model):
    verdict: str | None
    items: list[Counterfactual]
    tried: int  # candidate changes re-diagnosed

    def text(self) -> str:
        head = f"verdict: {self.verdict or 'undecided'}; {len(self.items)} single-fact change(s) flip it " \
               f"({self.tried} candidates checked by re-diagnosis)"
        return "\n".join([head, *(f"  - {cf.text()}" for cf in self.items)])


def _numeric(spec: FactSpec | None) -> bool:
    return spec is not None and spec.type in ("fraction", "number", "integer")


def _numeric_inputs(kb: KnowledgeBase, name: str) -> list[str]:
    """Numeric observable facts a derived fact depends on (through any derivation), nearest and first-listed first."""
    out: list[str] = []
    queue, seen = [name], {name}
    while queue:
        current = queue.pop(0)
        for d in DERIVATIONS:
            if d.output != current:
                continue
            for inp in d.inputs:
                if inp in seen:
                    continue
                seen.add(inp)
                spec = kb.facts.get(inp)
                if spec is not None and spec.askable and _numeric(spec):
                    out.append(inp)
                if spec is None or spec.kind != "observed":
                    queue.append(inp)
    return out


class _Solver:
    """Where a derived fact crosses a value as one observed input moves, the others held (scan, then bisect)."""

    def __init__(self, kb: KnowledgeBase, observed: Mapping[str, Value], target: str, inp: str) -> None:
        self.kb, self.observed, self.target, self.inp = kb, dict(observed), target, inp
        self.spec = kb.facts[inp]
        x0 = observed.get(inp)
        self.x0 = float(x0) if isinstance(x0, (int, float)) else None
        self.samples = [(x, self.f(x)) for x in self._points()]

    def f(self, x: float) -> float | None:
        facts = {**self.observed, self.inp: round(x) if self.spec.type == "integer" else x}
        try:
            d = derive(facts, self.kb)
        except ExpertError:
            return None
        value = d.get(self.target)
        return value.value if value is not None else None

    def _domain(self) -> tuple[float, float]:
        if self.spec.type == "fraction":
            return 0.0, 1.0
        lo = self.spec.min if self.spec.min is not None else 0.0
        hi = min(self.spec.max if self.spec.max is not None else 1e24, 1e24)
        if self.spec.exclusive_min or lo <= 0:
            lo = max(lo, hi * 1e-30, 1e-12) if self.spec.type != "integer" else max(lo, 0.0)
        return lo, hi

    def _points(self) -> list[float]:
        lo, hi = self._domain()
        if self.spec.type == "fraction":
            points = [i / 40 for i in range(41)]
        else:
            start = self.x0 if self.x0 and self.x0 > 0 else math.sqrt(max(lo, 1e-12) * hi)
            points = [start * 2.0 ** k for k in range(-40, 41)]
            points += [lo, hi]
        if self.x0 is not None:
            points.append(self.x0)
        if self.spec.type == "integer":
            points = [float(round(p)) for p in points]
        return sorted({p for p in points if lo <= p <= hi})

    def boundaries(self, t: float) -> list[float]:
        """Input values at which the derived fact equals t (one per sign change of the scan)."""
        out: list[float] = []
        for (x1, f1), (x2, f2) in zip(self.samples, self.samples[1:], strict=False):
            if f1 is None or f2 is None or f1 == f2:
                continue
            if f1 == t:
                out.append(x1)
            elif (f1 - t) * (f2 - t) < 0:
                out.append(self._bisect(x1, f1, x2, t))
        return out

    def _bisect(self, a: float, fa: float, b: float, t: float) -> float:
        geometric = a > 0 and self.spec.type != "fraction"
        for _ in range(60):
            mid = math.sqrt(a * b) if geometric else (a + b) / 2
            fm = self.f(mid)
            if fm is None:
                break
            if (fa - t) * (fm - t) <= 0:
                b = mid
            else:
                a, fa = mid, fm
        return (a + b) / 2


def _nudge(spec: FactSpec, b: float, up: bool) -> float | None:
    """A round value strictly on one side of boundary b, within 5 % of it (integers: the next whole number)."""
    lo, hi = (0.0, 1.0) if spec.type == "fraction" else (
        spec.min if spec.min is not None else -math.inf, spec.max if spec.max is not None else math.inf)
    if spec.type == "integer":
        c = float(math.floor(b) + 1 if up else math.ceil(b) - 1)
    elif b == 0:
        c = (0.01 if spec.type == "fraction" else 1e-6) if up else -1.0
    else:
        c = math.nan
        for digits in range(1, 10):
            scale = 10.0 ** (math.floor(math.log10(abs(b))) - digits + 1)
            cand = (math.floor(b / scale) + 1) * scale if up else (math.ceil(b / scale) - 1) * scale
            cand = float(f"{cand:.{digits + 1}g}")
            if (cand > b if up else cand < b) and abs(cand - b) <= 0.05 * abs(b):
                c = cand
                break
        if math.isnan(c):
            return None
    if c < lo or c > hi or (spec.exclusive_min and spec.min is not None and c <= spec.min):
        return None
    return c


@dataclass(frozen=True)
class _Candidate:
    fact: str
    value: Value
    crosses: str
    via: str | None
    magnitude: float | None


def _relevant(report: Report) -> list[RuleEvaluation]:
    """Rules that vote for a bottleneck, and (transitively) the rules producing the findings they read."""
    by_finding: dict[str, list[RuleEvaluation]] = {}
    for e in report.evaluations:
        if e.concludes.finding:
            by_finding.setdefault(e.concludes.finding, []).append(e)
    chosen = {e.rule_id: e for e in report.evaluations if e.concludes.bottleneck}
    frontier = list(chosen.values())
    while frontier:
        e = frontier.pop()
        for leaf in e.leaves:
            if leaf.kind == "finding":
                for producer in by_finding.get(leaf.name, []):
                    if producer.rule_id not in chosen:
                        chosen[producer.rule_id] = producer
                        frontier.append(producer)
    return [chosen[k] for k in sorted(chosen)]


def _magnitude(before: Value | None, after: Value) -> float | None:
    if before is None:
        return None
    if isinstance(before, str) or isinstance(after, str):
        return 1.0
    if before == 0:
        return abs(float(after))
    return abs(float(after) - float(before)) / abs(float(before))


def _candidates_for(kb: KnowledgeBase, report: Report) -> list[_Candidate]:
    observed = {k: o.value for k, o in report.observations.items()}
    facts = report.facts()
    out: dict[tuple[str, Value], _Candidate] = {}
    solvers: dict[tuple[str, str], _Solver] = {}

    def add(fact: str, value: Value, crosses: str, via: str | None) -> None:
        if facts.get(fact) == value:
            return
        key = (fact, value)
        if key not in out:
            out[key] = _Candidate(fact, value, crosses, via, _magnitude(facts.get(fact), value))

    for ev in _relevant(report):
        for leaf in ev.leaves:
            if leaf.kind != "fact":
                continue
            spec = kb.facts.get(leaf.name)
            if spec is None:
                continue
            crosses = f"{leaf.name} {_SYMBOL.get(leaf.op, leaf.op)} {_fmt(leaf.threshold)} ({ev.rule_id})"
            if spec.type == "enum" and spec.askable and leaf.op in ("eq", "ne", "in", "not_in"):
                for choice in spec.choices or []:
                    add(leaf.name, choice, crosses, None)
                continue
            if not _numeric(spec) or leaf.op not in (*_NUMERIC_OPS, "eq", "ne"):
                continue
            if not isinstance(leaf.threshold, (int, float)) or isinstance(leaf.threshold, bool):
                continue
            t = float(leaf.threshold)
            if spec.askable:
                for x in _sides(spec, t, leaf.op, facts.get(leaf.name)):
                    add(leaf.name, _typed(spec, x), crosses, None)
                continue
            for inp in _numeric_inputs(kb, leaf.name):
                solver = solvers.get((leaf.name, inp))
                if solver is None:
                    solver = solvers[(leaf.name, inp)] = _Solver(kb, observed, leaf.name, inp)
                x0 = observed.get(inp)
                for b in solver.boundaries(t):
                    for x in _across(kb.facts[inp], b, x0):
                        new = solver.f(x)
                        via = f"{leaf.name} {_fmt(facts.get(leaf.name))} -> {_fmt(new)}"
                        add(inp, _typed(kb.facts[inp], x), crosses, via)
    return list(out.values())


_SYMBOL = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=", "in": "in", "not_in": "not in"}


def _typed(spec: FactSpec, x: float) -> Value:
    return round(x) if spec.type == "integer" else x


def _in_range(spec: FactSpec, v: float) -> bool:
    if spec.type == "fraction":
        return 0.0 <= v <= 1.0
    if spec.min is not None and (v < spec.min or (spec.exclusive_min and v == spec.min)):
        return False
    return spec.max is None or v <= spec.max


def _holds(op: str, v: float, t: float) -> bool:
    return {"lt": v < t, "le": v <= t, "gt": v > t, "ge": v >= t, "eq": v == t, "ne": v != t}[op]


def _sides(spec: FactSpec, t: float, op: str, current: Value | None) -> list[float]:
    """Values nearest threshold t on the other side of the test from the current value (both sides if unknown)."""
    x0 = float(current) if isinstance(current, (int, float)) else None
    options = [t, t - 1, t + 1] if spec.type == "integer" else [t]
    if op not in ("eq", "ne"):
        options += [v for v in (_nudge(spec, t, up=False), _nudge(spec, t, up=True)) if v is not None]
    options = [v for v in options if _in_range(spec, v)]
    out: list[float] = []
    for outcome in (True, False):
        if x0 is not None and outcome == _holds(op, x0, t):
            continue
        side = [v for v in options if _holds(op, v, t) == outcome and v != x0]
        if side:
            out.append(min(side, key=lambda v: abs(v - t)))
    return out


def _across(spec: FactSpec, b: float, current: Value | None) -> list[float]:
    """Input values just across a solved boundary b, on the other side from the current value."""
    x0 = float(current) if isinstance(current, (int, float)) else None
    out = []
    for up in (False, True):
        v = _nudge(spec, b, up=up)
        if v is not None and _in_range(spec, v) and (x0 is None or (v > b) != (x0 > b)):
            out.append(v)
    return out


def counterfactuals(report: Report, expert: Expert | None = None, limit: int | None = None) -> Counterfactuals:
    """The smallest single-fact changes that flip the verdict, found from rule thresholds, each verified.

    Candidates are values just across each numeric threshold of the rules that vote for a bottleneck (and the rules
    whose findings those read); a derived threshold (io_overhead > 0.1) is crossed by solving for one observed
    input (data_wait_s). Each candidate is re-diagnosed; the smallest flipping change per fact, direction and new
    verdict is kept: changes of known facts first (flips to another regime before flips to no verdict, smallest
    relative change first), then new measurements.
    """
    exp = _expert(expert)
    kb = exp.kb
    raw = _raw(report)
    facts = report.facts()

    def order(c: _Candidate) -> tuple[bool, float, str, str]:
        size = c.magnitude if c.magnitude is not None else (
            abs(float(c.value)) if isinstance(c.value, (int, float)) else 1.0)
        return c.magnitude is None, size, c.fact, str(c.value)

    candidates = sorted(_candidates_for(kb, report), key=order)
    best: dict[tuple[str, str, str | None], Counterfactual] = {}
    tried = 0
    for cand in candidates:
        before = facts.get(cand.fact)
        if isinstance(cand.value, str) or isinstance(before, str):
            direction = f"set {cand.value}"
        elif before is None:
            direction = "set"
        else:
            direction = "down" if float(cand.value) < float(before) else "up"
        tried += 1
        try:
            after = exp.diagnose({**raw, cand.fact: {"value": cand.value, "source": "counterfactual"}})
        except ExpertError:
            continue
        if after.bottleneck == report.bottleneck:
            continue
        key = (cand.fact, direction, after.bottleneck)
        if key in best:
            continue  # candidates are sorted, so the first flip per key is the smallest
        crosses, via = _attribute(report, after, cand)
        spec = kb.facts.get(cand.fact)
        best[key] = Counterfactual(fact=cand.fact, before=before, after=cand.value, unit=spec.unit if spec else None,
                                   verdict_before=report.bottleneck, verdict_after=after.bottleneck,
                                   crosses=crosses, via=via, magnitude=cand.magnitude)
    items = sorted(best.values(), key=lambda c: (c.before is None, c.verdict_after is None, isinstance(c.after, str),
                                                 c.magnitude is None, c.magnitude or 0.0, c.fact))
    if limit is not None:
        items = items[:limit]
    return Counterfactuals(verdict=report.bottleneck, items=items, tried=tried)


def _attribute(before: Report, after: Report, cand: _Candidate) -> tuple[str, list[str]]:
    """The rule whose firing changed the verdict, the tests of it that changed, and the derived facts that moved."""
    old = {e.rule_id: e for e in before.evaluations}
    started = [e for e in after.evaluations if e.fired and e.rule_id in old and not old[e.rule_id].fired]
    stopped = [e for e in after.evaluations if not e.fired and e.rule_id in old and old[e.rule_id].fired]

    def strength(e: RuleEvaluation) -> int:
        return -_STRENGTHS.index(e.concludes.strength or "suspect")

    decisive = sorted((e for e in started if after.bottleneck and e.concludes.bottleneck == after.bottleneck),
                      key=strength)
    decisive += sorted((e for e in stopped if before.bottleneck and e.concludes.bottleneck == before.bottleneck),
                       key=strength)
    decisive += started + stopped
    moved: list[str] = []
    facts_before, facts_after = before.facts(), after.facts()
    if not decisive:
        return f"crosses {cand.crosses}", moved
    rule = decisive[0]
    changed = [leaf for leaf, was in zip(rule.leaves, old[rule.rule_id].leaves, strict=False)
               if leaf.outcome != was.outcome]
    for leaf in changed:
        if leaf.kind == "fact" and leaf.name != cand.fact and leaf.name in facts_after:
            text = f"{leaf.name} {_fmt(facts_before.get(leaf.name))} -> {_fmt(facts_after[leaf.name])}"
            if text not in moved:
                moved.append(text)
    verb = "fires" if rule in started else "stops firing"
    tests = "; ".join(leaf.describe() for leaf in changed) or rule.title
    return f"rule {rule.rule_id} {verb} ({tests})", moved


Blocker.model_rebuild()
WhyNot.model_rebuild()
