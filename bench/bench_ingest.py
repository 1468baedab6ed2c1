"""Trace ingestion benchmark: dam-expert against Holistic Trace Analysis (HTA) loading the same trace, the cost of
the trace analysis (time breakdown, idle causes, per-op FLOPs) against the ingest before it, and how ingest scales
with the number of steps and of devices.

    python bench/bench_ingest.py [--repeat 3] [--no-hta] [--no-big] [--big-size-gb 1.0] [--old-ref REF]
                                 [--no-scaling] [--no-old] [--no-parallel] [--parallel-repeat 3] [--workers N]

Every measurement runs in its own child process, started through a small wrapper (bench/_harness.py) that waits for
it and reads getrusage(RUSAGE_CHILDREN), so the peak RSS reported is that child's largest process (HTA's parsing
pool included), interpreter and imports included. Each child also reports the time of the load call itself; the
speed ratio compares those (HTA's `TraceAnalysis(trace_dir=...)` against `expert.ingest_result(path)`), and
whole-process wall times are printed beside them. The best of --repeat runs is kept.

- HTA is installed into its own virtual environment, bench/.venv-hta (created on first use: pip install
  HolisticTraceAnalysis), so its dependencies never touch the project's.
- The old ingest is the code at git ref --old-ref (default: the commit before the trace analysis), extracted with
  `git archive` into a temporary directory and run the same way; "analysis cost" is ours over it, same trace, same
  run. Without git or the ref, that row is skipped with a note.
- The synthetic ~1 GB trace is made from the real resnet50 traces by bench/make_big_trace.py (bench/data/).
- Parallel decode (issue 20): the 1 GB trace ingested in one process (--workers 1) and with byte ranges decoded in
  worker processes (--workers N, default the CPUs), alternately, --parallel-repeat times each, each run a fresh
  process; medians of the event-reading phase and of the whole ingest, their ratio, and each worker's peak RSS (as
  the workers report it). Printed beside them: the load average and how much faster two CPU-bound processes run
  than one on this machine right now (about 2.0 on two quiet cores; a busy machine bounds any parallel speed-up).
- The scaling table times ingest of synthetic traces with 1k/10k/20k ProfilerSteps (a DataLoader span, a launch and
  a kernel each) and with 100/1,000/6,000 device ids (a kernel each), less the time of the same trace with one step
  (one device): a linear ingest keeps that cost per step (per device) flat.
Targets: on the resnet50 trace at least 5x faster than HTA and at most 1/3 of its peak RSS; on the 1 GB trace a peak
RSS under 300 MB; the parallel event reading at least 1.5x the one-process reading (on two quiet cores) with at most
100 MB per worker; per-step and per-device cost flat across the scaling table (the largest at most 1.5x the middle).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import (  # the shared bench harness, beside this script
    big_trace,
    ensure_hta,
    load,
    measured_main,
    median,
    project_python,
    two_process_capacity,
)
from _harness import run_child as _run_child

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DAM_SHARED") or ROOT.parent / "shared")
TRACE = SHARED / "traces" / "kineto-resnet50" / "resnet50_num_workers_0.pt.trace.json.gz"
__all__ = ["ensure_hta"]  # bench_compare.py takes the HTA environment from here
OLD_REF = "e791788"  # the last commit before the trace analysis (the ingest issue 14 started from)

OURS = """
import json, sys, time
t0 = time.perf_counter()
import expert
from expert.ingest import kineto
from expert.ingest._source import Source
from expert.ingest import _default_kb
t1 = time.perf_counter()
kb = _default_kb()  # the knowledge base load is part of the measured load
t2 = t1
if sys.argv[2] == "auto":
    result = expert.ingest_result(sys.argv[1])
    facts = len(result.observations)
    reader = result.files[0].stats["reader"]
    size = result.files[0].stats["bytes"]
else:
    file = kineto.parse(Source(sys.argv[1]), kb, engine="ijson")
    facts, reader, size = len(file.measured), file.stats["reader"], file.stats["bytes"]
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t3 - t2, "facts": facts, "reader": reader, "bytes": size}))
"""

HTA = """
import json, sys, time, logging
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1}))
"""


PARALLEL = """
import json, logging, sys, time
seen = {}


class Keep(logging.Handler):
    def emit(self, record):
        for key in ("read_s", "read_cpu_s", "parallel"):
            if hasattr(record, key):
                seen[key] = getattr(record, key)


