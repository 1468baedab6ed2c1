"""The local engine: a pool of worker processes (forkserver or spawn) on this machine, supervised per job.

Each worker compiles the rules once, in its initializer, then runs chunks of jobs sent over its own pipe and reports
when each job starts and ends. `concurrent.futures.ProcessPoolExecutor` cannot stop one task: a job stuck past its
time limit would hold a worker for ever, and killing it breaks the whole pool. Here the supervisor knows which job
each worker runs since when; a job that overstays its limit (the worker's own alarm did not stop it, e.g. native code)
gets its worker killed and replaced, becomes an error row, and the rest of its chunk goes back to the queue.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from typing import Any

from ._worker import TRANSIENT, Chunk, ChunkResult, ExpertOptions, Task, classify, initialize, run_chunk

# Imported once by the forkserver, so that each worker forks with them (none starts threads or compiles rules:
# pyarrow, whose thread pools are not fork-safe, is imported by each worker itself).
PRELOAD = ["expert.fleet._worker", "expert.fleet._table", "fsspec"]


def grace(timeout: float) -> float:
    """How long past its limit a job may run before its worker is killed (the worker's alarm goes first)."""
    return max(2.0, 0.25 * timeout)


def default_start_method() -> str:
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


def worker_main(conn: Connection, options: ExpertOptions) -> None:
    """A worker process: the initializer (compile the rules once), then chunks until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's to handle
    try:
        state = initialize(options)
    except BaseException as exc:
        conn.send(("fatal", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", state.worker))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] == "stop":
            return
        chunk: Chunk = message[1]
        try:
            result = run_chunk(state, chunk, on_start=lambda i: conn.send(("start", i)),
                               on_done=lambda i, row: conn.send(("job", i, row)))
        except Exception as exc:
            conn.send(("chunk-error", classify(exc)))
            continue
        conn.send(("chunk", result))


@dataclass
class Callbacks:
    """How an engine reports to the run: a job finished (its row without the report), a chunk was written (its
    result), or a job failed outside any worker's own handling (the run makes its error row)."""

    job: Callable[[dict[str, Any]], None]
    chunk: Callable[[ChunkResult], None]
    failed: Callable[[Task, str, str], None]


@contextlib.contextmanager
def _no_phantom_main() -> Iterator[None]:
    """A main program read from stdin has `__file__ == "<stdin>"`, which a spawned worker would try to run again and
    die on; hide such a name while a worker starts (the workers never need the main module)."""
    import sys

    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None or os.path.isfile(path):
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


class _Slot:
    def __init__(self, ctx: Any, options: ExpertOptions) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=worker_main, args=(child, options), name="dam-fleet-worker", daemon=True)
        with _no_phantom_main():
            self.process.start()
        child.close()
        self.ready = False
        self.worker = ""
        self.chunk: Chunk | None = None
        self.current: tuple[int, float] | None = None  # (job index in the chunk, when it started)
        self.done = 0  # jobs of the chunk finished (their rows are not on disk until the chunk is)
        self.eof = False

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()
        self.process.join(5)
        self.conn.close()


