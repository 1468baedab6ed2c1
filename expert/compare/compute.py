"""Comparing two diagnoses: the facts that moved beyond their noise, verdicts, findings, the GPU-time breakdown, and
whether the change looks like one of the before report's recommendations (with its Amdahl bound against the
measured speed-up).

Significance (the numbers are data, in knowledge_base/compare.yaml, which explains them):

- a setting (enum and hardware facts, and the configuration facts listed there) moved when the values differ;
- a measured fact whose provenance gives a per-sample spread on both sides (ProfilerStep windows of a trace, samples
  of a telemetry log) moved when the difference of the means is at least `z` standard errors, the spread of each
  side estimated from its range: sigma = (max - min) / d2(n);
- otherwise, when no spread is known, when it moved by at least `relative` of its before value (and, for a
  fraction, by at least `fraction_points`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ..kb.knowledge import KnowledgeBase
from ..observations.normalise import Observation, format_value
from ..report.model import Report
from .catalog import CompareCatalog, Move, Signature, load_catalog
from .gate import Condition, evaluate, parse_all
from .model import (
    AxisShare,
    BreakdownDelta,
    ClassDelta,
    Comparison,
    FactChange,
    FindingRef,
    NamedDelta,
    Prediction,
    Side,
    Value,
)
from .sides import IngestOptions, LoadedSide, SideSpec, load_side

if TYPE_CHECKING:
    from ..expert import Expert

# ---- noise ------------------------------------------------------------------------------------------------------


@lru_cache(maxsize=256)
def d2(n: int) -> float:
    """Expected range of n independent standard normal samples (d2(2) = 1.128, d2(6) = 2.534, d2(10) = 3.078), by
    Simpson's rule on E[R] = integral of 1 - Phi(x)^n - (1 - Phi(x))^n dx."""
    if n < 2:
        raise ValueError("the range of fewer than two samples is always 0")
    lo, hi, steps = -12.0, 12.0, 4800
    h = (hi - lo) / steps
    total = 0.0
    for k in range(steps + 1):
        x = lo + k * h
        phi = 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))
        f = 1.0 - phi ** n - (1.0 - phi) ** n
        total += f * (1 if k in (0, steps) else 4 if k % 2 else 2)
    return total * h / 3.0


def _spread(obs: Observation | None, name: str, catalog: CompareCatalog) -> tuple[float, int, str] | None:
    """(sigma, samples, what a sample is) from an observation's provenance, when it records a per-sample spread."""
    if obs is None:
        return None
    fmt = obs.source.split(":", 1)[0]
    allowed = catalog.significance.spread_facts(fmt)
    if allowed is None or (name not in allowed and "*" not in allowed):
        return None
    n, lo, hi = obs.detail.get("samples"), obs.detail.get("min"), obs.detail.get("max")
    if not isinstance(n, int) or n < 2 or not isinstance(lo, (int, float)) or not isinstance(hi, (int, float)):
        return None
    if hi < lo:
        return None
    return (hi - lo) / d2(n), n, "step" if fmt == "kineto" else "sample"


def _judge(name: str, before: Value, after: Value, spec_type: str | None, ob: Observation | None,
           oa: Observation | None, catalog: CompareCatalog) -> tuple[bool, str]:
    sig = catalog.significance
    if isinstance(before, str) or isinstance(after, str) or spec_type in ("enum", "hardware") or name in sig.settings:
        return before != after, "a setting: any difference"
    delta = float(after) - float(before)
    sb, sa = _spread(ob, name, catalog), _spread(oa, name, catalog)
    if sb is not None and sa is not None:
        se = math.sqrt(sb[0] ** 2 / sb[1] + sa[0] ** 2 / sa[1])
        if se > 0:
            t = abs(delta) / se
            return t >= sig.z, (f"per-{sb[2]} spread, {sb[1]} vs {sa[1]} {sb[2]}s: {t:.1f} standard errors "
                                f"(≥ {sig.z:g})")
    floor = sig.fraction_points if spec_type == "fraction" else 0.0
    needed = max(sig.relative * abs(float(before)), floor)
    text = f"no spread known: ≥ {sig.relative:.0%} of before"
    if floor:
        text += f" and ≥ {floor * 100:g} point"
    return (abs(delta) >= needed and delta != 0), text


