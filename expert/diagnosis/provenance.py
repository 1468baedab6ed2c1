"""The parts of a report most callers never read, built on first use: the rule evaluations and the provenance graph.

`build_report` keeps what they are built from in a `Basis` (the facts, the findings, the rules that fired, the
decision; every other section past the verdict, from the candidates and the optimizations to the missing facts and
next measurements, is deferred through it too) and hands the report `Deferred` values over it. The graph is
assembled here in the order the report's sections conclude (observations and derivations, fired rules, candidates,
optimizations, measurements), so a deferred graph is node for node, edge for edge, the graph an eager build made.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ..derive.formulas import DerivedValue
from ..kb.knowledge import KnowledgeBase
from ..observations.normalise import Observations
from ..report.model import (
    Applied,
    AxisScore,
    Candidate,
    Concludes,
    GraphEdge,
    GraphNode,
    ProvenanceData,
    Recommendation,
    RuleEvaluation,
    Wasted,
)
from ..rules.evaluate import LeafTrace, Outcome
from ..rules.model import RegimeTable
from ..rules.ruleset import LoadedRule, RuleSet

if TYPE_CHECKING:
    from .decide import Decision

Value = int | float | str
Trace = tuple[Outcome, list[LeafTrace]]


_UNBUILT = object()  # a part not built yet (the cluster part may be None)


class Optimizations(NamedTuple):
    """The report's optimization sections, worded and ranked (`build._optimizations`), and the recommended ones in
    proposal order (before ranking: the order the graph lists them in)."""

    recommended: list[Recommendation]
    wasted: list[Wasted]
    applied: list[Applied]
    proposed: list[Recommendation]

# A measurement's place in the graph, as `_measurements` chose it: ("fact", fact, tool, rule id) for a fired rule's
# `measure`, ("missing", fact, tool, rule ids) for a missing fact, ("confirm", axis, tool, rule ids or None for the
# verdict's own axis) for an axis to confirm.
MeasurementNote = tuple[str, str, str, Any]


@dataclass(eq=False)
class Basis:
    """What one diagnosis concluded from, shared by the eager build and the deferred parts. It never refers to the
    report, so a report and its deferred parts make no reference cycle; it does refer to the knowledge base and the
    rule set, so a report keeps them alive until its deferred parts are built (or it is pickled, which builds them)."""

    kb: KnowledgeBase
    ruleset: RuleSet
    facts: dict[str, Value]
    findings: Collection[str]
    observations: Observations
    derived: Mapping[str, DerivedValue]
    fired: list[LoadedRule]  # in (stratum, id) order
    fired_ids: set[str]
    rule_parts: Callable[[LoadedRule], tuple[Concludes, dict[str, Any]]]
    traces: dict[str, Trace] = field(default_factory=dict)
    # what the deferred parts are built from, set by build_report
    decision: Decision | None = None
    verdict: str | None = None
    caps: tuple[str, ...] = ()
    withheld_by: frozenset[str] = frozenset()  # conflict findings that withheld a regime resting on their facts
    table: RegimeTable | None = None
    table_rule: str | None = None
    measurements: list[MeasurementNote] = field(default_factory=list)  # filled with the next measurements
    engine_outcomes: dict[str, Outcome] | None = None  # what the engine reports (EngineResult.outcomes)
    axes: list[AxisScore] = field(default_factory=list)
    # the report sections built on first use: name -> how (build_report registers them), and the built ones
    builders: dict[str, Callable[[Basis], Any]] = field(default_factory=dict)
    built: dict[str, Any] = field(default_factory=dict)

    def outcome(self, rule_id: str) -> Outcome:
        """One rule's outcome on these facts and the final findings ("unknown" for a rule the set does not have)."""
        lr = self.ruleset.rules.get(rule_id)
        if lr is None:
            return "unknown"
        if rule_id in self.fired_ids:
            return "true"
        known = self.engine_outcomes.get(rule_id) if self.engine_outcomes is not None else None
        return known or lr.evaluator(self.facts, self.findings, None, False)

    def part(self, name: str) -> Any:
        """A deferred report section, built once (the graph needs the measurements, which need the missing facts)."""
        found = self.built.get(name, _UNBUILT)
        if found is _UNBUILT:
            found = self.built[name] = self.builders[name](self)
        return found

    def decided(self) -> Decision:
        """The decision the report states (set by build_report before any part is built)."""
        assert self.decision is not None, "build_report sets the decision"
        return self.decision

    def candidates(self) -> list[Candidate]:
        return self.part("candidates")  # type: ignore[no-any-return]

    def optimizations(self) -> Optimizations:
        return self.part("optimizations")  # type: ignore[no-any-return]

    def trace(self, lr: LoadedRule) -> Trace:
        """The rule evaluated leaf by leaf on these facts and the final findings (computed once per rule)."""
        found = self.traces.get(lr.id)
        if found is None:
            leaves: list[LeafTrace] = []
            outcome = lr.evaluator(self.facts, self.findings, leaves, False)
            found = self.traces[lr.id] = (outcome, leaves)
        return found


