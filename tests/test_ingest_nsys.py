"""Nsight Systems exports: hand-computed synthetic exports, schema variants, NVTX steps, .nsys-rep, bad inputs."""

from __future__ import annotations

import gzip
import math
import os
import sqlite3
import stat
import sys
import tracemalloc
from pathlib import Path

import pytest
from nsys_export import Copy, Export, Kernel, Nvtx, Sync, steps, write

import cli
import expert
from expert.errors import ObservationError
from expert.ingest import ingest_result, nsys
from expert.ingest._source import Source, sniff
from expert.ingest.nsys.adapter import device_timeline
from expert.ingest.records import GpuActivity
from expert.ingest.timeline import H2D, PAGEABLE, PINNED
from expert.ingest.timeline import analyse as analyse_timeline

GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>(Params)"
ELEM = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>(int, float*)"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
REDUCE = "void at::native::reduce_kernel<512, 1>(at::native::ReduceOp<float>)"
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _two_steps(device: int = 0, pid: int = 100, shift: float = 0.0) -> Export:
    """Two train_step ranges, [0, 1000] and [1000, 2000] us; the last kernel, launched in step 2, ends at 2100.

    Step 1: DataLoader [0, 100]; gemm [100, 400]; elementwise [400, 500]; NCCL [450, 700] (50 us under the
    elementwise kernel, 200 exposed); host gap [700, 800] (next launch at 750); gemm [800, 900]; gap to 1000.
    Step 2: DataLoader [1000, 1100]; gap until a pageable H2D copy [1150, 1250] launched at 1120, a pinned one
    [1250, 1350]; reduce kernel [1350, 2100] launched at 1340. A stream synchronize blocks [1360, 2090].
    """
    s = shift
    return Export(
        kernels=[Kernel(GEMM, s + 100, s + 400, s + 90, device, pid=pid),
                 Kernel(ELEM, s + 400, s + 500, s + 150, device, pid=pid),
                 Kernel(NCCL, s + 450, s + 700, s + 160, device, stream=9, pid=pid),
                 Kernel(GEMM, s + 800, s + 900, s + 750, device, pid=pid),
                 Kernel(REDUCE, s + 1350, s + 2100, s + 1340, device, pid=pid)],
        copies=[Copy(1, s + 1150, s + 1250, s + 1120, nbytes=1_000_000, src=0, device=device, pid=pid),
                Copy(1, s + 1250, s + 1350, s + 1130, nbytes=2_000_000, src=1, device=device, pid=pid),
                Copy(2, s + 1360, s + 1365, None, nbytes=4, src=2, dst=1, device=device, pid=pid)],
        nvtx=[*steps("train_step", [(s, s + 1000), (s + 1000, s + 2000)], pid=pid),
              Nvtx(LOADER, s, s + 100, pid=pid), Nvtx(LOADER, s + 1000, s + 1100, pid=pid, registered=True),
              Nvtx("autograd::engine::evaluate_function: MmBackward0", s + 600, s + 650, pid=pid)],
        syncs=[Sync(s + 1360, s + 2090, 3, device, pid), Sync(s + 100, s + 200, 2, device, pid)],
        gpus={device: "NVIDIA H100 80GB HBM3"})


@pytest.fixture()
def two_steps(tmp_path: Path) -> Path:
    return write(tmp_path / "two_steps.sqlite", _two_steps())