if __name__ == "__main__":
    import expert
    from expert.ingest import _default_kb
    for name in ("expert.ingest.kineto", "expert.ingest.kineto_parallel"):
        logging.getLogger(name).setLevel(logging.DEBUG)
        logging.getLogger(name).addHandler(Keep())
    _default_kb()
    t0 = time.perf_counter()
    result = expert.ingest_result(sys.argv[1], workers=int(sys.argv[2]))
    t1 = time.perf_counter()
    print(json.dumps({"load_s": t1 - t0, "read_s": seen.get("read_s"), "read_cpu_s": seen.get("read_cpu_s"),
                      "parallel": seen.get("parallel"), "facts": len(result.observations)}))
"""


def run_child(argv: list[str], repeat: int, cwd: Path | None = None) -> dict[str, Any]:
    """Best (fastest load) of `repeat` runs, each in a fresh wrapper process; peak RSS is the largest seen. `cwd`
    (with PYTHONPATH) picks the code the child imports: the old ingest's tree, or this one."""
    return _run_child(__file__, argv, repeat, cwd=cwd, best="load_s")


def old_tree(ref: str, into: Path) -> Path | None:
    """The package at git `ref`, extracted into `into` (None when git or the ref is not there)."""
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "expert", "knowledge_base", "rules",
                                  "cli.py"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def scaling_trace(path: Path, *, steps: int = 0, devices: int = 0) -> Path:
    """A synthetic Kineto trace: `steps` ProfilerSteps (DataLoader span, launch, kernel each) or `devices` device
    ids (one kernel each), in libkineto's layout."""
    events = []
    t = 1000.0
    for n in range(steps):
        events += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": t,
                    "dur": 90},
                   {"ph": "X", "cat": "user_annotation",
                    "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "pid": 1, "tid": 1,
                    "ts": t, "dur": 30},
                   {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 40,
                    "dur": 5, "args": {"correlation": n + 1}},
                   {"ph": "X", "cat": "kernel", "name": "volta_sgemm_128x64_nn", "pid": 0, "tid": 7, "ts": t + 50,
                    "dur": 30, "args": {"device": 0, "stream": 7, "correlation": n + 1}}]
        t += 100
    for d in range(devices):
        events.append({"ph": "X", "cat": "kernel", "name": "volta_sgemm_128x64_nn", "pid": d, "tid": 7,
                       "ts": 1000.0 + 10 * d, "dur": 8, "args": {"device": d, "stream": 7, "correlation": d + 1}})
    blocks = ",\n".join("  {\n    " + json.dumps(ev)[1:-1] + "\n  }" for ev in events)
    path.write_text('{\n  "schemaVersion": 1,\n  "traceEvents": [\n' + blocks + "\n  ]\n}\n")
    return path


SCALING = (("steps", (1000, 10000, 20000)), ("devices", (100, 1000, 6000)))


def scaling(python: str, old_root: Path | None, old_limit: int) -> bool:
    """Ingest time against the number of steps and of devices, less the time of the same trace with one step (one
    device); that cost per step (per device) should stay flat. True if it does (the largest <= 1.5x the middle)."""
    print("scaling (synthetic traces; the time less a one-step/one-device trace's, per unit, stays flat if linear):")
    print(f"  {'size':>18s} {'trace MB':>9s} {'dam-expert':>11s} {'per unit':>10s} {'old ingest':>11s} "
          f"{'per unit':>10s}")
    flat = True
    with tempfile.TemporaryDirectory() as tmp:
        for kind, sizes in SCALING:
            one = run_child([python, "-c", OURS, str(scaling_trace(Path(tmp) / f"{kind}_1.json", **{kind: 1})),
                             "auto"], 3)["load_s"]
            per_unit: list[float] = []
            for n in sizes:
                path = scaling_trace(Path(tmp) / f"{kind}_{n}.json", **{kind: n})
                mb = path.stat().st_size / 1e6
                ours = run_child([python, "-c", OURS, str(path), "auto"], 3)  # best of 3: start-up noise
                per_unit.append(max(ours["load_s"] - one, 0.0) / (n - 1))
                line = f"  {n:>10,d} {kind:7s} {mb:9.1f} {ours['load_s']:9.3f} s {per_unit[-1] * 1e6:7.1f} us"
                if old_root is not None and n <= old_limit:
                    old = run_child([python, "-c", OURS, str(path), "auto"], 1, cwd=old_root)
                    line += f" {old['load_s']:9.2f} s {old['load_s'] / n * 1e6:7.0f} us"
                elif old_root is not None:
                    line += f" {'(skipped: quadratic)':>22s}"
                print(line, flush=True)
            if per_unit[1] <= 0:  # the middle size costs no more than one unit: nothing to compare against
                print(f"  cost per {kind[:-1]} at {sizes[1]:,} is within start-up noise; at {sizes[-1]:,} "
                      f"{per_unit[-1] * 1e6:.1f} us")
                continue
            growth = per_unit[-1] / per_unit[1]
            good = growth <= 1.5
            flat = flat and good
            print(f"  cost per {kind[:-1]} at {sizes[-1]:,} is {growth:.2f}x that at {sizes[1]:,} "
                  f"[{'linear' if good else 'grows: not linear'}]")
    return flat


