"""Turn an engine run into a Report: verdict, axes, findings, recommended vs wasted, what to measure, provenance.

Everything here is decided by data: rule conclusions (rules/), regime tables (rules/), strengths and precedence
(knowledge_base/regimes.yaml), scorecard bands, the tool map. This module only combines them.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._bare import bare_model
from .._weakcache import PerObject
from ..derive.formulas import DerivedValue
from ..derive.graph import GRAPH, askable_inputs, askable_inputs_given
from ..engine.base import EngineResult
from ..kb.knowledge import KnowledgeBase, Scorecard
from ..observations.normalise import Observations, applied_optimizations
from ..report.model import (
    UNEXPLAINED_TERM,
    Applied,
    AxisScore,
    Candidate,
    ClusterSection,
    Concludes,
    Deferred,
    Evidence,
    EvidenceLimit,
    Finding,
    IronLaw,
    IronLawTerm,
    MissingFact,
    NextMeasurement,
    Recommendation,
    RegimeTableRecord,
    Report,
    ScoreRow,
    Wasted,
)
from ..rules.evaluate import WARM_RUNS, Evaluator, Outcome, generate_condition
from ..rules.logic import fact_tests
from ..rules.model import RecommendSpec, WasteSpec
from ..rules.ruleset import LoadedRule, RuleSet
from . import provenance
from .decide import Decision, decide, table_id
from .gains import bound_is_loose, expected_gain
from .provenance import Basis, Optimizations, fmt

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


_UNKNOWN = "\x00"  # where an unknown value went, until its clause is dropped
_UNKNOWN_CLAUSE = re.compile(r" ?\([^()\x00]*\x00[^()]*\)")  # the innermost parenthesis around an unknown value


def render_message(template: str, facts: Mapping[str, Value], scorecard: Scorecard | None = None) -> str:
    """Fill a rule's message template with fact values ("{gpu_util:.0%}"); only plain fact names are looked up
    (no attribute or index access). An unknown value drops the innermost parenthesis around it ("one by one (mean
    kernel {mean_kernel_us:.1f} µs): ..." reads "one by one: ..."), so a rule that fires without a fact it can show
    says nothing of it; outside a parenthesis it reads "unknown". A scorecard band ("{scorecard.mfu.fail_below}", see
    `Scorecard.bound`) renders as a percentage ("30 %") or with its format spec; any other placeholder renders as
    written."""
    parts: list[str] = []
    unknown = False
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
            parts.append(_UNKNOWN)
            unknown = True
            continue
        try:
            parts.append(format(value, spec).replace(_UNKNOWN, ""))
        except (ValueError, TypeError):
            parts.append(str(value).replace(_UNKNOWN, ""))
    text = "".join(parts)
    if unknown:
        while True:
            text, dropped = _UNKNOWN_CLAUSE.subn("", text)
            if not dropped:
                break
        text = text.replace(_UNKNOWN, "unknown")
    return text


def _band_text(value: float, spec: str) -> str:
    """A scorecard band in a message: "30 %" (the rules' style) unless a format spec is given."""
    if not spec:
        return f"{value * 100:g} %"
    try:
        return format(value, spec)
    except (ValueError, TypeError):
        return str(value)


def _evidence(ctx: Basis, lr: LoadedRule) -> list[Evidence]:
    out: list[Evidence] = []
    for leaf in ctx.trace(lr)[1]:
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
    derived: Mapping[str, DerivedValue],
    result: EngineResult,
    facts: dict[str, Value] | None = None,
) -> Report:
    """Assemble the report. Deterministic: independent of firing order and of the order facts were given in. The
    findings (their messages and evidence), the rule evaluations and the provenance graph are built on first use
    (expert/diagnosis/provenance.py). `facts`: the observed and derived values, where the caller has them."""
    if facts is None:
        facts = {**observations.values(), **{n: d.value for n, d in derived.items()}}
    parts = _parts(ruleset)
    fired_ids = set(result.fired)
    position, loaded = parts.position, parts.loaded  # the fired rules in (stratum, id) order, without a full scan
    fired = [loaded[i] for i in sorted(position[rule_id] for rule_id in fired_ids if rule_id in position)]
    ctx = Basis(kb, ruleset, facts, result.findings, observations, derived, fired, fired_ids, parts.of)

    decision = decide(ruleset, result.fired, result.findings, facts)
    verdict = decision.verdict
    axes = [AxisScore(axis=a.axis, share=a.share, strength=a.strength, rules=list(a.rules)) for a in decision.axes]
    conflicting = any(cap.conflict and cap.finding in decision.caps and _concluding(fired, cap.finding) is not None
                      for cap in kb.regimes.evidence_caps)  # as _evidence_limits finds them
    ctx.decision, ctx.verdict, ctx.caps, ctx.table = decision, verdict, decision.caps, decision.table
    ctx.withheld_by = frozenset(finding for finding, _ in decision.withheld)
    ctx.table_rule = table_id(verdict) if verdict is not None else None
    ctx.engine_outcomes, ctx.axes, ctx.builders = result.outcomes, axes, _DEFERRED_SECTIONS
    # every part was built here from checked values (as the graph is), so the Report is not validated again
    return _construct_report(
        engine=engine_name,
        observations=dict(sorted(observations.facts.items())),
        derived=Deferred(_sorted, derived),  # the records are built on first use too (DerivedRecords)
        bottleneck=verdict,
        verdict_title=kb.regimes.regimes[verdict].title if verdict else None,
        state="verdict" if verdict else "conflicting evidence" if conflicting else "insufficient evidence",
        candidates=Deferred(_candidates, ctx),  # resolved on first use, as every Deferred part
        conflicts=Deferred(_conflicts, ctx),
        evidence_limits=Deferred(_thin_evidence, ctx),
        axes=axes,
        findings=Deferred(_findings_part, ctx),
        recommended=Deferred(_recommended, ctx),  # worded and ranked on first use (with wasted and applied)
        wasted=Deferred(_wasted, ctx),
        applied=Deferred(_applied, ctx),
        next_measurements=Deferred(_next_measurements, ctx),
        missing=Deferred(_missing_facts, ctx),
        scorecard=Deferred(_scorecard_part, ctx),
        iron_law=Deferred(_iron_law_part, ctx),
        evaluations=Deferred(provenance.evaluations, ctx),
        graph=Deferred(provenance.graph, ctx),
        tables=list(parts.tables),
        cluster=Deferred(_cluster_part, ctx),
    )


