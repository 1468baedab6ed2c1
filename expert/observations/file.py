"""Observation files: YAML or JSON, either a flat {fact: value} mapping or {description, observations}."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from .._bare import bare_model
from .._yaml import check_size, load_yaml, read_text
from ..breakdown import TimeBreakdown
from ..errors import KnowledgeBaseError, ObservationError, Problem, printable
from .normalise import RankFigures


class ObservationFile(BaseModel):
    """The file format `dam diagnose FILE` reads (JSON Schema: `dam schema observations`)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # see _observation_file

    description: str | None = None
    observations: dict[str, Any]
    ranks: list[RankFigures] | None = None  # per-rank figures of a multi-GPU job, as `dam ingest` writes them
    time_breakdown: TimeBreakdown | None = None  # written by `dam ingest` from a profiler trace


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _cannot_read(problems: list[Problem]) -> ObservationError:
    return ObservationError(problems, title="cannot read the observation file")


def read_observation_file(path: Path, *, parse_yaml: Callable[[Path], Any] = load_yaml) -> ObservationFile:
    """Read an observation file; every failure is an ObservationError naming the file (and line where known).
    `parse_yaml` reads a YAML file as `load_yaml` does (the commands pass a cached one for the bundled examples)."""
    if not path.exists() and not path.is_symlink():
        raise ObservationError([Problem(str(path), "no such file")], title="cannot read the observation file")
    if path.suffix.lower() == ".json":
        text = read_text(path, _cannot_read)
        try:
            data = json.loads(text, object_pairs_hook=_unique_keys)
        except json.JSONDecodeError as exc:
            raise _cannot_read([Problem(f"{path}:{exc.lineno}", f"invalid JSON: {exc.msg}")]) from None
        except _DuplicateKey as exc:
            raise _cannot_read([Problem(str(path), f"duplicate key {exc.key!r}",
                                        "each fact may appear once")]) from None
        except RecursionError:
            raise _cannot_read([Problem(str(path), "nested too deeply to read")]) from None
        except ValueError as exc:  # an integer past Python's 4,300-digit conversion limit
            raise _cannot_read([Problem(str(path), f"invalid value: {exc}")]) from None
        check_size(data, str(path), ObservationError)
    else:
        try:
            data = parse_yaml(path)
        except KnowledgeBaseError as exc:
            raise ObservationError(exc.problems, title="cannot read the observation file") from exc
    if data is None:
        raise ObservationError([Problem(str(path), "file is empty", "give a mapping of fact: value")])
    if not isinstance(data, dict):
        raise ObservationError([Problem(str(path), f"expected a mapping of fact: value, got {type(data).__name__}")])
    if "observations" in data:
        extra = sorted(set(data) - {"observations", "description", "ranks", "time_breakdown"})
        if extra:
            raise ObservationError([Problem(str(path), f"unexpected top-level keys {extra}",
                                            "put facts under `observations:`")])
        if not isinstance(data["observations"], dict):
            raise ObservationError([Problem(f"{path}: observations", "must be a mapping of fact: value")])
        description = data.get("description")
        try:
            ranks = [RankFigures.model_validate(r) for r in data["ranks"]] if data.get("ranks") is not None else None
        except (ValidationError, TypeError) as exc:
            raise ObservationError([Problem(f"{path}: ranks", "each rank needs rank, file and per-step figures",
                                            str(exc).splitlines()[0])]) from exc
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
        # a description is free text shown in every report: control characters become visible escapes (\x1b)
        return _observation_file({"description": printable(str(description)) if description is not None else None,
                                  "observations": data["observations"], "ranks": ranks, "time_breakdown": breakdown})
    return _observation_file({"observations": data})


_FILE_FIELDS = tuple(ObservationFile.model_fields)


def _observation_file(given: dict[str, Any]) -> ObservationFile:
    """`ObservationFile(**given)`. Every field but `observations` arrives checked; where its keys are all strings the
    instance is built as validation would build it (a copy of the mapping, the other fields as given, the given ones
    marked as set) without building the model's validator, which a cold `dam diagnose FILE` would pay for (~10 ms
    of its first validator); other keys are validated, and rejected as before."""
    observations = given["observations"]
    if not all(type(key) is str for key in observations):
        return ObservationFile(**given)
    fields = {name: None for name in _FILE_FIELDS} | given | {"observations": dict(observations)}
    return bare_model(ObservationFile, fields, set(given))