def _number(value: Value | None) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def fact_changes(before: Report, after: Report, kb: KnowledgeBase, catalog: CompareCatalog) -> list[FactChange]:
    """Every fact known on at least one side, before and after, with its change and whether it is beyond noise;
    the significant ones first, each group in vocabulary order.

    A quantity derived on both sides moves beyond noise only when its own change passes the rule above and at least
    one of its inputs moved beyond noise too (io_overhead cannot be significant when neither data_wait_s nor
    step_time_s is)."""
    vb, va = before.facts(), after.facts()
    order = {name: i for i, name in enumerate(kb.facts)}
    names = sorted(set(vb) | set(va), key=lambda n: (order.get(n, len(order)), n))
    changes: dict[str, FactChange] = {}
    for name in names:
        spec = kb.facts.get(name)
        b, a = vb.get(name), va.get(name)
        unit = spec.unit if spec is not None else None
        derived = before.derived.get(name) or after.derived.get(name)
        if unit is None and derived is not None:
            unit = derived.unit
        if b is None or a is None:
            basis = "not known before" if b is None else "not known after"
            changes[name] = FactChange(name=name, before=b, after=a, significant=False, basis=basis, unit=unit,
                                       derived=derived is not None)
            continue
        significant, basis = _judge(name, b, a, spec.type if spec else None, before.observations.get(name),
                                    after.observations.get(name), catalog)
        nb, na = _number(b), _number(a)
        delta = na - nb if nb is not None and na is not None else None
        change = delta / abs(nb) if delta is not None and nb else None
        changes[name] = FactChange(name=name, before=b, after=a, change=change, delta=delta, significant=significant,
                                   basis=basis, unit=unit, derived=derived is not None)
    done: dict[str, bool] = {}

    def inherit(name: str, trail: frozenset[str] = frozenset()) -> bool:
        """Whether `name` stays significant once its inputs are taken into account (derived on both sides)."""
        if name in done:
            return done[name]
        fc = changes.get(name)
        db, da = before.derived.get(name), after.derived.get(name)
        if fc is None or not fc.significant or db is None or da is None or name in trail \
                or name in catalog.significance.settings:
            done[name] = bool(fc and fc.significant)
            return done[name]
        inputs = [i for i in dict.fromkeys([*db.inputs, *da.inputs]) if i in changes and i != name]
        moved = [i for i in inputs if inherit(i, trail | {name})]
        if inputs and not moved:
            fc.significant = False
            fc.basis = f"derived: its inputs ({', '.join(inputs)}) did not move beyond noise"
        done[name] = fc.significant
        return fc.significant

    for name in names:
        inherit(name)
    return sorted(changes.values(), key=lambda f: (not f.significant, order.get(f.name, len(order)), f.name))


# ---- the sides ---------------------------------------------------------------------------------------------------


def side_summary(side: LoadedSide) -> Side:
    r = side.report
    facts = r.facts()
    return Side(source=side.source, kind=side.kind, bottleneck=r.bottleneck, verdict_title=r.verdict_title,
                axes=[AxisShare(axis=a.axis, share=a.share) for a in r.axes],
                step_time_s=_number(facts.get("step_time_s")), mfu=_number(facts.get("mfu")),
                findings=[f.id for f in r.findings], recommended=[x.id for x in r.recommended])


def finding_changes(before: Report, after: Report) -> tuple[list[FindingRef], list[FindingRef]]:
    """(findings only after, findings only before)."""
    ids_b, ids_a = {f.id for f in before.findings}, {f.id for f in after.findings}
    new = [FindingRef(id=f.id, title=f.title, severity=f.severity) for f in after.findings if f.id not in ids_b]
    cleared = [FindingRef(id=f.id, title=f.title, severity=f.severity) for f in before.findings if f.id not in ids_a]
    return new, cleared


