"""A multi-GPU job from the traces of its ranks: files grouped into jobs, read in parallel, compared across ranks.

- **Inputs**: directories (their trace and telemetry files) and glob patterns expand to files; PyTorch profiler
  traces are grouped into jobs by `distributedInfo` (backend, world size, rank; captures at different times are
  different jobs), or by a rank in the file name (rank3.json) when the trace does not record it.
- **Reading** (`rank_reading.py`): every rank file is read in a worker process (never a fork of a process holding an
  Expert), giving the usual per-file facts (`kineto.parse`) and its per-step figures (`rank_trace.read`).
- **Across ranks**: matched by ProfilerStep number, the i-th collective of a step is the same collective on every
  rank; the shortest of its durations is the transfer itself, and what a rank spends beyond it is waiting for a later
  rank. The rank that waits least is the one the others wait for (`slowest_rank`); `sync_wait_s` is the mean wait
  of the others per step; `compute_skew` and `step_time_skew` compare the slowest rank's compute and step time with
  the median rank's. The communication facts (`comm_time_s`, `comm_overlap_frac`, `comm_frac`, `bus_bandwidth`)
  are measured on that rank, whose collectives hold the least waiting, so they describe the transfers and not the
  waits (which `sync_wait_s` carries). The node-level facts are the median rank's; categorical ones the most common.

Everything is deterministic and independent of the order the files are given in.
"""

from __future__ import annotations

import os
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import ObservationError, Problem
from ..observations.normalise import RankFigures
from . import distributed
from ._result import FileResult, JobResult, Measured, Scalar
from ._source import CANNOT_READ, JobProgress
from .rank_reading import INPUT_SUFFIXES, expand, read_all, worker_count
from .rank_trace import RankTrace


# ---- grouping ------------------------------------------------------------------------------------------------------
def _template(trace: RankTrace) -> str:
    name = trace.name
    for pattern in distributed.catalog().rank_patterns:
        match = pattern.search(name)
        if match:
            return name[: match.start(1)] + "#" + name[match.end(1):]
    return name


def group(traces: Sequence[RankTrace]) -> list[list[int]]:
    """Indices of `traces` grouped into jobs, each sorted by rank; jobs in time order. Deterministic."""
    keys: dict[tuple[Any, ...], list[int]] = {}
    for i, t in enumerate(traces):
        if t.rank_from == "distributedInfo":
            key: tuple[Any, ...] = ("info", t.world_size, t.backend)
        elif t.rank_from == "file name":
            key = ("name", str(Path(t.path).parent), _template(t))
        else:
            key = ("file", t.path)
        keys.setdefault(key, []).append(i)
    jobs: list[list[int]] = []
    for members in keys.values():
        members.sort(key=lambda i: (traces[i].start_us, traces[i].name, traces[i].path))
        split: list[list[int]] = []
        for i in members:
            t = traces[i]
            home = next((job for job in split if all(traces[j].rank != t.rank for j in job)
                         and _overlap(job, t, traces)), None)
            if home is None:
                split.append([i])
            else:
                home.append(i)
        jobs.extend(split)
    for job in jobs:
        job.sort(key=lambda i: (traces[i].rank if traces[i].rank is not None else -1, traces[i].name,
                                traces[i].path))
    jobs.sort(key=lambda job: (min(traces[i].start_us for i in job), traces[job[0]].name, traces[job[0]].path))
    return jobs


def _overlap(job: list[int], t: RankTrace, traces: Sequence[RankTrace]) -> bool:
    """Whether `t` was captured at the same time as the job's traces (ranks of one capture overlap in time)."""
    start = max(traces[j].start_us for j in job)
    end = min(traces[j].end_us for j in job)
    return max(start, t.start_us) < min(end, t.end_us) or any(traces[j].start_us == t.start_us == 0 for j in job)


def describe(traces: Sequence[RankTrace]) -> str:
    ranks = [t.rank for t in traces if t.rank is not None]
    world = next((t.world_size for t in traces if t.world_size), None)
    backend = next((t.backend for t in traces if t.backend), None)
    names = ", ".join(t.name for t in traces[:4]) + (f", … ({len(traces)} files)" if len(traces) > 4 else "")
    what = f"rank{'s' if len(ranks) != 1 else ''} {_ranges(ranks)}" if ranks else "no rank recorded"
    return f"{what}{f' of {world}' if world else ''}{f' ({backend})' if backend else ''}: {names}"


