"""dam compare against Holistic Trace Analysis's TraceDiff on the pair TraceDiff is tested on (HTA's
tests/data/trace_diff: control on an A100, test on a V100, ProfilerStep#1009-#1014 on both).

    python bench/bench_compare.py [--repeat 3] [--traces DIR]

What it checks, in one run:

- the same deltas for the same quantities: GPU kernels per step, kernel GPU time per step and the mean kernel
  duration, before, after and the change, from `expert.compare(control, test)` and from
  `TraceDiff.compare_traces(control, test, all iterations, DeviceType.GPU)`; a plain JSON scan of each trace counts
  the kernels whose launch (runtime event with the same correlation id) is not in the trace: TraceDiff assigns
  kernels to an iteration through their launch and drops those, dam-expert places every kernel in its step window by
  time, so dam-expert minus those kernels must equal TraceDiff exactly;
- per-kernel deltas, once the report carries a `time_breakdown` (its top kernels against TraceDiff's rows);
- the wall-time ratio: `expert.compare(a, b)` (ingest, diagnose and compare both sides) against TraceDiff (parse
  both traces and diff them), each in its own child process, best of --repeat; imports are timed apart.

HTA runs from its own virtual environment, bench/.venv-hta (made on first use, as bench/bench_ingest.py does).
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from bench_ingest import ensure_hta  # noqa: E402 - the sibling bench script owns the HTA environment

OURS = r"""
import json, re, sys, time
t0 = time.perf_counter()
import expert
t1 = time.perf_counter()
c = expert.compare(sys.argv[1], sys.argv[2])
t2 = time.perf_counter()
def side(report):
    obs = report.observations
    steps = obs["step_time_s"].detail["samples"]
    kernels = int(re.search(r"of (\d+) kernels", str(obs["mean_kernel_us"].detail["method"])).group(1))
    return {"steps": steps, "kernels": kernels, "mean_kernel_us": obs["mean_kernel_us"].value}
from expert.compare.sides import load_side
e = expert.default_expert()
sides = [side(load_side(p, e).report) for p in sys.argv[1:3]]
kernels = [{"name": k.name, "before_s": k.before_s, "after_s": k.after_s} for k in c.breakdown_delta.top_kernels]
print(json.dumps({"import_s": t1 - t0, "call_s": t2 - t1, "sides": sides, "basis": c.breakdown_delta.basis,
                  "kernels_per_step": [c.fact("kernels_per_step").before, c.fact("kernels_per_step").after],
                  "speedup": c.speedup, "top_kernels": kernels, "notes": c.breakdown_delta.notes}))
"""

HTA = r"""
import json, logging, sys, time
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
from hta.trace_diff import DeviceType, LabeledTrace, TraceDiff
t1 = time.perf_counter()
control = LabeledTrace("control", trace_dir=sys.argv[1])
test = LabeledTrace("test", trace_dir=sys.argv[2])
df = TraceDiff.compare_traces(control, test, control_iteration=control.iterations(),
                              test_iteration=test.iterations(), device_type=DeviceType.GPU)
t2 = time.perf_counter()
rows = {name: [float(r["control_counts"]), float(r["test_counts"]), float(r["control_total_duration"]),
               float(r["test_total_duration"])] for name, r in df.iterrows()}
print(json.dumps({"import_s": t1 - t0, "call_s": t2 - t1, "rows": rows,
                  "iterations": [len(control.iterations()), len(test.iterations())]}))
