"""One side of a comparison: profiler traces and telemetry (ingested), an observation file, or a saved report.

A side given as files may mix traces/telemetry with observation files (as `dam diagnose --from TRACE FILE` does:
the traces are ingested and merged, then the observation files add or override facts); a saved report stands alone.
Each side is diagnosed with the same Expert, so the two verdicts are comparable.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ObservationError, Problem
from ..observations.normalise import Observations
from ..report.model import Report
from .model import SideKind

if TYPE_CHECKING:
    from ..expert import Expert
    from ..ingest import IngestResult, Progress

PathLike = str | os.PathLike[str]
SideSpec = PathLike | Sequence[PathLike] | Report | Observations | Mapping[str, Any]
FileKind = Literal["report", "observations", "trace"]

_HEAD = 64 * 1024
_REPORT_MARKERS = ('"schema_version"', '"dam-expert/provenance"', '"evaluations"')


@dataclass(frozen=True)
class IngestOptions:
    """How traces and telemetry are read (the options of `dam ingest`), the same for both sides."""

    format: str = "auto"
    steps: str | tuple[int | None, int | None] | None = None
    window: str | tuple[float | None, float | None] | None = None
    samples: str | tuple[int | None, int | None] | None = None
    gpus: Sequence[int] | None = None
    columns: Sequence[str] | None = None
    progress: Progress | None = None


@dataclass
class LoadedSide:
    """A diagnosed side, with what the comparison needs beside the report."""

    source: str
    kind: SideKind
    report: Report
    time_breakdown: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    not_derived: dict[str, str] = field(default_factory=dict)


def classify(path: Path) -> FileKind:
    """What a file holds, from its name and first bytes: a saved report, an observation file, or a trace/log."""
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        return "observations"
    if suffix != ".json":
        return "trace"  # .json.gz, .csv, .txt, .log, .prom, .sqlite, ...: whatever `dam ingest` reads
    try:
        with open(path, "rb") as fh:
            head = fh.read(_HEAD).decode("utf-8", "replace")
    except OSError:
        return "trace"  # let the reader give the message
    stripped = head.lstrip("\ufeff \t\r\n")
    if any(marker in head for marker in _REPORT_MARKERS) and '"traceEvents"' not in head:
        return "report"
    if stripped.startswith("[") or '"traceEvents"' in head:
        return "trace"
    return "observations"


def load_side(spec: SideSpec, expert: Expert, options: IngestOptions | None = None, *,
              what: str = "side") -> LoadedSide:
    """Read and diagnose one side. `what` ("before"/"after") names the side in error messages."""
    if isinstance(spec, Report):
        return LoadedSide("report", "report", spec, _breakdown_of(spec))
    if isinstance(spec, Observations):
        return LoadedSide("observations", "observations", expert.diagnose(spec))
    if isinstance(spec, Mapping):
        return LoadedSide("observations", "observations", expert.diagnose(dict(spec)))
    paths = [Path(spec)] if isinstance(spec, (str, os.PathLike)) else [Path(p) for p in spec]
    if not paths:
        raise ObservationError([Problem(what, "no files given", "give a trace, an observation file or a report")],
                               title="cannot compare")
    for p in paths:
        if not p.exists():
            raise ObservationError([Problem(f"{what}: {p}", "no such file")], title="cannot compare")
        if not p.is_file():
            raise ObservationError([Problem(f"{what}: {p}", "not a regular file")], title="cannot compare")
    kinds = {p: classify(p) for p in paths}
    reports = [p for p in paths if kinds[p] == "report"]
    if reports:
        if len(paths) > 1:
            raise ObservationError([Problem(f"{what}: {reports[0]}", "a saved report is a whole side",
                                            "give it alone, or give the traces/observations it was diagnosed from")],
                                   title="cannot compare")
        return _load_report(reports[0])
    traces = [p for p in paths if kinds[p] == "trace"]
    files = [p for p in paths if kinds[p] == "observations"]
    raw: dict[str, Any] = {}
    notes: list[str] = []
    not_derived: dict[str, str] = {}
    breakdown: dict[str, Any] | None = None
    if traces:
        result = _ingest(traces, expert, options or IngestOptions())
        raw.update({k: v for k, v in result.to_observation_file()["observations"].items() if v["value"] != "unknown"})
        notes.extend(result.notes)
        not_derived = dict(result.not_derived)
        breakdown = _breakdown_of(result)
    for p in files:
        observations, file_breakdown = _read_observations(p)
        raw.update(observations)
        breakdown = file_breakdown if file_breakdown is not None else breakdown
    report = expert.diagnose(raw)
    return LoadedSide(", ".join(p.name for p in paths), "trace" if traces else "observations", report,
                      _breakdown_of(report) or breakdown, notes, not_derived)


def _ingest(paths: list[Path], expert: Expert, options: IngestOptions) -> IngestResult:
    from ..ingest import ingest_result

    return ingest_result([str(p) for p in paths], format=options.format, steps=options.steps, window=options.window,
                         samples=options.samples, gpus=options.gpus, columns=options.columns,
                         progress=options.progress, kb=expert.kb)


def _read_observations(path: Path) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """An observation file's observations, and the `time_breakdown` a `dam ingest --as json|yaml` file carries."""
    from .._yaml import load_yaml
    from ..errors import KnowledgeBaseError
    from ..observations.file import ObservationFile, read_observation_file

    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.suffix.lower() == ".json" else load_yaml(path)
    except (ValueError, UnicodeDecodeError, KnowledgeBaseError):
        data = None  # read_observation_file gives the located message
    if not (isinstance(data, dict) and "time_breakdown" in data):
        return dict(read_observation_file(path).observations), None
    breakdown = data.pop("time_breakdown")
    body = data.get("observations", data)
    extra = sorted(set(data) - {"observations", "description"}) if "observations" in data else []
    if extra or not isinstance(body, dict):
        raise ObservationError([Problem(str(path), f"unexpected top-level keys {extra}" if extra
                                        else "observations must be a mapping of fact: value")])
    return dict(ObservationFile(observations=body).observations), _as_dict(breakdown)


