"""Trace ingestion benchmark: dam-expert against Holistic Trace Analysis (HTA) loading the same trace, the cost of
the trace analysis (time breakdown, idle causes, per-op FLOPs) against the ingest before it, and how ingest scales
with the number of steps and of devices.

    python bench/bench_ingest.py [--repeat 3] [--no-hta] [--no-big] [--big-size-gb 1.0] [--old-ref REF]
                                 [--no-scaling] [--no-old]

Every measurement runs in its own child process, started through a small wrapper that waits for it and reads
getrusage(RUSAGE_CHILDREN), so the peak RSS reported is that child's (and its own children's, for HTA's parsing
pool), interpreter and imports included. Each child also reports the time of the load call itself; the speed ratio
compares those (HTA's `TraceAnalysis(trace_dir=...)` against `expert.ingest_result(path)`), and whole-process wall
times are printed beside them. The best of --repeat runs is kept.

- HTA is installed into its own virtual environment, bench/.venv-hta (created on first use: pip install
  HolisticTraceAnalysis), so its dependencies never touch the project's.
- The old ingest is the code at git ref --old-ref (default: the commit before the trace analysis), extracted with
  `git archive` into a temporary directory and run the same way; "analysis cost" is ours over it, same trace, same
  run. Without git or the ref, that row is skipped with a note.
- The synthetic ~1 GB trace is made from the real resnet50 traces by bench/make_big_trace.py (bench/data/).
- The scaling table times ingest of synthetic traces with 1k-20k ProfilerSteps (a DataLoader span, a launch and a
  kernel each) and with 1k-6k device ids (a kernel each): a linear ingest keeps the time per step (per device) flat.
Targets: on the resnet50 trace at least 5x faster than HTA and at most 1/3 of its peak RSS; on the 1 GB trace a peak
RSS under 300 MB; per-step and per-device cost flat across the scaling table.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared" / "traces" / "kineto-resnet50" / "resnet50_num_workers_0.pt.trace.json.gz"
BIG = ROOT / "bench" / "data" / "big_trace.json"
HTA_VENV = ROOT / "bench" / ".venv-hta"
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


def measure(argv: list[str]) -> None:
    """Wrapper mode: run argv, then print its output and the peak RSS of it and its children."""
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "{}"
    try:
        data = json.loads(last)
    except json.JSONDecodeError:
        data = {}
    data.update(rc=proc.returncode, wall_s=wall, peak_rss_mb=peak_kib / 1024, stderr=proc.stderr[-2000:])
    print(json.dumps(data))


def run_child(argv: list[str], repeat: int, cwd: Path | None = None) -> dict[str, Any]:
    """Best (fastest load) of `repeat` runs, each in a fresh wrapper process; peak RSS is the largest seen. `cwd`
    (with PYTHONPATH) picks the code the child imports: the old ingest's tree, or this one."""
    best: dict[str, Any] | None = None
    peak = 0.0
    env = {**os.environ, "PYTHONPATH": str(cwd or ROOT)}
    for _ in range(repeat):
        out = subprocess.run([sys.executable, __file__, "--_measure", "--", *argv], capture_output=True, text=True,
                             check=True, cwd=cwd or ROOT, env=env)
        data = json.loads(out.stdout.strip().splitlines()[-1])
        if data["rc"] != 0:
            raise SystemExit(f"benchmark child failed ({' '.join(argv[:2])} ...):\n{data['stderr']}")
        peak = max(peak, data["peak_rss_mb"])
        if best is None or data["load_s"] < best["load_s"]:
            best = data
    assert best is not None
    best["peak_rss_mb"] = peak
    return best


def ensure_hta() -> Path:
    python = HTA_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {HTA_VENV} (pip install HolisticTraceAnalysis) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(HTA_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "HolisticTraceAnalysis"], check=True)
    return python


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


def scaling(python: str, old_root: Path | None, old_limit: int) -> None:
    """Ingest time against the number of steps and of devices; per-step (per-device) cost should stay flat."""
    print("scaling (synthetic traces; a linear ingest keeps the cost per step/device flat):")
    print(f"  {'size':>16s} {'trace MB':>9s} {'dam-expert':>11s} {'per unit':>10s} {'old ingest':>11s} "
          f"{'per unit':>10s}")
    with tempfile.TemporaryDirectory() as tmp:
        for kind, sizes in (("steps", (1000, 5000, 10000, 20000)), ("devices", (1000, 3000, 6000))):
            for n in sizes:
                path = scaling_trace(Path(tmp) / f"{kind}_{n}.json", **{kind: n})
                mb = path.stat().st_size / 1e6
                ours = run_child([python, "-c", OURS, str(path), "auto"], 1)
                line = (f"  {n:>10d} {kind:5s} {mb:9.1f} {ours['load_s']:9.2f} s {ours['load_s'] / n * 1e6:7.0f} us")
                if old_root is not None and n <= old_limit:
                    old = run_child([python, "-c", OURS, str(path), "auto"], 1, cwd=old_root)
                    line += f" {old['load_s']:9.2f} s {old['load_s'] / n * 1e6:7.0f} us"
                elif old_root is not None:
                    line += f" {'(skipped: quadratic)':>22s}"
                print(line, flush=True)


def ensure_big(size_gb: float) -> Path:
    if not BIG.exists() or abs(BIG.stat().st_size - size_gb * 1e9) > 0.1e9:
        print(f"building {BIG} (~{size_gb:g} GB) from the real traces ...", flush=True)
        subprocess.run([sys.executable, str(ROOT / "bench" / "make_big_trace.py"), "--size-gb", str(size_gb),
                        "--out", str(BIG)], check=True)
    return BIG


def row(label: str, data: dict[str, Any], mb: float) -> str:
    return (f"{label:34s} {data['load_s']:8.3f} s {mb / data['load_s']:9.1f} MB/s {data['wall_s']:8.2f} s "
            f"{data['peak_rss_mb']:9.1f} MB")


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--_measure":
        measure(sys.argv[3:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-hta", action="store_true", help="skip the HTA comparison")
    parser.add_argument("--no-big", action="store_true", help="skip the synthetic 1 GB trace")
    parser.add_argument("--big-size-gb", type=float, default=1.0)
    parser.add_argument("--old-ref", default=OLD_REF, help="git ref of the old ingest (default: %(default)s)")
    parser.add_argument("--no-old", action="store_true", help="skip the old-ingest comparison")
    parser.add_argument("--no-scaling", action="store_true", help="skip the steps/devices scaling table")
    parser.add_argument("--old-limit", type=int, default=10000,
                        help="largest step/device count to run the (quadratic) old ingest on (default: %(default)s)")
    args = parser.parse_args()
    if not TRACE.is_file():
        print(f"bench_ingest: the real resnet50 trace is missing ({TRACE})", file=sys.stderr)
        return 2
    python = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").is_dir() else sys.executable
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
    if not args.no_big:
        big = ensure_big(args.big_size_gb)
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
    if not args.no_scaling:
        scaling(python, old_root, args.old_limit)
    old_dir.cleanup()
    print("all targets met" if ok else "some targets missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
