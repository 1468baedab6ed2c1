"""Ingest cost is linear in the number of steps and of devices (issue 22): 10,000 ProfilerSteps with their
DataLoader spans took 12 s and 20,000 took 50 s (an overlap scan per step window), 6,000 device ids in a 1.6 MB trace
took 53 s. The traces are generated here; each read runs in a subprocess with a generous time limit, so a quadratic
regression fails (or times out) instead of passing slowly. Timings for the record go in bench/bench_ingest.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))


def steps_trace(n: int, path: Path) -> Path:
    """n ProfilerSteps, each with a DataLoader span and one launched GEMM (about 0.7 kB per step)."""
    from kineto_builder import Trace

    trace = Trace()
    for s in range(n):
        ts = s * 100.0
        trace.step(s + 1, ts, 100)
        trace.loader(ts, 30)
        trace.launch("aten::mm", "gemm", ts + 35, ts + 40, 50)
    return trace.write(path)


def devices_trace(n: int, path: Path) -> Path:
    """One kernel launched on each of n device ids."""
    from kineto_builder import Trace

    trace = Trace()
    for d in range(n):
        corr = trace.runtime("cudaLaunchKernel", d * 10.0, 2)
        trace.kernel("k", d * 10.0 + 3, 5, corr, device=d)
    return trace.write(path)


def _timed_ingest(kind: str, n: int, tmp_path: Path) -> dict[str, Any]:
    code = (f"import json, sys, time; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            f"from pathlib import Path; from test_ingest_scale import {kind}_trace; "
            f"from expert.ingest import ingest_result; "
            f"p = {kind}_trace({n}, Path({str(tmp_path)!r}) / 't.json'); t = time.perf_counter(); "
            f"r = ingest_result(p); "
            f"print(json.dumps({{'s': time.perf_counter() - t, 'facts': len(r.observations), "
            f"'bytes': p.stat().st_size}}))")
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    out: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    out["wall"] = time.perf_counter() - started
    return out


def test_twenty_thousand_steps_ingest_in_linear_time(tmp_path: Path) -> None:
    small = _timed_ingest("steps", 10_000, tmp_path)
    large = _timed_ingest("steps", 20_000, tmp_path)
    assert large["facts"] > 0
    # linear: about twice the time (here ~2-3 s on two busy cores); quadratic was 12 s -> 50 s
    assert large["s"] < 20, large
    assert large["s"] < 3.5 * small["s"] + 2.0, (small, large)


def test_six_thousand_device_ids_ingest_in_linear_time(tmp_path: Path) -> None:
    small = _timed_ingest("devices", 3_000, tmp_path)
    large = _timed_ingest("devices", 6_000, tmp_path)
    assert large["facts"] > 0 and large["bytes"] > 1_500_000
    assert large["s"] < 15, large  # was 53 s
    assert large["s"] < 3.5 * small["s"] + 2.0, (small, large)
