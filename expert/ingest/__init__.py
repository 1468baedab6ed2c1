"""Facts from real telemetry: PyTorch profiler (Kineto) traces, Nsight Systems exports, nvidia-smi, dcgmi dmon,
dcgm-exporter text and a vLLM or SGLang server's /metrics (`serving_metrics`).

>>> import expert
>>> obs = expert.ingest("trace.json.gz")                      # doctest: +SKIP
>>> expert.diagnose(obs).bottleneck                            # doctest: +SKIP
'input'

`ingest` returns validated `expert.Observations` whose `source`/`detail` record where each value came from (file,
method, window, samples, min/max). `ingest_result` also says which facts could not be derived and why, and merges
several files (a trace plus a DCGM log of the same run). The traces of a multi-GPU job (a directory or glob of rank
files) are grouped into jobs and compared rank by rank (`ranks`), and nccl-tests output is telemetry too
(`nccl_tests`). Note: `expert.ingest` is this function; import the modules as `from expert.ingest import kineto`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from ..errors import ObservationError, Problem
from ..kb.knowledge import KnowledgeBase
from ..observations.normalise import Observations, normalise
from ._kb import default_kb as _default_kb
from ._result import FileResult, IngestResult, JobResult, Measured
from ._source import CANNOT_READ, FORMAT_TITLES, FORMATS, Format, JobProgress, Progress, Source, SourceLike, sniff
from .merge import merge

StepRange = str | tuple[int | None, int | None] | None
TimeWindow = str | tuple[float | None, float | None] | None

__all__ = [
    "FORMATS",
    "FORMAT_TITLES",
    "FileResult",
    "Format",
    "IngestResult",
    "JobProgress",
    "JobResult",
    "Measured",
    "Progress",
    "ingest",
    "ingest_result",
    "parse_range",
]

_RANGE = re.compile(r"^\s*([-+]?[0-9.eE+-]*)\s*(?::\s*([-+]?[0-9.eE+-]*)\s*)?$")


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


def _as_range(value: StepRange | TimeWindow, what: str, *, integer: bool,
              least: int | None = None, why: str = "") -> tuple[float | None, float | None] | None:
    """The range an option gives (None: not given); `least`: the smallest number it may hold (`why` says why)."""
    if value is None:
        return None
    if isinstance(value, str):
        lo, hi = parse_range(value, what, integer=integer)
        text = value
    else:
        lo, hi = value
        text = f"{'' if lo is None else lo}:{'' if hi is None else hi}"
        if lo is not None and hi is not None and hi < lo:
            raise ObservationError([Problem(f"{what} {text}", "the end is before the start")], title="invalid range")
    if least is not None and any(v is not None and v < least for v in (lo, hi)):
        raise ObservationError([Problem(f"{what} {text}", f"{what.lstrip('-').rstrip('s')} numbers are {least} or "
                                        f"more ({why})",
                                        f"e.g. {what} {least}:{least + 3}")], title="invalid range")
    return lo, hi


TELEMETRY: tuple[Format, ...] = ("nvidia-smi", "nvidia-smi-dmon", "dcgmi", "prometheus")
class _Applies(NamedTuple):
    formats: tuple[Format, ...]
    what: str  # the formats, in words
    instead: str  # the hint where no input takes the option


APPLIES: dict[str, _Applies] = {
    "--steps": _Applies(("kineto", "nsys"), "profiler traces (Kineto traces, Nsight Systems exports)",
                        "pick samples of a telemetry log with --samples A:B, or seconds with --window A:B"),
    "--step-range": _Applies(("nsys",), "Nsight Systems exports", "select Kineto steps with --steps A:B"),
    "--samples": _Applies(TELEMETRY, "telemetry logs (nvidia-smi, nvidia-smi dmon, dcgmi dmon, dcgm-exporter)",
                          "select ProfilerStep numbers of a trace with --steps A:B, or seconds with --window A:B"),
    "--columns": _Applies(("nvidia-smi",), "nvidia-smi --query-gpu CSV logs",
                          "--columns names the fields of an nvidia-smi CSV written with noheader"),
    "--window": _Applies(tuple(f for f in FORMATS if f not in ("nccl-tests", "serving-metrics")),
                         "traces and timestamped telemetry logs",
                         "nccl-tests output and serving metrics have no time axis"),
}
"""The input formats each selection option applies to, their description, and what to use where none of the inputs
takes it. An option none of the inputs takes is an error (it would select nothing: the result would not be what was
asked for); one that only some take is a note on the others (a trace and a DCGM log of the same run: --steps picks
the trace's steps, --samples the log's)."""


def _check_options(srcs: Sequence[Source], fmts: Sequence[str], given: dict[str, str]) -> None:
    """Raise for an option given (`given`: option -> its text) that applies to none of the inputs."""
    for option, text in given.items():
        applies = APPLIES[option]
        if any(fmt in applies.formats for fmt in fmts):
            continue
        shown = ", ".join(f"{src.label} ({_short_title(fmt)})" for src, fmt in zip(srcs, fmts, strict=True))
        raise ObservationError([Problem(f"{option} {text}", f"applies to {applies.what}, not to {shown}",
                                        applies.instead)], title="invalid option")


def _not_applied(option: str, fmt: str) -> str | None:
    """The note on an option this input's format does not take (None: it takes it)."""
    applies = APPLIES[option]
    if fmt in applies.formats:
        return None
    return f"{option} applies to {applies.what}; ignored for this file ({_short_title(fmt)})"