def _ranges(values: Sequence[int]) -> str:
    """0, 1, 2, 5 -> "0-2, 5"."""
    out: list[str] = []
    run: list[int] = []
    for v in sorted(set(values)):
        if run and v == run[-1] + 1:
            run.append(v)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [v]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


# ---- across ranks --------------------------------------------------------------------------------------------------
def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _figures(rank: int, t: RankTrace, wait_us: float | None) -> RankFigures:
    n = len(t.window_us)
    span = t.total("window_us")
    comm = t.total("comm_us")
    exposed = comm - t.total("overlap_us")
    return RankFigures(
        rank=rank, file=t.path,
        step_time_s=span / n / 1e6 if n and t.has_steps else None,
        compute_s=t.total("compute_us") / n / 1e6 if n else None,
        comm_s=comm / n / 1e6 if n else None,
        exposed_comm_frac=min(1.0, max(0.0, exposed / span)) if span > 0 else None,
        idle_frac=min(1.0, max(0.0, (span - t.total("busy_us")) / span)) if span > 0 else None,
        sync_wait_s=wait_us / 1e6 if wait_us is not None else None,
        comm_overlap_frac=t.total("overlap_us") / comm if comm > 0 else None,
        steps=n if t.has_steps else None)


def waits(traces: Sequence[RankTrace]) -> tuple[list[float] | None, list[int], str]:
    """Per rank, the mean time per step spent inside collectives beyond the shortest rank's duration of the same
    collective; the ProfilerStep numbers compared; how collectives were matched. None when they cannot be compared."""
    if len(traces) < 2 or not all(t.has_steps for t in traces):
        return None, [], ""
    index = [{s: k for k, s in enumerate(t.steps)} for t in traces]
    common = sorted(set.intersection(*(set(i) for i in index)))
    if not common:
        return None, [], ""
    total = [0.0] * len(traces)
    matched = 0
    for s in common:
        per_rank = [t.collectives[idx[s]] for t, idx in zip(traces, index, strict=True)]
        if per_rank[0] and all(len(c) == len(per_rank[0]) for c in per_rank):
            matched += 1
            for i in range(len(per_rank[0])):
                shortest = min(c[i][1] for c in per_rank)
                for r, c in enumerate(per_rank):
                    total[r] += c[i][1] - shortest
        else:
            comm = [t.comm_us[idx[s]] for t, idx in zip(traces, index, strict=True)]
            for r, value in enumerate(comm):
                total[r] += value - min(comm)
    how = ("collective by collective" if matched == len(common) else
           f"collective by collective in {matched} of {len(common)} steps, by total collective time in the others")
    return [v / len(common) for v in total], common, how


def bus_bandwidth(trace: RankTrace, world_size: int | None) -> tuple[float, int, float] | None:
    """(GB/s, collectives, seconds) of the collectives whose size is recorded: bus bytes over their time."""
    cat = distributed.catalog()
    moved = seconds = 0.0
    count = 0
    for step in trace.collectives:
        for kind, dur, size, group_size in step:
            n = group_size if group_size > 0 else (world_size or 0)
            factor = cat.bus_factor(kind, n)
            if size < 0 or not factor or n < 2 or dur <= 0:
                continue
            moved += size * factor
            seconds += dur / 1e6
            count += 1
    return (moved / seconds / 1e9, count, seconds) if seconds > 0 else None


def _allreduce_bytes(trace: RankTrace) -> float | None:
    per_step = []
    for step in trace.collectives:
        sizes = [size for kind, _, size, _ in step if kind == "allreduce"]
        if not sizes or any(s < 0 for s in sizes):
            return None
        per_step.append(sum(sizes))
    return _mean(per_step) if per_step and trace.has_steps else None


