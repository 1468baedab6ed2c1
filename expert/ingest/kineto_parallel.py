"""One large Kineto trace read in worker processes, by byte range: the same columns as the one-process pass.

A trace in libkineto's own layout (an uncompressed file on disk) of at least `PARALLEL_MIN_BYTES` is cut at event
boundaries (`_kineto_stream.cut_points`: the first boundary after each nominal offset, so no event straddles two
ranges) into ranges of about `RANGE_BYTES`. Worker processes (forkserver, or spawn: never a fork of this process,
which may hold an Expert and threads) each decode one range at a time and collect its events into a small partial
`_Collected` (columns with range-local name, thread and shape ids, counts, first/last). The parent merges the
partials in file order, re-interning the ids in the order the one-process pass meets them, so the result is that
pass's exactly: the same columns in the same order, the same ids and counts, hence the same report
(tests/test_ingest_parallel.py compares them). Memory per worker is bounded by the range size, not the trace.

- gzip input is read in one process: a compressed stream cannot be entered in the middle, and decompressing it
  first would cost the disk space or memory the streaming reader avoids;
- a range not in libkineto's layout (NotFast in a worker) sends the whole file back to the one-process reader, which
  falls back to ijson as usual, so errors are located the same way;
- workers that cannot start (a script that calls ingest outside `if __name__ == "__main__":`, which they would
  re-run; no memory) leave the reading to this process: the same result, later;
- a worker that dies while reading (killed, out of memory) or fails is a clear error naming the byte range, never a
  hang (tests/test_ingest_parallel.py);
- how many workers: `workers=` (`dam ingest --workers N`), else the DAM_INGEST_WORKERS environment variable, else the
  CPUs this process may use (bounded by the memory available); 1 reads in this process.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import signal
import threading
import time
from array import array
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import IO, Any, cast

from ..errors import ObservationError
from ._kineto_stream import BOUNDARY, NotFast, cut_points, gc_paused
from ._source import Progress, Source
from ._workers import ENV, context, cpus, mem_available, peak_rss, workers_from_env
from .kineto_collect import _collect, _Collected
from .kineto_read import _fast_batches
from .timeline import Timeline

PARALLEL_MIN_BYTES = 100_000_000
"""From this many bytes of uncompressed JSON on, a trace is read in worker processes (measured on 2 cores: starting
the fork server and the workers costs about 0.3 s, a fifth of a 100 MB trace's ingest)."""
RANGE_BYTES = 32 << 20
"""About this many bytes per range: a worker's partial columns stay a few megabytes, and ranges finishing at
different times keep the workers busy to the end."""
WORKER_BYTES = 150_000_000
"""Memory planned per worker (interpreter and readers about 40 MB, one range's decode buffers and columns)."""
PARENT_READS = True
"""Whether this process reads the first ranges itself while the workers start (tests turn it off to have every
range read by a worker)."""
_TICK = 0.1
_log = logging.getLogger(__name__)

def worker_count(src: Source, requested: int | None, min_bytes: int | None = None) -> int:
    """Workers for reading `src` by byte range: 1 (this process) for a stream, a gzip file or one under `min_bytes`
    (default PARALLEL_MIN_BYTES); else the request, DAM_INGEST_WORKERS, or the CPUs (bounded by memory)."""
    if requested is None:
        requested = workers_from_env()
    if requested == 1 or src.path is None or src.size is None or multiprocessing.current_process().daemon:
        return 1  # (a daemonic process may not start workers)
    if src.size < (PARALLEL_MIN_BYTES if min_bytes is None else min_bytes):
        return 1
    try:
        with open(src.path, "rb") as fh:
            if fh.read(2) == b"\x1f\x8b":
                return 1
    except OSError:
        return 1  # the one-process reader reports it
    if requested is not None:
        return requested
    n = cpus()
    available = mem_available()
    if available:
        n = min(n, max(1, int(available * 0.6 // WORKER_BYTES)))
    return n


@dataclasses.dataclass
class ParallelRead:
    """A trace read by byte range: the merged events, the metadata, the bytes read, and what the workers used."""

    collected: _Collected
    meta: dict[str, Any]
    bytes: int
    ranges: int
    workers: int
    peak_rss: dict[int, int]  # worker pid -> its peak resident size in bytes
    seconds: float
    worker_cpu_s: float  # CPU time the workers spent on their ranges, all together
    parent_cpu_s: float  # CPU time of this process (its own ranges, merging, unpickling), all threads


def read(src: Source, workers: int, *, progress: Progress | None = None, range_bytes: int | None = None,
         parent_reads: bool | None = None) -> ParallelRead | None:
    """Read `src` (a file in libkineto's layout) in `workers` processes, by byte range. None when the file cannot be
    cut at event boundaries or a range is not in libkineto's layout: then read it in one process.

    The workers start in a background thread (a fork server's first start imports the readers, about 0.3 s); until
    they are up this process reads the first ranges itself (parent_reads=False leaves every range to the workers).
    range_bytes: about this many bytes per range (default RANGE_BYTES)."""
    assert src.path is not None and src.size is not None
    range_bytes = RANGE_BYTES if range_bytes is None else range_bytes
    parent_reads = PARENT_READS if parent_reads is None else parent_reads
    start = time.perf_counter()
    size = src.size
    try:
        with open(src.path, "rb") as fh:
            cuts = cut_points(fh, size, max(workers, -(-size // max(range_bytes, 1))))
    except OSError:
        return None
    if not cuts:
        return None
    bounds = [0, *cuts, size]
    ranges = [(bounds[k] + (len(BOUNDARY) if k else 0), bounds[k + 1]) for k in range(len(bounds) - 1)]
    path, last = os.path.abspath(src.path), len(ranges) - 1
    ctx = context()
    done = ctx.Array("q", len(ranges), lock=False)
    pool = _Pool(ctx, min(workers, len(ranges)), done)
    merged = _Collected()
    meta: dict[str, Any] = {}
    read_bytes = len(BOUNDARY) * len(cuts)
    peaks: dict[int, int] = {}
    worker_cpu = 0.0
    parent_cpu = time.process_time()

    def add(part: _Collected, part_meta: dict[str, Any], n: int) -> None:
        nonlocal read_bytes
        for key, value in part_meta.items():
            meta.setdefault(key, value)  # the head's keys first, as the one-process reader keeps them
        merge(merged, part)
        read_bytes += n

    try:
        k = 0
        executor: ProcessPoolExecutor | None = None
        while k < len(ranges):  # ranges are read here while the workers start (or all of them if they cannot)
            if not parent_reads or pool.ready.is_set():
                executor = pool.get()
                if executor is not None:
                    break
            part, part_meta, n, _ = read_range(path, *ranges[k], k == 0, k == last, k)
            if part is None:
                pool.stop()
                return None
            add(part, part_meta, n)
            done[k] = ranges[k][1] - ranges[k][0]
            if progress is not None:
                progress(min(sum(done), size), size)
            k += 1
        if executor is not None:
            futures = deque(executor.submit(_TASK, path, *ranges[j], j == 0, j == last, j)
                            for j in range(k, len(ranges)))
            for j in range(k, len(ranges)):  # in file order; a merged partial is let go at once
                part, part_meta, n, (pid, peak, cpu) = _wait(futures.popleft(), src, ranges[j], done, size, progress)
                if part is None:
                    pool.stop()
                    return None
                peaks[pid] = max(peaks.get(pid, 0), peak)
                worker_cpu += cpu
                add(part, part_meta, n)
    except BaseException:
        pool.stop()
        raise
    pool.stop()
    if progress is not None:
        progress(size, size)
    seconds, parent_cpu = time.perf_counter() - start, time.process_time() - parent_cpu
    _log.debug("%s: %d byte ranges read in %.3f s, %d of them by %d workers; peak RSS per worker %s MB", src.label,
               len(ranges), seconds, len(ranges) - k, len(peaks), ", ".join(f"{p / 1e6:.0f}" for p in peaks.values()),
               extra={"parallel": {"ranges": len(ranges), "by_workers": len(ranges) - k, "workers": len(peaks),
                                   "peak_rss_mb": [round(p / 2**20, 1) for p in peaks.values()], "seconds": seconds,
                                   "worker_cpu_s": worker_cpu, "parent_cpu_s": parent_cpu}})
    return ParallelRead(merged, meta, read_bytes, len(ranges), len(peaks), peaks, seconds, worker_cpu, parent_cpu)


class _Pool:
    """Worker processes started in a background thread (each one up and initialised before `ready` is set), so that
    the caller can read the first ranges itself meanwhile."""

    def __init__(self, ctx: Any, workers: int, done: Any) -> None:
        self.ready = threading.Event()
        self._executor: ProcessPoolExecutor | None = None
        self._error: BaseException | None = None
        self._warned = False
        self._thread = threading.Thread(target=self._start, args=(ctx, workers, done), name="dam-ingest-workers",
                                        daemon=True)
        self._thread.start()

    def _start(self, ctx: Any, workers: int, done: Any) -> None:
        try:
            self._executor = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker,
                                                 initargs=(done,))
            for started in [self._executor.submit(os.getpid) for _ in range(workers)]:
                started.result()
        except BaseException as exc:  # reported by get(), if the workers are needed at all
            self._error = exc
        finally:
            self.ready.set()

    def get(self) -> ProcessPoolExecutor | None:
        """The started pool (waiting for it), or None when the workers could not start (a daemonic process, a
        script that calls ingest outside `if __name__ == "__main__":`, no memory): the caller reads in-process."""
        self.ready.wait()
        if self._error is not None or self._executor is None:
            if not self._warned:
                self._warned = True
                _log.info("worker processes could not start (%s); reading the trace in this process", self._error)
            return None
        return self._executor

    def stop(self) -> None:
        """Cancel what has not started and end the workers now (they hold nothing that needs a clean exit)."""
        self._thread.join()
        pool = self._executor
        if pool is None:
            return
        live = [p for p in (getattr(pool, "_processes", None) or {}).values() if p.is_alive()]
        pool.shutdown(wait=False, cancel_futures=True)
        for p in live:
            p.terminate()
        for p in live:
            p.join(timeout=5)


def _wait(future: Future[Any], src: Source, span: tuple[int, int], done: Any, size: int,
          progress: Progress | None) -> Any:
    """The result of one range's future, reporting progress while it runs; a failed worker is a clear error."""
    while True:
        try:
            return future.result(timeout=_TICK)
        except TimeoutError:
            if progress is not None:
                progress(min(sum(done), size), size)
        except (OverflowError, ObservationError):
            raise  # what the one-process reader raises too (kineto.parse words it)
        except BrokenProcessPool as exc:
            raise _failed(src, span, "stopped unexpectedly (killed, or out of memory?)") from exc
        except Exception as exc:  # a bug or a resource failure in the worker
            raise _failed(src, span, f"failed: {type(exc).__name__}: {exc}") from exc


def _failed(src: Source, span: tuple[int, int], what: str) -> ObservationError:
    return src.problem(f"the worker process reading bytes {span[0]:,}-{span[1]:,} of the trace {what}",
                       hint=f"read it in one process: --workers 1 (or {ENV}=1)")


# ---- the worker side -----------------------------------------------------------------------------------------------
_WORKER: dict[str, Any] = {}


def _init_worker(done: Any) -> None:
    """A worker's start: the shared progress slots; Ctrl-C is left to the parent, which ends the workers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _WORKER["done"] = done


class _Range:
    """Bytes [start, end) of an open file, read in blocks; the bytes read so far go into progress slot `slot`."""

    def __init__(self, fh: IO[bytes], start: int, end: int, slot: int) -> None:
        fh.seek(start)
        self._fh, self._left, self._slot = fh, end - start, slot
        self._done = _WORKER.get("done")

    def read(self, n: int = -1) -> bytes:
        want = self._left if n < 0 else min(n, self._left)
        data = self._fh.read(want) if want > 0 else b""
        self._left -= len(data)
        if self._done is not None and data:
            self._done[self._slot] += len(data)
        return data


def read_range(path: str, start: int, end: int, head: bool, tail: bool, slot: int) -> tuple[
        _Collected | None, dict[str, Any], int, tuple[int, int, float]]:
    """Decode and collect the events of bytes [start, end) of a trace (head: the range starts the document; tail: it
    ends it). Returns (partial or None when not in libkineto's layout, metadata, bytes read, (pid, peak RSS in
    bytes, CPU seconds spent))."""
    cpu = time.process_time()
    c = _Collected()
    meta: dict[str, Any] = {}
    with open(path, "rb") as fh, gc_paused():
        try:
            _collect(_fast_batches(cast(IO[bytes], _Range(fh, start, end, slot)), meta, head=head, tail=tail), c)
        except NotFast:
            return None, {}, 0, (os.getpid(), peak_rss(), time.process_time() - cpu)
    n = int(meta.pop("_bytes", 0))
    return c, meta, n, (os.getpid(), peak_rss(), time.process_time() - cpu)


_TASK: Callable[..., Any] = read_range
"""What each worker runs (tests replace it with one that fails)."""


# ---- merging -------------------------------------------------------------------------------------------------------
_IDS = {"_name": "names", "_thread": "threads", "_shape": "shapes"}
"""Timeline columns holding interned ids, by the suffix of their name, and the table the ids index."""
_TABLES = {"names", "shapes", "_name_ids", "_thread_ids", "_shape_ids", "launch", "launcher"}
"""Timeline fields that are the intern tables themselves, or filled after reading (`Timeline.finish`)."""


def merge(into: _Collected, part: _Collected) -> None:
    """Append a later range's partial to `into`, exactly as if its events had been collected after `into`'s."""
    for f in dataclasses.fields(into):
        mine, theirs = getattr(into, f.name), getattr(part, f.name)
        if f.name == "first":
            if theirs < mine:
                into.first = theirs
        elif f.name == "last":
            if theirs > mine:
                into.last = theirs
        elif isinstance(mine, Timeline):
            merge_timeline(mine, theirs)
        elif isinstance(mine, Counter):
            mine.update(theirs)
        elif isinstance(mine, set):
            mine |= theirs
        elif isinstance(mine, array):
            mine.extend(theirs)
        elif type(mine) is int:
            setattr(into, f.name, mine + theirs)
        else:
            raise TypeError(f"kineto_parallel.merge does not know how to merge _Collected.{f.name}")


def merge_timeline(into: Timeline, part: Timeline) -> None:
    """Append a later range's timeline: its names, threads and shapes interned into `into` in the order `part` met
    them (which is the order the one-process pass meets them after `into`'s), its id columns renumbered."""
    ids = {
        "names": [into.name_id(name) for name in part.names],
        "threads": [into.thread(*cast(tuple[Any, ...], key)) for key in part._thread_ids],  # keys are tuples
        "shapes": [into.shape_id(key, lambda s=shapes: s)
                   for key, shapes in zip(part._shape_ids, part.shapes, strict=True)],
    }
    for f in dataclasses.fields(into):
        if f.name in _TABLES:
            continue
        mine, theirs = getattr(into, f.name), getattr(part, f.name)
        table = next((t for suffix, t in _IDS.items() if f.name.endswith(suffix)), None)
        if table is not None:
            _extend_ids(mine, theirs, ids[table])
        elif isinstance(mine, (array, list)):
            mine.extend(theirs)
        else:
            raise TypeError(f"kineto_parallel.merge_timeline does not know how to merge Timeline.{f.name}")


def _extend_ids(column: array[int], ids: array[int], new: list[int]) -> None:
    """column += ids, each id renumbered through `new` (-1, "none", stays -1)."""
    if all(i == k for k, i in enumerate(new)):
        column.extend(ids)
        return
    lookup = [*new, -1]  # lookup[-1] is -1
    column.extend(array(column.typecode, map(lookup.__getitem__, ids)))