# ---- GPU-time breakdown (the `time_breakdown` of the report or ingest, when this version has one) ------------------


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _per_step(breakdown: Mapping[str, Any], report: Report) -> float | None:
    """The factor that turns GPU seconds over the breakdown's window into GPU seconds per step:
    step time / window length (None without a window or a step time)."""
    window = breakdown.get("window")
    step = _number(report.facts().get("step_time_s"))
    if not isinstance(window, Mapping) or step is None:
        return None
    start, end = _num(window.get("start_us")), _num(window.get("end_us"))
    if start is None or end is None or end <= start:
        return None
    return step / ((end - start) / 1e6)


def _entries(breakdown: Mapping[str, Any], key: str, *name_keys: str) -> dict[str, Mapping[str, Any]]:
    """The rows of one list of the breakdown by their name (the first of `name_keys` a row has); rows that are
    not mappings or have no name are skipped."""
    rows = breakdown.get(key)
    if not isinstance(rows, list):
        return {}
    out: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        if isinstance(row, Mapping):
            name = next((row[k] for k in name_keys if row.get(k) is not None), None)
            if name is not None:
                out[str(name)] = row
    return out


def _scaled(value: Any, scale: float | None) -> float | None:
    v = _num(value)
    return None if v is None else v * (scale if scale is not None else 1.0)


def _delta(b: float | None, a: float | None) -> float | None:
    return None if b is None or a is None else a - b


def breakdown_delta(before: LoadedSide, after: LoadedSide) -> BreakdownDelta:
    """Kernel classes, top kernels and top operators before against after (per step when both sides have a step
    time and a window; window totals otherwise). A kernel or operator in one side's top list only is None on the
    other (not among its top entries, which is not zero)."""
    tb, ta = before.time_breakdown, after.time_breakdown
    if tb is None or ta is None:
        sides = [w for w, t in (("before", tb), ("after", ta)) if t is None]
        return BreakdownDelta(notes=[f"no time_breakdown {' or '.join(sides)}: this version of dam-expert (or the "
                                     "input) gives no kernel-class breakdown, so GPU-time deltas are not shown"])
    sb, sa = _per_step(tb, before.report), _per_step(ta, after.report)
    per_step = sb is not None and sa is not None
    if not per_step:
        sb = sa = None
    notes = [] if per_step else ["a side has no step time or no window: GPU times are window totals, so compare "
                                 "the shares"]
    classes: list[ClassDelta] = []
    # "class" is the name in the JSON (issue 14); a model dumped without aliases may say class_
    cb, ca = _entries(tb, "classes", "class", "class_"), _entries(ta, "classes", "class", "class_")
    for name in dict.fromkeys([*cb, *ca]):
        b, a = cb.get(name, {}), ca.get(name, {})
        bs, as_ = _scaled(b.get("gpu_time_s"), sb), _scaled(a.get("gpu_time_s"), sa)
        # a class absent from a side's list took no GPU time there (the class list is complete)
        bs = 0.0 if name not in cb else bs
        as_ = 0.0 if name not in ca else as_
        classes.append(ClassDelta.model_validate({
            "class": name, "before_s": bs, "after_s": as_, "delta_s": _delta(bs, as_),
            "before_share": _num(b.get("share")) if name in cb else 0.0,
            "after_share": _num(a.get("share")) if name in ca else 0.0}))
    classes.sort(key=lambda c: -abs(c.delta_s or 0.0))

    def named(key: str) -> list[NamedDelta]:
        eb, ea = _entries(tb, key, "name"), _entries(ta, key, "name")
        rows: list[NamedDelta] = []
        for name in dict.fromkeys([*eb, *ea]):
            b, a = eb.get(name), ea.get(name)
            bs = _scaled(b.get("gpu_time_s"), sb) if b is not None else None
            as_ = _scaled(a.get("gpu_time_s"), sa) if a is not None else None
            count_b = _num(b.get("count")) if b is not None else None
            count_a = _num(a.get("count")) if a is not None else None
            rows.append(NamedDelta(name=name, before_s=bs, after_s=as_, delta_s=_delta(bs, as_),
                                   before_share=_num(b.get("share")) if b is not None else None,
                                   after_share=_num(a.get("share")) if a is not None else None,
                                   before_count=None if count_b is None else int(count_b),
                                   after_count=None if count_a is None else int(count_a)))
        rows.sort(key=lambda r: (r.delta_s is None, -abs(r.delta_s or 0.0),
                                 -max(r.before_share or 0.0, r.after_share or 0.0)))
        return rows

    return BreakdownDelta(basis="per step" if per_step else "window total", classes=classes,
                          top_kernels=named("top_kernels"), top_ops=named("top_ops"), notes=notes)


