"""An export's devices swept in worker processes: each device's sweeps (`host_sweep`, `gpu_sweep`, `analysis_sweep`)
read only that device's rows and write only their own connection's temporary tables, so devices are independent and
can run side by side, one SQLite connection per process on the same read-only file.

- this process sweeps every `lanes`-th device itself while the workers (forkserver, or spawn: never a fork of this
  process, which may hold an Expert and threads; `_workers.context`) sweep the others, one device at a time;
- a device's result (`DeviceResult`) and its notes come back pickled and are put in device order, so the facts, notes
  and report are those of the one-process sweep (tests/test_nsys_parallel.py compares them);
- how many processes: `workers=` (`dam ingest --workers N`), else DAM_INGEST_WORKERS, else the CPUs this process may
  use (bounded by the devices and by the memory available); 1, one device, a daemonic process or an export under
  `PARALLEL_MIN_ROWS` rows sweeps in this process;
- Ctrl-C stops the workers at once (`_workers.holding_ctrl_c` while they start, killed after); workers that cannot
  start or die leave their devices to this process: the same result, later.
"""

from __future__ import annotations

import multiprocessing
import queue as queue_mod
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._workers import context, cpus, holding_ctrl_c, mem_available

if TYPE_CHECKING:
    from ...kb.knowledge import KernelCatalog, KnowledgeBase
    from ..timeline.classes import Classifier
    from ..timeline.roofline import Roof
    from .analysis import DeviceResult, _Analysis
    from .steps import StepList

PARALLEL_MIN_ROWS = 1_000_000
"""From this many rows (activities, runtime calls and NVTX ranges) on, an export's devices are swept in parallel:
a device of a 1 M-row export takes seconds, starting a worker about half a second on 2 busy cores."""
WORKER_BYTES = 150_000_000
"""Memory planned per worker (interpreter, knowledge base, SQLite caches and the sweep's bounded state: ~60 MB
measured on a 1 GB export, with room)."""
_TICK_ROWS = 65536

Tick = Callable[[int], None]


def lanes(devices: int, rows: int, requested: int | None) -> int:
    """Processes to sweep `devices` devices of an export of `rows` rows with (1: this process alone)."""
    if devices < 2 or multiprocessing.current_process().daemon:
        return 1  # (a daemonic process may not start workers)
    if requested is None:
        from .._workers import workers_from_env

        requested = workers_from_env()
    if requested == 1 or rows < PARALLEL_MIN_ROWS:
        return 1
    n = requested if requested is not None else cpus()
    available = mem_available()
    if available and requested is None:
        n = min(n, max(1, int(available * 0.6 // WORKER_BYTES)))
    return max(1, min(n, devices))


@dataclass
class DeviceJob:
    """What a worker needs to sweep one device as `_Analysis._device` does in this process."""

    path: str
    """The export file (a spooled or exported copy lives until this process's analysis ends)."""
    label: str
    name: str
    state: dict[str, Any]
    """`_Analysis.device_state()`: options, extent, devices' processes, DataLoader spans, step numbering."""
    steps_by_proc: dict[int, StepList]
    roof: Roof | None
    factory: Callable[[Path, str, str, KnowledgeBase, dict[str, Any]], _Analysis]
    """`_Analysis.for_device` (pickled by reference: the worker imports the analysis as it unpickles the job)."""


_WORKER: dict[str, Any] = {}


def _init_worker(kb: KnowledgeBase, progress_queue: Any) -> None:
    _WORKER["kb"] = kb
    _WORKER["queue"] = progress_queue


def _task(job: DeviceJob, dev: int) -> tuple[DeviceResult, list[str]]:
    """Sweep one device in a worker: its result and its notes."""
    q = _WORKER.get("queue")
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        if q is not None and done[0] >= _TICK_ROWS:
            q.put(done[0])
            done[0] = 0

    run = job.factory(Path(job.path), job.label, job.name, _WORKER["kb"], job.state)
    try:
        result = run.sweep_device(dev, job.steps_by_proc, job.roof, tick)
    finally:
        run.x.close()
    if q is not None and done[0]:
        q.put(done[0])
    return result, run.device_notes.get(dev, [])


def sweep_devices(run: _Analysis, devices: Sequence[int], n: int, steps_by_proc: dict[int, StepList],
                  catalog: KernelCatalog, roof: Roof | None, cls: Classifier,
                  tick: Tick | None) -> dict[int, DeviceResult]:
    """Every device of `devices` swept, in `n` processes (this one included); results by device."""
    mine = list(devices[::n])
    theirs = [d for d in devices if d not in mine]
    job = DeviceJob(str(run.x.path), run.src.label, run.src.name, run.device_state(), steps_by_proc, roof,
                    type(run).for_device)
    out: dict[int, DeviceResult] = {}
    ctx = context()
    progress_queue = ctx.Queue()

    def drain() -> None:
        while True:
            try:
                rows = progress_queue.get_nowait()
            except queue_mod.Empty:
                return
            if tick is not None:
                tick(rows)

    def tick_here(rows: int) -> None:
        if tick is not None:
            tick(rows)
        drain()

    pool: ProcessPoolExecutor | None = None
    futures: dict[Future[tuple[DeviceResult, list[str]]], int] = {}
    left: list[int] = []  # devices whose worker could not start or died: swept here
    try:
        try:
            with holding_ctrl_c():  # submit() starts the workers
                pool = ProcessPoolExecutor(max_workers=min(n - 1, len(theirs)), mp_context=ctx,
                                           initializer=_init_worker, initargs=(run.kb, progress_queue))
                futures = {pool.submit(_task, job, d): d for d in theirs}
        except (OSError, RuntimeError, BrokenProcessPool):
            left = [d for d in theirs if d not in futures.values()]
        for d in mine:
            out[d] = run.sweep_device(d, steps_by_proc, roof, tick_here, catalog, cls)
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
            drain()
            for future in finished:
                d = futures[future]
                try:
                    out[d], run.device_notes[d] = future.result()
                except BrokenProcessPool:
                    left.append(d)
        for d in sorted(left):
            out[d] = run.sweep_device(d, steps_by_proc, roof, tick_here, catalog, cls)
    except BaseException:
        if pool is not None:  # Ctrl-C or a failure: stop the workers now, not after the devices they sweep
            from .._workers import stop_pool

            stop_pool(pool, futures)
        raise
    if pool is not None:
        pool.shutdown()
    drain()
    progress_queue.close()
    return out