def _sorted(records: Mapping[str, DerivedValue]) -> dict[str, DerivedValue]:
    return dict(sorted(records.items()))


def _construct_report(**values: Any) -> Report:
    """`Report.model_construct(**values)` without its generic per-field loop: the same instance state (the fields in
    declaration order, a field not given at its default, the given ones marked as set)."""
    fields: dict[str, Any] = {}
    for name, default in _REPORT_DEFAULTS:
        if name in values:
            fields[name] = values[name]
        elif default is not _REQUIRED:
            fields[name] = default() if callable(default) else default
    return bare_model(Report, fields, set(values))

_REQUIRED = object()


def _report_defaults() -> tuple[tuple[str, Any], ...]:
    """Each Report field and its default: the value where it is immutable, else how to make one (as model_construct
    does), or _REQUIRED."""
    out: list[tuple[str, Any]] = []
    for name, info in Report.model_fields.items():
        if info.is_required():
            out.append((name, _REQUIRED))
        elif info.default_factory is None and type(info.default) in (type(None), bool, int, float, str):
            out.append((name, info.default))
        else:
            out.append((name, functools.partial(info.get_default, call_default_factory=True, validated_data={})))
    return tuple(out)


_REPORT_DEFAULTS = _report_defaults()

_findings_part = functools.partial(Basis.part, name="findings")
_candidates = functools.partial(Basis.part, name="candidates")
_scorecard_part = functools.partial(Basis.part, name="scorecard")
_iron_law_part = functools.partial(Basis.part, name="iron_law")
_cluster_part = functools.partial(Basis.part, name="cluster")
_conflicts = functools.partial(Basis.part, name="conflicts")
_thin_evidence = functools.partial(Basis.part, name="evidence_limits")
_missing_facts = functools.partial(Basis.part, name="missing")
_next_measurements = functools.partial(Basis.part, name="next_measurements")