def evaluations(basis: Basis) -> list[RuleEvaluation]:
    """How every rule evaluated (fired or not), leaf by leaf, in rule-id order."""
    out: list[RuleEvaluation] = []
    fired = basis.fired_ids
    for lr in basis.ruleset.by_id:
        outcome, leaves = basis.trace(lr)
        concludes, when = basis.rule_parts(lr)
        out.append(RuleEvaluation(rule_id=lr.id, title=lr.rule.title, source=lr.rule.source, outcome=outcome,
                                  fired=lr.id in fired, leaves=leaves, concludes=concludes, when=when))
    return out


def fmt(value: object) -> str:
    """A value as a node label shows it (floats to 4 significant digits)."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


class _Graph:
    """Nodes and edges, deduplicated, in insertion order."""

    def __init__(self, basis: Basis) -> None:
        self.basis = basis
        self.nodes: dict[str, GraphNode] = {}
        self.edges: dict[tuple[str, str, str], GraphEdge] = {}
        self.fact_nodes: dict[str, str | None] = {}

    def node(self, node_id: str, kind: str, label: str, **attrs: object) -> str:
        if node_id not in self.nodes:
            self.nodes[node_id] = GraphNode(id=node_id, kind=kind, label=label, attrs=attrs)  # type: ignore[arg-type]
        return node_id

    def edge(self, source: str, target: str, relation: str) -> None:
        key = (source, target, relation)
        if key not in self.edges:
            self.edges[key] = GraphEdge(source=source, target=target, relation=relation)  # type: ignore[arg-type]

    def fact(self, name: str) -> str | None:
        """The node of a known fact (observation or derived, with its derivation chain)."""
        if name in self.fact_nodes:
            return self.fact_nodes[name]
        node: str | None = None
        observations, derived = self.basis.observations.facts, self.basis.derived
        if name in observations:
            obs = observations[name]
            node = self.node(f"obs:{name}", "observation", f"{name} = {fmt(obs.value)}", value=obs.value,
                             source=obs.source, **{f"detail_{k}": v for k, v in obs.detail.items()})
        elif name in derived:
            d = derived[name]
            node = self.node(f"derived:{name}", "derived", f"{name} = {fmt(d.value)}", value=d.value,
                             formula=d.formula, source=d.source)
            self.fact_nodes[name] = node
            for inp in d.inputs:
                parent = self.fact(inp)
                if parent:
                    self.edge(parent, node, "derived-from")
        self.fact_nodes[name] = node
        return node

    def rule(self, lr: LoadedRule, fired: bool) -> str:
        outcome, leaves = self.basis.trace(lr)
        node = self.node(f"rule:{lr.id}", "rule", lr.rule.title, rule_id=lr.id, source=lr.rule.source,
                         fired=fired, outcome=outcome)
        for leaf in leaves:
            if leaf.kind == "fact" and leaf.value is not None and (leaf.supports or not fired):
                parent = self.fact(leaf.name)
                if parent:
                    self.edge(parent, node, "used")
            elif leaf.kind == "finding" and leaf.outcome == "true" and not leaf.negated:
                self.edge(f"finding:{leaf.name}", node, "used")
        return node


def graph(basis: Basis) -> ProvenanceData:
    """The provenance graph: observations -> derivations -> rules -> findings -> bottlenecks -> optimizations and
    measurements."""
    if "next_measurements" in basis.builders:
        basis.part("next_measurements")  # where each measurement joins the graph is decided there
    g = _Graph(basis)
    for name in [*sorted(basis.observations.facts), *sorted(basis.derived)]:  # every known value is a node
        g.fact(name)
    for lr in basis.fired:  # finding nodes first, so every rule that reads one can link to it
        if lr.rule.then.finding:
            g.node(f"finding:{lr.rule.then.finding.id}", "finding", lr.rule.then.finding.id, severity=lr.rule.severity)
    for lr in basis.fired:
        g.rule(lr, fired=True)
        if lr.rule.then.finding:
            g.edge(f"rule:{lr.id}", f"finding:{lr.rule.then.finding.id}", "concluded")
    _candidates(g, basis)
    _optimizations(g, basis)
    _measurements(g, basis)
    # built from trusted values, so skip re-validation; JSON round trips validate them
    return ProvenanceData.model_construct(nodes=list(g.nodes.values()), edges=list(g.edges.values()))


def _candidates(g: _Graph, basis: Basis) -> None:
    for c in basis.candidates():
        node = g.node(f"bottleneck:{c.regime}", "bottleneck", c.title, strength=c.strength, score=c.score,
                      verdict=c.regime == basis.verdict)
        for rule_id in c.rules:
            g.edge(f"rule:{rule_id}", node, "concluded")
        for capped in basis.caps:
            g.edge(f"finding:{capped}", node, "used")


def _optimizations(g: _Graph, basis: Basis) -> None:
    verdict, table = basis.verdict, basis.table
    if table is not None and verdict is not None:
        table_node = g.node(f"rule:{basis.table_rule}", "rule", f"Effective vs wasted optimizations: {verdict}",
                            rule_id=basis.table_rule, source=table.source, fired=True)
        g.edge(f"bottleneck:{verdict}", table_node, "used")
    optimizations = basis.optimizations()
    for rec in optimizations.proposed:
        node = g.node(f"recommendation:{rec.id}", "recommendation", rec.title,
                      max_speedup=rec.expected_gain.max_speedup if rec.expected_gain else None)
        for rule_id in rec.rules:
            g.edge(f"rule:{rule_id}", node, "concluded")
    for wasted in optimizations.wasted:
        node = g.node(f"wasted:{wasted.id}", "wasted", wasted.title, reason=wasted.reason)
        for rule_id in wasted.rules:
            g.edge(f"rule:{rule_id}", node, "ruled-out")
    for applied in optimizations.applied:
        node = g.node(f"applied:{applied.id}", "wasted", applied.title,
                      reason="already applied (applied_optimizations)")
        parent = g.fact("applied_optimizations")
        if parent:
            g.edge(parent, node, "used")
        for rule_id in applied.rules:
            g.edge(f"rule:{rule_id}", node, "ruled-out")


def _measurements(g: _Graph, basis: Basis) -> None:
    rules: Mapping[str, LoadedRule] = basis.ruleset.rules
    for kind, name, tool, by in basis.measurements:
        if kind == "confirm":
            node = g.node(f"measurement:confirm-{name}", "measurement", f"confirm with {tool}", tool=tool)
            if by is None:
                g.edge(f"bottleneck:{basis.verdict}", node, "needs")
            else:
                for rule_id in by:
                    g.edge(f"rule:{rule_id}", node, "needs")
            continue
        node = g.node(f"measurement:{name}", "measurement", f"measure {name}", tool=tool)
        if kind == "fact":
            g.edge(f"rule:{by}", node, "concluded")
        else:  # the undecided rules this measurement would settle join the graph here
            for rule_id in by:
                g.edge(g.rule(rules[rule_id], fired=False), node, "needs")
