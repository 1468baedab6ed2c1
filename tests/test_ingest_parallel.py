"""A large Kineto trace read by byte range in worker processes (expert/ingest/kineto_parallel.py) gives exactly what
the one-process reader gives: the same collected columns, the same facts, the same report; gzip and streams are read
in one process; a worker that dies or fails is a clear error (exit 2), not a hang. The size threshold is lowered
through the `parallel_min_bytes` parameter so that small generated traces take the parallel path."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import random
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

import cli
import expert
from expert.errors import ObservationError
from expert.ingest import _default_kb, kineto, kineto_parallel
from expert.ingest._kineto_stream import BOUNDARY, cut_points, gc_paused
from expert.ingest._source import Source
from expert.ingest.kineto_collect import _collect, _Collected
from expert.ingest.kineto_read import _fast_batches

SHARED = Path(os.environ.get("DAM_SHARED") or Path(__file__).resolve().parents[1].parent / "shared")
RESNET = SHARED / "traces" / "kineto-resnet50" / "resnet50_num_workers_0.pt.trace.json.gz"


# ---- traces in libkineto's layout ------------------------------------------------------------------------------------
def write_kineto(path: Path, events: list[dict[str, Any]], head: dict[str, Any], tail: dict[str, Any]) -> Path:
    """libkineto's own layout: metadata keys, then one event per indented block ("\\n  },\\n  {" between two), then
    the keys after the events."""
    lines = ["{"] + [f'  "{k}": {json.dumps(v)},' for k, v in head.items()] + ['  "traceEvents": [']
    blocks = ",\n".join("  {\n    " + json.dumps(ev, ensure_ascii=False)[1:-1] + "\n  }" for ev in events)
    after = "".join(f',\n  "{k}": {json.dumps(v)}' for k, v in tail.items())
    path.write_text("\n".join(lines) + "\n" + blocks + "\n  ]" + after + "\n}\n", encoding="utf-8")
    return path


def mixed_events(seed: int, steps: int = 12) -> list[dict[str, Any]]:
    """Every kind of event the collector keeps or skips, with names of random lengths (so byte offsets fall anywhere
    inside events), several threads and devices, shapes, FLOPs, copies, syncs, instant and metadata events, and a
    few malformed ones."""
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    t = 1_000.0
    corr = ext = 0

    def x(cat: str, name: str, ts: float, dur: float, pid: Any = 1, tid: Any = 1, **args: Any) -> None:
        ev: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
        if args:
            ev["args"] = args
        events.append(ev)

    for n in range(steps):
        x("user_annotation", f"ProfilerStep#{n}", t, 900)
        x("user_annotation", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", t, 40 + n)
        x("python_function", f"train.py({rng.randint(1, 500)}): step_{'x' * rng.randint(0, 300)}", t + 1, 30,
          tid=rng.choice([1, 2, "python-thread"]))
        for k in range(rng.randint(4, 12)):
            ext += 1
            corr += 1
            ts = t + 50 + 60 * k
            name = rng.choice(["aten::mm", "aten::addmm", "aten::relu", "aten::conv2d", "aten::add_",
                               f"my_op_{'é' * rng.randint(0, 40)}"])
            shape = rng.choice([{}, {"Input Dims": [[64, 128], [128, 256]], "Input type": ["float", "float"]},
                                {"Input Dims": [[8, 3, 32, 32], [16, 3, 3, 3], [], [], [], [], []],
                                 "Input type": ["c10::BFloat16"] * 2 + ["", "ScalarList", "ScalarList", "", ""],
                                 "Concrete Inputs": ["", "", "", "[1, 1]", "[1, 1]", "", ""]}])
            flops = {"flops": rng.randint(1, 10**9)} if rng.random() < 0.3 else {}
            x("cpu_op", name, ts, 40, tid=rng.choice([1, 2]), **{"External id": ext, **shape, **flops})
            x("cuda_runtime", rng.choice(["cudaLaunchKernel", "hipLaunchKernel", "cudaMemcpyAsync"]), ts + 2, 5,
              tid=1, correlation=corr, **{"External id": ext})
            kind = rng.choice(["kernel", "kernel", "kernel", "gpu_memcpy", "gpu_memset"])
            kname = {"kernel": rng.choice(["ampere_sgemm_128x64_nn", "void at::native::vectorized_elementwise_kernel",
                                           "ncclDevKernel_AllReduce_Sum_f32_RING_LL"]),
                     "gpu_memcpy": rng.choice(["Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)"]),
                     "gpu_memset": "Memset (Device)"}[kind]
            x(kind, kname, ts + 10, rng.uniform(5, 50), pid=rng.choice([0, 1]), tid=7,
              device=rng.choice([0, 1]), stream=rng.choice([7, 13]), correlation=corr)
        x("cuda_sync", "Stream Sync", t + 880, 5)
        if n == steps // 2:
            x("cpu_op", "autograd::engine::evaluate_function: MmBackward0", t + 800, 20)
            x("cpu_op", "Optimizer.step#SGD.step", t + 850, 20)
            events.append({"ph": "i", "cat": "cpu_instant_event", "name": "a mark", "ts": t, "pid": 1, "tid": 1})
            events.append({"ph": "X", "cat": "kernel", "name": "bad ts", "ts": "soon", "dur": 3, "pid": 0, "tid": 7})
            events.append({"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": t, "cat": "ac2g", "name": "ac2g"})
        t += 1_000
    events.insert(0, {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}})
    return events


HEAD = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 8.5e10,
                                                  "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1}}
TAIL = {"traceName": "generated", "with_flops": True, "displayTimeUnit": "ms",
        "distributedInfo": {"backend": "gloo", "rank": 5, "world_size": 8}}  # the head's distributedInfo wins


def sequential(path: Path) -> tuple[_Collected, dict[str, Any]]:
    collected, meta = _Collected(), {}
    with open(path, "rb") as fh, gc_paused():
        _collect(_fast_batches(fh, meta), collected)
    meta.pop("_bytes")
    return collected, meta


def columns(c: _Collected) -> dict[str, Any]:
    """Every field of the collected events, the timeline's too, as plain comparable values."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(c):
        value = getattr(c, f.name)
        if f.name == "tl":
            for g in dataclasses.fields(value):
                out[f"tl.{g.name}"] = _plain(getattr(value, g.name))
        else:
            out[f.name] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return list(value.items())  # the order matters: it is the order the ids were given out in
    if hasattr(value, "tolist"):
        return (value.typecode, value.tolist())
    return value


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_kineto(tmp_path_factory.mktemp("parallel") / "mixed.json", mixed_events(7), HEAD, TAIL)


