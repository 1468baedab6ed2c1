"""Grow a synthetic Nsight Systems export of a given size from a real one (rows replicated, ids shifted).

    python bench/make_big_nsys.py [--size-gb 1.0] [--src ../shared/traces/nsys/mfu_2gpu_before.sqlite]
                                  [--out bench/data/big_nsys.sqlite]

The source is copied, then its event tables (kernels, memcpys, memsets, runtime calls, synchronizations, NVTX events,
CUDA events) are appended to, one replica at a time: every timestamp is shifted by the recording's length plus 1 ms
and every correlation id by the largest id plus one, so each replica is a later, disjoint copy of the recording whose
launches still match their kernels. StringIds, ENUM and TARGET_INFO tables are left as they are. Runs in SQLite
(INSERT ... SELECT), so growing 1 GB takes a minute, not hours.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import stat
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT.parent / "shared" / "traces" / "nsys" / "mfu_2gpu_before.sqlite"
OUT = ROOT / "bench" / "data" / "big_nsys.sqlite"
TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
          "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS",
          "CUPTI_ACTIVITY_KIND_CUDA_EVENT")
TIME_COLUMNS = ("start", "end", "timestamp")
ID_COLUMNS = ("correlationId",)


def grow(src: Path, out: Path, size_gb: float) -> tuple[int, int]:
    """Write the grown export to `out`; returns (replicas, bytes)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    shutil.copyfile(src, out)
    out.chmod(out.stat().st_mode | stat.S_IWUSR)
    conn = sqlite3.connect(out, isolation_level=None)
    conn.execute("PRAGMA journal_mode=OFF")
    conn.execute("PRAGMA synchronous=OFF")
    present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    tables = [t for t in TABLES if t in present]
    columns = {t: [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')] for t in tables}
    rows = {t: conn.execute(f'SELECT max(rowid) FROM "{t}"').fetchone()[0] or 0 for t in tables}
    lo = min(conn.execute(f'SELECT min(start) FROM "{t}"').fetchone()[0] or 2**62 for t in tables if
             "start" in columns[t])
    hi = max(conn.execute(f'SELECT max("end") FROM "{t}"').fetchone()[0] or 0 for t in tables if "end" in columns[t])
    period = hi - lo + 1_000_000
    corr = 1 + max(conn.execute(f'SELECT max(correlationId) FROM "{t}"').fetchone()[0] or 0 for t in tables
                   if "correlationId" in columns[t])
    target = size_gb * 1e9
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    replica = 0
    while conn.execute("PRAGMA page_count").fetchone()[0] * page < target:
        replica += 1
        conn.execute("BEGIN")
        for t in tables:
            cols = columns[t]
            exprs = [f'"{c}" + {replica * period}' if c in TIME_COLUMNS else
                     f'"{c}" + {replica * corr}' if c in ID_COLUMNS else f'"{c}"' for c in cols]
            names = ", ".join(f'"{c}"' for c in cols)
            conn.execute(f'INSERT INTO "{t}" ({names}) SELECT {", ".join(exprs)} FROM "{t}" WHERE rowid <= {rows[t]}')
        conn.execute("COMMIT")
    if "META_DATA_EXPORT" in present:
        conn.execute("INSERT INTO META_DATA_EXPORT VALUES ('DERIVED_BY', ?)",
                     (f"bench/make_big_nsys.py: {replica} replicas of {src.name}",))
    conn.close()
    return replica, out.stat().st_size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--src", type=Path, default=SRC)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if not args.src.is_file():
        print(f"make_big_nsys: the real export is missing ({args.src})", file=sys.stderr)
        return 2
    start = time.perf_counter()
    replicas, size = grow(args.src, args.out, args.size_gb)
    print(f"{args.out}: {size / 1e9:.2f} GB, {replicas} replicas of {args.src.name} "
          f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
