"""why: the chain from the observations through derived quantities and rules to one conclusion."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..model import GraphNode, NodeKind, Report
from ._shared import _fmt, _indent, _Model, _node_id, _ranking_notes, _suggest, _universe


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
    elif kind in _CONCLUSIONS:
        items, key, template, describe = _CONCLUSIONS[kind]
        item = next((x for x in items(report) if getattr(x, key) == bare), None)
        label = template.format(bare=bare, label=node.label)
        if item is not None:
            lines += describe(item, report)
    return Step(id=node_id, kind=kind, label=label, lines=lines, rests_on=parents)


# kind -> (the report's entries of that kind, the attribute a node id names, the step's label, its lines)
_CONCLUSIONS: dict[str, tuple[Callable[[Report], Iterable[Any]], str, str, Callable[[Any, Report], list[str]]]] = {
    "finding": (lambda r: r.findings, "id", "finding {bare}", lambda f, r: [f"{f.severity}: {f.message}"]),
    "bottleneck": (lambda r: r.candidates, "regime", "bottleneck {bare}: {label}",
                   lambda c, r: [f"{c.strength}, score {c.score}" + ("; the verdict" if c.regime == r.bottleneck
                                                                    else "")]),
    "recommendation": (lambda r: r.recommended, "id", "recommend {bare}: {label}",
                       lambda rec, r: [f"why: {rec.why}", f"expected gain: {gain_text(rec.expected_gain)}"]),
    "wasted": (lambda r: r.wasted, "id", "wasted {bare}: {label}", lambda w, r: [f"reason: {w.reason}"]),
    "measurement": (lambda r: r.next_measurements, "fact", "{label}", lambda m, r: [f"{m.tool}: {m.how}"]),
}


_SUMMARIES = {  # a concluded chain's summary by the kind of its target (bottleneck and rule: see `why`)
    "recommendation": "{bare} is recommended",
    "wasted": "{bare} is wasted effort for this bottleneck",
    "observation": "{bare} was observed",
    "derived": "{bare} was derived",
    "measurement": "{bare}: a measurement to take next",
}


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
    summary = _SUMMARIES.get(kind, "{kind} {bare}: concluded").format(kind=kind, bare=bare)
    if kind == "bottleneck":
        notes = _ranking_notes(report, bare)
        summary = (f"the verdict is {bare} ({report.verdict_title})" if bare == report.bottleneck
                   else f"{bare} is a candidate bottleneck, not the verdict")
    elif kind == "rule":
        ev = report.evaluation(bare)
        summary = f"rule {bare} fired" if ev is None or ev.fired else f"rule {bare} did not fire ({ev.outcome})"
    return Why(question=conclusion_id, target=target, kind=kind, concluded=True, summary=summary, notes=notes,
               steps=steps)
