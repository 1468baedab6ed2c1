"""Facts from real telemetry: PyTorch profiler (Kineto) traces, Nsight Systems exports, nvidia-smi, dcgmi dmon and
dcgm-exporter text.

>>> import expert
>>> obs = expert.ingest("trace.json.gz")                      # doctest: +SKIP
>>> expert.diagnose(obs).bottleneck                            # doctest: +SKIP
'input'

`ingest` returns validated `expert.Observations` whose `source`/`detail` record where each value came from (file,
method, window, samples, min/max). `ingest_result` also says which facts could not be derived and why, and merges
several files (a trace plus a DCGM log of the same run). Note: `expert.ingest` is this function; import the modules
as `from expert.ingest import kineto`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from ..errors import ObservationError, Problem
from ..kb.knowledge import KnowledgeBase
from ..observations.normalise import Observations, normalise
from ._result import FileResult, IngestResult, Measured
from ._source import FORMAT_TITLES, FORMATS, Format, Progress, Source, SourceLike, sniff
from .merge import merge

StepRange = str | tuple[int | None, int | None] | None
TimeWindow = str | tuple[float | None, float | None] | None

__all__ = [
    "FORMATS",
    "FORMAT_TITLES",
    "FileResult",
    "Format",
    "IngestResult",
    "Measured",
    "Progress",
    "ingest",
    "ingest_result",
    "parse_range",
]

_RANGE = re.compile(r"^\s*([-+]?[0-9.eE+-]*)\s*(?::\s*([-+]?[0-9.eE+-]*)\s*)?$")


@lru_cache(maxsize=1)
def _default_kb() -> KnowledgeBase:
    from .._resources import data_dir

    return KnowledgeBase.load(data_dir("knowledge_base"))


def parse_range(text: str, what: str, *, integer: bool) -> tuple[float | None, float | None]:
    """Parse "A:B", "A:", ":B" or "A" (A and B inclusive) into a pair; a bad range is an ObservationError."""
    match = _RANGE.match(text)
    problem = ObservationError([Problem(f"{what} {text}", "expected START:END, START:, :END or N",
                                        "e.g. --steps 2:5 (ProfilerStep#2..#5) or --window 10:70 (seconds)")],
                               title="invalid range")
    if not match or not (match.group(1) or match.group(2)):
        raise problem
    single = match.group(2) is None
    try:
        lo = (int(match.group(1)) if integer else float(match.group(1))) if match.group(1) else None
        hi = lo if single else ((int(match.group(2)) if integer else float(match.group(2))) if match.group(2) else None)
    except ValueError as exc:
        raise problem from exc
    if lo is not None and hi is not None and hi < lo:
        raise ObservationError([Problem(f"{what} {text}", "the end is before the start")], title="invalid range")
    return lo, hi


def _as_range(value: StepRange | TimeWindow, what: str, *, integer: bool) -> tuple[float | None, float | None] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return parse_range(value, what, integer=integer)
    lo, hi = value
    if lo is not None and hi is not None and hi < lo:
        raise ObservationError([Problem(f"{what} {lo}:{hi}", "the end is before the start")], title="invalid range")
    return lo, hi


def _read_one(obj: SourceLike, kb: KnowledgeBase, *, format: str, steps: tuple[float | None, float | None] | None,
              window: tuple[float | None, float | None] | None, samples: tuple[float | None, float | None] | None,
              gpus: Sequence[int] | None, columns: Sequence[str] | None, progress: Progress | None,
              nvtx_range: str | None = None) -> FileResult:
    src = Source(obj)
    fmt = sniff(src) if format == "auto" else format
    if fmt not in FORMATS:
        raise ObservationError([Problem(f"--format {format}", "unknown format", "one of auto, " + ", ".join(FORMATS))],
                               title="cannot read telemetry")
    if fmt == "nsys":
        from . import nsys

        step_numbers = None if steps is None else (None if steps[0] is None else int(steps[0]),
                                                   None if steps[1] is None else int(steps[1]))
        result = nsys.parse(src, kb, steps=step_numbers, window=window, gpus=gpus, step_range=nvtx_range,
                            progress=progress)
        if samples is not None:
            result.notes.append("--samples applies to telemetry logs; ignored for this export")
        return result
    if nvtx_range:
        raise ObservationError([Problem(f"--step-range {nvtx_range}", f"applies to Nsight Systems exports; "
                                        f"{src.label} is {FORMAT_TITLES.get(fmt, fmt)}",
                                        "select Kineto steps with --steps A:B")], title="invalid option")
    if fmt == "kineto":
        from . import kineto

        step_range = None if steps is None else (None if steps[0] is None else int(steps[0]),
                                                 None if steps[1] is None else int(steps[1]))
        result = kineto.parse(src, kb, steps=step_range, window=window, gpus=gpus, progress=progress)
        if samples is not None:
            result.notes.append("--samples applies to telemetry logs; ignored for this trace")
        return result
    from . import dcgm, nvidia_smi

    if fmt == "nvidia-smi":
        result = nvidia_smi.parse_csv(src, kb, window=window, samples=samples, gpus=gpus, columns=columns,
                                      progress=progress)
    elif fmt == "nvidia-smi-dmon":
        result = nvidia_smi.parse_dmon(src, kb, window=window, samples=samples, gpus=gpus, progress=progress)
    elif fmt == "dcgmi":
        result = dcgm.parse_dmon(src, kb, window=window, samples=samples, gpus=gpus, progress=progress)
    else:
        result = dcgm.parse_prometheus(src, kb, window=window, samples=samples, gpus=gpus, progress=progress)
    if steps is not None:
        result.notes.append("--steps applies to profiler traces; all samples in the window were used")
    return result


def ingest_result(sources: SourceLike | Sequence[SourceLike], *, format: str = "auto", steps: StepRange = None,
                  window: TimeWindow = None, samples: StepRange = None, gpus: Sequence[int] | None = None,
                  columns: Sequence[str] | None = None, progress: Progress | None = None,
                  kb: KnowledgeBase | None = None, step_range: str | None = None) -> IngestResult:
    """Read one or more traces/logs and merge them into validated observations, with what could not be derived.

    steps:   ProfilerStep numbers to keep, inclusive: "2:5", "3:", ":8", "7" or a (lo, hi) pair (traces only; in an
             Nsight Systems export, the numbers of its NVTX step ranges, or their order from 1).
    step_range: the NVTX range that marks one step in an Nsight Systems export ("train_step"); by default a
             repeating range named like a step (step, iteration, train_step, ProfilerStep#N) is used.
    window:  seconds from the start of the recording, inclusive: "10:70" (traces and timestamped logs).
    samples: sample numbers to keep (1-based, inclusive) in telemetry logs: "5:60".
    gpus:    device indices to keep (default: all devices with activity, averaged).
    columns: the --query-gpu field list of an nvidia-smi CSV written with `noheader`.
    progress: called as progress(bytes_read, total_bytes) while large files are read.
    Raises ObservationError naming the file and line for malformed input.
    """
    kb = kb or _default_kb()
    items: list[SourceLike] = (list(sources) if isinstance(sources, (list, tuple)) else [sources])  # type: ignore[list-item]
    if not items:
        raise ObservationError([Problem("ingest", "no input files given")], title="cannot read telemetry")
    nvtx_step = step_range.strip() if isinstance(step_range, str) and step_range.strip() else None
    step_numbers = _as_range(steps, "--steps", integer=True)
    time_window = _as_range(window, "--window", integer=False)
    sample_range = _as_range(samples, "--samples", integer=True)
    files = [_read_one(obj, kb, format=format, steps=step_numbers, window=time_window, samples=sample_range,
                       gpus=gpus, columns=columns, progress=progress, nvtx_range=nvtx_step) for obj in items]
    raw, not_derived, notes = merge(files)
    observations = normalise(kb, raw)
    return IngestResult(observations=observations, files=files, not_derived=not_derived, notes=notes)


def ingest(path_or_stream: SourceLike | Sequence[SourceLike], *, format: str = "auto", steps: StepRange = None,
           window: TimeWindow = None, samples: StepRange = None, gpus: Sequence[int] | None = None,
           columns: Sequence[str] | None = None, progress: Progress | None = None,
           kb: KnowledgeBase | None = None, step_range: str | None = None) -> Observations:
    """Observations from a profiler trace or a GPU telemetry log (or several, merged). See `ingest_result`."""
    return ingest_result(path_or_stream, format=format, steps=steps, window=window, samples=samples, gpus=gpus,
                         columns=columns, progress=progress, kb=kb, step_range=step_range).observations

