"""What runs in a fleet worker process: the rules compiled once per process, one job -> one row, a chunk -> one file.

The durable-rules engine is not fork-safe, so workers start by spawn or forkserver and build their `Expert` in an
initializer (`initialize`), from `ExpertOptions`; an Expert never crosses a process boundary.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ExpertError
from ._inputs import Job, is_local, is_observation_file, url_to_fs
from ._table import KEY_FACTS

TRANSIENT = frozenset({"timeout", "io", "crash"})  # error kinds worth another attempt (--retries, --resume)


class JobTimeout(BaseException):
    """Raised inside a job that ran past its time limit (a BaseException, so that no `except Exception` in a parser
    swallows it)."""


@dataclass(frozen=True)
class ExpertOptions:
    """How each worker builds its Expert (picklable; the Expert itself is not)."""

    extra_rules_dirs: tuple[str, ...] = ()
    engine: str = "auto"

    def build(self) -> Any:
        import expert

        if not self.extra_rules_dirs and self.engine == "auto":
            return expert.default_expert()
        return expert.Expert(extra_rules_dirs=list(self.extra_rules_dirs), engine=self.engine)  # type: ignore[arg-type]

    def digest(self) -> str:
        """A digest of everything the rules and knowledge depend on: files of rules/, knowledge_base/, extra dirs."""
        from .._resources import data_dir

        h = hashlib.sha256(f"engine={self.engine}".encode())
        for root in [data_dir("rules"), data_dir("knowledge_base"), *map(Path, self.extra_rules_dirs)]:
            for path in sorted(p for p in root.rglob("*") if p.is_file()):
                h.update(str(path.relative_to(root)).encode())
                h.update(path.read_bytes())
        return h.hexdigest()[:16]


@dataclass
class WorkerState:
    """Per-process state: the compiled Expert and who this worker is."""

    options: ExpertOptions
    expert: Any
    worker: str

    @classmethod
    def create(cls, options: ExpertOptions) -> WorkerState:
        return cls(options, options.build(), f"{socket.gethostname()}:{os.getpid()}")


_STATE: WorkerState | None = None


def initialize(options: ExpertOptions) -> WorkerState:
    """The worker initializer: compile the rules once for this process (again only if the options change)."""
    global _STATE
    if _STATE is None or _STATE.options != options:
        _STATE = WorkerState.create(options)
    return _STATE


def peak_rss_bytes() -> int:
    """This process's peak resident set size: VmHWM where /proc has it (ru_maxrss on Linux also counts the memory
    of the process this one was forked from before its exec), else ru_maxrss."""
    import resource
    import sys

    with contextlib.suppress(OSError), open("/proc/self/status", encoding="ascii", errors="replace") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


# ---- time limits --------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise JobTimeout in the body after `seconds`: SIGALRM on a process's main thread (it also interrupts blocking
    system calls), an asynchronous exception on other threads (between bytecodes; a blocked call is not interrupted,
    which is why the local pool also kills a worker that overstays, and the Dask task abandons the job's thread)."""
    if not seconds or seconds <= 0:
        yield
        return
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        def alarm(signum: int, frame: Any) -> None:
            raise JobTimeout

        previous = signal.signal(signal.SIGALRM, alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        return
    tid = threading.get_ident()
    lock = threading.Lock()
    state = {"active": True, "fired": False}

    def fire() -> None:
        with lock:
            if state["active"]:
                state["fired"] = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), ctypes.py_object(JobTimeout))

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with lock:
            state["active"] = False
            timer.cancel()
            if state["fired"]:  # clear it if it is still pending (the body finished at the limit)
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), None)


# ---- one job ------------------------------------------------------------------------------------------------------


class _NamedStream:
    """A binary stream read through fsspec, named by its URL (so errors and sources name the URL)."""

    def __init__(self, fh: Any, name: str) -> None:
        self._fh = fh
        self.name = name

    def read(self, n: int = -1) -> bytes:
        return bytes(self._fh.read(n))

    def readinto(self, buffer: Any) -> int:
        data = self._fh.read(len(buffer))
        memoryview(buffer)[: len(data)] = data
        return len(data)

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._fh.close()