def parallel(python: str, big: Path, repeat: int, workers: int) -> bool:
    """The 1 GB trace in one process and with byte ranges in `workers` processes, alternately; medians and ratios.
    True if the reading phase is >= 1.5x and every worker stays <= 100 MB."""
    mb = big.stat().st_size / 1e6
    print(f"parallel decode of {big.name} ({mb:.0f} MB), {workers} workers, {repeat} interleaved runs each:")
    print(f"  machine before: {load()}")
    runs: dict[str, list[dict[str, Any]]] = {"one": [], "many": []}
    capacity: list[float] = []
    for _ in range(repeat):
        capacity.append(two_process_capacity(python))
        runs["one"].append(run_child([python, "-c", PARALLEL, str(big), "1"], 1))
        runs["many"].append(run_child([python, "-c", PARALLEL, str(big), str(workers)], 1))
    print(f"  machine after:  {load()}; two CPU-bound processes ran {median(capacity):.2f}x as fast as one "
          f"(median of {', '.join(f'{c:.2f}' for c in capacity)}; 2.0 on two quiet cores)")
    for key, label in (("one", "one process"), ("many", f"{workers} workers")):
        rs = runs[key]
        reads = ", ".join(f"{r['read_s']:.2f}" for r in rs)
        print(f"  {label:13s} read {median([r['read_s'] for r in rs]):6.2f} s   ingest "
              f"{median([r['load_s'] for r in rs]):6.2f} s   largest process "
              f"{max(r['largest_process_mb'] for r in rs):5.0f} MB   (reads: {reads} s)")
    infos = [r["parallel"] for r in runs["many"] if r.get("parallel")]
    if len(infos) < len(runs["many"]):
        print("  (some runs with workers read in one process: the trace could not be cut at event boundaries)")
    peaks = [p for info in infos for p in info["peak_rss_mb"]]
    read_ratio = median([r["read_s"] for r in runs["one"]]) / median([r["read_s"] for r in runs["many"]])
    load_ratio = median([r["load_s"] for r in runs["one"]]) / median([r["load_s"] for r in runs["many"]])
    by_workers = median([info["by_workers"] / info["ranges"] for info in infos]) if infos else 0.0
    print(f"  per-worker peak RSS: {', '.join(f'{p:.0f}' for p in peaks) or '-'} MB; {by_workers:.0%} of the byte "
          f"ranges read by the workers (the rest by this process while they started)")
    good = read_ratio >= 1.5 and bool(peaks) and max(peaks) <= 100
    print(f"  ratio (one process / workers, medians): reading {read_ratio:.2f}x, whole ingest {load_ratio:.2f}x  "
          f"[{'meets' if good else 'misses'} >= 1.5x reading, <= 100 MB per worker]")
    if infos:  # CPU seconds do not depend on the machine's load the way wall seconds do
        seq_cpu = median([r["read_cpu_s"] for r in runs["one"]])
        work = median([info["worker_cpu_s"] + info["parent_cpu_s"] for info in infos])
        print(f"  CPU time of the reading: one process {seq_cpu:.2f} s; workers and parent together {work:.2f} s "
              f"(parent {median([info['parent_cpu_s'] for info in infos]):.2f} s): spread over {workers} idle cores "
              f"that would be {seq_cpu / (work / workers):.2f}x (an estimate, not a measurement)")
    return good


def row(label: str, data: dict[str, Any], mb: float) -> str:
    return (f"{label:34s} {data['load_s']:8.3f} s {mb / data['load_s']:9.1f} MB/s {data['wall_s']:8.2f} s "
            f"{data['peak_rss_mb']:9.1f} MB")


