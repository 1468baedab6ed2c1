"""Build a large synthetic Kineto trace from the real resnet50 traces, for the ingestion benchmark.

    python bench/make_big_trace.py [--size-gb 1.0] [--out bench/data/big_trace.json]

Copies of the two real traces (num_workers=0 and 4, alternating) are laid end to end: each copy's timestamps are
shifted past the previous one, and its correlation/flow ids, operator (External) ids and ProfilerStep numbers
renumbered, so the result is one long, consistent profile in libkineto's own layout (uncompressed JSON). Only the
standard library is used.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces" / "kineto-resnet50"
SOURCES = [TRACES / "resnet50_num_workers_0.pt.trace.json.gz", TRACES / "resnet50_num_workers_4.pt.trace.json.gz"]


def _load(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)  # type: ignore[no-any-return]


def _shift(ev: dict[str, Any], dt: float, dcorr: int, dstep: int) -> dict[str, Any]:
    ev = dict(ev)
    if isinstance(ev.get("ts"), (int, float)):
        ev["ts"] = ev["ts"] + dt
    if ev.get("ph") in ("s", "f") and isinstance(ev.get("id"), int):
        ev["id"] = ev["id"] + dcorr
    name = ev.get("name")
    if isinstance(name, str) and name.startswith("ProfilerStep#") and name[13:].isdigit():
        ev["name"] = f"ProfilerStep#{int(name[13:]) + dstep}"
    args = ev.get("args")
    if isinstance(args, dict):
        ids = [k for k in ("correlation", "External id", "external id") if isinstance(args.get(k), int)]
        if ids:
            args = dict(args)
            for k in ids:
                args[k] += dcorr  # one offset past every id of the copy before
            ev["args"] = args
    return ev


def build(out: Path, size_bytes: int) -> int:
    """Write the trace; returns its size in bytes."""
    docs = [_load(p) for p in SOURCES]
    spans, corr_spans, step_spans, bodies = [], [], [], []
    for doc in docs:
        events = [e for e in doc["traceEvents"] if e.get("ph") != "M" and e.get("cat") != "Trace"]
        ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
        ends = [e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, float))]
        corr = [e["args"][k] for e in events if isinstance(e.get("args"), dict)
                for k in ("correlation", "External id", "external id") if isinstance(e["args"].get(k), int)]
        spans.append((min(ts), max(ends)))
        corr_spans.append(max(corr) + 1)
        step_spans.append(sum(1 for e in events if str(e.get("name", "")).startswith("ProfilerStep#")))
        bodies.append(events)
    out.parent.mkdir(parents=True, exist_ok=True)
    head = docs[0].copy()
    head.pop("traceEvents")
    written = 0
    with open(out, "w", encoding="utf-8") as fh:
        fh.write("{\n")
        for key, value in head.items():
            fh.write(f'  "{key}": {json.dumps(value)},\n')
        fh.write('  "traceEvents": [\n')
        t_next = spans[0][0]
        corr_base = 0
        step_base = 0
        copy = 0
        first = True
        while written < size_bytes:
            k = copy % len(docs)
            dt = t_next - spans[k][0]
            parts = []
            for ev in bodies[k]:
                text = json.dumps(_shift(ev, dt, corr_base, step_base))
                parts.append(("" if first else ",\n") + "  {\n    " + text[1:-1] + "\n  }")
                first = False
            chunk = "".join(parts)
            fh.write(chunk)
            written += len(chunk.encode("utf-8"))
            t_next += spans[k][1] - spans[k][0] + 1000
            corr_base += corr_spans[k]
            step_base += step_spans[k] + 10
            copy += 1
        fh.write('\n  ],\n  "traceName": "synthetic"\n}\n')
    return out.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "data" / "big_trace.json")
    args = parser.parse_args()
    missing = [p for p in SOURCES if not p.is_file()]
    if missing:
        sys.exit(f"make_big_trace: the real traces are missing: {', '.join(map(str, missing))}")
    size = build(args.out, int(args.size_gb * 1e9))
    print(f"wrote {args.out} ({size / 1e6:.0f} MB)")


if __name__ == "__main__":
    main()
