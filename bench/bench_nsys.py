"""Nsight Systems export ingestion benchmark: dam-expert against nsys-ai reading the same files.

    python bench/bench_nsys.py [--repeat 3] [--no-nsys-ai] [--no-big] [--big-size-gb 1.0] [--src DIR] [--in-memory]
                               [--no-one-process]

Files: the real exports in ../shared/traces/nsys/ (2.7 MB and 2.4 MB two-GPU jobs, two small ones) and a synthetic
export of --big-size-gb grown from mfu_2gpu_before.sqlite by bench/make_big_nsys.py (rows replicated, timestamps and
correlation ids shifted; bench/data/, not committed).

Each measurement runs in its own child process through a wrapper that reads getrusage(RUSAGE_CHILDREN), so the peak
RSS is that child's, interpreter and imports included ("peak RSS": its largest process); "all procs" is the peak of
the sum over the child and its descendants, sampled every 50 ms (dam-expert's device workers, nsys-ai's DuckDB
threads share one process). On a machine with more than one CPU the big export is also read with
DAM_INGEST_WORKERS=1 (its devices swept one after the other in one process), for the ratio of the parallel sweep to
it in the same run (--no-one-process skips it). The load average is printed: on shared cores every figure is
slowed by the others' work, so compare the ratios of one run. The ratios compare whole-process wall time (nsys-ai has no
separate load call): dam-expert `expert.ingest_result(FILE)` (every fact, per-device timelines, NVTX steps) against
`nsys-ai summary FILE` (per-GPU span, busy, idle, top kernels, NCCL share: the closest analysis it has). The best of
--repeat runs is kept for the real files, one run each for the big file.

- nsys-ai is installed into its own virtual environment, bench/.venv-nsys-ai (created on first use), never into the
  project's: its wheel ships a top-level sitecustomize.py, and it pulls duckdb, pyarrow and textual. DuckDB's sqlite
  extension, which nsys-ai would download at run time, comes from the duckdb-ext-sqlite package (duckdb pinned to
  its 1.4.4), found through a HOME whose ~/.duckdb/extensions points into that venv.
- nsys-ai builds a Parquet cache beside the profile on first use (FILE.nsys-cache/). "cold" removes it before each
  run (what a first look at a profile costs); "warm" keeps it (a later query on the same profile).
- nsys-ai is an optional baseline: when it cannot be installed (no package index), its rows are skipped with the
  reason, and dam-expert's wall time and peak RSS are still measured.
- --in-memory also runs the in-memory timeline analysis the nsys reader used before it streamed (every device's rows
  held in a `timeline.Timeline`, then `timeline.analyse` and `cluster.device_rank` on the steady window), for the
  before/after ratio in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "traces" / "nsys"
BIG = ROOT / "bench" / "data" / "big_nsys.sqlite"
VENV = ROOT / "bench" / ".venv-nsys-ai"

OURS = """
import json, sys, time
t0 = time.perf_counter()
import expert
from expert.ingest import _default_kb
t1 = time.perf_counter()
_default_kb()
result = expert.ingest_result(sys.argv[1])
t2 = time.perf_counter()
util = {n.split(':')[0]: n.split('busy ')[1].split('%')[0] for n in result.notes
        if n.startswith('device ') and 'busy ' in n}
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "facts": len(result.observations), "util": util,
                  "rows": sum(v for k, v in result.files[0].stats.items() if k in ("kernels", "memcpys", "memsets",
                              "runtime_calls", "sync_records", "nvtx_events"))}))