def _recommended(ctx: Basis) -> list[Recommendation]:
    return ctx.optimizations().recommended


def _wasted(ctx: Basis) -> list[Wasted]:
    return ctx.optimizations().wasted


def _applied(ctx: Basis) -> list[Applied]:
    return ctx.optimizations().applied


_DEFERRED_SECTIONS: dict[str, Callable[[Basis], Any]] = {
    "candidates": lambda ctx: _verdict(ctx, ctx.decided()),
    "optimizations": lambda ctx: _optimizations(ctx, ctx.decided(), _parts(ctx.ruleset)),
    "scorecard": lambda ctx: _scorecard(ctx, ctx.decided()),
    "iron_law": lambda ctx: _iron_law(ctx.kb, ctx.facts, ctx.derived),
    "cluster": lambda ctx: _cluster(ctx.facts, ctx.observations, ctx.fired_ids, ctx.outcome),
    "findings": lambda ctx: _findings(ctx, ctx.fired),
    "limits": lambda ctx: _evidence_limits(ctx, ctx.caps, ctx.fired),
    "conflicts": lambda ctx: ctx.part("limits")[0],
    "evidence_limits": lambda ctx: ctx.part("limits")[1],
    "outcomes": lambda ctx: _outcomes(ctx),
    "missing": lambda ctx: _missing(ctx, ctx.part("outcomes"), _parts(ctx.ruleset)),
    "next_measurements": lambda ctx: _measurements(ctx, ctx.fired, ctx.part("missing"), ctx.verdict, ctx.axes),
}


def _outcomes(ctx: Basis) -> dict[str, Outcome]:
    """The outcome of every rule that did not fire, on these facts and the final findings: from the engine where it
    reports them (the pure engine's last evaluation of a rule is its final one), else evaluated here without a
    trace (stopping at the first decisive leaf)."""
    known = ctx.engine_outcomes or {}
    facts, findings, fired = ctx.facts, ctx.findings, ctx.fired_ids
    out: dict[str, Outcome] = {}
    for rule_id, evaluator in _parts(ctx.ruleset).untraced():
        if rule_id not in fired:
            out[rule_id] = known.get(rule_id) or evaluator(facts, findings, None, False)
    return out


def _cluster(facts: Mapping[str, Value], observations: Observations | None = None, fired: set[str] | None = None,
             outcome: Callable[[str], str] | None = None) -> ClusterSection | None:
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
    elif outcome is not None and "slowest_rank" in facts and "comm_frac" in facts and \
            outcome("ranks-slow-link") == "false":
        known["slow_link"] = False
    return ClusterSection.model_validate(known)