def main() -> int:
    if measured_main():
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-hta", action="store_true", help="skip the HTA comparison")
    parser.add_argument("--no-big", action="store_true", help="skip the synthetic 1 GB trace")
    parser.add_argument("--big-size-gb", type=float, default=1.0)
    parser.add_argument("--old-ref", default=OLD_REF, help="git ref of the old ingest (default: %(default)s)")
    parser.add_argument("--no-old", action="store_true", help="skip the old-ingest comparison")
    parser.add_argument("--no-scaling", action="store_true", help="skip the steps/devices scaling table")
    parser.add_argument("--no-parallel", action="store_true", help="skip the parallel decode comparison")
    parser.add_argument("--parallel-repeat", type=int, default=3, help="interleaved runs of each (default: 3)")
    parser.add_argument("--workers", type=int, default=None, help="worker processes (default: the CPUs)")
    parser.add_argument("--old-limit", type=int, default=10000,
                        help="largest step/device count to run the (quadratic) old ingest on (default: %(default)s)")
    args = parser.parse_args()
    if not TRACE.is_file():
        print(f"bench_ingest: the real resnet50 trace is missing ({TRACE})", file=sys.stderr)
        return 2
    python = project_python()
    with gzip.open(TRACE, "rb") as fh:
        raw_mb = sum(len(chunk) for chunk in iter(lambda: fh.read(1 << 20), b"")) / 1e6
    gz_mb = TRACE.stat().st_size / 1e6
    print(f"resnet50 trace: {TRACE.name}: {gz_mb:.2f} MB gzip, {raw_mb:.1f} MB JSON; cpus {os.cpu_count()}")
    header = f"{'':34s} {'load':>10s} {'JSON MB/s':>14s} {'process':>10s} {'peak RSS':>12s}"
    print(header)
    ours = run_child([python, "-c", OURS, str(TRACE), "auto"], args.repeat)
    print(row(f"dam-expert ({ours['reader']})", ours, raw_mb))
    ours_ijson = run_child([python, "-c", OURS, str(TRACE), "ijson"], args.repeat)
    print(row("dam-expert (ijson reader)", ours_ijson, raw_mb))
    old_dir = tempfile.TemporaryDirectory()
    old_root = None if args.no_old else old_tree(args.old_ref, Path(old_dir.name))
    old: dict[str, Any] | None = None
    if old_root is not None:
        old = run_child([python, "-c", OURS, str(TRACE), "auto"], args.repeat, cwd=old_root)
        print(row(f"old ingest ({args.old_ref}, {old['reader']})", old, raw_mb))
        print(f"  analysis cost: load {ours['load_s'] / old['load_s']:.2f}x the old ingest "
              f"(+{ours['load_s'] - old['load_s']:.3f} s), peak RSS {ours['peak_rss_mb'] / old['peak_rss_mb']:.2f}x "
              f"(+{ours['peak_rss_mb'] - old['peak_rss_mb']:.1f} MB)")
    elif not args.no_old:
        print(f"old ingest: skipped (git ref {args.old_ref} is not available)")
    ok = True
    if not args.no_hta:
        hta_python = ensure_hta()
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / TRACE.name).symlink_to(TRACE)
            hta = run_child([str(hta_python), "-c", HTA, tmp], args.repeat)
        print(row("HTA TraceAnalysis", hta, raw_mb))
        for label, mine in (("batch reader", ours), ("ijson reader", ours_ijson)):
            speed = hta["load_s"] / mine["load_s"]
            process = hta["wall_s"] / mine["wall_s"]
            memory = mine["peak_rss_mb"] / hta["peak_rss_mb"]
            good = speed >= 5 and memory <= 1 / 3
            ok = ok and (good or label == "ijson reader")
            print(f"  vs HTA ({label}): load {speed:.1f}x faster (whole process {process:.1f}x), peak RSS "
                  f"{memory:.2f} of HTA's  [{'meets' if good else 'misses'} >= 5x and <= 1/3]")
    big = big_trace(args.big_size_gb) if not (args.no_big and args.no_parallel) else None
    if big is not None and not args.no_big:
        big_mb = big.stat().st_size / 1e6
        print(f"synthetic trace: {big.name}: {big_mb:.0f} MB JSON")
        for engine in ("auto", "ijson"):
            data = run_child([python, "-c", OURS, str(big), engine], 1)
            good = data["peak_rss_mb"] < 300
            ok = ok and good
            print(row(f"dam-expert ({data['reader']})", data, big_mb) +
                  f"  [{'meets' if good else 'misses'} < 300 MB]")
            if engine == "auto" and old_root is not None:
                before = run_child([python, "-c", OURS, str(big), engine], 1, cwd=old_root)
                print(row(f"old ingest ({before['reader']})", before, big_mb) +
                      f"  analysis cost {data['load_s'] / before['load_s']:.2f}x time, "
                      f"+{data['peak_rss_mb'] - before['peak_rss_mb']:.0f} MB")
    if big is not None and not args.no_parallel:
        ok = parallel(python, big, args.parallel_repeat, args.workers or len(os.sched_getaffinity(0))) and ok
    if not args.no_scaling:
        ok = scaling(python, old_root, args.old_limit) and ok
    old_dir.cleanup()
    print("all targets met" if ok else "some targets missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