# ---- did the change do what the report predicted? -----------------------------------------------------------------


def _moved(fc: FactChange | None, move: Move) -> bool | None:
    """True: moved as listed, beyond noise. False: known on both sides and did not. None: not comparable."""
    if fc is None or fc.before is None or fc.after is None:
        return None
    if not fc.significant:
        return False
    if move.moves == "changed":
        return True
    if fc.delta is None:
        return False
    return fc.delta > 0 if move.moves == "up" else fc.delta < 0


def _against(fc: FactChange | None, move: Move) -> bool:
    """Moved beyond noise the other way."""
    if fc is None or not fc.significant or fc.delta is None or move.moves == "changed":
        return False
    return fc.delta < 0 if move.moves == "up" else fc.delta > 0


def describe_change(fc: FactChange, kb: KnowledgeBase) -> str:
    """"num_workers 0 → 4", "data_wait_s -98% (0.0693 s → 0.00142 s)"."""
    spec = kb.facts.get(fc.name)
    show = f"{_fmt(spec, fc.before)} → {_fmt(spec, fc.after)}"
    if fc.change is None:
        return f"{fc.name} {show}"
    return f"{fc.name} {fc.change:+.0%} ({show})"


def _fmt(spec: Any, value: Value | None) -> str:
    return "not measured" if value is None else format_value(spec, value)


def match_signature(signature: Signature, facts: Mapping[str, FactChange], kb: KnowledgeBase,
                    unknown_because: Mapping[str, str] | None = None) -> tuple[str | None, list[str]]:
    """("matches" | "consistent" | None, evidence) for one optimization's signature against the fact changes;
    `unknown_because` says why a fact is not known on a side (the ingest's reasons), for the evidence."""
    markers = [(m, _moved(facts.get(m.fact), m)) for m in signature.markers]
    moved = [m for m, result in markers if result]
    effects = [(m, _moved(facts.get(m.fact), m), _against(facts.get(m.fact), m)) for m in signature.effects]
    supporting = [m for m, result, _ in effects if result]
    opposed = [m for m, _, against in effects if against]

    def says(moves: Sequence[Move]) -> list[str]:
        return [describe_change(facts[m.fact], kb) for m in moves]

    if moved:
        evidence = says(moved) + says(supporting)
        evidence += [f"but {text}" for text in says(opposed)]
        return "matches", evidence
    if any(result is False for _, result in markers):
        return None, []
    if supporting and not opposed:
        evidence = says(supporting)
        for m, result in markers:
            if result is None:
                why = (unknown_because or {}).get(m.fact)
                fc = facts.get(m.fact)
                shown = describe_change(fc, kb) if fc is not None else f"{m.fact} not measured"
                evidence.append(f"{shown} ({why})" if why else shown)
        return "consistent", evidence
    return None, []


def predictions(before: Report, facts: Sequence[FactChange], speedup: float | None, kb: KnowledgeBase,
                catalog: CompareCatalog, unknown_because: Mapping[str, str] | None = None) -> list[Prediction]:
    """The before report's recommendations the change looks like, matches first, each with its Amdahl bound."""
    by_name = {f.name: f for f in facts}
    signatures = catalog.by_optimization
    out: list[Prediction] = []
    for rec in before.recommended:
        signature = signatures.get(rec.id)
        if signature is None:
            continue
        match, evidence = match_signature(signature, by_name, kb, unknown_because)
        if match is None:
            continue
        bound = rec.expected_gain.max_speedup if rec.expected_gain is not None else None
        within = None if bound is None or speedup is None else speedup <= bound + 1e-9
        realised = (speedup - 1) / (bound - 1) if bound is not None and speedup is not None and bound > 1 else None
        text = f"{rec.title} ({rec.id}; {match}: {'; '.join(evidence)})"
        if bound is not None:
            text += f": predicted ≤ {bound:.2f}×"
        if speedup is not None:
            text += f"; measured {speedup:.2f}×"
            if speedup < 1:
                text += " (slower than before: whatever moved these facts did not pay off)"
            elif realised is not None and within:
                text += f" ({realised:.0%} of the predicted gain)"
            elif within is False:
                text += " (beyond the bound: more changed than this optimization, or the noise is large)"
        out.append(Prediction(id=rec.id, title=rec.title, match=match, evidence=evidence,
                              predicted_max_speedup=bound, measured_speedup=speedup, within_bound=within,
                              realised=realised, text=text))
    out.sort(key=lambda p: p.match != "matches")
    return out


