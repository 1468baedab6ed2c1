"""A multi-GPU job's rank files: inputs expanded to files, and every rank trace read, in worker processes when there
is enough to read (the comparison across ranks is `ranks.py`).

- **Inputs**: directories (their trace and telemetry files) and glob patterns expand to files.
- **Reading**: every rank file is read in a worker process (forkserver, or spawn where there is none: never a fork of
  a process holding an Expert); each worker streams one file at a time, so memory grows with the number of workers
  (bounded by the CPUs and the memory available), not with the number of ranks. Each rank's trace gives the usual
  per-file facts (`kineto.parse`) and its per-step figures (`rank_trace.read`).
"""

from __future__ import annotations

import functools
import glob
import os
import queue as queue_mod
import re
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from ..errors import ObservationError, Problem
from ..kb.knowledge import KnowledgeBase
from . import distributed, rank_trace
from ._result import FileResult
from ._source import CANNOT_READ, JobProgress, Progress, Source, SourceLike
from ._workers import context, holding_ctrl_c, stop_pool
from ._workers import mem_available as _mem_available
from .rank_trace import RankTrace

INPUT_SUFFIXES = (".json", ".json.gz", ".gz", ".sqlite", ".csv", ".txt", ".log", ".out", ".prom")
"""Files a directory contributes: profiler traces (Kineto JSON, Nsight Systems SQLite exports) and telemetry logs
(others are skipped, with a note)."""

PARALLEL_MIN_BYTES = 128 << 20
"""Below this much JSON in all, rank files are read in this process: starting workers (about a second for the
pool, measured on 2 busy cores) would cost more than reading them one after the other (about 0.4 s per 35 MB)."""

_GLOB = re.compile(r"[*?\[]")