def test_hand_computed_export_gives_every_fact_with_provenance(two_steps: Path) -> None:
    result = ingest_result(two_steps)
    v = result.observations.values()
    window = 1000 + 1100  # step 2 is extended to the end of the reduce kernel it launched
    assert v["step_time_s"] == pytest.approx(1050e-6)
    assert v["gpu_util"] == pytest.approx((600 + 100 + 950) / window)
    assert v["gpu_idle_gap_frac"] == pytest.approx(450 / window)
    assert v["host_wait_frac"] == pytest.approx((100 + 100 + 50) / window)
    assert v["data_wait_s"] == pytest.approx(100e-6)
    assert v["mean_kernel_us"] == pytest.approx((300 + 100 + 250 + 100 + 750) / 5)
    assert v["kernels_per_step"] == 2
    assert v["h2d_copy_frac"] == pytest.approx(200 / window)
    assert v["pageable_copy_frac"] == pytest.approx(0.5)
    assert v["comm_frac"] == pytest.approx(200 / window)
    assert v["comm_overlap_frac"] == pytest.approx(50 / 250)
    assert v["comm_time_s"] == pytest.approx(125e-6)
    assert v["hardware"] == "h100-sxm"
    assert v["workload"] == "training"
    assert v["num_workers"] == 0
    assert v["trace_steps"] == 2 and v["trace_window_s"] == pytest.approx(2100e-6)
    assert v["step_time_cv"] == pytest.approx(math.sqrt(2 * 50**2) / 1050)  # windows of 1000 and 1100 us
    # the shared analysis's finer idle split (launch overhead, host compute, blocking syncs, nothing on the host)
    # stays within the idle time
    assert v["launch_overhead_frac"] + v["host_compute_frac"] + v["host_sync_frac"] + v["unattributed_idle_frac"] \
        <= v["gpu_idle_gap_frac"] + 1e-9
    gap = result.observations.facts["gpu_idle_gap_frac"].detail
    assert gap["idle_data_wait"] == pytest.approx(200 / window, abs=1e-4)
    assert gap["idle_host_wait"] == pytest.approx(250 / window, abs=1e-4)
    assert gap["idle_other"] == 0
    util = result.observations.facts["gpu_util"]
    assert util.source == "nsys:two_steps.sqlite"
    assert util.detail["window"] == "NVTX 'train_step' #1–#2 (2 steps)"
    assert util.detail["devices"] == "0" and util.detail["file"] == str(two_steps)
    file = result.files[0]
    assert file.stats["host_sync_calls"] == 1  # the stream-wait record is GPU-side, not a host block
    assert file.stats["host_sync_share"] == pytest.approx(730 / window, abs=1e-4)
    assert set(file.measured) | set(file.not_derived) == set(nsys.FACTS)
    note = next(n for n in file.notes if n.startswith("device 0:"))
    assert "communication" in note and "cutlass::Kernel2" in note


def test_a_second_device_in_another_process_is_averaged_and_selectable(tmp_path: Path) -> None:
    a, b = _two_steps(0, 100), _two_steps(1, 200, shift=5.0)
    both = Export(kernels=a.kernels + b.kernels, copies=a.copies + b.copies, nvtx=a.nvtx + b.nvtx,
                  syncs=a.syncs + b.syncs, gpus={0: "NVIDIA H100 80GB HBM3", 1: "NVIDIA H100 80GB HBM3"})
    path = write(tmp_path / "two.sqlite", both)
    result = ingest_result(path)
    single = ingest_result(write(tmp_path / "one.sqlite", _two_steps()))
    for fact in ("gpu_util", "step_time_s", "comm_frac", "host_wait_frac", "data_wait_s"):
        assert result.observations.values()[fact] == pytest.approx(single.observations.values()[fact])
    assert result.observations.facts["gpu_util"].detail["devices"] == "0,1"
    assert any("2 devices in 2 processes" in n for n in result.notes)
    only = ingest_result(path, gpus=[1])
    assert only.observations.facts["gpu_util"].detail["devices"] == "1"
    with pytest.raises(ObservationError, match="devices 0, 1 only"):
        ingest_result(path, gpus=[3])


def test_steps_are_found_named_by_the_user_and_selected_by_number(tmp_path: Path) -> None:
    spec = _two_steps()
    spec.nvtx = [n for n in spec.nvtx if n.text != "train_step"]
    spec.nvtx += steps("iteration", [(0, 1000), (1000, 2000)], numbered=True)
    spec.nvtx += [Nvtx("forward", 0, 600), Nvtx("forward", 1000, 1600)]
    path = write(tmp_path / "iter.sqlite", spec)
    auto = ingest_result(path)
    assert auto.observations.facts["gpu_util"].detail["window"] == "NVTX 'iteration' #1–#2 (2 steps)"
    named = ingest_result(path, step_range="forward")
    assert named.observations.values()["step_time_s"] > 0
    assert "'forward'" in str(named.observations.facts["step_time_s"].detail["method"])
    second = ingest_result(path, steps="2")
    assert second.observations.values()["step_time_s"] == pytest.approx(1100e-6)
    assert second.observations.facts["gpu_util"].detail["window"] == "NVTX 'iteration' #2 (1 step)"
    with pytest.raises(ObservationError, match="the export has #1, #2"):
        ingest_result(path, steps="5:6")
    with pytest.raises(ObservationError, match=r"no NVTX range of that name.*'forward' ×2"):
        ingest_result(path, step_range="backward")