def _ingest(state: WorkerState, urls: list[str],
            storage_options: Mapping[str, Any]) -> tuple[dict[str, Any], list[Any], Any]:
    """The observations the trace and telemetry files of one job give, as `dam diagnose --from` takes them.

    This is the one place the fleet calls ingestion: a job's files go together, so a multi-rank job gets whatever
    analysis `expert.ingest_result` does on several files of one job.
    """
    from ..ingest import ingest_result

    with contextlib.ExitStack() as stack:
        sources: list[Any] = []
        for url in urls:
            fs, path = url_to_fs(url, storage_options)
            if is_local(fs):
                sources.append(url if "://" not in url else path)  # a plain path as given, like the CLI
            else:
                fh = stack.enter_context(fs.open(path, "rb"))
                sources.append(_NamedStream(fh, url))
        # workers=1: rank files are read in this worker; the fleet already keeps every CPU busy with jobs, and its
        # workers (daemonic, like Dask's) cannot start processes of their own
        result = ingest_result(sources, kb=state.expert.kb, workers=1)
    observations = result.to_observation_file()["observations"]
    facts = {k: v for k, v in observations.items() if v["value"] != "unknown"}
    # the rank table of a multi-GPU job and the trace's time breakdown travel with the facts, as in dam diagnose --from
    return facts, list(result.observations.ranks), result.time_breakdown


def _observation_file(url: str, storage_options: Mapping[str, Any]) -> dict[str, Any]:
    from ..errors import ObservationError, Problem
    from ..observations.file import read_observation_file

    fs, path = url_to_fs(url, storage_options)
    if is_local(fs):
        return dict(read_observation_file(Path(path)).observations)
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / Path(path).name
        fs.get_file(path, str(local))
        try:
            return dict(read_observation_file(local).observations)
        except ObservationError as exc:
            problems = [Problem(p.where.replace(str(local), url), p.message, p.hint) for p in exc.problems]
            raise ObservationError(problems, title=exc.title) from exc


def diagnose_job(state: WorkerState, job: Job, storage_options: Mapping[str, Any]) -> Any:
    """Diagnose one job as `dam diagnose FACTS.yaml --from TRACES... --set FACT=VALUE...` would: what the traces
    and telemetry give, then the observation files on top, then the typed facts."""
    traces = [u for u in job.files if not is_observation_file(u)]
    raw, ranks, breakdown = _ingest(state, traces, storage_options) if traces else ({}, [], None)
    for url in job.files:
        if is_observation_file(url):
            raw.update(_observation_file(url, storage_options))
    raw.update(job.facts)
    if not raw:
        from ..errors import ObservationError, Problem

        raise ObservationError([Problem(job.key, "the job's files give no fact")], title="nothing to diagnose")
    if ranks:
        return state.expert.diagnose(state.expert.observations(raw).model_copy(update={"ranks": ranks}),
                                     time_breakdown=breakdown)
    return state.expert.diagnose(raw, time_breakdown=breakdown)


DiagnoseFn = Callable[[WorkerState, Job, Mapping[str, Any]], Any]


def classify(exc: BaseException) -> tuple[str, str]:
    """(error kind, message) for an exception a job raised."""
    if isinstance(exc, JobTimeout):
        return "timeout", "timed out"
    if isinstance(exc, ExpertError):
        return "input", str(exc)
    if isinstance(exc, (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)):
        return "input", f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (OSError, EOFError, TimeoutError, ConnectionError)):
        return "io", f"{type(exc).__name__}: {exc}"
    if isinstance(exc, MemoryError):
        return "crash", "out of memory"
    return "internal", f"{type(exc).__name__}: {exc}"


# ---- rows ---------------------------------------------------------------------------------------------------------


@dataclass
class Task:
    """A job as dispatched: its fingerprint, the attempts already spent on it, and the labels of its row."""

    job: Job
    fingerprint: str
    attempts: int = 0


@dataclass
class Chunk:
    """Jobs one worker runs in a row and writes to one Parquet file."""

    id: int
    tasks: list[Task]
    run_id: str
    out: str | None = None  # the dataset folder (URL); None keeps full rows in memory
    timeout: float | None = None
    retries: int = 0
    storage_options: dict[str, Any] = field(default_factory=dict)
    diagnose: DiagnoseFn | None = None  # tests put a job that hangs or crashes here; None is `diagnose_job`
    crashes: int = 0  # times a worker died on this chunk between jobs (the local pool gives up after a few)

    @property
    def part(self) -> str:
        return f"part-{self.run_id}-{self.id:05d}.parquet"