# ---- the job's facts -------------------------------------------------------------------------------------------------
def _lower_median(items: list[tuple[int, Any]]) -> tuple[int, Any]:
    ordered = sorted(items, key=lambda p: (p[1], p[0]))
    return ordered[(len(ordered) - 1) // 2]


def _show(value: Scalar) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _aggregate(ranked: list[tuple[int, FileResult]], job: FileResult, skip: set[str]) -> None:
    """Node-level facts of the job from its ranks' files: the median rank's value (categorical: the most common)."""
    n = len(ranked)
    facts = sorted({f for _, r in ranked for f in r.measured} - skip)
    for fact in facts:
        have = [(rank, r, r.measured[fact]) for rank, r in ranked if fact in r.measured]
        values: list[tuple[int, Any]] = [(rank, m.value) for rank, _, m in have]
        if all(isinstance(v, (int, float)) for _, v in values):
            chosen_rank, _ = _lower_median(values)
            how = f"median of {len(have)} ranks" if len(have) > 1 else "the one rank"
        else:
            counts = Counter(v for _, v in values)
            best = max(counts.values())
            chosen_rank = min(rank for rank, v in values if counts[v] == best)
            how = f"most common of {len(have)} ranks" if len(have) > 1 else "the one rank"
            if len(counts) > 1:
                job.notes.append(f"the ranks differ in {fact} ({', '.join(sorted(map(str, counts)))}); used "
                                 f"{dict(values)[chosen_rank]} (rank {chosen_rank})")
        measured = next(m for rank, _, m in have if rank == chosen_rank)
        detail: dict[str, Scalar] = dict(measured.detail)
        method = str(detail.get("method", ""))
        detail["method"] = f"{method}; {how} (rank {chosen_rank})" if len(have) > 1 else method
        detail["rank"] = chosen_rank
        if len(have) > 1 and all(isinstance(v, (int, float)) for _, v in values):
            lo = min(values, key=lambda p: (p[1], p[0]))
            hi = max(values, key=lambda p: (p[1], -p[0]))
            detail.update(ranks_min=_round(lo[1]), ranks_min_rank=lo[0], ranks_max=_round(hi[1]),
                          ranks_max_rank=hi[0])
        if len(have) < n:
            job.notes.append(f"{fact}: measured on {len(have)} of {n} ranks")
        job.measured[fact] = Measured(fact=fact, value=measured.value, source=measured.source, detail=detail)
        job.not_derived.pop(fact, None)
    for fact in sorted({f for _, r in ranked for f in r.not_derived} - set(job.measured) - skip):
        reasons = [r.not_derived[fact] for _, r in ranked if fact in r.not_derived]
        job.not_derived[fact] = reasons[0] if len(set(reasons)) == 1 else "; ".join(sorted(set(reasons)))


def _round(value: Any) -> Scalar:
    out: Scalar = round(value, 6) if isinstance(value, float) else value
    return out


def analyse(traces: Sequence[RankTrace], files: Sequence[FileResult]) -> JobResult:
    """The multi-rank analysis of one job (its traces sorted by rank) and its facts."""
    ranks = [t.rank if t.rank is not None else i for i, t in enumerate(traces)]
    if len(set(ranks)) != len(ranks):
        dup = sorted(r for r, c in Counter(ranks).items() if c > 1)
        raise ObservationError([Problem(", ".join(t.path for t in traces if t.rank in dup),
                                        f"several files claim rank {', '.join(map(str, dup))} of the same job",
                                        "give one trace per rank of one capture")],
                               title=CANNOT_READ)
    world = next((t.world_size for t in traces if t.world_size), None)
    backend = next((t.backend for t in traces if t.backend), None)
    mode = "gpu" if any(t.mode == "gpu" for t in traces) else "cpu"
    wait_us, common, how = waits(traces)
    figures = [_figures(r, t, wait_us[i] if wait_us else None) for i, (r, t) in enumerate(zip(ranks, traces,
                                                                                               strict=True))]
    for fig, fr in zip(figures, files, strict=True):
        idle = fr.measured.get("gpu_idle_gap_frac")
        if idle is not None:  # the per-file idle breakdown (HTA's causes) of this rank's GPU
            fig.idle_causes = {k.removeprefix("idle_"): float(v) for k, v in idle.detail.items()
                               if k.startswith("idle_") and isinstance(v, (int, float))}
    label = describe(traces)
    where = os.path.commonpath([str(Path(t.path).parent) for t in traces]) if all(
        Path(t.path).is_absolute() == Path(traces[0].path).is_absolute() for t in traces) else traces[0].path
    job = FileResult(path=where or ".", name=f"{len(traces)} rank trace{'s' if len(traces) > 1 else ''}",
                     format="kineto")
    ranked = list(zip(ranks, files, strict=True))
    comm_facts = {"comm_frac", "comm_time_s", "comm_overlap_frac", "bus_bandwidth"}
    _aggregate(ranked, job, comm_facts)
    files_text = ", ".join(t.name for t in traces)
    result = JobResult(label=label, world_size=world, backend=backend, mode=mode, files=[t.path for t in traces],
                       ranks=figures, result=job)
    for rank, t in zip(ranks, traces, strict=True):
        job.notes.extend(f"rank {rank} ({t.name}): {note}" for note in t.notes)

    def add(fact: str, value: Scalar, source_trace: RankTrace | None, **detail: Scalar | None) -> None:
        clean = {k: v for k, v in detail.items() if v is not None}
        src = f"kineto:{source_trace.name}" if source_trace is not None else f"kineto:{job.name}"
        if source_trace is None:
            clean.setdefault("files", files_text)
        else:
            clean.setdefault("file", source_trace.path)
        job.measured[fact] = Measured(fact=fact, value=value, source=src, detail=clean)
        job.not_derived.pop(fact, None)

    first = traces[0]
    job.stats.update(ranks=_ranges(ranks), rank_traces=len(traces))
    if world:
        job.stats["world_size"] = world
    if world:
        add("world_size", world, first, method="distributedInfo.world_size", backend=backend)
        if mode == "gpu":
            add("num_gpus", world, first, method="distributedInfo.world_size (one GPU per rank)")
        else:
            job.missing("num_gpus", "CPU-only traces: the ranks ran on CPUs (world size "
                                    f"{world}, backend {backend})")
        hosts = {t.host for t in traces}
        if len(traces) == world and None not in hosts:
            add("num_nodes", len(hosts), None, method="distinct host_name of the ranks' traces")
        else:
            job.missing("num_nodes", "the traces do not name their hosts, or not every rank is traced")
    else:
        job.missing("world_size", "the traces have no distributedInfo (ranks were read from the file names)")
    ref_index = 0
    if wait_us is not None:
        ref_index = min(range(len(traces)), key=lambda i: (wait_us[i], ranks[i]))
        others = [w for i, w in enumerate(wait_us) if i != ref_index]
        slowest = ranks[ref_index]
        result.slowest_rank = slowest
        result.sync_wait_s = sum(others) / len(others) / 1e6
        steps_text = f"ProfilerStep#{common[0]}–#{common[-1]}" if len(common) > 1 else f"ProfilerStep#{common[0]}"
        add("slowest_rank", slowest, traces[ref_index], method="the rank whose collectives hold the least waiting: "
            "the one the others wait for", window=steps_text, samples=len(common))
        add("sync_wait_s", result.sync_wait_s, None, method=f"time per step the other ranks spend inside "
            f"collectives beyond rank {slowest}'s duration of the same collective ({how}), mean of the other ranks",
            window=steps_text, samples=len(common), slowest_rank=slowest,
            max=round(max(others) / 1e6, 6), min=round(min(others) / 1e6, 6))
        if any(w > 0 for w in others):
            waiting = sorted((ranks[i], w) for i, w in enumerate(wait_us) if i != ref_index)
            job.notes.append("waits for rank " + str(slowest) + " inside collectives, per step: " + ", ".join(
                f"rank {r} {w / 1e3:.3g} ms" for r, w in waiting))
        compute = [f.compute_s for f in figures if f.compute_s is not None]
        median_compute = statistics.median(compute) if compute else 0.0
        slow_compute = figures[ref_index].compute_s
        if median_compute > 0 and slow_compute is not None:
            result.compute_skew = max(0.0, slow_compute / median_compute - 1)
            add("compute_skew", result.compute_skew, traces[ref_index],
                method=f"rank {slowest}'s compute time per step over the median rank's, minus 1",
                compute_s=_round(figures[ref_index].compute_s), median_compute_s=_round(median_compute))
    else:
        reason = ("waits at collectives need the traces of at least two ranks" if len(traces) < 2 else
                  "the ranks' traces share no ProfilerStep numbers, so their collectives cannot be matched")
        for fact in ("slowest_rank", "sync_wait_s", "compute_skew"):
            job.missing(fact, reason + (f" ({len(traces)} of {world} ranks traced)" if world else ""))
    steps_s = [f.step_time_s for f in figures if f.step_time_s is not None]
    if len(steps_s) >= 2 and len(steps_s) == len(figures):
        median = statistics.median(steps_s)
        if median > 0:
            slow = max(range(len(figures)), key=lambda i: (figures[i].step_time_s or 0.0, -ranks[i]))
            result.step_time_skew = max(steps_s) / median - 1
            add("step_time_skew", result.step_time_skew, traces[slow], method=f"rank {ranks[slow]}'s step time, "
                "the longest, over the median rank's, minus 1", median_step_time_s=_round(median))
    else:
        job.missing("step_time_skew", "needs the step times of at least two ranks")
    _communication(result, job, traces[ref_index], figures[ref_index], world, add)
    return result


def _communication(result: JobResult, job: FileResult, t: RankTrace, fig: RankFigures, world: int | None,
                   add: Callable[..., None]) -> None:
    """The C2 facts, measured on the reference rank (the one the others wait for)."""
    which = f"rank {fig.rank}" + (", the one the others wait for" if result.slowest_rank is not None else "")
    comm = t.total("comm_us")
    span = t.total("window_us")
    common: dict[str, Scalar] = {"window": t.label, "rank": fig.rank}
    if len(t.window_us) and t.has_steps:
        common["samples"] = len(t.window_us)
    what = "gloo collective spans" if t.mode == "cpu" else "NCCL/RCCL kernels"
    if comm <= 0:
        add("comm_frac", 0.0, t, method=f"no collectives ({what}) in the window", **common)
        for fact in ("comm_time_s", "comm_overlap_frac", "bus_bandwidth"):
            job.missing(fact, f"no collectives ({what}) in {t.name}'s window")
        return
    exposed = comm - t.total("overlap_us")
    compute = "computation kernels" if t.mode == "gpu" else "CPU operators"
    add("comm_frac", min(1.0, max(0.0, exposed / span)), t, method=f"{what} time not overlapped by {compute}, over "
        f"the window, on {which}", **common)
    if t.has_steps:
        add("comm_time_s", comm / len(t.window_us) / 1e6, t, method=f"union of {what} time per step on {which}",
            **common)
    add("comm_overlap_frac", t.total("overlap_us") / comm, t, method=f"Holistic Trace Analysis's overlap: {what} "
        f"time during which {compute} run, over all {what} time, on {which}", **common)
    bw = bus_bandwidth(t, world)
    if bw is None:
        job.missing("bus_bandwidth", "the trace does not record collective sizes (PyTorch >= 2.3 writes them on "
                    "NCCL kernels; record_shapes=True on gloo spans)")
    else:
        result.bus_bandwidth = bw[0]
        add("bus_bandwidth", bw[0], t, method=f"nccl-tests bus bandwidth of {bw[1]} collectives with recorded sizes "
            f"on {which}: bus bytes over their time", seconds=round(bw[2], 6), **common)
    grad = _allreduce_bytes(t)
    if grad:
        add("gradient_bytes", grad, t, method=f"all-reduce bytes per step on {which} (the gradients, for data "
            "parallel training)", **common)


def _is_multi(traces: Sequence[RankTrace]) -> bool:
    return len(traces) > 1 or any((t.world_size or 1) > 1 for t in traces)


def choose(jobs: list[list[int]], traces: Sequence[RankTrace], job: int | None) -> list[int]:
    """The job to analyse: the only one, or the `job`-th (1-based); several without a choice is an error."""
    if job is not None:
        if not 1 <= job <= len(jobs):
            raise ObservationError([Problem(f"--job {job}", f"the inputs hold {len(jobs)} job(s)",
                                            f"give --job 1..{len(jobs)}")], title=CANNOT_READ)
        return jobs[job - 1]
    if len(jobs) == 1:
        return jobs[0]
    listing = "; ".join(f"job {k}: {describe([traces[i] for i in members])}" for k, members in enumerate(jobs, 1))
    raise ObservationError([Problem("ingest", f"the traces are not the ranks of one job; they hold {len(jobs)} "
                                    f"jobs ({listing})", "pick one with --job N (job=N from Python), or give "
                                    "one job's rank files (a directory or glob of them)")],
                           title=CANNOT_READ)


def is_single_node(traces: Sequence[RankTrace]) -> bool:
    """One trace of a one-rank (or unstated) job: read as before, with no multi-rank analysis."""
    return not _is_multi(traces)


__all__ = ["INPUT_SUFFIXES", "JobProgress", "JobResult", "analyse", "choose", "expand", "group", "read_all",
           "worker_count"]