def test_without_step_ranges_the_whole_export_is_the_window_and_step_facts_say_why(tmp_path: Path) -> None:
    spec = _two_steps()
    spec.nvtx = [n for n in spec.nvtx if n.text != "train_step"] + [Nvtx("train_step", 0, 2000)]
    result = ingest_result(write(tmp_path / "once.sqlite", spec))
    assert "occurs once" in result.not_derived["step_time_s"]
    # the shared analysis's steady window, as for a Kineto trace without ProfilerStep spans: from the first GPU
    # activity (100 us; the launch call at 90 us before it is initialisation) to the end of the last kernel
    assert "steady state" in str(result.observations.facts["gpu_util"].detail["window"])
    assert result.observations.values()["gpu_util"] == pytest.approx((600 + 100 + 950) / (2100 - 100))
    windowed = ingest_result(write(tmp_path / "once2.sqlite", spec), window="0.00091:")
    assert windowed.observations.values()["gpu_util"] == pytest.approx(950 / 1100)  # 1000 us to the end
    with pytest.raises(ObservationError, match="--window is outside the export"):
        ingest_result(tmp_path / "once.sqlite", window="5:")


def test_an_old_layout_without_optional_columns_and_tables_is_read_and_the_gaps_named(tmp_path: Path) -> None:
    spec = _two_steps()
    spec.drop_tables = ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEM_KIND",
                        "ENUM_CUPTI_SYNC_TYPE", "TARGET_INFO_GPU", "CUPTI_ACTIVITY_KIND_MEMSET")
    spec.drop_columns = {"CUPTI_ACTIVITY_KIND_KERNEL": ("globalPid", "demangledName"),
                         "CUPTI_ACTIVITY_KIND_MEMCPY": ("globalPid", "srcKind", "dstKind")}
    spec.runtime_extra = [("cudaStreamSynchronize_v3020", 1360, 2090, 100)]
    result = ingest_result(write(tmp_path / "old.sqlite", spec))
    v = result.observations.values()
    assert v["gpu_util"] == pytest.approx((600 + 100 + 950) / 2100)
    assert v["comm_frac"] == pytest.approx(200 / 2100)
    assert "no srcKind column" in result.not_derived["pageable_copy_frac"]
    assert "--set hardware=" in result.not_derived["hardware"]
    notes = " | ".join(result.notes)
    assert "CUPTI_ACTIVITY_KIND_KERNEL: globalPid" in notes and "srcKind, dstKind" in notes
    assert "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" in notes and "CUPTI's numbering" in notes
    assert result.files[0].stats["host_sync_calls"] == 1  # from the *Synchronize runtime call
    top = next(n for n in result.notes if n.startswith("device 0:"))
    assert "cutlass::Kernel2" in top  # the short name stands in for the missing demangled name


