"""Multi-rank benchmark: dam-expert's rank analysis against Holistic Trace Analysis (HTA) on the same rank folders.

    python bench/bench_ranks.py [--ranks 2 4 8] [--repeat 1] [--no-hta] [--workers N] [--big-ranks 2 4]

For each rank count N, a folder of N rank traces is built from the real A100 rank trace in ../shared/traces (or
$DAM_SHARED/traces) by tests/gen_traces/make_gpu_ranks.py (rank N-1 computes 1.3x as long and the others wait for
it; bench/data/ranks-N/). Then, each in its own child process, whose peak memory is the largest sum of the resident
sizes of its process tree, worker processes included (sampled every 20 ms with psutil when it is installed; else
getrusage's largest single process):

- dam-expert: `expert.ingest_result(folder)` (rank files read in worker processes from 128 MB of JSON on; below,
  in the process itself; --workers N forces N), whose per-rank figures
  are the temporal breakdown (idle, compute, non-compute shares of the step windows) and the communication /
  computation overlap in HTA's definition;
- HTA: `TraceAnalysis(trace_dir=folder)` (its parser pool), `get_temporal_breakdown()` and `get_comm_comp_overlap()`.

With --big-ranks 2 4, it also reads N ranks of about 1 GB of JSON each (the synthetic trace of
bench/make_big_trace.py, hard-linked as rank0.json ... so the ranks come from the file names) and prints dam-expert's
peak memory, which the worker count bounds: it must not grow with N.

It prints, per N, the largest per-rank difference of each figure in percentage points (HTA measures from the first
to the last kernel before the last ProfilerStep; dam-expert over the ProfilerStep windows, here the same steps), and
wall time and peak RSS as ratios. HTA is installed into bench/.venv-hta on first use (pip install
HolisticTraceAnalysis), so its dependencies never touch the project's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import big_trace, ensure_hta, measured_main, project_python  # the shared harness, beside this script
from _harness import run_child as _run_child

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DAM_SHARED") or ROOT.parent / "shared")
SOURCE = SHARED / "traces" / "hta" / "trace_diff_control_control.json.gz"
DATA = ROOT / "bench" / "data"

OURS = """
import json, sys, time
t0 = time.perf_counter()
import expert
t1 = time.perf_counter()
steps = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] != "-" else None
workers = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3] != "-" else None
result = expert.ingest_result(sys.argv[1], steps=steps, workers=workers)
t2 = time.perf_counter()
ranks = {}
for r in (result.job.ranks if result.job else []):  # one file alone (no distributedInfo) is a single-GPU trace
    compute = r.compute_s / r.step_time_s
    ranks[r.rank] = {"idle": r.idle_frac, "compute": compute, "non_compute": 1 - r.idle_frac - compute,
                     "overlap": r.comm_overlap_frac}
slowest = result.job.slowest_rank if result.job else None
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "ranks": ranks, "slowest_rank": slowest}))
"""

HTA = """
import json, sys, time, logging
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
breakdown = analysis.get_temporal_breakdown(visualize=False)
overlap = analysis.get_comm_comp_overlap(visualize=False)
t2 = time.perf_counter()
ranks = {}
for row in breakdown.to_dict("records"):
    ranks[int(row["rank"])] = {"idle": row["idle_time_pctg"] / 100, "compute": row["compute_time_pctg"] / 100,
                               "non_compute": row["non_compute_time_pctg"] / 100}
