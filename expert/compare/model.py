"""The `Comparison` of two diagnoses (before and after a change): pydantic models with a lossless JSON round trip."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Value = int | float | str
SideKind = Literal["trace", "observations", "report"]
Match = Literal["matches", "consistent"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class AxisShare(_Model):
    axis: str
    share: float


class Side(_Model):
    """One side of the comparison: where it came from and what its diagnosis concluded."""

    source: str  # the files (or "observations" / "report") this side was read from
    kind: SideKind
    bottleneck: str | None
    verdict_title: str | None = None
    axes: list[AxisShare] = []
    step_time_s: float | None = None
    mfu: float | None = None
    findings: list[str] = []
    recommended: list[str] = []


class FactChange(_Model):
    """One fact before and after. `change` is the relative change (after / before - 1) of a number, `delta` the
    absolute one; `significant` says whether it moved beyond its own noise, and `basis` how that was judged;
    `derived` is true when the diagnosis derived it (on either side) rather than observed it."""

    name: str
    before: Value | None
    after: Value | None
    change: float | None = None
    delta: float | None = None
    significant: bool = False
    basis: str = ""
    unit: str | None = None
    derived: bool = False


class FindingRef(_Model):
    id: str
    title: str
    severity: str


class ClassDelta(_Model):
    """GPU time of one kernel class before and after (seconds per step, or over the window: see `basis`)."""

    class_: str = Field(alias="class")
    before_s: float | None = None
    after_s: float | None = None
    delta_s: float | None = None
    before_share: float | None = None
    after_share: float | None = None


class NamedDelta(_Model):
    """GPU time of one kernel or operator before and after; None where it is not among that side's top entries."""

    name: str
    before_s: float | None = None
    after_s: float | None = None
    delta_s: float | None = None
    before_share: float | None = None
    after_share: float | None = None
    before_count: int | None = None
    after_count: int | None = None


class BreakdownDelta(_Model):
    """Where GPU time went, before against after (from each side's `time_breakdown`); empty, with a note, when a side
    has none."""

    basis: str | None = None  # "per step" or "window total"
    classes: list[ClassDelta] = []
    top_kernels: list[NamedDelta] = []
    top_ops: list[NamedDelta] = []
    notes: list[str] = []


class Prediction(_Model):
    """One of the before report's recommendations that the change looks like, and its Amdahl bound against the
    measured speed-up."""

    id: str
    title: str
    match: Match
    evidence: list[str]
    predicted_max_speedup: float | None = None
    measured_speedup: float | None = None
    within_bound: bool | None = None
    realised: float | None = None  # share of the predicted gain achieved: (measured - 1) / (predicted - 1)
    text: str


class Gate(_Model):
    """The --fail-if conditions and the reasons the gate failed (a condition held, or could not be evaluated)."""

    passed: bool = True
    failed: list[str] = []
    conditions: list[str] = []


class Comparison(_Model):
    """Before against after: verdicts, facts that moved beyond their noise, findings, GPU-time breakdown, whether
    the change looks like one of the before report's recommendations, and the regression gate."""

    schema_version: Literal[1] = 1
    before: Side
    after: Side
    speedup: float | None = None  # before step time / after step time
    facts: list[FactChange] = []
    findings_new: list[FindingRef] = []
    findings_cleared: list[FindingRef] = []
    breakdown_delta: BreakdownDelta = BreakdownDelta()
    predictions: list[Prediction] = []
    gate: Gate = Gate()
    notes: list[str] = []

    def to_json(self, indent: int | None = 2) -> str:
        """Lossless JSON; `Comparison.model_validate_json` reads it back."""
        return self.model_dump_json(indent=indent, by_alias=True)

    def fact(self, name: str) -> FactChange | None:
        """The change of one fact, or None when neither side has it."""
        return next((f for f in self.facts if f.name == name), None)

    @property
    def verdict_changed(self) -> bool:
        return self.before.bottleneck != self.after.bottleneck
