"""The Dask engine: chunks of jobs as dask.distributed tasks, on a LocalCluster or on a scheduler given by address.

A worker plugin builds each worker process's Expert once (Dask's nanny starts workers by spawn, so the rules are
compiled in a fresh process); each task runs one chunk and writes its Parquet file from the worker. Dask cannot stop
one task, so with a time limit each job runs on its own thread: the thread is interrupted at the limit (between
bytecodes), and a job still stuck after the grace period (in native code) is abandoned to finish or hang on its own,
so that the run goes on.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from dataclasses import replace
from typing import Any

from ._local import Callbacks, grace
from ._worker import Chunk, ChunkResult, ExpertOptions, Task, WorkerState, error_row, initialize, run_chunk, run_task


def _plugin(options: ExpertOptions) -> Any:
    from distributed import WorkerPlugin

    class ExpertPlugin(WorkerPlugin):
        """Compile the rules when a worker starts (and when a restarted one does)."""

        def __init__(self, options: ExpertOptions) -> None:
            self.options = options

        def setup(self, worker: Any) -> None:
            initialize(self.options)

    return ExpertPlugin(options)


@contextlib.contextmanager
def local_cluster(workers: int) -> Any:
    """A LocalCluster of `workers` single-threaded processes on loopback, closed on exit.

    When a job kills its worker, the nanny restarts it; if the restarted worker is removed before the cluster has
    seen it added, distributed's worker-status watcher dies of a KeyError (dask/distributed#5407) and closing the
    cluster raises it again, after the scheduler and the workers are closed. Every task has ended by then, so that
    KeyError is dropped here and the cluster is marked closed.
    """
    from distributed import LocalCluster

    with warnings.catch_warnings():  # the scheduler's (loopback) health endpoint moves off a busy port 8787
        warnings.filterwarnings("ignore", message="Port .* is already in use")
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1,  # type: ignore[no-untyped-call]
                               processes=True, dashboard_address=None, host="127.0.0.1",
                               silence_logs=logging.ERROR)
    try:
        yield cluster
    finally:
        try:
            cluster.close()
        except KeyError:  # raised after the scheduler and the workers were closed; finish what close() left
            from distributed.core import Status

            cluster.status = Status.closed
            cluster._loop_runner.stop()  # type: ignore[no-untyped-call]


def _threaded(state: WorkerState, task: Task, chunk: Chunk) -> tuple[dict[str, Any], bool]:
    """Run one job on its own thread; give up on it (an error row) when it outlives its limit and the grace."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["row"] = run_task(state, task, chunk)
        except BaseException as exc:  # the thread must not die silently
            box["error"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=target, name=f"dam-fleet-job-{task.job.key}"[:60], daemon=True)
    thread.start()
    assert chunk.timeout is not None
    limit = chunk.timeout * (chunk.retries + 1)
    thread.join(limit + grace(chunk.timeout))
    if thread.is_alive():
        message = (f"timed out after {chunk.timeout:g} s (--timeout); the job did not stop (native code?) and its "
                   "thread was abandoned on the Dask worker")
        task.attempts = max(task.attempts, 1)
        return error_row(task, chunk.run_id, state.worker, "timeout", message), True
    if "row" in box:
        return box["row"], False
    return error_row(task, chunk.run_id, state.worker, "internal", box.get("error", "the job's thread failed")), False


def dask_chunk(chunk: Chunk, options: ExpertOptions) -> ChunkResult:
    """The Dask task: one chunk on this worker process's Expert."""
    state = initialize(options)  # built by the plugin already; here only if the plugin could not be registered
    return run_chunk(state, chunk, runner=_threaded if chunk.timeout else None)


class DaskEngine:
    """Run chunks as Dask tasks: on `client`, on the scheduler at `scheduler`, or on a LocalCluster of `workers`
    processes (one thread each, on loopback, no dashboard)."""

    name = "dask"

    def __init__(self, workers: int, options: ExpertOptions, *, scheduler: str | None = None,
                 client: Any = None) -> None:
        self.workers = workers
        self.options = options
        self.scheduler = scheduler
        self.client = client
        self.peak_rss: dict[str, int] = {}
        self.abandoned = 0

    @contextlib.contextmanager
    def _connect(self) -> Any:
        from distributed import Client

        if self.client is not None:
            yield self.client
            return
        if self.scheduler:
            try:
                import dask

                timeout = dask.config.get("distributed.comm.timeouts.connect")  # 30 s unless configured
                client = Client(self.scheduler, timeout=timeout)  # type: ignore[no-untyped-call]
            except (OSError, TimeoutError) as exc:
                from ..errors import Problem
                from ._inputs import FleetInputError

                raise FleetInputError([Problem(f"--scheduler {self.scheduler}",
                                               f"cannot connect to the Dask scheduler: {exc}",
                                               "e.g. tcp://10.0.0.5:8786 (dask scheduler prints it)")],
                                      title="invalid option") from exc
            with client:
                yield client
            return
        with local_cluster(self.workers) as cluster, Client(cluster) as client:  # type: ignore[no-untyped-call]
            yield client

    def _done(self, result: ChunkResult, callbacks: Callbacks) -> None:
        self.peak_rss[result.worker] = max(self.peak_rss.get(result.worker, 0), result.peak_rss)
        self.abandoned += result.abandoned
        for row in result.rows:
            callbacks.job(row)
        callbacks.chunk(result)

    def run(self, chunks: list[Chunk], callbacks: Callbacks) -> None:
        if not chunks:
            return
        from distributed import as_completed

        with self._connect() as client:
            client.register_plugin(_plugin(self.options), name=f"dam-fleet-expert-{self.options.digest()}")
            next_id = max(c.id for c in chunks) + 1
            pending: dict[Any, Chunk] = {}

            def submit(chunk: Chunk) -> Any:
                future = client.submit(dask_chunk, chunk, self.options, key=f"dam-fleet-{chunk.run_id}-{chunk.id}",
                                       pure=False)
                pending[future] = chunk
                return future

            futures = as_completed([submit(c) for c in chunks])  # type: ignore[no-untyped-call]
            isolate: list[Chunk] = []  # single jobs whose task failed: run again alone, after the rest
            try:
                for future in futures:
                    chunk = pending.pop(future)
                    try:
                        result: ChunkResult = future.result()
                    except Exception:
                        if len(chunk.tasks) > 1:  # find the job that fails: run each on its own
                            for task in chunk.tasks:
                                single = submit(replace(chunk, id=next_id, tasks=[task]))
                                futures.add(single)  # type: ignore[no-untyped-call]
                                next_id += 1
                        else:
                            isolate.append(chunk)
                        continue
                    self._done(result, callbacks)
                # A worker that dies takes the blame for every task it held; alone, only the culprit fails again.
                for chunk in isolate:
                    future = submit(replace(chunk, id=next_id))
                    next_id += 1
                    try:
                        result = future.result()
                    except Exception as exc:
                        message = f"the Dask task failed: {type(exc).__name__}: {exc}"
                        callbacks.failed(chunk.tasks[0], "crash", message)
                        continue
                    finally:
                        pending.pop(future, None)
                    self._done(result, callbacks)
            finally:
                for future in pending:
                    future.cancel()