def _short_title(fmt: str) -> str:
    """A format's title without its parenthesis: `PyTorch profiler / Kineto trace`."""
    return FORMAT_TITLES.get(fmt, fmt).split(" (")[0]


def _read_one(src: Source, fmt: str, kb: KnowledgeBase, *, steps: tuple[float | None, float | None] | None,
              window: tuple[float | None, float | None] | None, samples: tuple[float | None, float | None] | None,
              gpus: Sequence[int] | None, columns: Sequence[str] | None, progress: Progress | None,
              nvtx_range: str | None = None, jobs: list[JobResult] | None = None,
              workers: int | None = None) -> FileResult:
    result = _parse(src, fmt, kb, steps=steps, window=window, samples=samples, gpus=gpus, columns=columns,
                    progress=progress, nvtx_range=nvtx_range, jobs=jobs, workers=workers)
    _note_ignored(result, fmt, steps=steps, samples=samples, columns=columns, nvtx_range=nvtx_range, window=window)
    return result


def _parse(src: Source, fmt: str, kb: KnowledgeBase, *, steps: tuple[float | None, float | None] | None,
           window: tuple[float | None, float | None] | None, samples: tuple[float | None, float | None] | None,
           gpus: Sequence[int] | None, columns: Sequence[str] | None, progress: Progress | None,
           nvtx_range: str | None, jobs: list[JobResult] | None, workers: int | None) -> FileResult:
    """One file read by its format's reader, with the options that format takes."""
    if fmt == "nsys":
        from . import nsys

        analysis = nsys.analyse(src, kb, steps=_step_range(steps), window=window, gpus=gpus, step_range=nvtx_range,
                                progress=progress, workers=workers)
        if analysis.job is not None and jobs is not None:  # several devices: compared as the ranks of a job
            jobs.append(analysis.job)
        return analysis.result
    if fmt == "kineto":
        from . import kineto

        return kineto.parse(src, kb, steps=_step_range(steps), window=window, gpus=gpus, progress=progress,
                            workers=workers)
    from . import dcgm, nccl_tests, nvidia_smi

    if fmt == "nvidia-smi":
        return nvidia_smi.parse_csv(src, kb, window=window, samples=samples, gpus=gpus, columns=columns,
                                    progress=progress)
    if fmt == "nvidia-smi-dmon":
        return nvidia_smi.parse_dmon(src, kb, window=window, samples=samples, gpus=gpus, progress=progress)
    if fmt == "dcgmi":
        return dcgm.parse_dmon(src, kb, window=window, samples=samples, gpus=gpus, progress=progress)
    if fmt == "nccl-tests":
        return nccl_tests.parse(src, kb, progress=progress)
    if fmt == "serving-metrics":
        from . import serving_metrics

        return serving_metrics.parse(src, kb, progress=progress)
    return dcgm.parse_prometheus(src, kb, window=window, samples=samples, gpus=gpus, progress=progress)