"""


def child(argv: list[str], repeat: int) -> dict[str, Any]:
    """The fastest of `repeat` fresh child processes."""
    best: dict[str, Any] | None = None
    for _ in range(repeat):
        out = subprocess.run(argv, capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"benchmark child failed ({argv[0]}):\n{out.stderr[-3000:]}")
        data = json.loads(out.stdout.strip().splitlines()[-1])
        if best is None or data["call_s"] < best["call_s"]:
            best = data
    assert best is not None
    return best


def unlaunched_kernels(path: Path) -> tuple[int, float]:
    """(count, total duration in us) of kernels inside the ProfilerStep spans' time range whose launch is not in the
    trace, by a plain JSON scan (the whole file in memory: a check, not the product)."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    launched = {e["args"]["correlation"] for e in events
                if str(e.get("cat", "")).lower() in ("cuda_runtime", "runtime", "cuda_driver")
                and isinstance(e.get("args"), dict) and "correlation" in e["args"]}
    kernels = [e for e in events if str(e.get("cat", "")).lower() == "kernel"
               and e.get("args", {}).get("correlation") not in launched]
    return len(kernels), float(sum(e["dur"] for e in kernels))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "traces",
                        help="the shared traces folder (default: ../shared/traces beside the repository)")
    args = parser.parse_args()
    control = args.traces / "hta" / "trace_diff_control_control.json.gz"
    test = args.traces / "hta" / "trace_diff_test_test.json.gz"
    if not (control.is_file() and test.is_file()):
        print(f"bench_compare: the HTA TraceDiff pair is missing ({control.parent})", file=sys.stderr)
        return 2
    python = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").is_dir() else sys.executable
    hta_python = ensure_hta()
    ours = child([python, "-c", OURS, str(control), str(test)], args.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        dirs = []
        for name, path in (("control", control), ("test", test)):
            folder = Path(tmp) / name
            folder.mkdir()
            (folder / path.name).symlink_to(path.resolve())
            dirs.append(str(folder))
        hta = child([str(hta_python), "-c", HTA, *dirs], args.repeat)

    rows = hta["rows"]
    kernel_rows = {k: v for k, v in rows.items() if not k.startswith(("Memcpy", "Memset"))}
    steps_hta = hta["iterations"]
    h_count = [sum(v[i] for v in kernel_rows.values()) for i in (0, 1)]
    h_time = [sum(v[i + 2] for v in kernel_rows.values()) for i in (0, 1)]
    o_count = [s["kernels"] for s in ours["sides"]]
    o_time = [s["kernels"] * s["mean_kernel_us"] for s in ours["sides"]]
    o_steps = [s["steps"] for s in ours["sides"]]
    missing = [unlaunched_kernels(p) for p in (control, test)]

    print(f"HTA TraceDiff pair: {control.name} (A100) vs {test.name} (V100); steps {o_steps} (dam) / "
          f"{steps_hta} (HTA iterations)")
    print(f"{'quantity':44s} {'side':8s} {'dam-expert':>14s} {'TraceDiff':>14s} {'unlaunched':>12s} {'match':>6s}")
    ok = True
    for label, ov, hv, extra, scale in (
            ("GPU kernels per step", o_count, h_count, [m[0] for m in missing], 1.0),
            ("kernel GPU time per step (ms)", o_time, h_time, [m[1] for m in missing], 1e-3)):
        per = [[x / n for x, n in zip(v, o_steps, strict=True)] for v in (ov, hv, extra)]
        for i, side in enumerate(("control", "test")):
            same = abs(ov[i] - extra[i] - hv[i]) <= 1e-6 * max(1.0, hv[i])
            ok = ok and same
            print(f"{label:44s} {side:8s} {per[0][i] * scale:14.4f} {per[1][i] * scale:14.4f} "
                  f"{per[2][i] * scale:12.4f} {'yes' if same else 'NO':>6s}")
        d_ours, d_hta, d_extra = (per[0][1] - per[0][0]), (per[1][1] - per[1][0]), (per[2][1] - per[2][0])
        same = abs(d_ours - d_extra - d_hta) <= 1e-6 * max(1.0, abs(d_hta))
        print(f"{'  change (test - control)':44s} {'':8s} {d_ours * scale:+14.4f} {d_hta * scale:+14.4f} "
              f"{d_extra * scale:+12.4f} {'yes' if same else 'NO':>6s}")
    means = [t / n for t, n in zip(o_time, o_count, strict=True)], [t / n for t, n in zip(h_time, h_count,
                                                                                        strict=True)]
    print(f"{'mean kernel duration (us)':44s} {'control':8s} {means[0][0]:14.3f} {means[1][0]:14.3f}")
    print(f"{'':44s} {'test':8s} {means[0][1]:14.3f} {means[1][1]:14.3f}")
    print(f"  kernels_per_step in the Comparison: {ours['kernels_per_step'][0]} → {ours['kernels_per_step'][1]} "
          f"(delta {ours['kernels_per_step'][1] - ours['kernels_per_step'][0]:+d}); step speed-up "
          f"{ours['speedup']:.3f}×")
    print("  unlaunched: kernels whose launch (runtime event with their correlation id) is missing from the trace; "
          "TraceDiff drops them, dam-expert counts them by time; 'match' checks dam-expert - unlaunched == TraceDiff")

    if ours["top_kernels"]:
        shown = 0
        print(f"per-kernel GPU time per step, dam-expert breakdown_delta ({ours['basis']}) vs TraceDiff:")
        for k in ours["top_kernels"]:
            if k["name"] not in kernel_rows or k["before_s"] is None or k["after_s"] is None:
                continue
            row = kernel_rows[k["name"]]
            hb, ha = row[2] / steps_hta[0] / 1e6, row[3] / steps_hta[1] / 1e6
            print(f"  {k['name'][:60]:60s} dam {k['after_s'] - k['before_s']:+.6f} s  TraceDiff {ha - hb:+.6f} s")
            shown += 1
            if shown == 10:
                break
    else:
        print("per-kernel deltas: n/a, this version gives no time_breakdown "
              f"({'; '.join(ours['notes']) or 'no top kernels'})")

    print(f"{'':30s} {'import':>10s} {'compare':>10s}")
    print(f"{'dam-expert expert.compare':30s} {ours['import_s']:9.3f}s {ours['call_s']:9.3f}s")
    print(f"{'HTA TraceDiff.compare_traces':30s} {hta['import_s']:9.3f}s {hta['call_s']:9.3f}s")
    ratio = hta["call_s"] / ours["call_s"]
    with_imports = (hta["call_s"] + hta["import_s"]) / (ours["call_s"] + ours["import_s"])
    print(f"wall-time ratio (compare call, best of {args.repeat}): dam-expert is {ratio:.1f}x faster than TraceDiff; "
          f"with imports {with_imports:.1f}x")
    print("same deltas for the same quantities" if ok else "DIFFERENT deltas: see the rows marked NO")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