@dataclass
class _RuleSetParts:
    """Report records that depend on the rule set alone, built once per rule set (kept here, not on the rules)."""

    tables: list[RegimeTableRecord]
    recommends: dict[tuple[str, str], list[RecommendSpec]]  # (rule id, optimization) -> the rule's recommendations
    wastes: dict[tuple[str, str], list[WasteSpec]]  # (rule id, optimization) -> the rule's ruled-out entries
    titles: dict[str, str]  # rule id -> title
    # rule id -> (the weight of what it concludes, the facts its comparisons read (not `known` tests), leaf order)
    askable: dict[str, tuple[int, tuple[str, ...]]]
    position: dict[str, int]  # rule id -> place in (stratum, id) order
    # a fact no gated derivation leads to -> the askable facts that would settle it (askable_inputs), known or not
    ungated: dict[str, tuple[str, ...]]
    derivable_askable: frozenset[str]  # facts rules read that a user can give and the expert can also derive
    rules: dict[str, tuple[Concludes, dict[str, Any]]] = field(default_factory=dict)  # rule id -> (concludes, when)
    settles: dict[tuple[str, ...], str] = field(default_factory=dict)  # the first rules -> a missing fact's `why`
    loaded: list[LoadedRule] = field(default_factory=list)  # the rules in (stratum, id) order
    # their untraced evaluators: closures, then code generated once the rule set is warm
    evaluators: list[tuple[str, Evaluator]] | None = None
    uses: int = 0
    generated: bool = False

    def untraced(self) -> list[tuple[str, Evaluator]]:
        """The rules' untraced evaluators, generated as plain code after WARM_RUNS uses (as the pure engine's)."""
        self.uses += 1  # a lost update under threads only delays the switch
        if self.uses >= WARM_RUNS and not self.generated:
            self.generated = True
            self.evaluators = [(lr.id, generate_condition(lr.condition)) for lr in self.loaded]
        if self.evaluators is None:
            self.evaluators = [(lr.id, lr.evaluator) for lr in self.loaded]
        return self.evaluators

    def would_settle(self, rules: list[str]) -> str:
        """A missing fact's `why`: the titles of the first three rules it would settle, and how many more."""
        key = tuple(rules[:3])
        found = self.settles.get(key)
        if found is None:
            if len(self.settles) > 4096:  # combinations repeat; a bound all the same
                self.settles.clear()
            found = self.settles[key] = "would settle: " + "; ".join(self.titles[r] for r in key)
        return f"{found} and {len(rules) - 3} more" if len(rules) > 3 else found

    def of(self, lr: LoadedRule) -> tuple[Concludes, dict[str, Any]]:
        """A rule's `concludes` and resolved `when`: they never change, so they are built once."""
        found = self.rules.get(lr.id)
        if found is None:
            found = self.rules[lr.id] = (_concludes(lr), lr.condition.model_dump(by_alias=True, exclude_none=True))
        return found


_TABLE_FIELDS = tuple(RegimeTableRecord.model_fields)
_IRON_LAW_FIELDS = tuple(IronLaw.model_fields)


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
    # checked values (from the loaded rule set), built as validation builds them (no validator to build on a cold run)
    tables = [bare_model(RegimeTableRecord, {"regime": t.regime, "source": t.source, "effective": list(t.effective),
                                             "wasted": {w.id: w.reason for w in t.wasted}}, set(_TABLE_FIELDS))
              for _, (_, t) in sorted(ruleset.tables.items())]
    strengths = ruleset.kb.regimes.strengths
    askable: dict[str, tuple[int, tuple[str, ...]]] = {}
    for lr in rules.values():  # one entry per comparison, as a trace lists them (depth first)
        then = lr.rule.then
        askable[lr.id] = (strengths[then.bottleneck.strength] * 2 if then.bottleneck else 1,
                          tuple(test.fact for test in fact_tests(lr.condition) for _ in test.ops()))
    names = {name for _, names in askable.values() for name in names}
    ungated = {name: tuple(askable_inputs(name, ruleset.kb)) for name in sorted(names) if not GRAPH.gated_below(name)}
    return _RuleSetParts(tables=tables, recommends=recommends, wastes=wastes,
                         titles={lr.id: lr.rule.title for lr in rules.values()}, askable=askable,
                         ungated={name: inputs for name, inputs in ungated.items() if inputs},
                         derivable_askable=frozenset(name for name in names if GRAPH.producers(name)
                                                     and (spec := ruleset.kb.facts.get(name)) is not None
                                                     and spec.askable),
                         position={lr.id: i for i, lr in enumerate(ruleset.by_stratum)},
                         loaded=list(ruleset.by_stratum))


_parts: PerObject[RuleSet, _RuleSetParts] = PerObject(_build_parts)


def _concludes(lr: LoadedRule) -> Concludes:
    """A rule's `then`, compactly, recorded in the report so that saved reports can answer why-not."""
    then = lr.rule.then
    return Concludes(finding=then.finding.id if then.finding else None,
                     bottleneck=then.bottleneck.regime if then.bottleneck else None,
                     strength=then.bottleneck.strength if then.bottleneck else None,
                     axis=then.axis.axis if then.axis else None, recommend=[r.id for r in then.recommend],
                     waste=[w.id for w in then.waste], measure=list(then.measure))


