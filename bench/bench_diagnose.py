"""Diagnosis benchmark: warm latency per engine, engine floor vs full pipeline, and `dam` cold start.

Run:  .venv/bin/python bench/bench_diagnose.py [--n 2000]

Every figure is printed next to a baseline measured in the same run (the machine is small and noisy):
the engine floor (rules only) for the full pipeline, and `python -c pass` for the cold start.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import expert  # noqa: E402
from expert.derive.graph import derive  # noqa: E402
from expert.observations.file import read_observation_file  # noqa: E402


def workload(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """Bundled examples plus seeded random observation sets shaped like real ones."""
    examples = [read_observation_file(p).observations for p in sorted((ROOT / "examples").glob("*.yaml"))]
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(n):
        if i % 4 == 0:
            out.append(dict(examples[i % len(examples)]))
            continue
        step = rng.uniform(0.01, 1.0)
        out.append({
            "hardware": rng.choice(["h100-sxm", "a100-sxm-80gb", "l40s", "mi300x"]),
            "dtype": rng.choice(["bf16", "fp16", "fp32"]),
            "workload": rng.choice(["training", "inference"]),
            "batch_size": rng.choice([1, 8, 64, 256]),
            "gpu_util": round(rng.random(), 3),
            "sm_active": round(rng.random(), 3),
            "mem_bw_util": round(rng.random(), 3),
            "host_cpu_util": round(rng.random(), 3),
            "step_time_s": step,
            "data_wait_s": step * rng.random() * 0.5,
            "gpu_idle_gap_frac": round(rng.random(), 3),
            "mean_kernel_us": rng.uniform(2, 500),
            "flops": rng.uniform(1e12, 1e16),
            "bytes_moved": rng.uniform(1e9, 1e12),
        })
    return out


def timed(fn: Callable[[Any], Any], items: list[Any]) -> list[float]:
    lat = []
    for item in items:
        t = time.perf_counter()
        fn(item)
        lat.append(time.perf_counter() - t)
    return lat


def pct(lat: list[float], q: float) -> float:
    ordered = sorted(lat)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6


def cold_start(runs: int) -> tuple[float, float]:
    dam = shutil.which("dam", path=str(Path(sys.executable).parent)) or "dam"
    cmds = {
        "baseline": [sys.executable, "-c", "pass"],
        "dam": [dam, "diagnose", "--example", "data_starved_training"],
    }
    medians = {}
    for name, cmd in cmds.items():
        walls = []
        for _ in range(runs):
            t = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, cwd="/tmp")
            walls.append(time.perf_counter() - t)
        medians[name] = statistics.median(walls)
    return medians["dam"], medians["baseline"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2000, help="diagnoses per measurement (default 2000)")
    parser.add_argument("--cold-runs", type=int, default=7)
    args = parser.parse_args()
    items = workload(args.n)
    print(f"workload: {len(items)} observation sets (bundled examples + seeded random), "
          f"Python {sys.version.split()[0]}")
    print(f"{'engine':15s} {'p50 µs':>9s} {'p95 µs':>9s} {'diag/s':>9s}   {'engine floor p50':>17s} "
          f"{'full/floor':>10s}")
    for name in ("durable", "pure"):
        exp = expert.Expert(engine=name)  # type: ignore[arg-type]
        prepared = []
        for obs in items:
            normalised = exp.observations(obs)
            facts = {**normalised.values(), **{k: d.value for k, d in derive(normalised.values(), exp.kb).items()}}
            prepared.append(facts)
        for obs in items[:200]:  # warm up
            exp.diagnose(obs)
        full = timed(exp.diagnose, items)
        floor = timed(exp.engine.run, prepared)
        p50 = pct(full, 0.5)
        print(f"{exp.engine_name:15s} {p50:9.0f} {pct(full, 0.95):9.0f} {len(full) / sum(full):9.0f}   "
              f"{pct(floor, 0.5):14.0f} µs {p50 / pct(floor, 0.5):9.1f}x")
    dam, base = cold_start(args.cold_runs)
    print(f"cold start `dam diagnose --example data_starved_training`: {dam * 1e3:.0f} ms "
          f"(python -c pass: {base * 1e3:.0f} ms; ratio {dam / base:.1f}x); target ≤ 500 ms")


if __name__ == "__main__":
    main()