# ---- inputs -------------------------------------------------------------------------------------------------------
def expand(items: Sequence[SourceLike]) -> tuple[list[SourceLike], list[str]]:
    """Directories and glob patterns replaced by the files they name (sorted); duplicates dropped. (items, notes)"""
    out: list[SourceLike] = []
    notes: list[str] = []
    seen: set[str] = set()

    def add(obj: SourceLike) -> None:
        if isinstance(obj, (str, os.PathLike)):
            key = os.path.realpath(obj)
            if key in seen:
                notes.append(f"{obj} was given twice; read once")
                return
            seen.add(key)
        out.append(obj)

    for obj in items:
        if isinstance(obj, (str, os.PathLike)):
            path = Path(obj)
            if path.is_dir():
                files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
                chosen = [p for p in files if p.name.lower().endswith(INPUT_SUFFIXES)]
                if not chosen:
                    inner = sorted(p.name for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
                    where = (f"; it has sub-folders ({', '.join(inner[:4])}{', ...' if len(inner) > 4 else ''}): "
                             "name the one that holds the job's files" if inner else "")
                    raise ObservationError([Problem(str(path), "the directory holds no trace or telemetry files",
                                                    "expected " + ", ".join(f"*{s}" for s in INPUT_SUFFIXES) + where)],
                                           title=CANNOT_READ)
                skipped = len(files) - len(chosen)
                if skipped:
                    notes.append(f"{path}: {skipped} file(s) that are not traces or telemetry logs skipped")
                for p in chosen:
                    add(str(p))
                continue
            if not path.exists() and _GLOB.search(str(obj)):
                matches = sorted(m for m in glob.glob(str(obj), recursive=True) if Path(m).is_file())
                if not matches:
                    raise ObservationError([Problem(str(obj), "no files match this pattern")],
                                           title=CANNOT_READ)
                for m in matches:
                    add(m)
                continue
        add(obj)
    return out, notes


def head_world_size(src: Source) -> int | None:
    """The world size a trace states in its first bytes (None when it does not)."""
    info = rank_trace.head_info(src).get("distributedInfo")
    size = info.get("world_size") if isinstance(info, dict) else None
    return size if type(size) is int else None


# ---- reading, in parallel --------------------------------------------------------------------------------------------
_WORKER: dict[str, Any] = {}


def _init_worker(kb: KnowledgeBase | None, progress_queue: Any) -> None:
    _WORKER["kb"] = kb
    _WORKER["queue"] = progress_queue


def _worker_kb() -> KnowledgeBase:
    kb = _WORKER.get("kb")
    if kb is None:
        from ._kb import default_kb as _default_kb

        kb = _default_kb()
    assert isinstance(kb, KnowledgeBase)
    return kb


def read_one(src: Source, kb: KnowledgeBase, options: dict[str, Any],
             progress: Callable[[int], None] | None = None, workers: int | None = None) -> tuple[FileResult, RankTrace]:
    """Both readings of one rank's trace: the per-file facts and the per-step figures. progress(bytes so far), each
    reading counting for half of the file. workers: for `kineto.parse`'s byte ranges (1 inside a worker process)."""
    from . import kineto

    if src.path is None:  # a stream can be read once: spool it to a temporary file (disk, not memory)
        import shutil
        import tempfile

        with tempfile.NamedTemporaryFile(prefix="dam-rank-", suffix=".json") as spool:
            with src.open() as fh:
                shutil.copyfileobj(fh, spool, 1 << 20)
            spool.flush()
            spooled = Source(spool.name)
            spooled.label, spooled.name = src.label, src.name
            return read_one(spooled, kb, options, progress, workers)
    size = src.size or 0
    first: Progress | None = (lambda done, total: progress(done // 2)) if progress else None
    second: Progress | None = (lambda done, total: progress((size + done) // 2)) if progress else None
    result = kineto.parse(src, kb, steps=options.get("steps"), window=options.get("window"),
                          gpus=options.get("gpus"), progress=first, workers=workers)
    again = Source(src.path)
    again.label, again.name = src.label, src.name
    trace = rank_trace.read(again, steps=options.get("steps"), window=options.get("window"),
                            gpus=options.get("gpus"), progress=second)
    return result, trace


def _task(path: str, index: int, options: dict[str, Any]) -> tuple[FileResult, RankTrace]:
    q = _WORKER.get("queue")
    last = [0]

    def report(done: int) -> None:
        if q is not None and done - last[0] >= (1 << 20):
            last[0] = done
            q.put((index, done))

    out = read_one(Source(path), _worker_kb(), options, report, workers=1)  # no pool inside a pool
    if q is not None:
        q.put((index, Path(path).stat().st_size))
    return out


def _json_size(path: Path) -> int:
    """Bytes of JSON a file holds: gzip's ISIZE trailer (mod 4 GiB) when compressed, else its size."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b":
                return size
            fh.seek(-4, os.SEEK_END)
            isize = int.from_bytes(fh.read(4), "little")
    except OSError:
        return size
    return isize if isize >= size else size * 10  # a wrapped ISIZE: the file holds more than 4 GiB


def worker_count(paths: Sequence[Path], requested: int | None) -> int:
    """Workers for reading `paths`: the request, or as many as CPUs and memory allow (1: read in this process).

    A worker's peak is about 150 MB plus a third of the largest file's JSON (the typed arrays the readers keep);
    at most 60 % of the available memory is planned for."""
    if not paths:
        return 1
    if requested is not None:
        return max(1, min(requested, len(paths)))
    sizes = [_json_size(p) for p in paths]
    if len(paths) < 2 or sum(sizes) < PARALLEL_MIN_BYTES:
        return 1
    n = min(len(paths), os.cpu_count() or 1)
    available = _mem_available()
    if available:
        per_worker = 150e6 + max(sizes) / 3
        n = min(n, max(1, int(available * 0.6 // per_worker)))
    return n


def read_all(sources: Sequence[Source], kb: KnowledgeBase, options: dict[str, Any], *, workers: int | None = None,
             progress: Progress | None = None,
             job_progress: JobProgress | None = None) -> list[tuple[FileResult, RankTrace]]:
    """Read every rank trace (in worker processes when there is enough to read); results in the order given."""
    labels = _provisional_jobs(sources)
    sizes = [s.size or 0 for s in sources]
    totals: dict[str, int] = Counter()
    for label, size in zip(labels, sizes, strict=True):
        totals[label] += size
    done = [0] * len(sources)
    grand = sum(sizes) or None

    def advance(index: int, value: int) -> None:
        done[index] = max(done[index], min(value, sizes[index] or value))
        if job_progress is not None:
            label = labels[index]
            job_progress(label, sum(d for d, lab in zip(done, labels, strict=True) if lab == label),
                         totals[label] or None)
        if progress is not None:
            progress(sum(done), grand)

    results: list[tuple[FileResult, RankTrace] | None] = [None] * len(sources)
    paths = [Path(s.path) for s in sources if s.path is not None]
    n = worker_count(paths, workers)
    pooled = [i for i, s in enumerate(sources) if s.path is not None] if n > 1 else []
    for i, src in enumerate(sources):
        if i not in pooled:
            results[i] = read_one(src, kb, options, functools.partial(advance, i), workers)
            advance(i, sizes[i])
    if pooled:
        ctx = context()
        progress_queue = ctx.Queue()
        pool: ProcessPoolExecutor | None = None
        futures: dict[Future[tuple[FileResult, RankTrace]], int] = {}
        try:
            with holding_ctrl_c():  # submit() starts the workers
                pool = ProcessPoolExecutor(max_workers=min(n, len(pooled)), mp_context=ctx,
                                           initializer=_init_worker, initargs=(kb, progress_queue))  # kb: ~1 ms
                futures = {pool.submit(_task, str(sources[i].path), i, options): i for i in pooled}
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
                _drain(progress_queue, advance)
                for future in finished:
                    results[futures[future]] = future.result()
        except BaseException:
            if pool is not None:  # Ctrl-C or a failure: stop the workers now, not after the files they read
                stop_pool(pool, futures)
            raise
        pool.shutdown()
        _drain(progress_queue, advance)
        progress_queue.close()
    return [r for r in results if r is not None]


def _drain(progress_queue: Any, advance: Callable[[int, int], None]) -> None:
    while True:
        try:
            index, value = progress_queue.get_nowait()
        except queue_mod.Empty:
            return
        advance(index, value)


def _provisional_jobs(sources: Sequence[Source]) -> list[str]:
    """A job label per file from its first bytes, for the progress bars (the grouping after reading decides)."""
    cat = distributed.catalog()
    labels: list[str] = []
    for src in sources:
        info = rank_trace.head_info(src).get("distributedInfo")
        if isinstance(info, dict) and type(info.get("world_size")) is int:
            labels.append(f"{info.get('backend') or 'job'} job of {info['world_size']} ranks")
        elif cat.rank_from_name(src.name) is not None:
            labels.append(f"ranks in {Path(src.label).parent}")
        else:
            labels.append(src.name)
    return labels
