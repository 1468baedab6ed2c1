"""Worker processes for reading traces: how they start, how many CPUs and how much memory there is for them, and
how much memory one used (shared by `rank_reading.py`, which reads rank files in workers, and `kineto_parallel.py`,
which reads the byte ranges of one large trace in workers)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Collection, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

from ..errors import ObservationError, Problem

ENV = "DAM_INGEST_WORKERS"  # worker processes for trace ingest (1: read in this process)
PRELOAD = ["expert._ignore_sigint", "expert.ingest.rank_reading", "expert.ingest.kineto",
           "expert.ingest.kineto_parallel"]
"""What the fork server imports once, before it forks any worker: first the module that makes it (and so every worker)
ignore Ctrl-C, which this process handles; then the readers and their msgspec types."""


def context() -> multiprocessing.context.BaseContext:
    """forkserver where the platform has it (workers fork from a clean server that has imported the readers once),
    else spawn; never fork, which would copy this process (an Expert, threads, open files) into every worker."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        _start_fork_server_ignoring_ctrl_c()
        return ctx
    return multiprocessing.get_context("spawn")


def _start_fork_server_ignoring_ctrl_c() -> None:
    """Start the fork server (once per process) with SIGINT ignored, a disposition it keeps through exec and hands on
    to every worker: a terminal's Ctrl-C goes to the whole process group, and a server or worker still starting
    Python would print a KeyboardInterrupt traceback. This process handles the Ctrl-C and stops its workers. (The
    start takes ~6 ms, during which a Ctrl-C here is ignored; off the main thread the server's first preloaded
    module, expert._ignore_sigint, does the same a moment later.)"""
    from multiprocessing import forkserver

    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)


def cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the platform has one, as os.process_cpu_count)."""
    counted = getattr(os, "process_cpu_count", None)  # Python 3.13+
    if counted is not None:
        return int(counted() or 1)
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def mem_available() -> int | None:
    """Bytes of memory available to new processes (Linux /proc/meminfo MemAvailable), or None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def peak_rss() -> int:
    """The largest resident size this process has had, in bytes (0 where the platform does not say)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024  # bytes on macOS, KiB on Linux


@contextmanager
def holding_ctrl_c() -> Iterator[None]:
    """Hold a Ctrl-C that comes while workers are started and handed their work, and deliver it after: a
    KeyboardInterrupt in the middle of handing a new worker its start-up data leaves it a truncated pickle, and a
    traceback on the terminal. Starting takes milliseconds; the held signal then acts as it would have."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only; nothing to hold here
        return
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            if callable(previous):
                previous(signal.SIGINT, None)
            elif previous == signal.SIG_DFL:
                raise KeyboardInterrupt


def stop_pool(pool: ProcessPoolExecutor, futures: Collection[Future[Any]]) -> None:
    """Cancel what has not started and end the worker processes at once (Ctrl-C must end the command within a
    second, issue 22; a worker mid-way through a large trace would otherwise finish it first)."""
    for future in futures:
        future.cancel()
    processes = list((getattr(pool, "_processes", None) or {}).values())  # no public API ends running workers
    for process in processes:
        process.kill()  # SIGKILL: a worker still starting up would print a traceback on its way out of SIGTERM
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.join(timeout=1)


def workers_from_env() -> int | None:
    """DAM_INGEST_WORKERS as a number of worker processes (None when unset); anything else is an error (exit 2)."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return None
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise ObservationError([Problem(f"{ENV}={text}", "expected a whole number of worker processes, 1 or more",
                                        f"{ENV}=1 reads a trace in one process")], title="invalid option")
    return int(text)
