"""Worker processes for reading traces: how they start, how many CPUs and how much memory there is for them, and
how much memory one used (shared by `rank_reading.py`, which reads rank files in workers, and `kineto_parallel.py`,
which reads the byte ranges of one large trace in workers)."""

from __future__ import annotations

import multiprocessing
import os
import sys

PRELOAD = ["expert.ingest.rank_reading", "expert.ingest.kineto", "expert.ingest.kineto_parallel"]
"""What the fork server imports once, before it forks any worker (the readers and their msgspec types)."""


def context() -> multiprocessing.context.BaseContext:
    """forkserver where the platform has it (workers fork from a clean server that has imported the readers once),
    else spawn; never fork, which would copy this process (an Expert, threads, open files) into every worker."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        return ctx
    return multiprocessing.get_context("spawn")


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