class LocalEngine:
    """Run chunks on `workers` local processes."""

    name = "local"

    def __init__(self, workers: int, options: ExpertOptions, start_method: str | None = None) -> None:
        self.workers = workers
        self.options = options
        self.start_method = start_method or default_start_method()
        self.peak_rss: dict[str, int] = {}

    def _context(self) -> Any:
        ctx = mp.get_context(self.start_method)
        if self.start_method == "forkserver":
            ctx.set_forkserver_preload(PRELOAD)
        return ctx

    def run(self, chunks: list[Chunk], callbacks: Callbacks) -> None:
        if not chunks:
            return
        ctx = self._context()
        queue: deque[Chunk] = deque(chunks)
        next_id = max(c.id for c in chunks) + 1
        slots = [_Slot(ctx, self.options) for _ in range(min(self.workers, len(chunks)))]
        failures = 0
        try:
            while queue or any(s.chunk is not None for s in slots):
                for slot in slots:
                    if slot.ready and slot.chunk is None and queue:
                        slot.chunk, slot.current, slot.done = queue.popleft(), None, 0
                        slot.conn.send(("chunk", slot.chunk))
                ready = wait([s.conn for s in slots] + [s.process.sentinel for s in slots], self._wait(slots))
                dead: list[tuple[_Slot, str, str]] = []
                for slot in slots:
                    if slot.conn in ready:
                        fatal = self._drain(slot, callbacks)
                        if fatal:
                            failures += 1
                            if failures >= 3:
                                raise _cannot_start(fatal)
                    if (slot.eof or slot.process.sentinel in ready) and not slot.process.is_alive():
                        code = slot.process.exitcode
                        dead.append((slot, "crash", f"the worker process died ({_exit_text(code)})"))
                    elif slot.current is not None and slot.chunk is not None and slot.chunk.timeout:
                        limit = slot.chunk.timeout
                        if time.monotonic() - slot.current[1] > limit + grace(limit):
                            dead.append((slot, "timeout", f"timed out after {limit:g} s (--timeout); the job did not "
                                                          "stop, so its worker process was killed"))
                for slot, kind, message in dead:
                    if not slot.ready:  # died before its initializer finished: do not respawn for ever
                        failures += 1
                        if failures >= 3:
                            raise _cannot_start(message)
                    slot.kill()
                    requeue = self._salvage(slot, kind, message, callbacks)
                    for tasks in requeue:
                        assert slot.chunk is not None
                        queue.append(replace(slot.chunk, id=next_id, tasks=tasks))
                        next_id += 1
                    slots.remove(slot)
                    if queue or any(s.chunk is not None for s in slots):
                        slots.append(_Slot(ctx, self.options))
                if not slots and queue:
                    slots.append(_Slot(ctx, self.options))
        except BaseException:  # interrupted (or a bug): do not wait for the workers' chunks
            for slot in slots:
                slot.kill()
            raise
        self._stop(slots)

    @staticmethod
    def _wait(slots: list[_Slot]) -> float | None:
        deadlines = [s.current[1] + s.chunk.timeout + grace(s.chunk.timeout) for s in slots
                     if s.current is not None and s.chunk is not None and s.chunk.timeout]
        return max(0.0, min(deadlines) - time.monotonic()) + 0.01 if deadlines else None

    def _drain(self, slot: _Slot, callbacks: Callbacks) -> str | None:
        while slot.conn.poll():
            try:
                message = slot.conn.recv()
            except (EOFError, OSError):
                slot.eof = True
                return None
            kind = message[0]
            if kind == "ready":
                slot.ready, slot.worker = True, message[1]
            elif kind == "fatal":
                slot.chunk = None
                return str(message[1])
            elif kind == "start":
                slot.current = (message[1], time.monotonic())
            elif kind == "job":
                slot.current, slot.done = None, message[1] + 1
                callbacks.job(message[2])
            elif kind == "chunk":
                result: ChunkResult = message[1]
                self.peak_rss[result.worker] = max(self.peak_rss.get(result.worker, 0), result.peak_rss)
                callbacks.chunk(result)
                slot.chunk, slot.current = None, None
            elif kind == "chunk-error":
                error_kind, text = message[1]
                assert slot.chunk is not None
                for task in slot.chunk.tasks:
                    callbacks.failed(task, error_kind, f"writing the chunk's rows failed: {text}")
                slot.chunk, slot.current = None, None
        return None

    @staticmethod
    def _salvage(slot: _Slot, kind: str, message: str, callbacks: Callbacks) -> list[list[Task]]:
        """After a worker died: the job it ran fails (or is retried), the rest of its chunk is run again."""
        chunk = slot.chunk
        if chunk is None:
            return []
        index = slot.current[0] if slot.current is not None else None
        again = [t for i, t in enumerate(chunk.tasks) if i != index]
        if index is None:  # died between jobs (writing the chunk?): run it again, but not for ever
            chunk.crashes += 1
            if chunk.crashes > 2:
                for task in again:
                    callbacks.failed(task, kind, f"{message} (three times on this job's chunk)")
                return []
        requeue = [again] if again else []
        if index is not None:
            task = chunk.tasks[index]
            task.attempts += 1
            if kind in TRANSIENT and task.attempts <= chunk.retries:
                requeue.append([task])
            else:
                callbacks.failed(task, kind, message)
        return requeue

    @staticmethod
    def _stop(slots: list[_Slot]) -> None:
        for slot in slots:
            with contextlib.suppress(OSError, ValueError):
                slot.conn.send(("stop",))
        end = time.monotonic() + 5
        for slot in slots:
            slot.process.join(max(0.0, end - time.monotonic()))
            if slot.process.is_alive():
                slot.kill()
            else:
                slot.conn.close()


def _cannot_start(reason: str) -> Exception:
    from ..errors import Problem
    from ._inputs import FleetInputError

    return FleetInputError([Problem("worker processes", f"cannot start: {reason}",
                                    "see the worker's error above; a main program read from stdin cannot be "
                                    "re-imported by spawned workers: run it from a file")],
                           title="cannot start the fleet workers")


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = "; out of memory?" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exit code {code}"


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