def _findings(ctx: Basis, fired: list[LoadedRule]) -> list[Finding]:
    """Each finding once, from the first rule (in (stratum, id) order) that concluded it, by severity then rule."""
    seen: set[str] = set()
    out: list[Finding] = []
    for lr in fired:
        spec = lr.rule.then.finding
        if spec is None or spec.id in seen:
            continue
        seen.add(spec.id)
        out.append(Finding(id=spec.id, severity=lr.rule.severity, title=lr.rule.title,
                           message=_message(ctx, lr), rule_id=lr.id, source=lr.rule.source,
                           evidence=_evidence(ctx, lr)))
    out.sort(key=lambda f: (_SEVERITY_ORDER[f.severity], f.rule_id))
    return out


def _message(ctx: Basis, lr: LoadedRule) -> str:
    spec = lr.rule.then.finding
    return render_message(spec.message, ctx.facts, ctx.kb.scorecard) if spec is not None else ""


def _concluding(fired: list[LoadedRule], finding: str) -> LoadedRule | None:
    """The rule a finding of the report comes from: the first fired rule, in (stratum, id) order, concluding it."""
    return next((lr for lr in fired if lr.rule.then.finding is not None and lr.rule.then.finding.id == finding),
                None)


def _verdict(ctx: Basis, decision: Decision) -> list[Candidate]:
    regimes = ctx.kb.regimes
    candidates = [Candidate(regime=v.regime, title=regimes.regimes[v.regime].title, strength=v.strength,
                            score=v.score, rules=list(v.rules)) for v in decision.candidates]
    return candidates


def _optimizations(
    ctx: Basis, decision: Decision, parts: _RuleSetParts
) -> Optimizations:
    """The decision's recommended and ruled-out optimizations, worded (each rule's why, each reason) and ranked by
    their Amdahl bound, ties broken by whether that bound is known to be loose (`acts_on` unmeasured), then by the
    declared effort (optimizations.yaml), cheapest first; and the ones the job already applies (fact
    applied_optimizations), which are never recommended."""
    kb = ctx.kb
    verdict, table = decision.verdict, decision.table
    table_rule = table_id(verdict) if verdict is not None else None
    table_reasons = {entry.id: entry.reason for entry in table.wasted} if table is not None else {}

    wasted: dict[str, tuple[str, list[str]]] = {}
    for opt_id, rules in decision.wasted.items():
        if rules[0] == table_rule:
            reason = table_reasons[opt_id]
        else:
            reason = render_message(parts.wastes[rules[0], opt_id][0].reason, ctx.facts, ctx.kb.scorecard)
        wasted[opt_id] = (reason, rules)

    applied_ids = applied_optimizations(ctx.facts.get("applied_optimizations"))
    workload = ctx.facts.get("workload")
    part = kb.hardware.get(str(ctx.facts.get("hardware")))
    vendor = part.vendor if part is not None else None
    recommended: list[tuple[tuple[float, int, int, int, int], Recommendation]] = []
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
        gain = expected_gain(ctx, opt)
        title, how = opt.worded(workload, vendor)
        recommendation = Recommendation(id=opt_id, title=title, why="; ".join(whys), how=how, axis=opt.axis,
                                        shrinks=opt.shrinks, source=opt.source, rules=list(rules),
                                        expected_gain=gain)
        effort = opt.effort if opt.effort is not None else 6  # undeclared effort: after every declared one
        # a bound known to be loose (what it acts on is narrower than its term, and not measured) ranks after an
        # equal bound that is not; an unknown gain has no bound to be loose
        loose = int(gain is not None and bound_is_loose(ctx, opt))
        recommended.append(((-(gain.max_speedup if gain else 1.0), loose, effort, spec, index), recommendation))
    proposed = [rec for _, rec in recommended]  # the graph lists them in proposal order
    recommended.sort(key=lambda item: item[0])

    wasted_out: list[Wasted] = []
    for opt_id, (reason, rules) in sorted(wasted.items()):
        wasted_out.append(Wasted(id=opt_id, title=kb.optimizations[opt_id].worded(workload, vendor)[0], reason=reason,
                                 rules=list(rules)))
    applied_out: list[Applied] = []
    if applied_ids:
        source = ctx.observations.facts["applied_optimizations"].source
        for opt_id in applied_ids:
            rules = list(decision.proposed.get(opt_id, []))
            applied_out.append(Applied(id=opt_id, title=kb.optimizations[opt_id].worded(workload, vendor)[0],
                                       source=source, rules=rules))
    return Optimizations([rec for _, rec in recommended], wasted_out, applied_out, proposed)