def _note_ignored(result: FileResult, fmt: str, **given: object) -> None:
    """Notes on the options given (not None) that this input's format does not take."""
    for key, value in given.items():
        option = {"nvtx_range": "--step-range"}.get(key, f"--{key}")
        note = _not_applied(option, fmt) if value is not None else None
        if note is not None:
            result.notes.append(note)


def _option_text(value: object) -> str:
    """An option's value as the user wrote it (a range given as a pair: A:B)."""
    if isinstance(value, tuple):
        return ":".join("" if v is None else str(v) for v in value)
    return str(value)


def _step_range(steps: tuple[float | None, float | None] | None) -> tuple[int | None, int | None] | None:
    return None if steps is None else (None if steps[0] is None else int(steps[0]),
                                       None if steps[1] is None else int(steps[1]))


def ingest_result(sources: SourceLike | Sequence[SourceLike], *, format: str = "auto", steps: StepRange = None,
                  window: TimeWindow = None, samples: StepRange = None, gpus: Sequence[int] | None = None,
                  columns: Sequence[str] | None = None, progress: Progress | None = None,
                  kb: KnowledgeBase | None = None, step_range: str | None = None, job: int | None = None,
                  workers: int | None = None, job_progress: JobProgress | None = None) -> IngestResult:
    """Read one or more traces/logs and merge them into validated observations, with what could not be derived.

    sources: files, open streams, directories (their trace and telemetry files) or glob patterns ("run/rank*.json").
    steps:   ProfilerStep numbers to keep, inclusive: "2:5", "3:", ":8", "7" or a (lo, hi) pair (traces only; in an
             Nsight Systems export, the numbers of its NVTX step ranges, or their order from 1).
    step_range: the NVTX range that marks one step in an Nsight Systems export ("train_step"); by default a
             repeating range named like a step (step, iteration, train_step, ProfilerStep#N) is used.
    window:  seconds from the start of the recording, inclusive: "10:70" (traces and timestamped logs).
    samples: sample numbers to keep (1-based, inclusive) in telemetry logs: "5:60".
    gpus:    device indices to keep (default: all devices with activity, averaged).
    columns: the --query-gpu field list of an nvidia-smi CSV written with `noheader`.
    progress: called as progress(bytes_read, total_bytes) while large files are read.
    job:     with the traces of several jobs (or captures), which one (1-based, in time order) to read.
    workers: processes reading rank traces in parallel, or the byte ranges of one large uncompressed trace
    (expert/ingest/kineto_parallel.py; default: as many as CPUs and memory allow, or $DAM_INGEST_WORKERS; 1: in
    this process).
    job_progress: called as job_progress(job label, bytes_read, total_bytes) while a job's rank files are read.

    The traces of a multi-GPU job (PyTorch profiler traces with distributedInfo, or rank numbers in their names) are
    compared rank by rank (expert/ingest/ranks.py): `result.job` holds the analysis, `observations.ranks` the
    per-rank figures. Raises ObservationError naming the file and line for malformed input.
    """
    from . import rank_reading, ranks

    kb = kb or _default_kb()
    items: list[SourceLike] = (list(sources) if isinstance(sources, (list, tuple)) else [sources])  # type: ignore[list-item]
    if not items:
        raise ObservationError([Problem("ingest", "no input files given")], title=CANNOT_READ)
    if format != "auto" and format not in FORMATS:
        raise ObservationError([Problem(f"--format {format}", "unknown format", "one of auto, " + ", ".join(FORMATS))],
                               title=CANNOT_READ)
    nvtx_step = step_range.strip() if isinstance(step_range, str) and step_range.strip() else None
    step_numbers = _as_range(steps, "--steps", integer=True, least=0,
                             why="ProfilerStep#0 and an export's first NVTX step are the first")
    time_window = _as_range(window, "--window", integer=False)
    sample_range = _as_range(samples, "--samples", integer=True, least=1, why="the first sample of a log is 1")
    items, notes = rank_reading.expand(items)
    srcs = [Source(obj) for obj in items]
    fmts = [sniff(src) if format == "auto" else format for src in srcs]
    options = {"--steps": steps, "--step-range": nvtx_step, "--samples": samples, "--window": window,
               "--columns": ",".join(columns) if columns else None}
    _check_options(srcs, fmts, {k: _option_text(v) for k, v in options.items() if v is not None})
    traces = [src for src, fmt in zip(srcs, fmts, strict=True) if fmt == "kineto"]
    multi = len(traces) > 1 or (len(traces) == 1 and (rank_reading.head_world_size(traces[0]) or 1) > 1)
    opts = {"steps": _step_range(step_numbers), "window": time_window, "gpus": gpus}
    job_result = None
    rank_files: list[FileResult] = []
    if multi:
        pairs = rank_reading.read_all(traces, kb, opts, workers=workers, progress=progress, job_progress=job_progress)
        found = [t for _, t in pairs]
        chosen = ranks.choose(ranks.group(found), found, job)
        rank_files = [pairs[i][0] for i in chosen]
        if not ranks.is_single_node([found[i] for i in chosen]):
            job_result = ranks.analyse([found[i] for i in chosen], rank_files)
        if sample_range is not None:
            notes.append("--samples applies to telemetry logs; ignored for the traces")
    elif job is not None:
        raise ObservationError([Problem(f"--job {job}", "the inputs are not the ranks of multi-GPU jobs")],
                               title=CANNOT_READ)
    export_jobs: list[JobResult] = []  # Nsight Systems exports with several devices (their facts are in the file)
    others = [_read_one(src, fmt, kb, steps=step_numbers, window=time_window, samples=sample_range, gpus=gpus,
                        columns=columns, progress=progress, nvtx_range=nvtx_step, jobs=export_jobs, workers=workers)
              for src, fmt in zip(srcs, fmts, strict=True) if not (multi and fmt == "kineto")]
    merged_inputs = ([job_result.result] if job_result is not None else rank_files) + others
    raw, not_derived, merge_notes = merge(merged_inputs)
    observations = normalise(kb, raw)
    cluster = job_result
    if cluster is None and export_jobs:
        cluster = export_jobs[0]
        if len(export_jobs) > 1:
            notes.append(f"{len(export_jobs)} multi-device exports: the rank figures are the first one's")
    if cluster is not None:
        observations = observations.model_copy(update={"ranks": list(cluster.ranks)})
    return IngestResult(observations=observations, files=[*rank_files, *others], not_derived=not_derived,
                        notes=notes + merge_notes, job=cluster)


def ingest(path_or_stream: SourceLike | Sequence[SourceLike], *, format: str = "auto", steps: StepRange = None,
           window: TimeWindow = None, samples: StepRange = None, gpus: Sequence[int] | None = None,
           columns: Sequence[str] | None = None, progress: Progress | None = None,
           kb: KnowledgeBase | None = None, step_range: str | None = None, job: int | None = None,
           workers: int | None = None, job_progress: JobProgress | None = None) -> Observations:
    """Observations from a profiler trace or a GPU telemetry log (or several, merged; or the rank traces of a
    multi-GPU job, compared). See `ingest_result`."""
    return ingest_result(path_or_stream, format=format, steps=steps, window=window, samples=samples, gpus=gpus,
                         columns=columns, progress=progress, kb=kb, step_range=step_range, job=job,
                         workers=workers, job_progress=job_progress).observations