@dataclass
class ChunkResult:
    chunk_id: int
    rows: list[dict[str, Any]]  # without report_json when written to `part`
    part: str | None
    worker: str
    peak_rss: int
    abandoned: int = 0  # jobs whose thread could not be stopped (Dask)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def base_row(task: Task, run_id: str, worker: str) -> dict[str, Any]:
    import expert

    job = task.job
    row: dict[str, Any] = {
        "job_key": job.key, "files": list(job.files), "labels": dict(job.labels), "bottleneck": None,
        "verdict_title": None, "strength": None, "axes": [], "axis_data": None, "axis_algorithm": None,
        "axis_machine": None, "recommended": [], "top_recommendation": None, "max_speedup": None, "wasted": [],
        "findings": [], "missing": [],
    }
    row.update(dict.fromkeys(KEY_FACTS))
    row.update({"error": None, "error_kind": None, "attempts": task.attempts, "duration_s": None, "worker": worker,
                "run_id": run_id, "finished_at": None, "fingerprint": task.fingerprint,
                "dam_version": expert.__version__, "engine": None, "report_json": None})
    return row


def report_row(row: dict[str, Any], report: Any) -> None:
    """Fill a row's verdict columns from a Report."""
    facts = report.facts()
    lead = next((c for c in report.candidates if c.regime == report.bottleneck), None)
    gains = [(r.expected_gain.max_speedup, r.id) for r in report.recommended if r.expected_gain is not None]
    best = max(gains, key=lambda g: g[0]) if gains else None
    shares = {a.axis: a.share for a in report.axes}
    row.update({
        "bottleneck": report.bottleneck, "verdict_title": report.verdict_title,
        "strength": lead.strength if lead else None, "axes": [a.axis for a in report.axes],
        "axis_data": shares.get("data"), "axis_algorithm": shares.get("algorithm"),
        "axis_machine": shares.get("machine"), "recommended": [r.id for r in report.recommended],
        "top_recommendation": best[1] if best else None, "max_speedup": best[0] if best else None,
        "wasted": [w.id for w in report.wasted], "findings": [f.id for f in report.findings],
        "missing": [m.fact for m in report.missing], "engine": report.engine,
        "report_json": report.to_json(indent=None),
    })
    for name, kind in KEY_FACTS.items():
        value = facts.get(name)
        row[name] = (None if value is None else str(value)) if kind == "string" else _number(value)


def error_row(task: Task, run_id: str, worker: str, kind: str, message: str) -> dict[str, Any]:
    """The row of a job that produced no report."""
    from datetime import datetime, timezone

    row = base_row(task, run_id, worker)
    row.update({"error": message, "error_kind": kind, "finished_at": datetime.now(timezone.utc)})
    return row


def run_task(state: WorkerState, task: Task, chunk: Chunk) -> dict[str, Any]:
    """One job, with its time limit and retries for transient failures, as one row."""
    from datetime import datetime, timezone

    fn = chunk.diagnose or diagnose_job
    started = time.perf_counter()
    kind = message = None
    report = None
    while True:
        task.attempts += 1
        try:
            with deadline(chunk.timeout):
                report = fn(state, task.job, chunk.storage_options)
            kind = None
            break
        except JobTimeout:
            kind, message = "timeout", f"timed out after {chunk.timeout:g} s (--timeout)"
        except Exception as exc:
            kind, message = classify(exc)
        if kind not in TRANSIENT or task.attempts > chunk.retries:
            break
    row = base_row(task, chunk.run_id, state.worker)
    if report is not None and kind is None:
        report_row(row, report)
    else:
        row.update({"error": message, "error_kind": kind})
    row["duration_s"] = time.perf_counter() - started
    row["finished_at"] = datetime.now(timezone.utc)
    return row


def run_chunk(state: WorkerState, chunk: Chunk, *, on_start: Callable[[int], None] | None = None,
              on_done: Callable[[int, dict[str, Any]], None] | None = None,
              runner: Callable[[WorkerState, Task, Chunk], tuple[dict[str, Any], bool]] | None = None) -> ChunkResult:
    """Run a chunk's jobs one after the other, write their rows to one Parquet file (when `chunk.out` is set)."""
    rows: list[dict[str, Any]] = []
    abandoned = 0
    for i, task in enumerate(chunk.tasks):
        if on_start:
            on_start(i)
        if runner is None:
            row = run_task(state, task, chunk)
        else:
            row, lost = runner(state, task, chunk)
            abandoned += lost
        rows.append(row)
        if on_done:
            on_done(i, summary(row))
    part = None
    if chunk.out is not None:
        from ._table import write_part

        part = write_part(rows, chunk.out, chunk.part, chunk.storage_options)
        rows = [summary(r) for r in rows]
    return ChunkResult(chunk.id, rows, part, state.worker, peak_rss_bytes(), abandoned)


def summary(row: dict[str, Any]) -> dict[str, Any]:
    """A row without its report JSON (what travels back to the driver when the row is already on disk)."""
    return {k: v for k, v in row.items() if k != "report_json"}
