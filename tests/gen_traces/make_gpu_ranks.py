"""Multi-rank GPU traces built from one real rank's trace, by a documented transformation of its timeline.

    python tests/gen_traces/make_gpu_ranks.py OUT_DIR --ranks 4 [--slow-rank 2 --slow-factor 1.5]
                                              [--link-factor 1.0] [--source TRACE] [--layout kineto|compact]

The source (default traces/hta/trace_diff_control_control.json.gz in ../shared, or in $DAM_SHARED: rank 3 of an
8-GPU NCCL job on A100s, 6 ProfilerSteps, 60 NCCL kernels) is a real PyTorch profiler trace. Every rank written is a
copy of it with:

1. its identity: distributedInfo {backend nccl, rank r, world_size N}; its GPU events on device r (pid and
   args.device), so each file is what rank r of an N-rank job would write;
2. optionally a different link (--link-factor g): every NCCL kernel lasts g times as long, and every later event on
   the timeline moves by the time added so far (all ranks alike: the transfers themselves are slower or faster);
3. optionally a straggler (--slow-rank k --slow-factor f): on rank k every computation kernel (every kernel but NCCL's)
   lasts f times as long and everything after it moves by the time added so far, E(t) = (f - 1) x the computation
   time before t; rank k's collectives keep their duration (a collective, once its ranks have arrived, runs at the
   link's pace). A collective completes only when its last rank arrives, so on every other rank the i-th NCCL kernel
   starts when it did before (plus the delay already accumulated) and ends when rank k's does: it lasts
   E(s_i) - E(s_{i-1}) longer, which is the wait the analysis must find and attribute to rank k. Their later events
   move with it; their GPU work keeps its duration (CPU spans such as a ProfilerStep stretch over the wait).

Nothing else changes (names, correlation ids, CPU operators, memcpys); event times stay in microseconds. The output
is gzip (level 1) in libkineto's own layout (one event per indented block), as the profiler writes it, or compact
JSON (--layout compact, read by the general ijson reader). Only the standard library is used.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("DAM_SHARED") or ROOT.parent / "shared")  # CI puts shared/ beside the clone
SOURCE = SHARED / "traces" / "hta" / "trace_diff_control_control.json.gz"
_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def load(path: Path) -> dict[str, Any]:
    opener: Any = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)  # type: ignore[no-any-return]


def _is_comm(ev: dict[str, Any]) -> bool:
    return ev.get("cat") == "kernel" and "nccl" in str(ev.get("name", "")).lower()


def _is_compute(ev: dict[str, Any]) -> bool:
    return ev.get("cat") == "kernel" and not _is_comm(ev)


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        elif e > s:
            out.append((s, e))
    return out


def _busy_before(spans: list[tuple[float, float]]) -> Callable[[float], float]:
    """t -> length of the (disjoint, sorted) spans before t."""
    starts = [s for s, _ in spans]
    cumulative = [0.0]
    for s, e in spans:
        cumulative.append(cumulative[-1] + e - s)

    def before(t: float) -> float:
        k = bisect_right(starts, t) - 1
        if k < 0:
            return 0.0
        s, e = spans[k]
        return cumulative[k] + min(t, e) - s

    return before


def _span(ev: dict[str, Any]) -> tuple[float, float] | None:
    ts, dur = ev.get("ts"), ev.get("dur")
    if isinstance(ts, (int, float)) and isinstance(dur, (int, float)):
        return float(ts), float(ts) + float(dur)
    return None


def _retime(ev: dict[str, Any], start: float, end: float | None) -> dict[str, Any]:
    out = dict(ev)
    out["ts"] = round(start, 3)
    if end is not None:
        out["dur"] = round(end - start, 3)
    return out


def slower_link(events: list[dict[str, Any]], factor: float) -> list[dict[str, Any]]:
    """Every NCCL kernel `factor` times as long; later events move by the time added so far."""
    if factor == 1.0:
        return events
    comm = _union([sp for ev in events if _is_comm(ev) and (sp := _span(ev))])
    before = _busy_before(comm)

    def warp(t: float) -> float:
        return t + (factor - 1.0) * before(t)

    out = []
    for ev in events:
        sp = _span(ev)
        if sp is not None:
            out.append(_retime(ev, warp(sp[0]), warp(sp[1])))
        elif isinstance(ev.get("ts"), (int, float)):
            out.append(_retime(ev, warp(float(ev["ts"])), None))
        else:
            out.append(ev)
    return out


def straggle(events: list[dict[str, Any]], factor: float, slow: bool) -> list[dict[str, Any]]:
    """The timeline of the slow rank (slow=True) or of a rank waiting for it, as the module docstring says."""
    compute = _union([sp for ev in events if _is_compute(ev) and (sp := _span(ev))])
    extra_before = _busy_before(compute)

    def extra(t: float) -> float:
        return (factor - 1.0) * extra_before(t)

    colls = sorted(sp for ev in events if _is_comm(ev) and (sp := _span(ev)))
    ends = [e for _, e in colls]
    arrival = [extra(s) for s, _ in colls]  # the slow rank's delay when it reaches collective i

    def waited(t: float) -> float:
        """The delay of a waiting rank at t: that of the last collective ended by t."""
        k = bisect_right(ends, t) - 1
        return arrival[k] if k >= 0 else 0.0

    out = []
    for ev in events:
        sp = _span(ev)
        if sp is None:
            if isinstance(ev.get("ts"), (int, float)):
                t = float(ev["ts"])
                out.append(_retime(ev, t + (extra(t) if slow else waited(t)), None))
            else:
                out.append(ev)
            continue
        s, e = sp
        if _is_comm(ev):
            i = colls.index((s, e))
            delay = arrival[i]
            out.append(_retime(ev, s + (delay if slow else waited(s)), e + delay))
        elif ev.get("cat") in _GPU_CATS and not (slow and _is_compute(ev)):  # GPU work keeps its duration
            delay = extra(s) if slow else waited(s)
            out.append(_retime(ev, s + delay, e + delay))
        else:  # slowed computation, and CPU spans (a step, or a call waiting for the GPU, lasts longer)
            out.append(_retime(ev, s + (extra(s) if slow else waited(s)), e + (extra(e) if slow else waited(e))))
    return out


def as_rank(doc: dict[str, Any], events: list[dict[str, Any]], rank: int, world: int) -> dict[str, Any]:
    out = {k: v for k, v in doc.items() if k != "traceEvents"}
    out["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
    moved = []
    for ev in events:
        if ev.get("cat") in _GPU_CATS or (ev.get("ph") == "M" and isinstance(ev.get("pid"), int) and ev["pid"] < 64):
            ev = dict(ev)
            ev["pid"] = rank
            if isinstance(ev.get("args"), dict) and "device" in ev["args"]:
                ev["args"] = {**ev["args"], "device": rank}
        moved.append(ev)
    out["traceEvents"] = moved
    return out


def write(doc: dict[str, Any], path: Path, layout: str) -> None:
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as fh:
        if layout == "compact":
            json.dump(doc, fh)
            return
        fh.write("{\n")
        for key, value in doc.items():
            if key != "traceEvents":
                fh.write(f'  "{key}": {json.dumps(value)},\n')
        fh.write('  "traceEvents": [')
        for i, ev in enumerate(doc["traceEvents"]):
            fh.write(("" if i == 0 else ",") + "\n  {\n    " + json.dumps(ev)[1:-1] + "\n  }")
        fh.write("\n  ]\n}\n")


def build(out: Path, ranks: int, *, source: Path = SOURCE, slow_rank: int | None = None, slow_factor: float = 1.0,
          link_factor: float = 1.0, layout: str = "kineto", name: str = "rank{rank}.json.gz") -> list[Path]:
    """Write the rank files; returns their paths."""
    doc = load(source)
    events = slower_link(list(doc["traceEvents"]), link_factor)
    slowed = straggle(events, slow_factor, slow=True) if slow_rank is not None else events
    waiting = straggle(events, slow_factor, slow=False) if slow_rank is not None else events
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(ranks):
        timeline = slowed if rank == slow_rank else waiting
        path = out / name.format(rank=rank)
        write(as_rank(doc, timeline, rank, ranks), path, layout)
        paths.append(path)
    return paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--slow-rank", type=int)
    parser.add_argument("--slow-factor", type=float, default=1.5)
    parser.add_argument("--link-factor", type=float, default=1.0)
    parser.add_argument("--layout", choices=["kineto", "compact"], default="kineto")
    args = parser.parse_args()
    if not args.source.is_file():
        print(f"make_gpu_ranks: the source trace is missing ({args.source})", file=sys.stderr)
        return 2
    for path in build(args.out, args.ranks, source=args.source, slow_rank=args.slow_rank,
                      slow_factor=args.slow_factor if args.slow_rank is not None else 1.0,
                      link_factor=args.link_factor, layout=args.layout):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