"""


def _tree_rss_kib(root: int) -> int:
    """The resident memory of a process and all its descendants, in KiB (Linux /proc; 0 elsewhere)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        rss[pid] = int(fields[21]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total


def measure(argv: list[str], env: dict[str, str] | None) -> None:
    """Wrapper mode: run argv, then print its last JSON line (if any), wall time, the peak RSS of its largest process
    and the peak of the whole process tree (sampled every 50 ms: a reader's worker processes included)."""
    start = time.perf_counter()
    tree = 0
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(argv, stdout=out, stderr=err, text=True, env=env)
        while child.poll() is None:
            tree = max(tree, _tree_rss_kib(child.pid))
            time.sleep(0.05)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        proc = subprocess.CompletedProcess(argv, child.returncode, out.read(), err.read())
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    lines = proc.stdout.strip().splitlines()
    try:
        data = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    except json.JSONDecodeError:
        data = {}
    data.update(rc=proc.returncode, wall_s=wall, peak_rss_mb=peak_kib / 1024, tree_rss_mb=max(tree, peak_kib) / 1024,
                stderr=proc.stderr[-2000:],
                stdout=proc.stdout[-20000:] if not data else "")
    print(json.dumps(data))


def run_child(argv: list[str], repeat: int, env: dict[str, str] | None = None,
              before: Any = None) -> dict[str, Any]:
    """Best (fastest wall) of `repeat` runs, each in a fresh wrapper process; peak RSS is the largest seen."""
    best: dict[str, Any] | None = None
    peak = tree = 0.0
    failures: list[int] = []
    runs = 0
    while runs < repeat:
        if before is not None:
            before()
        wrapper = [sys.executable, __file__, "--_measure", json.dumps(env) if env else "", "--", *argv]
        out = subprocess.run(wrapper, capture_output=True, text=True, check=True)
        data = json.loads(out.stdout.strip().splitlines()[-1])
        if data["rc"] != 0:  # seen once from nsys-ai (no output): retried, and counted in the row
            failures.append(data["rc"])
            if len(failures) > 2:
                raise SystemExit(f"benchmark child failed ({' '.join(argv[:3])} ...), exit codes {failures}:\n"
                                 f"{data['stderr']}")
            continue
        runs += 1
        peak = max(peak, data["peak_rss_mb"])
        tree = max(tree, data["tree_rss_mb"])
        if best is None or data["wall_s"] < best["wall_s"]:
            best = data
    assert best is not None
    best["peak_rss_mb"] = peak
    best["tree_rss_mb"] = tree
    best["failures"] = failures
    return best


def ensure_nsys_ai() -> tuple[Path, dict[str, str]] | str:
    """The nsys-ai executable in its own venv and the environment that lets DuckDB find its sqlite extension, or why
    it is not available."""
    exe = VENV / "bin" / "nsys-ai"
    if not exe.exists():
        print(f"creating {VENV} (pip install nsys-ai duckdb==1.4.4 duckdb-ext-sqlite) ...", flush=True)
        made = subprocess.run([sys.executable, "-m", "venv", str(VENV)], capture_output=True, text=True)
        if made.returncode == 0:
            made = subprocess.run([str(VENV / "bin" / "python"), "-m", "pip", "install", "-q", "nsys-ai",
                                   "duckdb==1.4.4", "duckdb-ext-sqlite"], capture_output=True, text=True)
        if made.returncode != 0 or not exe.exists():
            said = [ln for ln in (made.stderr + made.stdout).splitlines() if ln.strip() and "WARNING" not in ln]
            return f"pip could not install it ({said[-1].strip() if said else f'exit {made.returncode}'})"
    ext = next(VENV.glob("lib/python*/site-packages/duckdb_ext/extensions"), None)
    home = ROOT / "bench" / "data" / "nsys-ai-home"
    (home / ".duckdb").mkdir(parents=True, exist_ok=True)
    link = home / ".duckdb" / "extensions"
    if ext is not None and not link.exists():
        link.symlink_to(ext)
    env = dict(os.environ, HOME=str(home))
    return exe, env


IN_MEMORY = """
import json, sys, time
from pathlib import Path
import expert
from expert.ingest._source import Source
from expert.ingest.nsys.adapter import device_timeline
from expert.ingest.nsys.cluster import device_rank
from expert.ingest.nsys.rows import open_export
from expert.ingest.timeline import analyse, steady_window
t0 = time.perf_counter()
kb = expert.default_expert().kb
t1 = time.perf_counter()
util = {}
with open_export(Source(Path(sys.argv[1]))) as (x, _):
    first, last = x.extent() or (0.0, 0.0)
    procs = x.device_processes()
    for dev in sorted(procs):
        tl = device_timeline(x, dev, x.activities([dev]), procs[dev], [])
        windows = steady_window(tl, first, last, {dev}, kb.kernels).windows
        a = analyse(tl, windows, {dev}, kb.kernels)
        device_rank(tl, dev, windows, [], path="", name="", label="")
        util[f"device {dev}"] = f"{a.idle['busy'] * 100:.1f}" if a else "?"
        del tl
print(json.dumps({"import_s": t1 - t0, "load_s": time.perf_counter() - t1, "util": util}))
"""


def drop_cache(profile: Path) -> None:
    for p in profile.parent.glob(profile.stem + ".nsys-cache*"):
        shutil.rmtree(p) if p.is_dir() else p.unlink()


_UTIL = re.compile(r"GPU (\d+):\s*\n\s*Span:.*?Util: ([0-9.]+)%")


def row(label: str, data: dict[str, Any], mb: float) -> str:
    load = f"{data['load_s']:8.3f} s" if "load_s" in data else f"{'':10s}"
    failed = f"   (exited {data['failures']} on earlier tries, retried)" if data.get("failures") else ""
    return (f"{label:38s} {load} {data['wall_s']:8.2f} s {mb / data['wall_s']:8.1f} MB/s {data['peak_rss_mb']:9.1f} MB"
            f" {data['tree_rss_mb']:9.1f} MB" + failed)


def compare(name: str, path: Path, mb: float, repeat: int, python: str,
            nsys_ai: tuple[Path, dict[str, str]] | None, in_memory: bool, one_process: bool = False) -> list[str]:
    lines = []
    ours = run_child([python, "-c", OURS, str(path)], repeat)
    print(row("dam-expert ingest", ours, mb) + f"   ({ours['rows']:,} rows, {ours['facts']} facts)", flush=True)
    lines.append(f"  {name}: dam-expert {ours['wall_s']:.2f} s wall, {ours['peak_rss_mb']:.1f} MB peak RSS (largest "
                 f"process), {ours['tree_rss_mb']:.1f} MB with its workers")
    if one_process:
        one = run_child([python, "-c", OURS, str(path)], repeat, dict(os.environ, DAM_INGEST_WORKERS="1"))
        print(row("dam-expert ingest, one process", one, mb), flush=True)
        lines.append(f"  {name} devices in workers/one process: wall {ours['wall_s'] / one['wall_s']:.2f}, peak RSS "
                     f"(all processes) {ours['tree_rss_mb'] / one['tree_rss_mb']:.2f}")
    if in_memory:
        old = run_child([python, "-c", IN_MEMORY, str(path)], repeat)
        print(row("in-memory timeline (before streaming)", old, mb), flush=True)
        lines.append(f"  {name} streaming/in-memory: wall {ours['wall_s'] / old['wall_s']:.2f}, peak RSS "
                     f"{ours['peak_rss_mb'] / old['peak_rss_mb']:.3f}")
    if nsys_ai is None:
        return lines
    exe, env = nsys_ai
    cold = run_child([str(exe), "summary", str(path)], repeat, env, before=lambda: drop_cache(path))
    print(row("nsys-ai summary (cold: builds its cache)", cold, mb), flush=True)
    warm = run_child([str(exe), "summary", str(path)], repeat, env)
    print(row("nsys-ai summary (warm: cache built)", warm, mb), flush=True)
    theirs = {f"device {d}": u for d, u in _UTIL.findall(cold["stdout"])}
    agree = ", ".join(f"{d} {ours['util'].get(d, '?')}% vs {u}%" for d, u in theirs.items())
    for label, other in (("cold", cold), ("warm", warm)):
        lines.append(f"  {name} dam-expert/nsys-ai ({label}): wall {ours['wall_s'] / other['wall_s']:.2f}, peak RSS "
                     f"{ours['peak_rss_mb'] / other['peak_rss_mb']:.2f}")
    lines.append(f"  busy share, ours (kernels+copies over the window) vs nsys-ai (kernels over each GPU's span): "
                 f"{agree}")
    drop_cache(path)
    return lines


def main() -> int:
    if len(sys.argv) > 3 and sys.argv[1] == "--_measure":
        measure(sys.argv[4:], json.loads(sys.argv[2]) if sys.argv[2] else None)
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-nsys-ai", action="store_true", help="skip the nsys-ai comparison")
    parser.add_argument("--no-big", action="store_true", help="skip the synthetic 1 GB export")
    parser.add_argument("--big-size-gb", type=float, default=1.0)
    parser.add_argument("--src", type=Path, default=REAL, help="folder of the real exports")
    parser.add_argument("--no-one-process", action="store_true",
                        help="skip the big export's one-process run (DAM_INGEST_WORKERS=1), the baseline of its "
                             "devices swept in worker processes")
    parser.add_argument("--in-memory", action="store_true",
                        help="also run the in-memory timeline analysis (the reader before it streamed)")
    args = parser.parse_args()
    real = sorted(args.src.glob("*.sqlite")) if args.src.is_dir() else []
    if not real:
        print(f"bench_nsys: the real exports are missing ({args.src})", file=sys.stderr)
        return 2
    python = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").is_dir() else sys.executable
    nsys_ai: tuple[Path, dict[str, str]] | None = None
    if args.no_nsys_ai:
        print("nsys-ai: skipped (--no-nsys-ai)")
    else:
        found = ensure_nsys_ai()
        if isinstance(found, str):
            print(f"nsys-ai: not installed, skipped: {found}")
        else:
            nsys_ai = found
    print(f"cpus {os.cpu_count()}; load average {' '.join(f'{v:.1f}' for v in os.getloadavg())} (others' work "
          f"slows every row alike)\n{'':38s} {'load':>10s} {'process':>10s} {'MB/s':>13s} {'peak RSS':>12s} "
          f"{'all procs':>12s}")
    summary: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-nsys-") as tmp:
        for src in real:  # nsys-ai writes its cache beside the profile: work on copies
            path = Path(tmp) / src.name
            shutil.copyfile(src, path)
            mb = path.stat().st_size / 1e6
            print(f"{src.name}: {mb:.2f} MB")
            summary += compare(src.name, path, mb, args.repeat, python, nsys_ai, args.in_memory)
    if not args.no_big:
        big = BIG
        if not big.exists() or big.stat().st_size < args.big_size_gb * 1e9:
            subprocess.run([sys.executable, str(ROOT / "bench" / "make_big_nsys.py"), "--size-gb",
                            str(args.big_size_gb), "--src", str(args.src / "mfu_2gpu_before.sqlite"), "--out",
                            str(big)], check=True)
        mb = big.stat().st_size / 1e6
        print(f"{big.name} (synthetic): {mb:.0f} MB")
        summary += compare(big.name, big, mb, 1, python, nsys_ai, args.in_memory,
                           one_process=(os.cpu_count() or 1) > 1 and not args.no_one_process)
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