# ---- identical results ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("workers", "range_bytes", "parent_reads"),
                         [(2, 4096, False), (3, 1000, True), (2, 1, False), (4, 1 << 30, False)])
def test_ranges_merge_into_exactly_the_sequential_columns(trace: Path, workers: int, range_bytes: int,
                                                          parent_reads: bool) -> None:
    expected, expected_meta = sequential(trace)
    got = kineto_parallel.read(Source(trace), workers, range_bytes=range_bytes, parent_reads=parent_reads)
    assert got is not None and got.ranges > 1
    assert got.bytes == trace.stat().st_size
    assert columns(got.collected) == columns(expected)
    assert got.meta == expected_meta and set(got.meta) == {"deviceProperties", "distributedInfo", "with_flops"}
    if not parent_reads:
        assert got.workers >= 1 and all(peak > 0 for peak in got.peak_rss.values())


def test_cuts_fall_on_event_boundaries_while_nominal_offsets_fall_inside_events(trace: Path) -> None:
    data = trace.read_bytes()
    parts = 40
    with open(trace, "rb") as fh:
        cuts = cut_points(fh, len(data), parts)
    assert len(cuts) == parts - 1 and cuts == sorted(set(cuts))
    assert all(data[c:c + len(BOUNDARY)] == BOUNDARY for c in cuts)
    nominal = [len(data) * k // parts for k in range(1, parts)]
    straddling = [at for at, cut in zip(nominal, cuts, strict=True) if cut != at]
    assert len(straddling) >= parts // 2  # the nominal offsets land inside events; each range ends at the event's end
    assert all(cut > at for at, cut in zip(nominal, cuts, strict=True) if cut != at)


def test_report_and_ingest_result_are_identical(trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kb = _default_kb()
    one = kineto.parse(Source(trace), kb, workers=1)
    many = kineto.parse(Source(trace), kb, workers=3, parallel_min_bytes=0)
    assert many.model_dump_json() == one.model_dump_json()
    assert one.stats["reader"] == "msgspec batches" and len(one.measured) > 10
    monkeypatch.setenv(kineto_parallel.ENV, "2")
    assert kineto.parse(Source(trace), kb, parallel_min_bytes=0).model_dump_json() == one.model_dump_json()
    monkeypatch.delenv(kineto_parallel.ENV)
    seq = expert.ingest_result(str(trace), workers=1)
    monkeypatch.setattr(kineto_parallel, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(kineto_parallel, "RANGE_BYTES", 4096)
    par = expert.ingest_result(str(trace), workers=2)
    assert par.model_dump_json() == seq.model_dump_json()
    assert expert.diagnose(par.observations).to_json() == expert.diagnose(seq.observations).to_json()


def test_the_real_resnet50_trace_gives_the_same_facts(tmp_path: Path) -> None:
    if not RESNET.is_file():
        pytest.skip(f"the shared real traces are not at {RESNET.parent} (set DAM_SHARED)")
    plain = tmp_path / "resnet50.json"
    with gzip.open(RESNET, "rb") as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst)
    kb = _default_kb()
    one = kineto.parse(Source(plain), kb, workers=1)
    expected, _ = sequential(plain)
    got = kineto_parallel.read(Source(plain), 2, range_bytes=1 << 20, parent_reads=False)
    assert got is not None and got.ranges >= 10
    assert columns(got.collected) == columns(expected)
    many = kineto.parse(Source(plain), kb, workers=2, parallel_min_bytes=0)
    assert many.model_dump_json() == one.model_dump_json()


# ---- what is read in one process -------------------------------------------------------------------------------------
def test_gzip_streams_small_files_and_other_layouts_are_read_in_one_process(trace: Path, tmp_path: Path) -> None:
    packed = tmp_path / "mixed.json.gz"
    packed.write_bytes(gzip.compress(trace.read_bytes()))
    assert kineto_parallel.worker_count(Source(packed), 4, 0) == 1  # gzip cannot be entered in the middle
    with open(trace, "rb") as stream:
        assert kineto_parallel.worker_count(Source(stream), 4, 0) == 1  # a stream
    assert kineto_parallel.worker_count(Source(trace), 4, None) == 1  # under 100 MB
    assert kineto_parallel.worker_count(Source(trace), 4, 0) == 4
    assert kineto_parallel.worker_count(Source(trace), 1, 0) == 1
    kb = _default_kb()
    assert kineto.parse(Source(packed), kb, workers=4, parallel_min_bytes=0).model_dump_json() == \
        kineto.parse(Source(packed), kb, workers=1).model_dump_json()
    compact = tmp_path / "compact.json"  # one line: no event boundaries to cut at
    compact.write_text(json.dumps({"traceEvents": mixed_events(3, steps=4), **HEAD}))
    assert kineto_parallel.read(Source(compact), 2) is None
    assert kineto.parse(Source(compact), kb, workers=2, parallel_min_bytes=0).model_dump_json() == \
        kineto.parse(Source(compact), kb, workers=1).model_dump_json()


def test_worker_count_from_the_environment(trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kineto_parallel.ENV, "3")
    assert kineto_parallel.worker_count(Source(trace), None, 0) == 3
    monkeypatch.setenv(kineto_parallel.ENV, "1")
    assert kineto_parallel.worker_count(Source(trace), None, 0) == 1
    assert kineto_parallel.worker_count(Source(trace), 2, 0) == 2  # an explicit request wins
    for bad in ("0", "two", "²", "-1"):
        monkeypatch.setenv(kineto_parallel.ENV, bad)
        with pytest.raises(ObservationError, match="DAM_INGEST_WORKERS"):
            kineto_parallel.worker_count(Source(trace), None, 0)


# ---- errors: the same as one process, or a clear one ----------------------------------------------------------------
def _problem(path: Path, **options: Any) -> str:
    with pytest.raises(ObservationError) as info:
        kineto.parse(Source(path), _default_kb(), **options)
    return str(info.value)


@pytest.mark.parametrize("damage", ["truncated event", "64-bit overflow"])
def test_a_damaged_middle_range_fails_as_the_one_process_reader_does(tmp_path: Path, damage: str) -> None:
    events = mixed_events(11)
    middle = len(events) // 2
    if damage == "64-bit overflow":
        events[middle] = {"ph": "X", "cat": "kernel", "name": "k", "ts": 5_000, "dur": 1, "pid": 0, "tid": 7,
                          "args": {"correlation": 2**70, "device": 0}}
    path = write_kineto(tmp_path / "damaged.json", events, HEAD, TAIL)
    if damage == "truncated event":
        text = path.read_text(encoding="utf-8")
        at = text.index('"ts"', len(text) // 2)
        path.write_text(text[:at] + text[at + 12:], encoding="utf-8")
    one = _problem(path, workers=1)
    assert _problem(path, workers=3, parallel_min_bytes=0) == one
    assert ("64 bits" in one) if damage == "64-bit overflow" else ("damaged.json:" in one)


def crash_in_second_range(path: str, start: int, end: int, head: bool, tail: bool, slot: int) -> Any:
    """A worker task that dies (as if killed or out of memory) on the second range."""
    if slot == 1:
        os._exit(3)
    return kineto_parallel.read_range(path, start, end, head, tail, slot)


def fail_in_last_range(path: str, start: int, end: int, head: bool, tail: bool, slot: int) -> Any:
    """A worker task that raises on the last range."""
    if tail:
        raise MemoryError("no room for the columns")
    return kineto_parallel.read_range(path, start, end, head, tail, slot)


def _within(seconds: float, call: Any) -> Any:
    """call() in a thread; fails (rather than hanging the suite) if it has not returned within `seconds`."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s: a hang"
    if "error" in box:
        raise box["error"]
    return box.get("value")


@pytest.mark.parametrize(("task", "says"), [(crash_in_second_range, "stopped unexpectedly"),
                                            (fail_in_last_range, "failed: MemoryError: no room for the columns")])
def test_a_failing_worker_is_a_clear_error_not_a_hang(trace: Path, monkeypatch: pytest.MonkeyPatch, task: Any,
                                                      says: str) -> None:
    monkeypatch.setattr(kineto_parallel, "_TASK", task)
    with pytest.raises(ObservationError) as info:
        _within(60, lambda: kineto_parallel.read(Source(trace), 2, range_bytes=4096, parent_reads=False))
    message = str(info.value)
    assert says in message and "the worker process reading bytes" in message and str(trace) in message
    assert "--workers 1" in message and "Traceback" not in message


def die_at_start(done: Any) -> None:
    """A worker initializer that dies before the worker takes any range."""
    os._exit(4)


def test_workers_that_cannot_start_leave_the_reading_to_this_process(trace: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kineto_parallel, "_init_worker", die_at_start)
    got = _within(60, lambda: kineto_parallel.read(Source(trace), 2, range_bytes=4096, parent_reads=False))
    assert got is not None and got.workers == 0 and got.ranges > 2
    assert columns(got.collected) == columns(sequential(trace)[0])


def test_the_cli_exits_2_when_a_worker_dies(trace: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(kineto_parallel, "_TASK", crash_in_second_range)
    monkeypatch.setattr(kineto_parallel, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(kineto_parallel, "PARENT_READS", False)
    monkeypatch.setattr(kineto_parallel, "RANGE_BYTES", 4096)
    assert _within(60, lambda: cli.main(["ingest", str(trace), "--workers", "2"])) == 2
    err = capsys.readouterr().err
    assert "stopped unexpectedly" in err and "Traceback" not in err
    monkeypatch.setattr(kineto_parallel, "_TASK", kineto_parallel.read_range)
    assert cli.main(["ingest", str(trace), "--workers", "2", "--as", "json"]) == 0
    parallel_out = capsys.readouterr().out
    assert cli.main(["ingest", str(trace), "--workers", "1", "--as", "json"]) == 0
    assert capsys.readouterr().out == parallel_out


def test_progress_climbs_to_the_file_size(trace: Path) -> None:
    seen: list[tuple[int, int | None]] = []
    got = kineto_parallel.read(Source(trace), 2, range_bytes=2048, parent_reads=True,
                               progress=lambda done, total: seen.append((done, total)))
    assert got is not None
    size = trace.stat().st_size
    assert seen[-1] == (size, size) and all(total == size for _, total in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
