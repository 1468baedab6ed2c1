"""counterfactuals: the smallest single-fact changes that flip the verdict, each verified by re-diagnosis."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import ExpertError
from ...rules.logic import ORDERED, SYMBOLS, compare
from ..model import Report, RuleEvaluation
from ._shared import _STRENGTHS, Value, _expert, _fmt, _Model, _raw
from ._solve import _numeric, _numeric_inputs, _Solver

if TYPE_CHECKING:
    from ...expert import Expert
    from ...kb.knowledge import FactSpec, KnowledgeBase


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
            crosses = f"{leaf.name} {SYMBOLS.get(leaf.op, leaf.op)} {_fmt(leaf.threshold)} ({ev.rule_id})"
            if spec.type == "enum" and spec.askable and leaf.op in ("eq", "ne", "in", "not_in"):
                for choice in spec.choices or []:
                    add(leaf.name, choice, crosses, None)
                continue
            if not _numeric(spec) or not (leaf.op in ORDERED or leaf.op in ("eq", "ne")):
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


def _typed(spec: FactSpec, x: float) -> Value:
    return round(x) if spec.type == "integer" else x


def _in_range(spec: FactSpec, v: float) -> bool:
    if spec.type == "fraction":
        return 0.0 <= v <= 1.0
    if spec.min is not None and (v < spec.min or (spec.exclusive_min and v == spec.min)):
        return False
    return spec.max is None or v <= spec.max


def _sides(spec: FactSpec, t: float, op: str, current: Value | None) -> list[float]:
    """Values nearest threshold t on the other side of the test from the current value (both sides if unknown)."""
    x0 = float(current) if isinstance(current, (int, float)) else None
    options = [t, t - 1, t + 1] if spec.type == "integer" else [t]
    if op not in ("eq", "ne"):
        options += [v for v in (_nudge(spec, t, up=False), _nudge(spec, t, up=True)) if v is not None]
    options = [v for v in options if _in_range(spec, v)]
    out: list[float] = []
    for outcome in (True, False):
        if x0 is not None and outcome == compare(op, x0, t):
            continue
        side = [v for v in options if compare(op, v, t) == outcome and v != x0]
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


_CLUSTER_FINDING = "cluster_job"
"""The finding rules/cluster.yaml (rule cluster-context) concludes when a diagnosis has cluster facts; a report
without it is a single-GPU job, and a change that would make it hold describes another job, not a counterfactual."""


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
    single_gpu = not any(f.id == _CLUSTER_FINDING for f in report.findings)
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
        if single_gpu and any(f.id == _CLUSTER_FINDING for f in after.findings):
            continue  # the change makes it a cluster job (num_gpus, comm_*, sync_wait_*...): not this job
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