def _missing(ctx: Basis, outcomes: Mapping[str, str], parts: _RuleSetParts) -> list[MissingFact]:
    """Unknown facts that stand between a rule and a definite outcome, weighted by what the rule would conclude:
    each comparison (not a `known` test) of an undecided rule on a fact not known adds the rule's weight to every
    askable fact that would settle it; each fact lists those rules in (stratum, id) order."""
    facts, kb = ctx.facts, ctx.kb
    by_name: dict[str, int] = {}  # an unknown fact a comparison reads -> the weight of those comparisons
    rules_by_name: dict[str, list[str]] = {}  # ... -> the rules reading it, in order
    askable, ungated = parts.askable, parts.ungated
    for rule_id, outcome in outcomes.items():  # in (stratum, id) order
        if outcome != "unknown":
            continue
        w, names = askable[rule_id]
        for name in names:
            if name in facts:
                continue
            by_name[name] = by_name.get(name, 0) + w
            readers = rules_by_name.get(name)
            if readers is None:
                rules_by_name[name] = [rule_id]
            elif readers[-1] != rule_id:
                readers.append(rule_id)
    weight: dict[str, int] = {}
    names_for: dict[str, list[str]] = {}
    memo: dict[str, list[str]] = {}
    for name, w in by_name.items():
        inputs: Sequence[str] | None = ungated.get(name) or memo.get(name)  # ungated: known inputs skipped below
        if inputs is None:
            inputs = askable_inputs_given(name, facts, kb, memo)
        if name in parts.derivable_askable:  # asked for itself, or completed by the one input its way still lacks
            inputs = list(inputs) + [c for c in GRAPH.completing_inputs(name, facts, kb) if c not in inputs]
        for fact in inputs:
            if fact in facts:  # observed, or already derived from what was observed
                continue
            weight[fact] = weight.get(fact, 0) + w
            names_for.setdefault(fact, []).append(name)
    rules_for: dict[str, list[str]] = {}
    position = parts.position
    for fact, via in names_for.items():
        if len(via) == 1:
            rules_for[fact] = list(rules_by_name[via[0]])
        else:
            rules_for[fact] = sorted({r for n in via for r in rules_by_name[n]}, key=position.__getitem__)
    specs = kb.facts
    workload = facts.get("workload")
    out: list[MissingFact] = []
    for fact in sorted(weight, key=lambda f: (-weight[f], specs[f].cost, f)):
        spec = specs[fact]
        if not spec.applies_to(workload):
            continue
        settles = rules_for[fact]
        out.append(MissingFact(fact=fact, question=spec.question or spec.description, why=parts.would_settle(settles),
                               rules=settles))
    return out


