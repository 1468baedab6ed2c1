"""Turn an engine run into a Report: verdict, axes, findings, recommended vs wasted, what to measure, provenance.

Everything here is decided by data: rule conclusions (rules/), regime tables (rules/), strengths and precedence
(knowledge_base/regimes.yaml), scorecard bands, the tool map. This module only combines them.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._weakcache import PerObject
from ..derive.formulas import DerivedValue, amdahl_max_speedup
from ..derive.graph import askable_inputs_given
from ..engine.base import EngineResult
from ..kb.knowledge import KnowledgeBase, Optimization, Scorecard
from ..observations.normalise import Observations, applied_optimizations
from ..report.model import (
    Applied,
    AxisScore,
    Candidate,
    ClusterSection,
    Concludes,
    Evidence,
    EvidenceLimit,
    ExpectedGain,
    Finding,
    GraphEdge,
    GraphNode,
    IronLaw,
    IronLawTerm,
    MissingFact,
    NextMeasurement,
    ProvenanceData,
    Recommendation,
    RegimeTableRecord,
    Report,
    RuleEvaluation,
    ScoreRow,
    Wasted,
)
from ..rules.evaluate import LeafTrace
from ..rules.model import RecommendSpec, WasteSpec
from ..rules.ruleset import LoadedRule, RuleSet
from .decide import Decision, decide, table_id

Value = int | float | str
_SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


_Segment = tuple[str, "str | None", str]  # literal text, then a fact name (or None) and its format spec


@functools.lru_cache(maxsize=4096)
def _parse_template(template: str) -> tuple[_Segment, ...]:
    """A message template split once into segments (templates come from the rules, so they repeat)."""
    try:
        return tuple((text, name, spec or "") for text, name, spec, _ in string.Formatter().parse(template))
    except ValueError:  # unbalanced braces: show the template as written
        return ((template, None, ""),)


def render_message(template: str, facts: Mapping[str, Value], scorecard: Scorecard | None = None) -> str:
    """Fill a rule's message template with fact values ("{gpu_util:.0%}"); only plain fact names are looked up
    (no attribute or index access), and an unknown value renders as '?'. A scorecard band
    ("{scorecard.mfu.fail_below}", see `Scorecard.bound`) renders as a percentage ("30 %") or with its format spec;
    any other placeholder renders as written."""
    parts: list[str] = []
    for text, name, spec in _parse_template(template):
        parts.append(text)
        if name is None:
            continue
        if not name.isidentifier():
            band = scorecard.bound(name) if scorecard is not None else None
            parts.append(f"{{{name}}}" if band is None else _band_text(band, spec))
            continue
        value = facts.get(name)
        if value is None:
            parts.append("?")
            continue
        try:
            parts.append(format(value, spec))
        except (ValueError, TypeError):
            parts.append(str(value))
    return "".join(parts)


def _band_text(value: float, spec: str) -> str:
    """A scorecard band in a message: "30 %" (the rules' style) unless a format spec is given."""
    if not spec:
        return f"{value * 100:g} %"
    try:
        return format(value, spec)
    except (ValueError, TypeError):
        return str(value)


@dataclass
class _Context:
    kb: KnowledgeBase
    ruleset: RuleSet
    facts: dict[str, Value]
    observations: Observations
    derived: dict[str, DerivedValue]
    traces: dict[str, tuple[str, list[LeafTrace]]] = field(default_factory=dict)
    nodes: dict[str, GraphNode] = field(default_factory=dict)
    edges: dict[tuple[str, str, str], GraphEdge] = field(default_factory=dict)  # insertion-ordered, deduplicated
    fact_nodes: dict[str, str | None] = field(default_factory=dict)

    def add_node(self, node_id: str, kind: str, label: str, **attrs: object) -> str:
        if node_id not in self.nodes:
            self.nodes[node_id] = GraphNode(id=node_id, kind=kind, label=label, attrs=attrs)  # type: ignore[arg-type]
        return node_id

    def add_edge(self, source: str, target: str, relation: str) -> None:
        key = (source, target, relation)
        if key not in self.edges:
            self.edges[key] = GraphEdge(source=source, target=target, relation=relation)  # type: ignore[arg-type]

    def graph(self) -> ProvenanceData:
        # built from trusted values, so skip re-validation; JSON round trips validate them
        return ProvenanceData.model_construct(nodes=list(self.nodes.values()), edges=list(self.edges.values()))

    def fact_node(self, name: str) -> str | None:
        """The provenance node of a known fact (observation or derived, with its derivation chain)."""
        if name in self.fact_nodes:
            return self.fact_nodes[name]
        node: str | None = None
        if name in self.observations.facts:
            obs = self.observations.facts[name]
            node = self.add_node(f"obs:{name}", "observation", f"{name} = {_fmt(obs.value)}", value=obs.value,
                                 source=obs.source, **{f"detail_{k}": v for k, v in obs.detail.items()})
        elif name in self.derived:
            d = self.derived[name]
            node = self.add_node(f"derived:{name}", "derived", f"{name} = {_fmt(d.value)}", value=d.value,
                                 formula=d.formula, source=d.source)
            self.fact_nodes[name] = node
            for inp in d.inputs:
                parent = self.fact_node(inp)
                if parent:
                    self.add_edge(parent, node, "derived-from")
        self.fact_nodes[name] = node
        return node

    def rule_node(self, lr: LoadedRule, fired: bool) -> str:
        node = self.add_node(f"rule:{lr.id}", "rule", lr.rule.title, rule_id=lr.id, source=lr.rule.source,
                             fired=fired, outcome=self.traces[lr.id][0])
        for leaf in self.traces[lr.id][1]:
            if leaf.kind == "fact" and leaf.value is not None and (leaf.supports or not fired):
                parent = self.fact_node(leaf.name)
                if parent:
                    self.add_edge(parent, node, "used")
            elif leaf.kind == "finding" and leaf.outcome == "true" and not leaf.negated:
                self.add_edge(f"finding:{leaf.name}", node, "used")
        return node


def _fmt(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _evidence(ctx: _Context, rule_id: str) -> list[Evidence]:
    out: list[Evidence] = []
    for leaf in ctx.traces[rule_id][1]:
        if not leaf.supports:
            continue
        source = None
        if leaf.kind == "fact":
            if leaf.name in ctx.observations.facts:
                source = ctx.observations.facts[leaf.name].source
            elif leaf.name in ctx.derived:
                source = f"derived: {ctx.derived[leaf.name].formula}"
        out.append(Evidence(fact=leaf.name, value=leaf.value, test=leaf.comparison(), source=source))
    return out


def build_report(
    kb: KnowledgeBase,
    ruleset: RuleSet,
    engine_name: str,
    observations: Observations,
    derived: dict[str, DerivedValue],
    result: EngineResult,
) -> Report:
    """Assemble the report. Deterministic: independent of firing order and of the order facts were given in."""
    facts: dict[str, Value] = {**observations.values(), **{n: d.value for n, d in derived.items()}}
    ctx = _Context(kb, ruleset, facts, observations, derived)
    ordered = ruleset.by_stratum
    fired_ids = set(result.fired)
    evaluations: list[RuleEvaluation] = []
    parts = _parts(ruleset)
    for lr in ruleset.by_id:
        trace: list[LeafTrace] = []
        outcome = lr.evaluator(facts, result.findings, trace, False)
        ctx.traces[lr.id] = (outcome, trace)
        concludes, when = parts.of(lr)
        evaluations.append(RuleEvaluation(
            rule_id=lr.id, title=lr.rule.title, source=lr.rule.source, outcome=outcome, fired=lr.id in fired_ids,
            leaves=trace, concludes=concludes, when=when))
    for name in [*sorted(observations.facts), *sorted(derived)]:  # every observed and derived value is a node
        ctx.fact_node(name)
    fired = [lr for lr in ordered if lr.id in fired_ids]
    for lr in fired:  # finding nodes first, so every rule that reads one can link to it
        if lr.rule.then.finding:
            ctx.add_node(f"finding:{lr.rule.then.finding.id}", "finding", lr.rule.then.finding.id,
                         severity=lr.rule.severity)
    for lr in fired:
        ctx.rule_node(lr, fired=True)
        if lr.rule.then.finding:
            ctx.add_edge(f"rule:{lr.id}", f"finding:{lr.rule.then.finding.id}", "concluded")

    decision = decide(ruleset, result.fired, result.findings, facts)
    verdict = decision.verdict
    findings = _findings(ctx, fired)
    candidates = _verdict(ctx, decision)
    axes = [AxisScore(axis=a.axis, share=a.share, strength=a.strength, rules=list(a.rules)) for a in decision.axes]
    recommended, wasted, applied = _optimizations(ctx, decision, parts)
    missing = _missing(ctx, ordered)
    measurements = _measurements(ctx, fired, missing, verdict, axes)
    conflicts, limits = _evidence_limits(ctx, decision, findings)
    # every part was built here from checked values (as the graph is), so the Report is not validated again
    return Report.model_construct(
        engine=engine_name,
        observations=dict(sorted(observations.facts.items())),
        derived=dict(sorted(derived.items())),
        bottleneck=verdict,
        verdict_title=kb.regimes.regimes[verdict].title if verdict else None,
        state="verdict" if verdict else "conflicting evidence" if conflicts else "insufficient evidence",
        candidates=candidates,
        conflicts=conflicts,
        evidence_limits=limits,
        axes=axes,
        findings=findings,
        recommended=recommended,
        wasted=wasted,
        applied=applied,
        next_measurements=measurements,
        missing=missing,
        scorecard=_scorecard(ctx, decision),
        iron_law=_iron_law(kb, facts, derived),
        evaluations=evaluations,
        graph=ctx.graph(),
        tables=list(parts.tables),
        cluster=_cluster(facts, observations, fired_ids, ctx.traces),
    )


def _cluster(facts: Mapping[str, Value], observations: Observations | None = None, fired: set[str] | None = None,
             traces: Mapping[str, tuple[Any, Any]] | None = None) -> ClusterSection | None:
    """The cluster section: the C³ facts by name, or None when the diagnosis has none of them; with rank traces,
    their per-rank figures, the straggler rules ranks-straggler and ranks-slow-link found (rules/cluster_ranks.yaml)."""
    known: dict[str, Any] = {name: facts[name] for name in ClusterSection.model_fields if name in facts}
    ranks = list(observations.ranks) if observations is not None else []
    scale = max(float(known.get("num_gpus", 1)), float(known.get("num_nodes", 1)), float(known.get("world_size", 1)))
    single_node_facts = {"num_gpus", "num_nodes", "comm_frac"}  # meaningful on one GPU too
    if scale <= 1 and not set(known) - single_node_facts and not ranks:
        return None
    fired = fired or set()
    if ranks:
        known["ranks"] = ranks
    if "ranks-straggler" in fired and "slowest_rank" in facts:
        known["straggler_rank"] = facts["slowest_rank"]
    if "ranks-slow-link" in fired:
        known["slow_link"] = True
    elif traces and "slowest_rank" in facts and "comm_frac" in facts and \
            traces.get("ranks-slow-link", ("unknown",))[0] == "false":
        known["slow_link"] = False
    return ClusterSection.model_validate(known)


@dataclass
class _RuleSetParts:
    """Report records that depend on the rule set alone, built once per rule set (kept here, not on the rules)."""

    tables: list[RegimeTableRecord]
    recommends: dict[tuple[str, str], list[RecommendSpec]]  # (rule id, optimization) -> the rule's recommendations
    wastes: dict[tuple[str, str], list[WasteSpec]]  # (rule id, optimization) -> the rule's ruled-out entries
    rules: dict[str, tuple[Concludes, dict[str, Any]]] = field(default_factory=dict)  # rule id -> (concludes, when)

    def of(self, lr: LoadedRule) -> tuple[Concludes, dict[str, Any]]:
        """A rule's `concludes` and resolved `when`: they never change, so they are built once."""
        found = self.rules.get(lr.id)
        if found is None:
            found = self.rules[lr.id] = (_concludes(lr), lr.condition.model_dump(by_alias=True, exclude_none=True))
        return found


def _build_parts(ruleset: RuleSet) -> _RuleSetParts:
    """The rule set's report records; the regime tables become report records here, once."""
    rules = ruleset.rules
    recommends: dict[tuple[str, str], list[RecommendSpec]] = {}
    wastes: dict[tuple[str, str], list[WasteSpec]] = {}
    for lr in rules.values():
        for rec in lr.rule.then.recommend:
            recommends.setdefault((lr.id, rec.id), []).append(rec)
        for waste in lr.rule.then.waste:
            wastes.setdefault((lr.id, waste.id), []).append(waste)
    tables = [RegimeTableRecord(regime=t.regime, source=t.source, effective=list(t.effective),
                                wasted={w.id: w.reason for w in t.wasted})
              for _, (_, t) in sorted(ruleset.tables.items())]
    return _RuleSetParts(tables=tables, recommends=recommends, wastes=wastes)


_parts: PerObject[RuleSet, _RuleSetParts] = PerObject(_build_parts)


def _concludes(lr: LoadedRule) -> Concludes:
    """A rule's `then`, compactly, recorded in the report so that saved reports can answer why-not."""
    then = lr.rule.then
    return Concludes(finding=then.finding.id if then.finding else None,
                     bottleneck=then.bottleneck.regime if then.bottleneck else None,
                     strength=then.bottleneck.strength if then.bottleneck else None,
                     axis=then.axis.axis if then.axis else None, recommend=[r.id for r in then.recommend],
                     waste=[w.id for w in then.waste], measure=list(then.measure))


def _findings(ctx: _Context, fired: list[LoadedRule]) -> list[Finding]:
    seen: set[str] = set()
    out: list[Finding] = []
    for lr in fired:
        spec = lr.rule.then.finding
        if spec is None or spec.id in seen:
            continue
        seen.add(spec.id)
        out.append(Finding(id=spec.id, severity=lr.rule.severity, title=lr.rule.title,
                           message=render_message(spec.message, ctx.facts, ctx.kb.scorecard), rule_id=lr.id,
                           source=lr.rule.source,
                           evidence=_evidence(ctx, lr.id)))
    out.sort(key=lambda f: (_SEVERITY_ORDER[f.severity], f.rule_id))
    return out


def _verdict(ctx: _Context, decision: Decision) -> list[Candidate]:
    regimes = ctx.kb.regimes
    candidates = [Candidate(regime=v.regime, title=regimes.regimes[v.regime].title, strength=v.strength,
                            score=v.score, rules=list(v.rules)) for v in decision.candidates]
    for c in candidates:
        node = ctx.add_node(f"bottleneck:{c.regime}", "bottleneck", c.title, strength=c.strength, score=c.score,
                            verdict=c.regime == decision.verdict)
        for rule_id in c.rules:
            ctx.add_edge(f"rule:{rule_id}", node, "concluded")
        for capped in decision.caps:
            ctx.add_edge(f"finding:{capped}", node, "used")
    return candidates


def _gain(ctx: _Context, opt: Optimization) -> ExpectedGain | None:
    """The expected gain from the report's own terms: the Amdahl bound 1 / (1 - share) of removing the term, or,
    for an optimization with a `floor` (optimizations.yaml) that is known, the term falling to the floor, not to
    zero: 1 / (1 - share + floor) for a share of today's step (better kernels reach η = 1), (1 - floor) / (1 - share)
    for a share of the run at the floor (checkpoint interval tuning reaches Daly's optimum). An optimization with a
    term speed-up bound (`term_speedup`, a peak ratio, else the declared `max_term_speedup`) shrinks its term at best
    to share / s: 1 / (1 - share + share / s), never above s."""
    shrinks, floor, floor_of = opt.shrinks, opt.floor, opt.floor_of
    term = ctx.kb.regimes.terms.get(shrinks)
    if term is None or term.share is None or term.share not in ctx.facts:
        return None
    share = float(ctx.facts[term.share])
    cap = ctx.kb.regimes.max_reported_speedup
    capped = share >= 1 - 1 / cap
    bound = _term_bound(ctx, opt)
    if bound is not None:
        s, what = bound
        rest = share / s
        if floor is not None and floor in ctx.facts and floor_of == "step":
            rest = max(rest, min(float(ctx.facts[floor]), share))
        speedup = min(1 / (1 - share + rest), cap)
        return ExpectedGain(
            term=shrinks, term_share=round(share, 4), max_speedup=round(speedup, 3),
            assumptions=f"upper bound: the {shrinks} term, {share:.1%} of the step, runs at most {s:.3g}x faster "
            f"({what}); 1 / (1 − {share:.3g} + {rest:.3g}); other terms unchanged")
    known_floor = float(ctx.facts[floor]) if floor is not None and floor in ctx.facts else None
    own = floor_of == "own"
    if known_floor is not None and not (capped and own):  # a floor of today's step bounds the gain at any share
        rest = min(known_floor, share)
        speedup = (1 - rest) / (1 - share) if own else 1 / (1 - share + rest) if share - rest < 1 else cap
        formula = f"(1 − {rest:.3g}) / (1 − {share:.3g})" if own else f"1 / (1 − {share:.3g} + {rest:.3g})"
        return ExpectedGain(
            term=shrinks, term_share=round(share, 4), max_speedup=round(min(speedup, cap), 3),
            assumptions=f"upper bound: the {shrinks} term, {share:.1%} of the step, falls to {floor} "
            f"{rest:.1%}, not to zero; {formula}; other terms unchanged" + ("; capped" if speedup > cap else ""))
    speedup = cap if capped else amdahl_max_speedup(share)
    what = "hidden behind compute" if shrinks == "overlap" else "removed entirely"
    return ExpectedGain(
        term=shrinks, term_share=round(share, 4), max_speedup=round(speedup, 3),
        assumptions=f"upper bound (Amdahl): the {shrinks} term, {share:.0%} of the step, {what}; other terms unchanged"
        + ("; capped" if capped else ""),
    )


def _term_bound(ctx: _Context, opt: Optimization) -> tuple[float, str] | None:
    """How much faster the optimization can make its own term at best, and where that figure comes from: the
    derived peak ratio it names (`term_speedup`), else its declared bound (`max_term_speedup`); at least 1."""
    if opt.term_speedup is not None:
        raw = ctx.facts.get(opt.term_speedup)
        if isinstance(raw, (int, float)) and not isinstance(raw, bool) and raw > 0:
            return max(1.0, float(raw)), f"{opt.term_speedup} = {float(raw):.3g}, from the hardware catalog"
    if opt.max_term_speedup is not None:
        return opt.max_term_speedup, f"the declared bound of {opt.id}: {opt.bound_source}"
    return None


def _optimizations(
    ctx: _Context, decision: Decision, parts: _RuleSetParts
) -> tuple[list[Recommendation], list[Wasted], list[Applied]]:
    """The decision's recommended and ruled-out optimizations, worded (each rule's why, each reason) and ranked by
    their Amdahl bound, ties broken by the declared effort (optimizations.yaml), cheapest first; and the ones the job
    already applies (fact applied_optimizations), which are never recommended."""
    kb = ctx.kb
    verdict, table = decision.verdict, decision.table
    table_rule = table_id(verdict) if verdict is not None else None
    if table is not None and verdict is not None:
        table_node = ctx.add_node(f"rule:{table_rule}", "rule", f"Effective vs wasted optimizations: {verdict}",
                                  rule_id=table_rule, source=table.source, fired=True)
        ctx.add_edge(f"bottleneck:{verdict}", table_node, "used")
    table_reasons = {entry.id: entry.reason for entry in table.wasted} if table is not None else {}

    wasted: dict[str, tuple[str, list[str]]] = {}
    for opt_id, rules in decision.wasted.items():
        if rules[0] == table_rule:
            reason = table_reasons[opt_id]
        else:
            reason = render_message(parts.wastes[rules[0], opt_id][0].reason, ctx.facts, ctx.kb.scorecard)
        wasted[opt_id] = (reason, rules)

    applied_ids = applied_optimizations(ctx.facts.get("applied_optimizations"))
    recommended: list[tuple[tuple[float, int, int, int], Recommendation]] = []
    for index, (opt_id, rules) in enumerate(decision.proposed.items()):
        if opt_id in wasted or opt_id in applied_ids:
            continue
        whys: list[str] = []
        seen: dict[str, int] = {}
        for rule_id in rules:  # each proposal in order: a rule proposing it twice gives both of its whys
            nth = seen[rule_id] = seen.get(rule_id, -1) + 1
            if rule_id == table_rule and table is not None:
                whys.append(f"effective when {kb.regimes.regimes[table.regime].title.lower()} (regime table)")
            else:
                whys.append(render_message(parts.recommends[rule_id, opt_id][nth].why, ctx.facts,
                                            ctx.kb.scorecard))
        spec = 1 if rules[0] == table_rule else 0  # the regime table alone proposes it: less specific than a rule
        opt = kb.optimizations[opt_id]
        gain = _gain(ctx, opt)
        recommendation = Recommendation(id=opt_id, title=opt.title, why="; ".join(whys), how=opt.how, axis=opt.axis,
                                        shrinks=opt.shrinks, source=opt.source, rules=list(rules),
                                        expected_gain=gain)
        effort = opt.effort if opt.effort is not None else 6  # undeclared effort: after every declared one
        recommended.append(((-(gain.max_speedup if gain else 1.0), effort, spec, index), recommendation))
        node = ctx.add_node(f"recommendation:{opt_id}", "recommendation", opt.title,
                            max_speedup=gain.max_speedup if gain else None)
        for rule_id in rules:
            ctx.add_edge(f"rule:{rule_id}", node, "concluded")
    recommended.sort(key=lambda item: item[0])

    wasted_out: list[Wasted] = []
    for opt_id, (reason, rules) in sorted(wasted.items()):
        wasted_out.append(Wasted(id=opt_id, title=kb.optimizations[opt_id].title, reason=reason, rules=list(rules)))
        node = ctx.add_node(f"wasted:{opt_id}", "wasted", kb.optimizations[opt_id].title, reason=reason)
        for rule_id in rules:
            ctx.add_edge(f"rule:{rule_id}", node, "ruled-out")
    applied_out: list[Applied] = []
    if applied_ids:
        source = ctx.observations.facts["applied_optimizations"].source
        for opt_id in applied_ids:
            rules = list(decision.proposed.get(opt_id, []))
            applied_out.append(Applied(id=opt_id, title=kb.optimizations[opt_id].title, source=source, rules=rules))
            node = ctx.add_node(f"applied:{opt_id}", "wasted", kb.optimizations[opt_id].title,
                                reason="already applied (applied_optimizations)")
            parent = ctx.fact_node("applied_optimizations")
            if parent:
                ctx.add_edge(parent, node, "used")
            for rule_id in rules:
                ctx.add_edge(f"rule:{rule_id}", node, "ruled-out")
    return [rec for _, rec in recommended], wasted_out, applied_out


def _missing(ctx: _Context, ordered: list[LoadedRule]) -> list[MissingFact]:
    """Unknown facts that stand between a rule and a definite outcome, weighted by what the rule would conclude."""
    strengths = ctx.kb.regimes.strengths
    weight: dict[str, int] = {}
    rules_for: dict[str, list[str]] = {}
    inputs_memo: dict[str, list[str]] = {}
    for lr in ordered:
        outcome, trace = ctx.traces[lr.id]
        if outcome != "unknown":
            continue
        then = lr.rule.then
        w = strengths[then.bottleneck.strength] * 2 if then.bottleneck else 1
        for leaf in trace:
            if leaf.kind != "fact" or leaf.value is not None or leaf.op == "known":
                continue
            for fact in askable_inputs_given(leaf.name, ctx.facts, ctx.kb, inputs_memo):
                if fact in ctx.facts:  # observed, or already derived from what was observed
                    continue
                weight[fact] = weight.get(fact, 0) + w
                if lr.id not in rules_for.setdefault(fact, []):
                    rules_for[fact].append(lr.id)
    out: list[MissingFact] = []
    for fact in sorted(weight, key=lambda f: (-weight[f], ctx.kb.facts[f].cost, f)):
        spec = ctx.kb.facts[fact]
        rules = rules_for[fact]
        titles = "; ".join(ctx.ruleset.rules[r].rule.title for r in rules[:3])
        more = f" and {len(rules) - 3} more" if len(rules) > 3 else ""
        out.append(MissingFact(fact=fact, question=spec.question or spec.description,
                               why=f"would settle: {titles}{more}", rules=rules))
    return out


def _evidence_limits(ctx: _Context, decision: Decision,
                     findings: list[Finding]) -> tuple[list[EvidenceLimit], list[EvidenceLimit]]:
    """The evidence caps in effect (knowledge_base/regimes.yaml `evidence_caps`), as (conflicts, thin evidence):
    each with its finding's wording, the values that disagree, and the measurements that would lift it."""
    regimes = ctx.kb.regimes
    threshold = regimes.strengths[regimes.verdict_min_strength]
    by_id = {f.id: f for f in findings}
    conflicts: list[EvidenceLimit] = []
    limits: list[EvidenceLimit] = []
    for cap in regimes.evidence_caps:
        found = by_id.get(cap.finding)
        if cap.finding not in decision.caps or found is None:
            continue
        measure = ctx.ruleset.rules[found.rule_id].rule.then.measure
        if cap.conflict:  # re-measure what was given; what was not given is no part of the conflict
            measure = [m for m in measure if m in ctx.facts] or list(measure)
        remeasure: list[NextMeasurement] = []
        for fact in measure:
            tool = _measurement_for(ctx, fact)
            if tool is not None:
                remeasure.append(NextMeasurement(fact=fact, axis=tool[0], tool=tool[1], how=tool[2],
                                                 why=f"{found.title}: re-measure {fact}", settles=[cap.finding]))
        record = EvidenceLimit(
            finding=cap.finding, title=found.title, message=found.message, max_strength=cap.max_strength,
            effect="withheld" if regimes.strengths[cap.max_strength] < threshold else "capped",
            firmer=cap.firmer or found.message, source=cap.source,
            facts={name: ctx.facts[name] for name in cap.conflict if name in ctx.facts}, remeasure=remeasure)
        (conflicts if cap.conflict else limits).append(record)
    return conflicts, limits


def _measurement_for(ctx: _Context, fact: str) -> tuple[str, str, str] | None:
    spec = ctx.kb.facts.get(fact)
    key = spec.measure if spec and spec.measure else fact
    m = ctx.kb.tools.measurements.get(key)
    if m is None:
        return None
    return m.axis, ctx.kb.tools.tools[m.tool].name, m.how


def _measurements(
    ctx: _Context, fired: list[LoadedRule], missing: list[MissingFact], verdict: str | None,
    implicated: list[AxisScore],
) -> list[NextMeasurement]:
    out: dict[str, NextMeasurement] = {}
    for lr in fired:
        for fact in lr.rule.then.measure:
            if fact in ctx.facts or fact in out:
                continue
            found = _measurement_for(ctx, fact)
            if found is None:
                continue
            axis, tool, how = found
            settles = [lr.rule.then.finding.id] if lr.rule.then.finding else [lr.id]
            out[fact] = NextMeasurement(fact=fact, axis=axis, tool=tool, how=how,
                                        why=f"{lr.rule.title}: measure {fact} to confirm or rule it out",
                                        settles=settles)
            node = ctx.add_node(f"measurement:{fact}", "measurement", f"measure {fact}", tool=tool)
            ctx.add_edge(f"rule:{lr.id}", node, "concluded")
    for item in missing[:6]:
        if item.fact in out:
            continue
        found = _measurement_for(ctx, item.fact)
        if found is None:
            continue
        axis, tool, how = found
        out[item.fact] = NextMeasurement(fact=item.fact, axis=axis, tool=tool, how=how, why=item.why,
                                         settles=item.rules)
        node = ctx.add_node(f"measurement:{item.fact}", "measurement", f"measure {item.fact}", tool=tool)
        for rule_id in item.rules:  # the undecided rules this measurement would settle join the graph here
            ctx.add_edge(ctx.rule_node(ctx.ruleset.rules[rule_id], fired=False), node, "needs")
    result = list(out.values())
    # seed Table 4: the tool that confirms the verdict along its axis, then one per other implicated axis
    axes: list[str] = [ctx.kb.regimes.regimes[verdict].confirm_axis] if verdict else []
    axes += [a.axis for a in implicated if a.axis not in axes]
    for axis in axes:
        row = ctx.kb.tools.axes[axis]
        tools = [ctx.kb.tools.tools[t].name for t in [row.primary, *row.secondary]]
        if verdict and axis == axes[0]:
            why = f"confirm the {ctx.kb.regimes.regimes[verdict].title.lower()} verdict along the {axis} axis"
            settles = [verdict]
        else:
            why = f"the {axis} axis is implicated; measure its key metric"
            settles = [axis]
        result.append(NextMeasurement(fact=None, axis=axis, tool=tools[0],
                                      how=f"{row.key_metric}; secondary: {', '.join(tools[1:])}",
                                      why=f"{why} ({row.source})", settles=settles))
        node = ctx.add_node(f"measurement:confirm-{axis}", "measurement", f"confirm with {tools[0]}", tool=tools[0])
        if verdict and axis == axes[0]:
            ctx.add_edge(f"bottleneck:{verdict}", node, "needs")
        else:
            for rule_id in next(a.rules for a in implicated if a.axis == axis):
                ctx.add_edge(f"rule:{rule_id}", node, "needs")
    return result


def _scorecard(ctx: _Context, decision: Decision) -> list[ScoreRow]:
    rows = []
    for metric, band in zip(ctx.kb.scorecard.metrics, decision.bands, strict=True):
        raw = ctx.facts.get(metric.fact)
        value = float(raw) if isinstance(raw, (int, float)) else None
        rows.append(ScoreRow(id=metric.id, title=metric.title, axis=metric.axis, value=value,
                             band=band, definition=metric.definition, bands=metric.bands_text()))  # type: ignore[arg-type]
    return rows


def _iron_law(kb: KnowledgeBase, facts: Mapping[str, Value],
              derived: Mapping[str, DerivedValue] | None = None) -> IronLaw:
    """The iron-law terms, then the `unexplained` line: the measured step less the sum of the known terms (clamped
    at zero; the terms may overlap, so this is what not even their plain sum covers), and the compute term's η."""
    def num(name: str | None) -> float | None:
        value = facts.get(name) if name else None
        return float(value) if isinstance(value, (int, float)) else None

    terms = [IronLawTerm(term=term, label=spec.label, seconds=num(spec.seconds), share=num(spec.share))  # type: ignore[arg-type]
             for term, spec in kb.regimes.terms.items() if spec.seconds]
    step = num("step_time_s")
    known = [t.seconds for t in terms if t.seconds is not None]
    if step is not None and step > 0 and known:
        rest = max(0.0, step - sum(known))
        terms.append(IronLawTerm(term="unexplained", label=kb.regimes.unexplained_label, seconds=rest,
                                 share=rest / step))
    efficiency, efficiency_source = _efficiency(facts, derived or {})
    return IronLaw(step_time_s=step, terms=terms, sequential_s=num("t_sequential_s"),
                   overlapped_s=num("t_overlapped_s"), efficiency=efficiency, efficiency_source=efficiency_source)


def _efficiency(facts: Mapping[str, Value], derived: Mapping[str, DerivedValue]) -> tuple[float | None, str | None]:
    """The compute term's η and where it came from: compute_efficiency's formula and inputs, η = 1 when the compute
    term is known without it (a lower bound), nothing when there is no compute term."""
    eta = derived.get("compute_efficiency")
    if eta is not None and "t_compute_s" in facts:
        inputs = ", ".join(f"{name} {_fmt(value)}" for name, value in eta.inputs.items())
        return float(eta.value), f"η = {eta.formula} ({inputs})"
    if "t_compute_s" in facts:
        return 1.0, ("η = 1: no activity measured (sm_active, gpu_util or tensor_active) beside the MFU, so the "
                     "compute term is a lower bound")
    return None, None