def _load_report(path: Path) -> LoadedSide:
    """A saved report (plain report JSON or the JSON export), keeping a `time_breakdown` the report JSON carries
    even where this version's Report model has no such field."""
    from ..report.render.graph import JSON_FORMAT, load_json

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ObservationError([Problem(str(path), "cannot be read as UTF-8 text")],
                               title="cannot read the report") from exc
    breakdown: dict[str, Any] | None = None
    if "time_breakdown" not in Report.model_fields and '"time_breakdown"' in text:
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None  # load_json gives the located message
        body = data.get("report") if isinstance(data, dict) and data.get("format") == JSON_FORMAT else data
        if isinstance(body, dict) and "time_breakdown" in body:
            breakdown = _as_dict(body.pop("time_breakdown"))
            text = json.dumps(data)
    report = load_json(text, str(path))
    return LoadedSide(path.name, "report", report, _breakdown_of(report) or breakdown)


def _breakdown_of(obj: Any) -> dict[str, Any] | None:
    """The `time_breakdown` of a report or an ingest result, as a plain mapping, when it has one."""
    value = getattr(obj, "time_breakdown", None)
    if value is None and hasattr(obj, "to_observation_file") and hasattr(obj, "files"):
        value = obj.to_observation_file().get("time_breakdown")
        per_file = [b for b in (getattr(f, "time_breakdown", None) for f in obj.files) if b is not None]
        if value is None and len(per_file) == 1:
            value = per_file[0]
    return _as_dict(value)


def _as_dict(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if hasattr(value, "model_dump"):
        dumped = value.model_dump(mode="json", by_alias=True)
        return dumped if isinstance(dumped, dict) else None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return dict(value) if isinstance(value, Mapping) else None
