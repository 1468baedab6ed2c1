"""Fleet benchmark: jobs/s and peak RSS per worker of `expert.fleet.run` on 1 and 2 workers, local pool and Dask.

Run:  .venv/bin/python bench/bench_fleet.py [--fact-jobs 400] [--trace-copies 4] [--repeat 3]

Two workloads: (a) typed-fact jobs (the bundled examples' observations as manifest facts: the rules, no I/O) and
(b) real traces (every `../shared/traces/*/*.json.gz`, copied --trace-copies times so each job reads its own file).
The baseline, measured in the same run, is a plain sequential loop in a fresh process: import, compile the rules,
then `ingest_result` + `diagnose` + `to_json` per job (what a fleet row needs, minus Parquet). Every fleet figure is
end to end: `run()` from the call to its return, so it includes starting the workers (or the Dask LocalCluster),
compiling the rules in each, writing Parquet and the summary. "Dask overhead" is Dask's wall time over the local
pool's for the same jobs and workers; "warm" Dask runs on a cluster started beforehand (start-up excluded).
Peak RSS per worker is each worker process's own peak (VmHWM); the baseline's is the loop process's.
The machine is small and shared: read the ratios, not the absolute numbers, and look at the load average printed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import expert.fleet  # noqa: E402
from expert.fleet._worker import _read_observation_file as read_observation_file  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces"

_LOOP = r"""
import json, sys, time
t0 = time.perf_counter()
import expert
from expert.ingest import ingest_result
e = expert.default_expert()
jobs = json.load(open(sys.argv[1]))
t1 = time.perf_counter()
for job in jobs:
    raw = {}
    if job["files"]:
        result = ingest_result(job["files"], kb=e.kb)
        raw = {k: v for k, v in result.to_observation_file()["observations"].items() if v["value"] != "unknown"}
    raw.update(job["facts"])
    e.diagnose(raw).to_json(indent=None)
t2 = time.perf_counter()
from expert.fleet._worker import peak_rss_bytes  # VmHWM, as the fleet workers measure themselves
rss = peak_rss_bytes()
print(json.dumps({"setup_s": t1 - t0, "loop_s": t2 - t1, "rss": rss}))
"""


def fact_jobs(n: int) -> list[dict[str, Any]]:
    examples = [read_observation_file(p).observations for p in sorted((ROOT / "examples").glob("*.yaml"))]
    return [{"job_key": f"facts-{i:05d}", "files": [], "facts": dict(examples[i % len(examples)])} for i in range(n)]


def trace_jobs(folder: Path, copies: int) -> list[dict[str, Any]]:
    sources = sorted(TRACES.glob("*/*.json.gz"))
    jobs = []
    for c in range(copies):
        for src in sources:
            dst = folder / f"copy{c}" / src.parent.name / src.name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dst)
            jobs.append({"job_key": f"{c}/{src.parent.name}/{src.name}", "files": [str(dst)], "facts": {}})
    return jobs


def sequential(jobs: list[dict[str, Any]], tmp: Path) -> dict[str, float]:
    path = tmp / "jobs.json"
    path.write_text(json.dumps(jobs))
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _LOOP, str(path)], capture_output=True, text=True, check=True,
                         env=env)
    wall = time.perf_counter() - started
    data: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    data["wall_s"] = wall
    return data


def fleet(jobs: list[dict[str, Any]], tmp: Path, **kwargs: Any) -> dict[str, Any]:
    out = tmp / f"out-{time.monotonic_ns()}"
    started = time.perf_counter()
    result = expert.fleet.run(jobs, out=out, load_rows=False, **kwargs)
    wall = time.perf_counter() - started
    assert result.ran == len(jobs), (result.ran, len(jobs))
    shutil.rmtree(out)
    return {"wall_s": wall, "errors": result.errors, "rss": max(result.workers.values()),
            "workers": len(result.workers)}


def median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    runs = sorted(runs, key=lambda r: r["wall_s"])
    best = dict(runs[len(runs) // 2])
    best["spread"] = (runs[0]["wall_s"], runs[-1]["wall_s"])
    return best


CONFIGS = [(engine, workers) for engine in ("local", "dask", "dask-warm") for workers in (1, 2)]


def report(name: str, jobs: list[dict[str, Any]], tmp: Path, repeat: int, client_for: Callable[[int], Any]) -> None:
    """Every configuration once per round, `repeat` rounds (so that a busy spell on the machine spreads over all
    of them), then the median of each."""
    n = len(jobs)
    runs: dict[Any, list[dict[str, Any]]] = {key: [] for key in ["loop", *CONFIGS]}
    for _ in range(repeat):
        runs["loop"].append(sequential(jobs, tmp))
        for engine, workers in CONFIGS:
            if engine == "dask-warm":
                runs[(engine, workers)].append(fleet(jobs, tmp, engine="dask", client=client_for(workers)))
            else:
                runs[(engine, workers)].append(fleet(jobs, tmp, engine=engine, workers=workers))
    base = median(runs["loop"])
    print(f"\n== {name}: {n} jobs, median of {repeat} rounds ==")
    print(f"  sequential loop, fresh process: {base['wall_s']:.2f} s end to end ({n / base['wall_s']:.1f} jobs/s; "
          f"import + compile {base['setup_s']:.2f} s, loop {base['loop_s']:.2f} s = {n / base['loop_s']:.1f} jobs/s), "
          f"peak RSS {base['rss'] / 2**20:.0f} MiB")
    print(f"  {'engine':<10} {'workers':>7} {'wall s':>7} {'(min-max)':>13} {'jobs/s':>7} {'vs loop':>8} "
          f"{'RSS/worker':>11} {'vs loop':>8} {'vs local':>9}")
    local: dict[int, float] = {}
    for engine, workers in CONFIGS:
        m = median(runs[(engine, workers)])
        if engine == "local":
            local[workers] = m["wall_s"]
        over = "" if engine == "local" else f"{m['wall_s'] / local[workers]:8.2f}x"
        lo, hi = m["spread"]
        print(f"  {engine:<10} {workers:>7} {m['wall_s']:7.2f} {f'({lo:.2f}-{hi:.2f})':>13} {n / m['wall_s']:7.1f} "
              f"{base['wall_s'] / m['wall_s']:7.2f}x {m['rss'] / 2**20:7.0f} MiB {m['rss'] / base['rss']:7.2f}x "
              f"{over:>9}")
        if m["errors"]:
            print(f"    ({m['errors']} error rows)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fact-jobs", type=int, default=400)
    parser.add_argument("--trace-copies", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from distributed import Client, LocalCluster

    logging.getLogger("distributed").setLevel(logging.ERROR)

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    clusters: dict[int, Any] = {}

    def client_for(workers: int) -> Any:
        if workers not in clusters:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Port .* is already in use")
                cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                       dashboard_address=None, host="127.0.0.1", silence_logs=logging.ERROR)
            clusters[workers] = (cluster, Client(cluster))
        return clusters[workers][1]

    try:
        with tempfile.TemporaryDirectory() as tmp:
            report("(a) typed-fact jobs", fact_jobs(args.fact_jobs), Path(tmp), args.repeat, client_for)
            if TRACES.is_dir():
                jobs = trace_jobs(Path(tmp) / "traces", args.trace_copies)
                report(f"(b) real traces ({len(jobs) // args.trace_copies} files x {args.trace_copies})", jobs,
                       Path(tmp), args.repeat, client_for)
            else:
                print(f"\n(b) skipped: no real traces at {TRACES}")
    finally:
        for cluster, client in clusters.values():
            client.close()
            cluster.close()
    print("\nload average after: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