for row in overlap.to_dict("records"):
    ranks[int(row["rank"])]["overlap"] = row["comp_comm_overlap_pctg"] / 100
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "ranks": ranks}))
"""


def run_child(argv: list[str], repeat: int) -> dict[str, Any]:
    """Best (fastest) of `repeat` runs, each in a fresh wrapper process whose peak memory is that of the whole
    process tree (worker processes included); see bench/_harness.py."""
    return _run_child(__file__, argv, repeat, tree=True)


def ensure_ranks(n: int) -> Path:
    folder = DATA / f"ranks-{n}"
    if not (folder / f"rank{n - 1}.json.gz").is_file():
        print(f"building {folder} ({n} rank traces from {SOURCE.name}) ...", flush=True)
        subprocess.run([sys.executable, str(ROOT / "tests" / "gen_traces" / "make_gpu_ranks.py"), str(folder),
                        "--source", str(SOURCE), "--ranks", str(n), "--slow-rank", str(n - 1), "--slow-factor", "1.3"],
                       check=True, capture_output=True)
    return folder


def ensure_big_ranks(n: int) -> Path:
    """N hard links to the ~1 GB synthetic trace (bench/make_big_trace.py), named rank0.json ... rank{N-1}.json."""
    big = big_trace(1.0)  # the real resnet50 traces laid end to end (bench/make_big_trace.py)
    folder = DATA / f"big-ranks-{n}"
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(n):
        link = folder / f"rank{r}.json"
        if not link.exists():
            os.link(big, link)
    return folder


def hta_steps(folder: Path) -> str:
    """The ProfilerSteps HTA analyses by default: all but the last (it drops the last profiler step)."""
    import gzip
    import re

    with gzip.open(folder / "rank0.json.gz", "rt", encoding="utf-8") as fh:
        steps = sorted({int(m) for m in re.findall(r'"name": "ProfilerStep#(\d+)"', fh.read())})
    return f"{steps[0]}:{steps[-2]}"


def main() -> int:
    if measured_main():
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--no-hta", action="store_true", help="skip the HTA comparison")
    parser.add_argument("--workers", help="dam-expert's worker processes (default: its own choice)")
    parser.add_argument("--big-ranks", type=int, nargs="*", default=[],
                        help="also read N ranks of ~1 GB each (dam-expert only), e.g. --big-ranks 2 4")
    args = parser.parse_args()
    if not SOURCE.is_file():
        print(f"bench_ranks: the real rank trace is missing ({SOURCE}); set DAM_SHARED", file=sys.stderr)
        return 2
    python = project_python()
    hta_python = None if args.no_hta else str(ensure_hta())
    env_note = f"cpus {os.cpu_count()}; source {SOURCE.name} ({SOURCE.stat().st_size / 1e6:.1f} MB gzip per rank)"
    print(env_note)
    ok = True
    for n in args.ranks:
        folder = ensure_ranks(n)
        steps = hta_steps(folder)
        ours = run_child([python, "-c", OURS, str(folder), steps, args.workers or "-"], args.repeat)
        print(f"\n{n} ranks ({folder}, ProfilerStep {steps}):")
        print(f"  dam-expert  wall {ours['wall_s']:7.2f} s  (ingest {ours['load_s']:.2f} s)  peak RSS "
              f"{ours['peak_rss_mb']:7.1f} MB   slowest rank {ours['slowest_rank']}")
        if hta_python is None:
            continue
        hta = run_child([hta_python, "-c", HTA, str(folder)], args.repeat)
        print(f"  HTA         wall {hta['wall_s']:7.2f} s  (load + 2 analyses {hta['load_s']:.2f} s)  peak RSS "
              f"{hta['peak_rss_mb']:7.1f} MB")
        worst: dict[str, float] = {}
        for rank, figures in hta["ranks"].items():
            mine = ours["ranks"][rank]
            for key in ("idle", "compute", "non_compute", "overlap"):
                worst[key] = max(worst.get(key, 0.0), abs(mine[key] - figures[key]) * 100)
        agree = all(v <= 3.0 for v in worst.values())
        ok = ok and agree
        print("  largest per-rank difference, points: " + ", ".join(f"{k} {v:.2f}" for k, v in worst.items()) +
              f"  [{'agree' if agree else 'differ'} within 3 points]")
        example = min(hta["ranks"])
        print(f"  rank {example}: dam-expert " + ", ".join(f"{k} {v:.1%}" for k, v in ours["ranks"][example].items())
              + " | HTA " + ", ".join(f"{k} {v:.1%}" for k, v in hta["ranks"][example].items()))
        print(f"  ratios: HTA wall / dam-expert wall {hta['wall_s'] / ours['wall_s']:.1f}x; dam-expert peak RSS / "
              f"HTA peak RSS {ours['peak_rss_mb'] / hta['peak_rss_mb']:.2f}")
    for n in args.big_ranks:
        folder = ensure_big_ranks(n)
        size = sum(p.stat().st_size for p in folder.glob("rank*.json")) / 1e9
        big = run_child([python, "-c", OURS, str(folder), "-", args.workers or "-"], 1)
        print(f"\n{n} ranks of ~1 GB ({size:.1f} GB of JSON): dam-expert wall {big['wall_s']:.1f} s, peak RSS "
              f"{big['peak_rss_mb']:.0f} MB (largest process {big['largest_process_mb']:.0f} MB); "
              f"{big['peak_rss_mb'] / (size * 1e3):.2f} MB of memory per MB of JSON")
    print("\nfigures agree with HTA" if ok else "\nsome figures differ from HTA by more than 3 points")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