def test_hardware_can_be_supplied_when_the_export_has_no_device_tables(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    spec = _two_steps()
    spec.drop_tables = ("TARGET_INFO_GPU",)
    path = write(tmp_path / "nogpu.sqlite", spec)
    assert cli.main(["diagnose", "--from", str(path), "--set", "hardware=h100-sxm", "--format", "json"]) == 0
    out = capsys.readouterr()
    assert '"hardware"' in out.out and "h100-sxm" in out.out


def test_no_gpu_activity_is_an_account_not_an_error(tmp_path: Path) -> None:
    spec = Export(nvtx=steps("step", [(0, 10), (10, 20)]), runtime_extra=[("cudaMalloc_v3020", 0, 5, 100)])
    result = ingest_result(write(tmp_path / "cpu.sqlite", spec))
    assert "kernel, memcpy and memset tables are empty" in result.not_derived["gpu_util"]
    assert result.observations.values()["step_time_s"] == pytest.approx(10e-6)


def test_records_are_format_neutral_sorted_and_joined_to_their_launch(two_steps: Path) -> None:
    with nsys.open_export(Source(two_steps)) as (export, _):
        acts = list(export.activities())
        assert [a.start_us for a in acts] == sorted(a.start_us for a in acts)
        first = acts[0]
        assert first == GpuActivity("kernel", GEMM, 100.0, 300.0, 0, 7, first.correlation, 100, 90.0)
        copies = [a for a in acts if a.kind == "memcpy"]
        assert [c.name for c in copies] == ["Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pinned -> Device)",
                                            "Memcpy DtoH (Device -> Pinned)"]
        assert [c.pageable for c in copies] == [True, False, False]
        assert math.isnan(copies[2].launch_us)
        syncs = list(export.sync_spans())
        assert {s.kind for s in syncs} == {"stream", "stream_wait"}
        calls = list(export.runtime_calls())
        assert all(c.process == 100 and c.thread == 1 for c in calls)


def test_gzip_and_stream_inputs_are_spooled(two_steps: Path, tmp_path: Path) -> None:
    packed = tmp_path / "two_steps.sqlite.gz"
    packed.write_bytes(gzip.compress(two_steps.read_bytes()))
    assert sniff(Source(packed)) == "nsys"
    expected = ingest_result(two_steps).observations.values()["gpu_util"]
    assert ingest_result(packed).observations.values()["gpu_util"] == pytest.approx(expected)
    with open(two_steps, "rb") as fh:
        assert ingest_result(fh).observations.values()["gpu_util"] == pytest.approx(expected)


def test_rows_stream_without_python_lists_of_the_table(tmp_path: Path) -> None:
    n = 40_000
    spec = Export(kernels=[Kernel(GEMM if i % 2 else ELEM, i * 10.0, i * 10.0 + 8, i * 10.0 - 5) for i in range(n)])
    path = write(tmp_path / "many.sqlite", spec)
    tracemalloc.start()
    try:
        result = ingest_result(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.observations.values()["gpu_util"] == pytest.approx(0.8, abs=1e-3)
    # rows are swept from the cursors in time order (host side, then the window, then the analysis): running sums,
    # intervals in flight, batches of at most 4096 rows on their way to temporary SQLite tables. Holding the rows
    # as the in-memory timeline did took about 18 MB here (130 bytes per kernel and launch call, plus index lists);
    # Python record lists of the tables would add about 15 MB more.
    assert peak < 6 << 20


# -- the adapter: nsys rows as the shared analysis's timeline ------------------------------------------------------

def test_the_adapter_feeds_the_shared_analysis_which_splits_gaps_and_clips_to_windows(tmp_path: Path) -> None:
    spec = Export(kernels=[Kernel(ELEM, 10, 20, 5), Kernel(ELEM, 20.01, 30, 8), Kernel(ELEM, 50, 60, 45),
                           Kernel(ELEM, 80, 90, 20)],
                  copies=[Copy(1, 92, 94, 91, src=0), Copy(1, 95, 97, 94, src=1)],
                  nvtx=[Nvtx("aten::add, seq = 3, op_id = 7", 4, 9), Nvtx(LOADER, 0, 5)])
    kb = expert.default_expert().kb
    assert kb.kernels is not None
    with nsys.open_export(Source(write(tmp_path / "gaps.sqlite", spec))) as (export, _):
        tl = device_timeline(export, 0, export.activities([0]), {100}, [(0.0, 5.0)])
    assert list(tl.g_start) == [10, 20.01, 50, 80, 92, 95]
    assert list(tl.launch) == pytest.approx([5, 8, 45, 20, 91, 94])  # joined by correlation id within the process
    assert [f & (H2D | PAGEABLE | PINNED) for f in tl.g_flag][4:] == [H2D | PAGEABLE, H2D | PINNED]
    assert [tl.names[i] for i in tl.o_name] == ["aten::add"]  # emit_nvtx's annotation stripped: an operator
    assert [tl.names[i] for i in tl.s_name] == [LOADER] and tl.loader == [(0.0, 5.0)]
    a = analyse_timeline(tl, [(0.0, 100.0)], {0}, kb.kernels)
    assert a is not None
    span = 100.0
    assert a.idle["busy"] == pytest.approx((10 + 9.99 + 10 + 10 + 2 + 2) / span)
    assert a.idle["data"] == pytest.approx(5 / span)
    # launched after the gap began: [5, 10), [30, 50) and [90, 92) (the copy launched at 91)
    assert a.idle["hta_host"] == pytest.approx((5 + 20 + 2) / span)
    assert a.idle["hta_kernel"] == pytest.approx(0.01 / span)  # shorter than 30 ns
    # launched before the gap began: [60, 80) and [94, 95) (launched at 94); the trailing [97, 100)
    assert a.idle["hta_other"] == pytest.approx((20 + 1 + 3) / span)
    assert a.copies["pageable"] == pytest.approx(2) and a.copies["pinned"] == pytest.approx(2)
    clipped = analyse_timeline(tl, [(15.0, 55.0)], {0}, kb.kernels)
    assert clipped is not None and clipped.idle["busy"] == pytest.approx((5 + 9.99 + 5) / 40)
    assert clipped.activities == 2  # activities starting inside the window


def test_kernel_classes_and_top_kernels_come_from_the_shared_catalog(two_steps: Path) -> None:
    result = ingest_result(two_steps)
    bd = result.time_breakdown
    assert bd is not None and bd.source == "two_steps.sqlite"
    classes = {c.class_: c for c in bd.classes}
    assert {"gemm", "communication", "elementwise", "reduction", "host_transfer"} <= set(classes)
    assert classes["gemm"].count == 2 and classes["communication"].count == 1
    assert bd.top_kernels[0].name == REDUCE and bd.top_kernels[0].count == 1
    v = result.observations.values()
    assert v["top_kernel_class"] == "reduction" and v["trace_kernels"] == 5
    assert v["uses_cuda_graphs"] == "no"
    assert nsys.short_name(ELEM) == "at::native::vectorized_elementwise_kernel"
    assert nsys.short_name(GEMM) == "cutlass::Kernel2"


# -- .nsys-rep ------------------------------------------------------------------------------------------------------

def _fake_nsys(bin_dir: Path, export: Path | None) -> None:
    """An `nsys` on PATH that writes `export` to --output=PATH (or fails when export is None)."""
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "nsys"
    body = (f"import shutil, sys\nout = [a.split('=', 1)[1] for a in sys.argv if a.startswith('--output=')][0]\n"
            f"assert sys.argv[1:3] == ['export', '--type=sqlite'], sys.argv\nshutil.copy({str(export)!r}, out)\n"
            if export else "import sys\nsys.stderr.write('Error: the report is corrupt\\n')\nsys.exit(1)\n")
    script.write_text(f"#!{sys.executable}\n{body}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_a_report_is_exported_with_nsys_when_it_is_on_path(two_steps: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"\x00NSYS-REPORT")
    _fake_nsys(tmp_path / "bin", two_steps)
    monkeypatch.setenv("PATH", str(tmp_path / "bin") + os.pathsep + os.environ.get("PATH", ""))
    result = ingest_result(report)
    assert result.observations.values()["step_time_s"] == pytest.approx(1050e-6)
    assert any("exported with `nsys export --type sqlite`" in n for n in result.notes)


def test_a_report_without_nsys_or_with_a_failing_export_is_a_clear_error(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"\x00NSYS-REPORT")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert cli.main(["ingest", str(report)]) == 2
    err = capsys.readouterr().err
    assert "run.nsys-rep" in err and "not on PATH" in err and "nsys export --type sqlite" in err
    _fake_nsys(tmp_path / "bin", None)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert cli.main(["diagnose", "--from", str(report)]) == 2
    assert "failed (exit 1): Error: the report is corrupt" in capsys.readouterr().err


# -- bad inputs -----------------------------------------------------------------------------------------------------

def _not_nsys(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    conn.commit()
    conn.close()
    return path


def _empty_db(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (a)")
    conn.execute("DROP TABLE t")
    conn.commit()
    conn.close()
    return path


def _truncated(path: Path) -> Path:
    real = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "nsys" / "mfu_2gpu_before.sqlite"
    if real.is_file():
        data = real.read_bytes()
    else:
        data = write(path.with_suffix(".full"), Export(kernels=[Kernel(ELEM, i, i + 0.5, i - 0.2)
                                                                for i in range(20_000)])).read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


@pytest.mark.parametrize(("make", "message"), [
    (_not_nsys, "not an Nsight Systems export (its tables: users)"),
    (_empty_db, "an empty SQLite database (no tables)"),
    (_truncated, "truncated or damaged"),
    (lambda p: (p.write_bytes(b""), p)[1], "the file is empty"),
], ids=["not-nsys", "empty-database", "truncated", "zero-bytes"])
def test_bad_sqlite_inputs_are_located_errors_with_exit_2(tmp_path: Path, make: object, message: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = make(tmp_path / "bad.sqlite")  # type: ignore[operator]
    assert cli.main(["ingest", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and message in err and "Traceback" not in err


def test_a_locked_database_is_a_clear_error(two_steps: Path, capsys: pytest.CaptureFixture[str]) -> None:
    holder = sqlite3.connect(two_steps, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        assert cli.main(["ingest", str(two_steps)]) == 2
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    err = capsys.readouterr().err
    assert str(two_steps) in err and "locked by another process" in err


def test_step_range_on_a_kineto_trace_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    trace = Path(__file__).parent / "fixtures" / "telemetry" / "kineto_two_steps.json"
    assert cli.main(["ingest", str(trace), "--step-range", "train_step"]) == 2
    assert "applies to Nsight Systems exports" in capsys.readouterr().err


def test_ingest_and_diagnose_from_the_command_line(two_steps: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ingest", str(two_steps), "--step-range", "train_step"]) == 0
    out = capsys.readouterr().out
    assert "step_time_s" in out and "nsys:two_steps.sqlite" in out
    assert cli.main(["diagnose", "--from", str(two_steps), "--step-range", "train_step", "--format", "json"]) == 0
    assert expert.Report.model_validate_json(capsys.readouterr().out).observations["gpu_util"].value > 0


def test_forcing_the_nsys_format_on_another_file_says_what_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    trace = Path(__file__).parent / "fixtures" / "telemetry" / "kineto_two_steps.json"
    assert cli.main(["ingest", str(trace), "--format", "nsys"]) == 2
    err = capsys.readouterr().err
    assert "kineto_two_steps.json" in err and "not a SQLite database" in err and "nsys export --type sqlite" in err


def test_progress_is_reported_while_rows_stream(tmp_path: Path) -> None:
    spec = Export(kernels=[Kernel(ELEM, i * 10.0, i * 10.0 + 8, i * 10.0 - 5) for i in range(70_000)])
    path = write(tmp_path / "progress.sqlite", spec)
    seen: list[tuple[int, int | None]] = []
    ingest_result(path, progress=lambda done, size: seen.append((done, size)))
    size = path.stat().st_size
    assert len(seen) >= 2 and seen[-1] == (size, size)
    assert all(done <= size for done, _ in seen)


# -- nsys's runtime-API names, operators beyond aten:: --------------------------------------------------------------

ATTN = "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 4, false, cutlass::bfloat16_t>>(Params)"


def versioned_calls() -> Export:
    """Two `step` ranges [0, 3000) and [3000, 6000) us (on a thread that launches nothing). Kernels [10, 110),
    [2510, 2600), [3010, 5990), launched at 5, 2503 and 3005 (2 us calls). In the gap [110, 2510) the launching
    thread runs cudaHostAlloc_v3020 [120, 320), blocks in cudaStreamSynchronize_v3020 [320, 420) and sits in a slow
    first cudaLaunchKernel_v7000 [430, 1930) (nsys's names: an API-version suffix after the name Kineto writes).

    Idle split of the 6000 us: launch 10 (the 10 us before the first kernel) + 1500 + 2 (inside launch calls in the
    long gap) + 2 (the launch call in [2600, 3010)) = 1514; sync 100; host compute 200; unattributed
    598 + 408 + 10 = 1016; busy 100 + 90 + 2980 = 3170."""
    return Export(kernels=[Kernel(GEMM, 10, 110, 5), Kernel(ELEM, 2510, 2600, 2503), Kernel(GEMM, 3010, 5990, 3005)],
                  nvtx=[Nvtx("step", 0, 3000, tid=2), Nvtx("step", 3000, 6000, tid=2)],  # marked on another thread
                  runtime_extra=[("cudaHostAlloc_v3020", 120, 320, 100), ("cudaStreamSynchronize_v3020", 320, 420, 100),
                                 ("cudaLaunchKernel_v7000", 430, 1930, 100)],
                  gpus={0: "NVIDIA H100 80GB HBM3"})


def test_runtime_calls_with_nsys_api_version_suffixes_take_their_roles(tmp_path: Path) -> None:
    result = ingest_result(write(tmp_path / "versioned.sqlite", versioned_calls()))
    v = result.observations.values()
    assert v["gpu_util"] == pytest.approx(3170 / 6000)
    assert v["host_sync_frac"] == pytest.approx(100 / 6000)  # cudaStreamSynchronize_v3020 blocks
    # time inside cudaLaunchKernel_v7000 is launch overhead, except the 1.5 ms first launch: a one-off, unattributed
    assert v["launch_overhead_frac"] == pytest.approx(14 / 6000)
    assert v["host_compute_frac"] == pytest.approx(200 / 6000)
    assert v["unattributed_idle_frac"] == pytest.approx((1016 + 1500) / 6000)
    assert v["idle_host_ops"] == "cudaHostAlloc"  # named as Kineto names it
    note = next(n for n in result.notes if "took 1.5 ms" in n)
    assert note.startswith("cudaLaunchKernel took 1.5 ms") and "first launch" in note


def test_emit_nvtx_operators_beyond_aten_launch_their_kernels(tmp_path: Path) -> None:
    """flash-attn's custom op (`flash_attn::_flash_attn_forward, op_id = N`, inside the autograd function
    `FlashAttnFunc, seq = N, op_id = N`) is the operator of the attention kernel it launches, as a Kineto trace's
    cpu_op would be; a user's own `Model::forward` range (no emit_nvtx annotation) is not an operator."""
    spec = Export(kernels=[Kernel(ATTN, 100, 900, 60), Kernel(GEMM, 900, 1000, 70), Kernel(ATTN, 1100, 1900, 1060),
                           Kernel(GEMM, 1900, 2000, 1070)], gpus={0: "NVIDIA H100 80GB HBM3"})
    for t in (0.0, 1000.0):
        spec.nvtx += [Nvtx("Model::forward", t + 1, t + 90),
                      Nvtx("FlashAttnFunc, seq = 7, op_id = 8", t + 50, t + 65),
                      Nvtx("flash_attn::_flash_attn_forward, op_id = 9", t + 55, t + 63),
                      Nvtx("aten::mm, seq = 8, op_id = 10", t + 68, t + 75)]
    result = ingest_result(write(tmp_path / "flash.sqlite", spec))
    v = result.observations.values()
    assert v["top_kernel_class"] == "attention"
    assert v["top_kernel_class_ops"] == "flash_attn::_flash_attn_forward"
    assert v["top_op"] == "flash_attn::_flash_attn_forward"
    bd = result.time_breakdown
    assert bd is not None and [op.name for op in bd.top_ops] == ["flash_attn::_flash_attn_forward", "aten::mm"]


def test_top_kernel_class_ops_says_why_it_is_not_derived(tmp_path: Path) -> None:
    no_nvtx = Export(kernels=[Kernel(GEMM, 100, 400, 90), Kernel(GEMM, 500, 800, 490)])
    why = ingest_result(write(tmp_path / "plain.sqlite", no_nvtx)).not_derived["top_kernel_class_ops"]
    assert "no launch call lies inside an operator NVTX range" in why and "emit_nvtx" in why
    assert "no runtime calls" not in why  # the export has them
    outside = Export(kernels=[Kernel(ATTN, 100, 900, 60), Kernel(ELEM, 900, 950, 70)],
                     nvtx=[Nvtx("aten::add, seq = 1, op_id = 2", 65, 75)])
    why = ingest_result(write(tmp_path / "outside.sqlite", outside)).not_derived["top_kernel_class_ops"]
    assert why.startswith("none of the attention kernels was launched inside an operator")
    no_calls = Export(kernels=[Kernel(GEMM, 100, 400, None), Kernel(GEMM, 500, 800, None)])
    why = ingest_result(write(tmp_path / "nocalls.sqlite", no_calls)).not_derived["top_kernel_class_ops"]
    assert "the trace has no runtime calls" in why


def test_step_range_with_an_export_and_a_telemetry_log_is_a_note_on_the_log(two_steps: Path) -> None:
    dcgm = Path(__file__).parent / "fixtures" / "telemetry" / "dcgmi_dmon.txt"
    result = ingest_result([two_steps, dcgm], step_range="train_step")
    assert result.observations.values()["trace_steps"] == 2
    assert any(n.startswith("dcgmi_dmon.txt: --step-range applies to Nsight Systems exports") for n in result.notes)


def test_runtime_call_roles_ignore_the_api_version_suffix() -> None:
    from expert.ingest.timeline.classes import Classifier, api_name

    assert api_name("cudaLaunchKernel_v7000") == "cudaLaunchKernel"
    assert api_name("cudaStreamGetCaptureInfo_v2_v11030") == "cudaStreamGetCaptureInfo_v2"
    assert api_name("cuMemcpyDtoH_v2") == "cuMemcpyDtoH_v2"  # a driver API's own _v2 stays
    kernels = expert.default_expert().kb.kernels
    assert kernels is not None
    cls = Classifier(kernels)
    for name in ("cudaStreamSynchronize_v3020", "cudaDeviceSynchronize_v3020", "cudaFree_v3020", "cudaMemcpy_v3020"):
        assert cls.is_blocking(name) and cls.is_blocking(api_name(name)), name
    assert cls.is_graph_launch("cudaGraphLaunch_v10000")
    assert cls.is_launch_call("cudaLaunchKernel_v7000") and cls.is_launch_call("cuLaunchKernelEx")
    assert cls.is_launch_call("cudaMemsetAsync_v3020") and cls.is_launch_call("hipLaunchKernel")
    assert not cls.is_launch_call("cudaMemcpyAsync_v3020")  # a copy: host copy work, not launch overhead
    assert cls.is_host_copy("cudaMemcpyAsync_v3020") and not cls.is_blocking("cudaMemcpyAsync_v3020")


@pytest.mark.parametrize(("name", "operator"), [
    ("aten::mm", True), ("aten::mm, seq = 3, op_id = 5", True),
    ("flash_attn::_flash_attn_forward, op_id = 990813", True), ("c10d::alltoall_base_, op_id = 7", True),
    ("torchvision::nms, seq = 1, op_id = 2, sizes = [[4, 4]]", True),
    ("flash_attn::_flash_attn_forward", False),  # no emit_nvtx annotation: a user's own range
    ("Model::forward", False), ("FlashAttnFunc, seq = 45368, op_id = 990812", False),
    ("FSDP::pre_forward (blocks.3._checkpoint_wrapped_module), op_id = 990878", False),
    ("record_param_comms, op_id = 991143", False), ("nn.Module: Linear_0", False), ("ProfilerStep#3", False),
    ("a::b, sizes = [[1]]", False), ("", False),
])
def test_operator_ranges_are_told_apart_alike_in_python_and_in_sqlite(name: str, operator: bool) -> None:
    from expert.ingest.nsys.names import is_operator_range, operator_sql, sql_is_operator

    assert is_operator_range(name) is operator
    conn = sqlite3.connect(":memory:")
    conn.create_function("dam_is_op", 1, sql_is_operator, deterministic=True)
    assert bool(conn.execute(f"SELECT {operator_sql('x.n')} FROM (SELECT ? AS n) x", (name,)).fetchone()[0]) is operator