def _evidence_limits(ctx: Basis, caps: tuple[str, ...],
                     fired: list[LoadedRule]) -> tuple[list[EvidenceLimit], list[EvidenceLimit]]:
    """The evidence caps in effect (knowledge_base/regimes.yaml `evidence_caps`), as (conflicts, thin evidence):
    each with its finding's wording, the values that disagree, and the measurements that would lift it."""
    regimes = ctx.kb.regimes
    threshold = regimes.strengths[regimes.verdict_min_strength]
    conflicts: list[EvidenceLimit] = []
    limits: list[EvidenceLimit] = []
    for cap in regimes.evidence_caps:
        lr = _concluding(fired, cap.finding) if cap.finding in caps else None
        if lr is None:
            continue
        title, message = lr.rule.title, _message(ctx, lr)
        measure = lr.rule.then.measure
        if cap.conflict:  # re-measure what was given; what was not given is no part of the conflict
            measure = [m for m in measure if m in ctx.facts] or list(measure)
        remeasure: list[NextMeasurement] = []
        for fact in measure:
            tool = _measurement_for(ctx, fact)
            if tool is not None:
                remeasure.append(NextMeasurement(fact=fact, axis=tool[0], tool=tool[1], how=tool[2],
                                                 why=f"{title}: re-measure {fact}", settles=[cap.finding]))
        record = EvidenceLimit(
            finding=cap.finding, title=title, message=message, max_strength=cap.max_strength,
            effect="withheld" if regimes.strengths[cap.max_strength] < threshold or cap.finding in ctx.withheld_by
            else "capped",
            firmer=cap.firmer or message, source=cap.source,
            facts={name: ctx.facts[name] for name in cap.conflict if name in ctx.facts}, remeasure=remeasure)
        (conflicts if cap.conflict else limits).append(record)
    return conflicts, limits


def _measurement_for(ctx: Basis, fact: str) -> tuple[str, str, str] | None:
    spec = ctx.kb.facts.get(fact)
    key = spec.measure if spec and spec.measure else fact
    m = ctx.kb.tools.measurements.get(key)
    if m is None:
        return None
    return m.axis, ctx.kb.tools.tools[m.tool].name, m.how


def _measurements(
    ctx: Basis, fired: list[LoadedRule], missing: list[MissingFact], verdict: str | None,
    implicated: list[AxisScore],
) -> list[NextMeasurement]:
    out: dict[str, NextMeasurement] = {}
    notes = ctx.measurements  # where each measurement joins the graph (expert/diagnosis/provenance.py)
    workload = ctx.facts.get("workload")
    for lr in fired:
        for fact in lr.rule.then.measure:
            if fact in ctx.facts or fact in out or ((spec := ctx.kb.facts.get(fact)) and not spec.applies_to(workload)):
                continue
            found = _measurement_for(ctx, fact)
            if found is None:
                continue
            axis, tool, how = found
            settles = [lr.rule.then.finding.id] if lr.rule.then.finding else [lr.id]
            out[fact] = NextMeasurement(fact=fact, axis=axis, tool=tool, how=how,
                                        why=f"{lr.rule.title}: measure {fact} to confirm or rule it out",
                                        settles=settles)
            notes.append(("fact", fact, tool, lr.id))
    for item in missing[:6]:
        if item.fact in out:
            continue
        found = _measurement_for(ctx, item.fact)
        if found is None:
            continue
        axis, tool, how = found
        out[item.fact] = NextMeasurement(fact=item.fact, axis=axis, tool=tool, how=how, why=item.why,
                                         settles=item.rules)
        notes.append(("missing", item.fact, tool, item.rules))
    result = list(out.values())
    # seed Table 4: the tool that confirms the verdict along its axis, then one per other implicated axis
    axes: list[str] = [ctx.kb.regimes.regimes[verdict].confirm_axis] if verdict else []
    axes += [a.axis for a in implicated if a.axis not in axes]
    for axis in axes:
        row = ctx.kb.tools.axes[axis]
        tools = [ctx.kb.tools.tools[t].name for t in [row.primary, *row.secondary]]
        if verdict and axis == axes[0]:
            regime = ctx.kb.regimes.regimes[verdict]
            why = f"confirm the {regime.title.lower()} verdict along the {axis} axis"
            if (confirm := regime.confirm_with) is not None:  # the regime's own tool, not the axis row's
                result.append(NextMeasurement(fact=None, axis=axis, tool=ctx.kb.tools.tools[confirm.tool].name,
                                              how=confirm.how, why=f"{why} ({confirm.source})", settles=[verdict]))
                notes.append(("confirm", axis, ctx.kb.tools.tools[confirm.tool].name, None))
                continue
            settles = [verdict]
        else:
            why = f"the {axis} axis is implicated; measure its key metric"
            settles = [axis]
        result.append(NextMeasurement(fact=None, axis=axis, tool=tools[0],
                                      how=f"{row.key_metric}; secondary: {', '.join(tools[1:])}",
                                      why=f"{why} ({row.source})", settles=settles))
        notes.append(("confirm", axis, tools[0], None if verdict and axis == axes[0]
                      else next(a.rules for a in implicated if a.axis == axis)))
    return result


