"""A fleet run: jobs -> what is unchanged since the last run -> chunks on an engine -> Parquet rows -> summary."""

from __future__ import annotations

import hashlib
import json
import math
import os
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..errors import Problem
from ._inputs import FleetInputError, Job, collect_jobs, stat_jobs, url_to_fs
from ._local import Callbacks, LocalEngine, cpu_count
from ._worker import TRANSIENT, Chunk, ChunkResult, DiagnoseFn, ExpertOptions, Task, error_row, summary

ROW_VERSION = 1  # bump when the row layout or its meaning changes: --resume then reruns every job
ENGINES = ("local", "dask")
SUMMARY_FILES = ("_summary.md", "_summary.html")
_GB = 1e9
RERUN = TRANSIENT | {"too-large"}  # error kinds --resume runs again (the limit may have changed)
_MAX_CHUNK = 64


@dataclass
class FleetRun:
    """What a fleet run did: the rows of every job in its input (newest), and how the run went."""

    rows: list[dict[str, Any]]
    out: str | None
    run_id: str
    jobs: int
    ran: int  # jobs run this time (reports and error rows alike)
    resumed: int  # jobs left as they were (--resume: inputs, facts, rules and version unchanged)
    errors: int  # rows with an error, among `rows`
    seconds: float
    engine: str
    workers: dict[str, int] = field(default_factory=dict)  # worker -> its peak RSS in bytes
    abandoned: int = 0
    notes: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # summary files written

    @property
    def jobs_per_s(self) -> float:
        return self.ran / self.seconds if self.seconds > 0 else 0.0

    def error_kinds(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for row in self.rows:
            if row.get("error"):
                counts[row.get("error_kind") or "error"] = counts.get(row.get("error_kind") or "error", 0) + 1
        return counts


def fingerprint(job: Job, rules: str) -> str:
    """What a job's row depends on: its files as they are now, its facts and labels, the rules and the version."""
    import expert

    payload = {"version": expert.__version__, "row": ROW_VERSION, "rules": rules, "key": job.key,
               "files": [r.identity() for r in (job.refs or [])], "facts": job.facts, "labels": job.labels}
    text = json.dumps(payload, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)


def _jobs(jobs: str | os.PathLike[str] | Iterable[Any], job_key: str | None,
          storage_options: Mapping[str, Any]) -> tuple[list[Job], list[str]]:
    if isinstance(jobs, (str, os.PathLike)):
        return collect_jobs([os.fspath(jobs)], job_key=job_key, storage_options=storage_options)
    items = list(jobs)
    if items and all(isinstance(i, (str, os.PathLike)) for i in items):
        return collect_jobs([os.fspath(i) for i in items], job_key=job_key, storage_options=storage_options)
    out = [Job.coerce(item, f"jobs[{i}]") for i, item in enumerate(items)]
    keys = [j.key for j in out]
    if len(set(keys)) != len(keys):
        raise FleetInputError([Problem("jobs", "job keys must be unique")])
    return out, []


def require(modules: Sequence[str]) -> None:
    """Raise a FleetInputError naming the extra to install when a module the fleet needs is missing."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        extra = "fleet-query" if missing == ["duckdb"] else "fleet"
        raise FleetInputError([Problem("dam fleet", f"needs {', '.join(missing)}, which is not installed",
                                       f"pip install 'dam-expert[{extra}]'")], title="missing extra")


def _writable(out: str, storage_options: Mapping[str, Any]) -> None:
    """Create the output folder and make sure it takes files, before any work (a clear error, exit code 2)."""
    import posixpath

    fs, folder = url_to_fs(out, storage_options)
    probe = posixpath.join(folder, f".dam-fleet-probe-{secrets.token_hex(4)}")
    try:
        fs.makedirs(folder, exist_ok=True)
        with fs.open(probe, "wb") as fh:
            fh.write(b"")
        fs.rm(probe)
    except (OSError, ValueError) as exc:
        raise FleetInputError([Problem(f"--out {out}", f"cannot write there: {exc}",
                                       "give a folder this user (and every Dask worker) can write")],
                              title="invalid option") from exc


def _check(engine: str, workers: int | None, timeout: float | None, retries: int, max_trace_gb: float | None,
           resume: bool, out: str | None, scheduler: str | None, client: Any) -> None:
    problems = []
    if engine not in ENGINES:
        problems.append(Problem(f"--engine {engine}", "unknown engine", "local or dask"))
    if workers is not None and workers < 1:
        problems.append(Problem(f"--workers {workers}", "must be at least 1"))
    if timeout is not None and not timeout > 0:
        problems.append(Problem(f"--timeout {timeout}", "must be a positive number of seconds"))
    if retries < 0:
        problems.append(Problem(f"--retries {retries}", "must be 0 or more"))
    if max_trace_gb is not None and not max_trace_gb > 0:
        problems.append(Problem(f"--max-trace-gb {max_trace_gb}", "must be a positive size in GB"))
    if resume and out is None:
        problems.append(Problem("--resume", "needs an output folder (--out) to resume from"))
    if (scheduler or client is not None) and engine != "dask":
        problems.append(Problem(f"--scheduler {scheduler}", "applies to --engine dask"))
    if problems:
        raise FleetInputError(problems, title="invalid option")


def run(jobs: str | os.PathLike[str] | Iterable[Any], *, out: str | os.PathLike[str] | None = None,
        engine: str = "local", workers: int | None = None, scheduler: str | None = None, client: Any = None,
        resume: bool = False, timeout: float | None = None, retries: int = 0, max_trace_gb: float | None = None,
        job_key: str | None = None, extra_rules_dirs: Sequence[str] = (), rule_engine: str = "auto",
        storage_options: Mapping[str, Any] | None = None, chunk_size: int | None = None,
        start_method: str | None = None, progress: Callable[[int, int, int], None] | None = None,
        load_rows: bool = True, _diagnose: DiagnoseFn | None = None) -> FleetRun:
    """Diagnose every job of a fleet; returns the rows (the same as the Parquet dataset written to `out`).

    jobs:     a manifest (CSV/JSONL), a glob or a directory (fsspec URLs; a list of them), or Job objects / mappings
              {job_key, files, facts, labels}.
    out:      the dataset folder (Parquet part files, _summary.md, _summary.html); None keeps rows in memory only.
    engine:   "local" (a process pool here) or "dask" (`client`, the scheduler at `scheduler`, or a LocalCluster).
    resume:   leave jobs whose files (URL, size, ETag/mtime), facts, labels, rules and version are unchanged since
              the run that wrote `out` (error rows of timeouts, I/O errors and crashes are run again).
    timeout:  seconds per job (attempt); a job past it becomes an error row, a stuck one loses its worker.
    retries:  further attempts for transient failures (timeouts, I/O errors, crashed workers).
    max_trace_gb: jobs with a file larger than this become error rows without being read.
    progress: called as progress(done, total, errors) as jobs finish.
    load_rows: False leaves report_json out of the returned rows (the dataset still has it).
    """
    started = time.perf_counter()
    out_url = os.fspath(out) if out is not None else None
    _check(engine, workers, timeout, retries, max_trace_gb, resume, out_url, scheduler, client)
    require(["pyarrow", "fsspec", *(["distributed"] if engine == "dask" else [])])
    so = dict(storage_options or {})
    options = ExpertOptions(tuple(os.fspath(d) for d in extra_rules_dirs), rule_engine)
    driver_expert = options.build()  # validates --rules-dir / engine here, before any worker starts
    rules = options.digest()
    job_list, notes = _jobs(jobs, job_key, so)
    stat_jobs(job_list, so)
    run_id = new_run_id()
    n_workers = workers or cpu_count()
    if workers and (scheduler or client is not None):
        notes.append("--workers applies to a cluster of dam fleet's own; the scheduler's workers ran the jobs")

    from ._table import compact, list_parts, read_index, read_rows, write_part

    index = {}
    if out_url is not None:
        _writable(out_url, so)
        if resume:
            index = read_index(out_url, so)
        elif list_parts(out_url, so):
            notes.append("the previous dataset in the output folder is replaced (use --resume to update it)")

    driver_part = f"part-{run_id}-driver.parquet"
    keep: dict[str, str] = {}  # job key -> the part file holding its row
    rows: dict[str, dict[str, Any]] = {}  # job key -> row of this run (without report_json when written)
    driver_rows: list[dict[str, Any]] = []
    tasks: list[Task] = []
    resumed = 0
    for job in job_list:
        task = Task(job, fingerprint(job, rules))
        bad = [r for r in job.refs or [] if r.error]
        big = [r for r in job.refs or [] if max_trace_gb and r.size is not None and r.size > max_trace_gb * _GB]
        old = index.get(job.key)
        if bad:
            message = "; ".join(f"{r.url}: {r.error}" for r in bad)
            driver_rows.append(error_row(task, run_id, "driver", "input", message))
        elif big:
            message = "; ".join(f"{r.url} is {r.size / _GB:.2f} GB, over --max-trace-gb {max_trace_gb:g}"
                                for r in big if r.size is not None)
            driver_rows.append(error_row(task, run_id, "driver", "too-large", message))
        elif old is not None and old.fingerprint == task.fingerprint and old.error_kind not in RERUN:
            keep[job.key] = old.part
            resumed += 1
        else:
            tasks.append(task)
    preflight = len(driver_rows)
    for row in driver_rows:
        rows[row["job_key"]] = row
        keep[row["job_key"]] = driver_part

    size = chunk_size or max(1, min(_MAX_CHUNK, math.ceil(len(tasks) / (n_workers * 4)) if tasks else 1))
    chunks = [Chunk(i, tasks[j:j + size], run_id, out_url, timeout, retries, so, _diagnose)
              for i, j in enumerate(range(0, len(tasks), size))]
    total = len(tasks)
    done: set[str] = set()
    errors = 0

    def on_job(row: dict[str, Any]) -> None:
        nonlocal errors
        if row["job_key"] not in done:
            done.add(row["job_key"])
            errors += bool(row.get("error"))
            if progress:
                progress(len(done), total, errors)

    def on_chunk(result: ChunkResult) -> None:
        for row in result.rows:
            rows[row["job_key"]] = row
            if result.part is not None:
                keep[row["job_key"]] = result.part

    def on_failed(task: Task, kind: str, message: str) -> None:
        row = error_row(task, run_id, "driver", kind, message)
        driver_rows.append(row)
        rows[task.job.key] = row
        keep[task.job.key] = driver_part
        on_job(row)

    if progress:
        progress(0, total, 0)
    runner: Any
    if engine == "dask":
        from ._dask import DaskEngine

        runner = DaskEngine(n_workers, options, scheduler=scheduler, client=client)
    else:
        runner = LocalEngine(n_workers, options, start_method)
    try:
        runner.run(chunks, Callbacks(on_job, on_chunk, on_failed))
    finally:
        if out_url is not None and driver_rows:
            write_part(driver_rows, out_url, driver_part, so)
    if out_url is not None:
        compact(out_url, keep, so)
    seconds = time.perf_counter() - started
    order = {j.key: i for i, j in enumerate(job_list)}
    if out_url is not None:
        from ._table import schema

        columns = None if load_rows else [n for n in schema().names if n != "report_json"]
        final = sorted(read_rows(out_url, keep, columns, so), key=lambda r: order.get(r["job_key"], 0))
    else:
        final = sorted((r if load_rows else summary(r) for r in rows.values()), key=lambda r: order[r["job_key"]])
    result = FleetRun(rows=final, out=out_url, run_id=run_id, jobs=len(job_list), ran=len(tasks) + preflight,
                      resumed=resumed, errors=sum(1 for r in final if r.get("error")), seconds=seconds,
                      engine=engine, workers=dict(runner.peak_rss), abandoned=getattr(runner, "abandoned", 0),
                      notes=notes)
    if out_url is not None:
        result.files = write_summary(result, driver_expert, so)
    return result


def write_summary(result: FleetRun, expert: Any, storage_options: Mapping[str, Any]) -> list[str]:
    """_summary.md and _summary.html beside the part files."""
    import posixpath

    from ._summary import summarize, to_html, to_markdown

    assert result.out is not None
    titles = {o.id: o.title for o in expert.kb.optimizations.values()}
    notes = [f"run {result.run_id}: {result.ran} job(s) run, {result.resumed} unchanged since the last run "
             f"(--resume), in {result.seconds:.1f} s on the {result.engine} engine", *result.notes]
    s = summarize(result.rows, titles, notes)
    fs, folder = url_to_fs(result.out, storage_options)
    written = []
    for name, text in (("_summary.md", to_markdown(s)), ("_summary.html", to_html(s))):
        with fs.open(posixpath.join(folder, name), "w", encoding="utf-8") as fh:
            fh.write(text)
        written.append(posixpath.join(result.out.rstrip("/"), name))
    return written
