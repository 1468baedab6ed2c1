"""what_if: re-diagnose with some facts changed, and what concluded differently."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import Field

from ...errors import ObservationError, Problem
from ..model import Report
from ._shared import Value, _expert, _fmt, _Model, _raw
from ._solve import _numeric_inputs, _Solver

if TYPE_CHECKING:
    from ...expert import Expert
    from ...kb.knowledge import FactSpec, KnowledgeBase


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
    from ...observations.normalise import convert

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
