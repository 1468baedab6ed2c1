"""What ingestion produces: measured facts with provenance, the facts it could not derive and why, notes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..breakdown import TimeBreakdown
from ..kb.knowledge import KnowledgeBase
from ..observations.normalise import Observations, RankFigures

Scalar = int | float | str


class Measured(BaseModel):
    """One fact measured from one file, before validation against the vocabulary."""

    model_config = ConfigDict(extra="forbid")

    fact: str
    value: Scalar
    source: str
    detail: dict[str, Scalar] = Field(default_factory=dict)


class FileResult(BaseModel):
    """Everything one input file gave: measured facts, the facts its format could give but this file did not (and
    why), and notes (choices made, data skipped)."""

    model_config = ConfigDict(extra="forbid")

    path: str
    name: str
    format: str
    measured: dict[str, Measured] = Field(default_factory=dict)
    not_derived: dict[str, str] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    stats: dict[str, Scalar] = Field(default_factory=dict)
    time_breakdown: TimeBreakdown | None = None  # where the GPU time goes (profiler traces)

    def add(self, fact: str, value: Scalar, **detail: Scalar | None) -> None:
        """Record a measured fact with its provenance detail (None values are left out)."""
        clean = {k: v for k, v in detail.items() if v is not None}
        self.measured[fact] = Measured(fact=fact, value=value, source=f"{self.format}:{self.name}", detail=clean)
        self.not_derived.pop(fact, None)

    def add_hardware(self, counts: Mapping[str, int], kb: KnowledgeBase, *, what: str, method: str,
                     metric: str | None = None, file: str | None = None, several: str | None = None) -> None:
        """Map the most frequent device name in `counts` to a catalog id, or record why not.

        `what` names the name in messages ("device name", "modelName"); `several`, when given, is the note's wording
        for inputs that list more than one device model.
        """
        name = max(counts, key=lambda n: counts[n])
        found = kb.hardware_resolution(name)
        if found is None:
            self.missing("hardware", f"{what} {name!r} is not in the hardware catalog; give --set hardware=ID "
                         "(dam hardware list) or --hardware-file")
        else:  # a family name ("NVIDIA H100") resolves to its default variant, and the detail says so
            self.add("hardware", found.id, metric=metric, method=method, device_name=name, file=file or self.path,
                     resolved_from=name if found.note else None, note=found.note)
        if several and len(counts) > 1:
            self.notes.append(f"{several} ({', '.join(sorted(counts))}); used {name!r}")

    def missing(self, fact: str, reason: str) -> None:
        """Record that this file cannot give `fact`, and why (unless it was measured)."""
        if fact not in self.measured:
            self.not_derived[fact] = reason


class JobResult(BaseModel):
    """The multi-rank analysis of one job (expert/ingest/ranks.py): its ranks' figures, the comparison across them,
    and the job's facts (`result`, measured on its ranks, with provenance to their files)."""

    model_config = ConfigDict(extra="forbid")

    label: str
    world_size: int | None = None
    backend: str | None = None
    mode: str = "gpu"
    files: list[str] = Field(default_factory=list)
    ranks: list[RankFigures] = Field(default_factory=list)
    slowest_rank: int | None = None
    step_time_skew: float | None = None
    compute_skew: float | None = None
    sync_wait_s: float | None = None
    bus_bandwidth: float | None = None
    result: FileResult


class IngestResult(BaseModel):
    """The merged observations of one or more files, with what could not be derived and why. `job` is the multi-rank
    analysis when the traces are the ranks of a multi-GPU job."""

    model_config = ConfigDict(extra="forbid")

    observations: Observations
    files: list[FileResult]
    not_derived: dict[str, str] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    job: JobResult | None = None

    @property
    def time_breakdown(self) -> TimeBreakdown | None:
        """The time breakdown of the first file that has one (a profiler trace)."""
        return next((f.time_breakdown for f in self.files if f.time_breakdown is not None), None)

    def to_observation_file(self) -> dict[str, Any]:
        """A mapping `dam diagnose FILE` reads back: measured facts with source and detail, the facts that could
        not be derived as `unknown` with the reason (they are skipped on reading), and the time breakdown."""
        names = ", ".join(f"{f.name} ({f.format})" for f in self.files)
        observations: dict[str, Any] = {}
        for name, obs in self.observations.facts.items():
            observations[name] = {"value": obs.value, "source": obs.source, "detail": dict(obs.detail)}
        for name, reason in self.not_derived.items():
            observations[name] = {"value": "unknown", "source": "ingest", "detail": {"reason": reason}}
        out: dict[str, Any] = {"description": f"Observations ingested from {names}", "observations": observations}
        if self.observations.ranks:
            out["ranks"] = [r.model_dump() for r in self.observations.ranks]
        if self.time_breakdown is not None:
            out["time_breakdown"] = self.time_breakdown.model_dump(mode="json", by_alias=True)
        return out