@dataclass(frozen=True)
class _KbRows:
    """What the scorecard and the iron law take from the knowledge base alone, read once per knowledge base: each
    metric's (fact, id, title, axis, definition, bands text), each iron-law term's (term, label, seconds fact, share
    fact)."""

    metrics: tuple[tuple[str, str, str, str, str, str], ...]
    terms: tuple[tuple[str, str, str | None, str | None], ...]


def _build_kb_rows(kb: KnowledgeBase) -> _KbRows:
    specs = kb.regimes.terms
    return _KbRows(
        tuple((m.fact, m.id, m.title, m.axis, m.definition, m.bands_text()) for m in kb.scorecard.metrics),
        tuple((term, specs[term].label, specs[term].seconds, specs[term].share)
              for term in kb.regimes.iron_law_terms()))


_kb_rows: PerObject[KnowledgeBase, _KbRows] = PerObject(_build_kb_rows)


def _scorecard(ctx: Basis, decision: Decision) -> list[ScoreRow]:
    rows = []
    facts = ctx.facts
    for (fact, metric_id, title, axis, definition, bands), band in zip(_kb_rows(ctx.kb).metrics, decision.bands,
                                                                       strict=True):
        raw = facts.get(fact)
        value = float(raw) if isinstance(raw, (int, float)) else None
        rows.append(ScoreRow(id=metric_id, title=title, axis=axis, value=value, band=band,  # type: ignore[arg-type]
                             definition=definition, bands=bands))
    return rows


def _iron_law(kb: KnowledgeBase, facts: Mapping[str, Value],
              derived: Mapping[str, DerivedValue] | None = None) -> IronLaw:
    """The iron-law terms, then the `unexplained` line: the measured step less the sum of the known terms (clamped
    at zero; the terms may overlap, so this is what not even their plain sum covers), and the compute term's η."""
    def num(name: str | None) -> float | None:
        value = facts.get(name) if name else None
        return float(value) if isinstance(value, (int, float)) else None

    terms = [IronLawTerm(term=term, label=label, seconds=num(seconds), share=num(share))
             for term, label, seconds, share in _kb_rows(kb).terms]
    step = num("step_time_s")
    known = [t.seconds for t in terms if t.seconds is not None]
    if step is not None and step > 0 and known:
        rest = max(0.0, step - sum(known))
        terms.append(IronLawTerm(term=UNEXPLAINED_TERM, label=kb.regimes.unexplained_label, seconds=rest,
                                 share=rest / step))
    efficiency, efficiency_source = _efficiency(facts, derived or {})
    # every value is a float or None (a str or None for the source) and the terms are IronLawTerm: what validating
    # IronLaw(...) would build, without building its validator on a cold run
    return bare_model(IronLaw, {"step_time_s": step, "terms": terms, "sequential_s": num("t_sequential_s"),
                                "overlapped_s": num("t_overlapped_s"), "efficiency": efficiency,
                                "efficiency_source": efficiency_source}, set(_IRON_LAW_FIELDS))


def _efficiency(facts: Mapping[str, Value], derived: Mapping[str, DerivedValue]) -> tuple[float | None, str | None]:
    """The compute term's η and where it came from: compute_efficiency's formula and inputs, η = 1 when the compute
    term is known without it (a lower bound), nothing when there is no compute term."""
    eta = derived.get("compute_efficiency")
    if eta is not None and "t_compute_s" in facts:
        inputs = ", ".join(f"{name} {fmt(value)}" for name, value in eta.inputs.items())
        return float(eta.value), f"η = {eta.formula} ({inputs})"
    if "t_compute_s" in facts:
        return 1.0, ("η = 1: no activity measured (sm_active, gpu_util or tensor_active) beside the MFU, so the "
                     "compute term is a lower bound")
    return None, None
