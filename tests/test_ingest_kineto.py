"""Kineto trace ingestion on a hand-made trace whose every number is worked out by hand (see the fixture's events)."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import Any

import pytest

import expert
from expert.errors import ObservationError
from expert.ingest import ingest, ingest_result, kineto
from expert.ingest._source import Source

FIXTURES = Path(__file__).parent / "fixtures" / "telemetry"
TWO_STEPS = FIXTURES / "kineto_two_steps.json"
MALFORMED = FIXTURES / "malformed"

# Worked out from the fixture: step windows [1000, 2000) and [2000, 3100) (step 2 extended to the end of the
# kernel it launched), GPU busy 250 + 300 + 580 us, DataLoader 300 + 100 us, host-wait gaps 330 + 620 us of which
# 300 + 100 us overlap the DataLoader.
EXPECTED: dict[str, Any] = {
    "step_time_s": 0.00105,
    "data_wait_s": 0.0002,
    "num_workers": 0,
    "hardware": "h100-sxm",
    "gpu_util": 1130 / 2100,
    "gpu_idle_gap_frac": 970 / 2100,
    "host_wait_frac": 550 / 2100,
    "mean_kernel_us": 270.0,
    "kernels_per_step": 2,
    "h2d_copy_frac": 50 / 2100,
    "pageable_copy_frac": 1.0,
    "comm_frac": 0.0,
    "flops": 2e9,
    "achieved_tflops": 4e9 / 2100e-6 / 1e12,
    "workload": "training",
    # the idle split: gap [1000, 1330) is DataLoader 300 us, then a 10 us cudaLaunchKernel (launch overhead: the
    # host inside a launch call, in a gap longer than the 50 us launch gap), a 5 us cudaMemcpyAsync (host compute: a
    # copy call) and 15 us of nothing; [1580, 1600) ends with an already queued kernel (GPU wait); [1900, 2520) is
    # DataLoader 100 us, a 10 us cudaLaunchKernel (launch overhead) and 510 us of nothing
    "launch_overhead_frac": 20 / 2100,
    "host_compute_frac": 5 / 2100,
    "host_dispatch_frac": 0.0,  # that host compute is a copy call outside any operator: no operator's dispatch
    "host_sync_frac": 0.0,
    "unattributed_idle_frac": 525 / 2100,
    "uses_cuda_graphs": "no",
    "trace_kernels": 4,
    "trace_steps": 2,
    "trace_window_s": 0.0021,
    "step_time_cv": 50 * 2 ** 0.5 / 1050,  # sample sd of 1000 and 1100 us over their mean
    "top_kernel_class": "gemm",  # 200 + 300 us of the 1130 us of GPU activity
    "top_kernel_class_frac": 500 / 1130,
    "memory_bound_kernel_frac": 580 / 1130,  # elementwise 300, reduction 280 (the 50 us HtoD copy: PCIe, not HBM)
    "weight_kernel_frac": 500 / 1130,  # the GEMMs read the weights; elementwise, reduction and the copy do not
    "idle_host_ops": "cudaMemcpyAsync",  # the only host compute in those gaps: a copy call outside any operator
    "host_copy_frac": 5 / 2100,  # ... a copy
    "device_frees_per_step": 0.0,  # its one blocking call is a synchronize, not a cudaFree
}
# shares keep 6 significant digits
ROUNDED = {"top_kernel_class_frac", "memory_bound_kernel_frac", "weight_kernel_frac", "host_copy_frac"}


def _doc() -> dict[str, Any]:
    return json.loads(TWO_STEPS.read_text())  # type: ignore[no-any-return]


def _check(values: dict[str, Any], expected: dict[str, Any] = EXPECTED) -> None:
    assert set(values) == set(expected)
    for name, want in expected.items():
        rel = 1e-5 if name in ROUNDED else 1e-9
        assert values[name] == (pytest.approx(want, rel=rel) if isinstance(want, float) else want), name


def test_every_fact_matches_the_hand_computation() -> None:
    result = ingest_result(TWO_STEPS)
    _check(result.observations.values())
    # the fixture records no shapes and no operator ids: no operator breakdown, no shape-derived FLOPs
    assert set(result.not_derived) == {"top_kernel_class_ops", "top_op", "top_op_frac", "top_op_pct_of_roof",
                                       "bytes_moved", "arithmetic_intensity", "dtype", "applied_optimizations",
                                       "idle_dispatch_ops", "allreduce_comm_share", "comm_kinds"}
    assert "no graph launches" in result.not_derived["applied_optimizations"]  # nothing shows an optimization
    assert "record_shapes=True" in result.not_derived["bytes_moved"]
    assert result.files[0].stats["reader"] == "msgspec batches"
    gpu = result.observations.facts["gpu_util"]
    assert gpu.source == "kineto:kineto_two_steps.json"
    assert gpu.detail["window"] == "ProfilerStep#1–#2 (2 steps)"
    assert "union of 5 kernel/memcpy/memset intervals" in str(gpu.detail["method"])
    idle = result.observations.facts["gpu_idle_gap_frac"].detail
    assert idle["idle_data_wait"] == pytest.approx(400 / 2100, abs=1e-4)
    assert idle["idle_host_wait"] == pytest.approx(550 / 2100, abs=1e-4)
    assert idle["idle_other"] == pytest.approx(20 / 2100, abs=1e-4)
    step = result.observations.facts["step_time_s"].detail
    assert (step["min"], step["max"], step["samples"]) == (0.001, 0.0011, 2)
    assert result.files[0].stats["host_sync_calls"] == 1


def test_ijson_reader_agrees_with_the_batch_reader() -> None:
    fast = kineto.parse(Source(TWO_STEPS), expert.default_expert().kb)
    slow = kineto.parse(Source(TWO_STEPS), expert.default_expert().kb, engine="ijson")
    assert slow.stats["reader"] == "ijson"
    assert {k: m.value for k, m in fast.measured.items()} == {k: m.value for k, m in slow.measured.items()}


@pytest.mark.parametrize("engine", ["auto", "ijson"])
@pytest.mark.parametrize("number", ["\u00b2", "\uff12", "\u0662", "1_0", " 2", "2 ", "+2", "9" * 5000],
                         ids=["superscript", "full-width", "arabic-indic", "underscore", "space-before", "space-after",
                              "plus", "5000-digits"])
def test_a_step_number_is_ascii_digits_only(tmp_path: Path, engine: str, number: str) -> None:
    """`ProfilerStep#²` passes str.isdigit() but not int(); PyTorch writes step numbers in ASCII digits, so any other
    name is not a step: the trace reads as the one step it has, with no traceback, in both readers and in the
    multi-rank reader (issue 22)."""
    from expert.ingest import rank_trace

    path = tmp_path / "odd_step.json"
    path.write_text(TWO_STEPS.read_text().replace('"ProfilerStep#2"', json.dumps(f"ProfilerStep#{number}")),
                    encoding="utf-8")
    result = kineto.parse(Source(path), expert.default_expert().kb, engine=engine)
    assert result.stats["reader"] == ("ijson" if engine == "ijson" else "msgspec batches")
    assert result.measured["trace_steps"].value == 1
    assert result.measured["gpu_util"].detail["window"] == "ProfilerStep#1 (1 step)"
    assert rank_trace.read(Source(path)).steps == [1]


def test_other_layouts_old_categories_gzip_and_streams_give_the_same_facts(tmp_path: Path) -> None:
    doc = _doc()
    minified = tmp_path / "minified.json"
    minified.write_text(json.dumps(doc))  # not libkineto's layout: read by ijson
    old = json.loads(json.dumps(doc))
    spelling = {"kernel": "Kernel", "cuda_runtime": "Runtime", "cpu_op": "Operator", "gpu_memcpy": "Memcpy"}
    for ev in old["traceEvents"]:
        ev["cat"] = spelling.get(ev.get("cat"), ev.get("cat"))
    old_path = tmp_path / "old.json"
    old_path.write_text(json.dumps(old, indent=1))
    gz = tmp_path / "trace.json.gz"
    gz.write_bytes(gzip.compress(TWO_STEPS.read_bytes()))
    bare = tmp_path / "array.json"
    bare.write_text(json.dumps(doc["traceEvents"]))  # Chrome's JSON Array Format: no metadata, so no hardware
    for source in (minified, old_path, gz, io.BytesIO(TWO_STEPS.read_bytes()), io.StringIO(TWO_STEPS.read_text())):
        _check(ingest(source).values())
    values = ingest_result(bare)
    _check(values.observations.values(), {k: v for k, v in EXPECTED.items() if k != "hardware"})
    assert "deviceProperties" in values.not_derived["hardware"]


def test_rocm_launch_names_are_matched(tmp_path: Path) -> None:
    doc = _doc()
    for ev in doc["traceEvents"]:
        if ev.get("cat") == "cuda_runtime":
            ev["name"] = ev["name"].replace("cuda", "hip")
    path = tmp_path / "rocm.json"
    path.write_text(json.dumps(doc))
    result = ingest_result(path)
    _check(result.observations.values(), {**EXPECTED, "idle_host_ops": "hipMemcpyAsync"})
    assert any("ROCm trace" in n for n in result.notes)


def test_step_range_and_window_select_steps() -> None:
    one = ingest_result(TWO_STEPS, steps="2:2").observations.values()
    assert one["step_time_s"] == pytest.approx(0.0011)
    assert one["data_wait_s"] == pytest.approx(0.0001)
    assert one["kernels_per_step"] == 2
    assert one["gpu_util"] == pytest.approx(580 / 1100)
    first = ingest_result(TWO_STEPS, window=(0, 0.0005)).observations.values()  # step 1 starts 10 us in
    assert first["step_time_s"] == pytest.approx(0.001)
    with pytest.raises(ObservationError, match=r"#1, #2"):
        ingest(TWO_STEPS, steps="5:9")


def test_a_trace_without_steps_uses_a_steady_state_window(tmp_path: Path) -> None:
    doc = _doc()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep")]
    path = tmp_path / "nosteps.json"
    path.write_text(json.dumps(doc))
    result = ingest_result(path)
    values = result.observations.values()
    for fact in ("step_time_s", "data_wait_s", "kernels_per_step", "flops", "achieved_tflops"):
        assert "ProfilerStep" in result.not_derived[fact]
    # from the first GPU activity (1330 us: before it the host only prepared) to the last one (3100 us); every
    # kernel name is new, so no warm-up is cut, and no stretch of 10 ms is empty
    assert values["gpu_util"] == pytest.approx(1130 / 1770)
    assert "steady state" in str(result.observations.facts["gpu_util"].detail["window"])
    window = result.time_breakdown.window if result.time_breakdown else None
    assert window is not None and (window.start_us, window.end_us, window.steps) == (330.0, 2100.0, 0)
    assert "from the first GPU activity" in window.reason and "warm-up is kept" in window.reason
    with pytest.raises(ObservationError, match="no ProfilerStep"):
        ingest(path, steps="1:2")


def test_a_cpu_only_trace_says_why_gpu_facts_are_missing(tmp_path: Path) -> None:
    doc = _doc()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in ("kernel", "gpu_memcpy", "cuda_runtime")]
    del doc["deviceProperties"]
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(doc))
    result = ingest_result(path)
    assert result.observations.values()["data_wait_s"] == pytest.approx(0.0002)
    for fact in ("gpu_util", "host_wait_frac", "mean_kernel_us", "h2d_copy_frac"):
        assert result.not_derived[fact].startswith("CPU-only trace")
    assert "deviceProperties" in result.not_derived["hardware"]


@pytest.mark.parametrize(("name", "where", "message"), [
    ("trace_truncated.json", ":14", "ends early"),
    ("trace_bad_token.json", ":5", "invalid char"),
    ("trace_truncated_gzip.json.gz", ":1", "truncated or corrupt"),
    ("trace_no_events.json", "trace_no_events.json", "no trace events"),
])
def test_malformed_traces_name_file_and_line(name: str, where: str, message: str) -> None:
    with pytest.raises(ObservationError) as info:
        ingest(MALFORMED / name)
    text = str(info.value)
    assert f"{name}{where}" in text if where.startswith(":") else where in text
    assert message in text


def test_progress_is_reported_for_files() -> None:
    seen: list[tuple[int, int | None]] = []
    ingest(TWO_STEPS, progress=lambda done, total: seen.append((done, total)))
    size = TWO_STEPS.stat().st_size
    assert seen and seen[-1] == (size, size)


def test_a_knowledge_base_without_kernel_classes_is_a_problem_naming_the_trace() -> None:
    import copy

    kb = copy.copy(expert.default_expert().kb)
    kb.kernels = None  # a knowledge base directory without kernels.yaml
    with pytest.raises(ObservationError) as err:
        ingest_result(TWO_STEPS, kb=kb)
    (problem,) = err.value.problems
    assert problem.where == str(TWO_STEPS) and "no kernels.yaml" in problem.message
