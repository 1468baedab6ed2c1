"""Shared by the fleet tests (local pool and Dask): inputs, the `dam diagnose` reference, jobs that hang or crash.

The hang and crash functions are imported by worker processes (by name), so they live in a module, not a test.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import signal
import time
from collections.abc import Mapping
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import cli
from expert.fleet._inputs import Job
from expert.fleet._worker import WorkerState, diagnose_job

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TELEMETRY = ROOT / "tests" / "fixtures" / "telemetry"
# Good telemetry fixtures that ingest on their own (the malformed ones are in malformed/).
GOOD_TELEMETRY = ["kineto_two_steps.json", "dcgmi_dmon.txt", "nvidia_smi_query.csv", "nvidia_smi_dmon.txt",
                  "dcgm_exporter.prom"]
TRACES = ROOT.parent / "shared" / "traces"
REAL_TRACES = sorted(TRACES.glob("*/*.json.gz")) if TRACES.is_dir() else []
SLOW_EVENTS = 2_000_000  # ~9 s to ingest here: far past any test's --timeout


def diagnose_cli(*args: str) -> dict[str, Any]:
    """The report `dam diagnose ARGS --format json` prints."""
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        assert cli.main(["diagnose", *args, "--format", "json"]) == 0
    return dict(json.loads(buffer.getvalue()))


def reference(row: Mapping[str, Any]) -> dict[str, Any]:
    """What `dam diagnose` says on the files (and facts) of a fleet row's job."""
    files = list(row["files"])
    traces = [f for f in files if not f.endswith((".yaml", ".yml"))]
    facts = [f for f in files if f.endswith((".yaml", ".yml"))]
    args = [*facts[:1]] + (["--from", *traces] if traces else [])
    return diagnose_cli(*args)


def write_inputs(folder: Path) -> dict[str, Path]:
    """A folder of telemetry fixtures plus a corrupt and an empty file; returns name -> path."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in GOOD_TELEMETRY:
        paths[name] = folder / name
        shutil.copy(TELEMETRY / name, paths[name])
    whole = gzip.compress((TELEMETRY / "kineto_two_steps.json").read_bytes())
    paths["corrupt.json.gz"] = folder / "corrupt.json.gz"
    paths["corrupt.json.gz"].write_bytes(whole[: len(whole) // 2])
    paths["empty.json"] = folder / "empty.json"
    paths["empty.json"].write_bytes(b"")
    return paths


def write_slow_trace(path: Path, events: int = SLOW_EVENTS) -> Path:
    """A valid Kineto trace with so many kernels that ingesting it takes seconds (a job that outlives --timeout)."""
    event = ('{"ph":"X","cat":"kernel","name":"void gemm_kernel<float>(float*)","pid":0,"tid":7,"ts":%d,"dur":5,'
             '"args":{"device":0,"stream":7}}')
    with gzip.open(path, "wt", compresslevel=1) as fh:
        fh.write('{"traceEvents":[')
        for start in range(0, events, 100_000):
            if start:
                fh.write(",")
            fh.write(",".join(event % (i * 10) for i in range(start, min(events, start + 100_000))))
        fh.write("]}")
    return path


def example_manifest(path: Path) -> list[str]:
    """A JSONL manifest of every bundled example as a typed-fact job (the YAML file), plus one job of inline facts
    and one of facts on top of a trace; returns the job keys."""
    lines = []
    for example in sorted(EXAMPLES.glob("*.yaml")):
        lines.append({"job_id": example.stem, "files": [str(example)], "labels": {"kind": "example"}})
    lines.append({"job_id": "inline", "facts": {"hardware": "h100-sxm", "gpu_util": "45%", "data_wait_s": "120 ms",
                                                "step_time_s": "300 ms"}, "labels": {"kind": "inline"}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return [str(line["job_id"]) for line in lines]


# ---- jobs that misbehave (run inside workers through run(..., _diagnose=...)) ---------------------------------------


def hang_natively(state: WorkerState, job: Job, storage_options: Mapping[str, Any]) -> Any:
    """Jobs whose key says "hang" block the timeout signal and sleep, as a job stuck in native code would."""
    if "hang" in job.key:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(60)
    return diagnose_job(state, job, storage_options)


def crash(state: WorkerState, job: Job, storage_options: Mapping[str, Any]) -> Any:
    """Jobs whose key says "crash" kill their worker process."""
    if "crash" in job.key:
        os._exit(3)
    return diagnose_job(state, job, storage_options)
