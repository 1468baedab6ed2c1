"""What the benchmark scripts share: each measurement in a fresh child process, started through a small wrapper (the
script itself run with `--_measure`) that waits for it and reports its peak memory; the best of a few runs; the
Holistic Trace Analysis (HTA) environment the comparisons run in; medians, the machine's load, and how much faster
two CPU-bound processes run than one on it right now (so that a parallel speed-up can be read against it).

    from _harness import measured_main, run_child, ensure_hta   (bench/ is on sys.path when a bench script runs)
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HTA_VENV = ROOT / "bench" / ".venv-hta"


def _tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants, summed (worker pools included)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue
    return total


def measure(argv: list[str], tree: bool) -> None:
    """Wrapper mode: run argv, then print its last JSON line with rc, wall_s, stderr and its peak memory:
    getrusage's largest single process of the tree (largest_process_mb) and, with `tree` and psutil installed, the
    largest sum of the resident sizes of the whole process tree, sampled every 20 ms (peak_rss_mb is the larger)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tree_peak = 0
    if tree:
        try:
            import psutil  # noqa: F401 - optional: without it only the largest single process is known
        except ImportError:
            tree = False
    while tree and proc.poll() is None:
        tree_peak = max(tree_peak, _tree_rss(proc.pid))
        time.sleep(0.02)
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - start
    single = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    last = stdout.strip().splitlines()[-1] if stdout.strip() else "{}"
    try:
        data = json.loads(last)
    except json.JSONDecodeError:
        data = {}
    data.update(rc=proc.returncode, wall_s=wall, peak_rss_mb=max(single, tree_peak / 2**20), largest_process_mb=single,
                stderr=stderr[-3000:])
    print(json.dumps(data))


def measured_main() -> bool:
    """Run wrapper mode if this process was started as one (`script --_measure [--tree] -- argv...`); True if so."""
    if len(sys.argv) > 2 and sys.argv[1] == "--_measure":
        tree = sys.argv[2] == "--tree"
        measure(sys.argv[4 if tree else 3:], tree)
        return True
    return False


def run_child(script: str, argv: list[str], repeat: int, *, cwd: Path | None = None, best: str = "wall_s",
              tree: bool = False) -> dict[str, Any]:
    """Best (smallest `best`) of `repeat` runs of argv, each in a fresh wrapper process (`script --_measure`); peak
    RSS is the largest seen. `cwd` (with PYTHONPATH) picks the code the child imports: an old tree, or this one."""
    chosen: dict[str, Any] | None = None
    peak = 0.0
    env = {**os.environ, "PYTHONPATH": str(cwd or ROOT)}
    flags = ["--_measure", "--tree", "--"] if tree else ["--_measure", "--"]
    for _ in range(repeat):
        out = subprocess.run([sys.executable, script, *flags, *argv], capture_output=True, text=True, check=True,
                             cwd=cwd or ROOT, env=env)
        data = json.loads(out.stdout.strip().splitlines()[-1])
        if data["rc"] != 0:
            raise SystemExit(f"benchmark child failed ({' '.join(argv[:3])} ...):\n{data['stderr']}")
        peak = max(peak, data["peak_rss_mb"])
        if chosen is None or data[best] < chosen[best]:
            chosen = data
    assert chosen is not None
    chosen["peak_rss_mb"] = peak
    return chosen


def ensure_hta() -> Path:
    """The Python of bench/.venv-hta, created on first use (pip install HolisticTraceAnalysis), so that HTA's
    dependencies never touch the project's."""
    python = HTA_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {HTA_VENV} (pip install HolisticTraceAnalysis) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(HTA_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "HolisticTraceAnalysis"], check=True)
    return python


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def load() -> str:
    """The machine's load averages (1, 5, 15 minutes) and CPU count, as `uptime` prints them."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPUs"


_SPIN = "import time\nt = time.perf_counter()\nx = 0\nfor i in range(8_000_000): x += i\nprint(time.perf_counter() - t)"


def two_process_capacity(python: str) -> float:
    """How much faster two CPU-bound processes finish than the same two run one after the other, right now: about
    2.0 on two quiet cores, 1.0 or less on a machine busy with other work (a parallel speed-up is bounded by it)."""
    def spins(n: int) -> float:
        start = time.perf_counter()
        procs = [subprocess.Popen([python, "-c", _SPIN], stdout=subprocess.DEVNULL) for _ in range(n)]
        for p in procs:
            p.wait()
        return time.perf_counter() - start

    return 2 * spins(1) / spins(2)


def big_trace(size_gb: float = 1.0) -> Path:
    """bench/data/big_trace.json: about `size_gb` GB of the real resnet50 traces laid end to end in libkineto's layout
    (bench/make_big_trace.py; the traces from ../shared or $DAM_SHARED), built on first use."""
    big = ROOT / "bench" / "data" / "big_trace.json"
    if not big.is_file() or abs(big.stat().st_size - size_gb * 1e9) > 0.1e9:
        shared = Path(os.environ.get("DAM_SHARED") or ROOT.parent / "shared")
        print(f"building {big} (~{size_gb:g} GB) from the real resnet50 traces ...", flush=True)
        sys.path.insert(0, str(ROOT / "bench"))
        import make_big_trace

        make_big_trace.SOURCES = [shared / "traces" / "kineto-resnet50" / p.name for p in make_big_trace.SOURCES]
        missing = [p for p in make_big_trace.SOURCES if not p.is_file()]
        if missing:
            raise SystemExit(f"the real traces are missing: {', '.join(map(str, missing))} (set DAM_SHARED)")
        make_big_trace.build(big, int(size_gb * 1e9))
    return big


def project_python() -> str:
    """The Python that runs the measured children: the project's .venv when there is one, else this one."""
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable
