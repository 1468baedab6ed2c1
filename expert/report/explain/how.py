"""how: how a fact got its value (observed, derived down to the observations it rests on, or unknown)."""

from __future__ import annotations

from typing import Literal

from ...derive.registry import DERIVATIONS
from ..model import Report
from ._shared import Value, _fmt, _Model, _suggest, _universe


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