# ---- the comparison ---------------------------------------------------------------------------------------------


def _notes(before: LoadedSide, after: LoadedSide, facts: Sequence[FactChange], preds: Sequence[Prediction],
           speedup: float | None) -> list[str]:
    notes: list[str] = []
    by_name = {f.name: f for f in facts}
    hw = by_name.get("hardware")
    if hw is not None and hw.before is not None and hw.after is not None and hw.before != hw.after:
        notes.append(f"before and after ran on different hardware ({hw.before} → {hw.after}): the step times "
                     "compare the machines as well as the change")
    step = by_name.get("step_time_s")
    if step is None or step.before is None or step.after is None:
        notes.append("step_time_s is not known on both sides: no speed-up, and no check against the predictions")
    elif step.significant and speedup is not None:
        notes.append(f"the step got {'faster' if speedup > 1 else 'slower'}: {speedup:.2f}× ({step.basis})")
    elif speedup is not None:
        notes.append(f"the step time did not move beyond its noise ({speedup:.2f}×; {step.basis})")
    if before.report.recommended and not preds and step is not None and step.significant:
        notes.append("the change does not look like any of the before report's recommendations "
                     f"({', '.join(r.id for r in before.report.recommended[:5])}"
                     f"{', ...' if len(before.report.recommended) > 5 else ''})")
    return notes


def compare_sides(before: LoadedSide, after: LoadedSide, kb: KnowledgeBase,
                  conditions: Sequence[Condition] = ()) -> Comparison:
    """The comparison of two diagnosed sides, with the gate evaluated on it."""
    catalog = load_catalog(kb)
    facts = fact_changes(before.report, after.report, kb, catalog)
    sb, sa = side_summary(before), side_summary(after)
    speedup = sb.step_time_s / sa.step_time_s if sb.step_time_s and sa.step_time_s else None
    new, cleared = finding_changes(before.report, after.report)
    unknown_because = {**{k: f"after: {v}" for k, v in after.not_derived.items()},
                       **{k: f"before: {v}" for k, v in before.not_derived.items()}}
    preds = predictions(before.report, facts, speedup, kb, catalog, unknown_because)
    comparison = Comparison(before=sb, after=sa, speedup=speedup, facts=facts, findings_new=new,
                            findings_cleared=cleared, breakdown_delta=breakdown_delta(before, after),
                            predictions=preds, notes=_notes(before, after, facts, preds, speedup))
    comparison.gate = evaluate(conditions, comparison, kb)
    return comparison


def finding_ids(expert: Expert) -> set[str]:
    """The findings the rules can conclude (to check `new finding ID` conditions)."""
    return {lr.rule.then.finding.id for lr in expert.ruleset.rules.values() if lr.rule.then.finding}


def compare(before: SideSpec, after: SideSpec, *, expert: Expert, fail_if: Sequence[str] = (),
            ingest: IngestOptions | None = None) -> Comparison:
    """Read, diagnose and compare two sides; the --fail-if conditions are parsed first, so a bad one fails before
    any file is read."""
    conditions = parse_all(list(fail_if), expert.kb, finding_ids(expert))
    a = load_side(before, expert, ingest, what="before")
    b = load_side(after, expert, ingest, what="after")
    return compare_sides(a, b, expert.kb, conditions)
