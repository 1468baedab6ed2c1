"""Observation files: YAML or JSON, either a flat {fact: value} mapping or {description, observations}."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ._yaml import load_yaml
from .breakdown import TimeBreakdown
from .errors import KnowledgeBaseError, ObservationError, Problem


class ObservationFile(BaseModel):
    """The file format `dam diagnose FILE` reads (JSON Schema: `dam schema observations`)."""

    model_config = ConfigDict(extra="forbid")

    description: str | None = None
    observations: dict[str, Any]
    time_breakdown: TimeBreakdown | None = None  # written by `dam ingest` from a profiler trace


def read_observation_file(path: Path) -> ObservationFile:
    """Read an observation file; every failure is an ObservationError naming the file (and line where known)."""
    if not path.is_file():
        raise ObservationError([Problem(str(path), "no such file")])
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as exc:
            raise ObservationError([Problem(str(path), "not a text file", "expected JSON")]) from exc
        except json.JSONDecodeError as exc:
            raise ObservationError([Problem(f"{path}:{exc.lineno}", f"invalid JSON: {exc.msg}")]) from exc
    else:
        try:
            data = load_yaml(path)
        except KnowledgeBaseError as exc:
            raise ObservationError(exc.problems, title="cannot read the observation file") from exc
    if data is None:
        raise ObservationError([Problem(str(path), "file is empty", "give a mapping of fact: value")])
    if not isinstance(data, dict):
        raise ObservationError([Problem(str(path), f"expected a mapping of fact: value, got {type(data).__name__}")])
    if "observations" in data:
        extra = sorted(set(data) - {"observations", "description", "time_breakdown"})
        if extra:
            raise ObservationError([Problem(str(path), f"unexpected top-level keys {extra}",
                                            "put facts under `observations:`")])
        if not isinstance(data["observations"], dict):
            raise ObservationError([Problem(f"{path}: observations", "must be a mapping of fact: value")])
        description = data.get("description")
        breakdown = None
        if data.get("time_breakdown") is not None:
            try:
                breakdown = TimeBreakdown.model_validate(data["time_breakdown"])
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(x) for x in first["loc"])
                raise ObservationError([Problem(f"{path}: time_breakdown.{where}", first["msg"],
                                                "time_breakdown is what `dam ingest` wrote; remove it or re-ingest")]
                                       ) from exc
        return ObservationFile(description=str(description) if description is not None else None,
                               observations=data["observations"], time_breakdown=breakdown)
    return ObservationFile(observations=data)
