"""A multi-GPU job from its real traces (expert/ingest/ranks.py): rank files grouped into jobs, read in parallel,
compared across ranks; the straggler and the waits attributed to it; nccl-tests as telemetry.

Traces: a real 3-rank DDP job generated here with torch.distributed (gloo, CPU) with rank 2 slowed
(tests/gen_traces/make_rank_traces.py), and GPU jobs built from the real A100 rank trace in ../shared/traces by the
documented transformation of tests/gen_traces/make_gpu_ranks.py (both generated once per session, conftest.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import CONTROL  # ../shared (or $DAM_SHARED)/traces/hta/trace_diff_control_control.json.gz

import cli
import expert
from expert.errors import ObservationError
from expert.ingest import ingest_result, rank_reading, rank_trace
from expert.ingest._source import Source
from expert.report.render import export

FIXTURES = Path(__file__).parent / "fixtures" / "telemetry"


def _by_rank(result: expert.IngestResult) -> dict[int, expert.observations.RankFigures]:
    assert result.job is not None
    return {r.rank: r for r in result.job.ranks}


# ---- the real gloo job -------------------------------------------------------------------------------------------
def test_the_slowed_gloo_rank_is_the_straggler_and_the_others_wait_for_it(gloo_job: Path) -> None:
    result = ingest_result(gloo_job)
    job = result.job
    assert job is not None and job.world_size == 3 and job.backend == "gloo" and job.mode == "cpu"
    assert [r.rank for r in job.ranks] == [0, 1, 2]
    assert job.slowest_rank == 2
    rows = _by_rank(result)
    # rank 2 computes 40 ms longer per step; ranks 0 and 1 spend that time waiting inside gloo:all_reduce
    assert rows[2].compute_s > rows[0].compute_s + 0.025 and rows[2].compute_s > rows[1].compute_s + 0.025
    assert rows[0].sync_wait_s > 0.025 and rows[1].sync_wait_s > 0.025
    assert rows[2].sync_wait_s == 0.0
    assert rows[0].comm_s > rows[2].comm_s + 0.02
    values = result.observations.values()
    assert values["slowest_rank"] == 2 and values["world_size"] == 3
    assert 0.025 < values["sync_wait_s"] < 0.2
    assert values["compute_skew"] > 1.0
    assert "num_gpus" not in values and "CPU-only" in result.not_derived["num_gpus"]
    assert any("waits for rank 2 inside collectives" in n for n in result.notes)
    # provenance back to the rank files
    facts = result.observations.facts
    assert facts["slowest_rank"].source == "kineto:rank2.json"
    assert all(f"rank{r}.json" in str(facts["sync_wait_s"].detail["files"]) for r in range(3))
    report = expert.diagnose(result.observations)
    assert report.bottleneck == "coordination"
    assert {"stragglers", "straggler_rank", "straggler_computes_longer"} <= {f.id for f in report.findings}
    assert report.cluster is not None and report.cluster.straggler_rank == 2 and report.cluster.world_size == 3
    assert [r.rank for r in report.cluster.ranks] == [0, 1, 2]
    assert "straggler_mitigation" in [r.id for r in report.recommended]


def test_rank_files_in_any_order_or_form_give_the_same_facts(gloo_job: Path) -> None:
    files = sorted(str(p) for p in gloo_job.glob("rank*.json"))
    forward = ingest_result(files)
    backward = ingest_result(list(reversed(files)))
    by_glob = ingest_result(str(gloo_job / "rank*.json"))
    by_dir = ingest_result(gloo_job)
    expected = forward.to_observation_file()
    for other in (backward, by_glob, by_dir):
        assert other.to_observation_file() == expected
        assert other.job == forward.job
    assert [f.name for f in backward.files] == ["rank0.json", "rank1.json", "rank2.json"]


def test_worker_processes_read_the_same_as_the_parent(gloo_job: Path) -> None:
    pooled = ingest_result(gloo_job, workers=2)
    alone = ingest_result(gloo_job, workers=1)
    assert pooled.to_observation_file() == alone.to_observation_file()
    assert pooled.job == alone.job


def test_job_progress_reports_each_jobs_bytes(gloo_job: Path) -> None:
    seen: list[tuple[str, int, int | None]] = []
    ingest_result(gloo_job, job_progress=lambda label, done, total: seen.append((label, done, total)))
    assert seen and {label for label, _, _ in seen} == {"gloo job of 3 ranks"}
    assert seen[-1][1] == seen[-1][2]


def test_cli_ingests_a_directory_and_diagnoses_from_it(gloo_job: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ingest", str(gloo_job)]) == 0
    out = capsys.readouterr().out
    assert "Ranks (3 traced of 3, cpu; per step)" in out and "2 ◀" in out
    assert cli.main(["diagnose", "--from", str(gloo_job), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cluster"]["straggler_rank"] == 2 and len(report["cluster"]["ranks"]) == 3
    assert set(report["cluster"]["ranks"][0]) >= {"rank", "file", "step_time_s", "compute_s", "comm_s",
                                                    "exposed_comm_frac", "idle_frac"}
    saved = tmp_path / "job.yaml"
    assert cli.main(["ingest", str(gloo_job / "rank*.json"), "--as", "yaml", "--output", str(saved)]) == 0
    assert len(yaml.safe_load(saved.read_text())["ranks"]) == 3
    assert cli.main(["diagnose", str(saved), "--format", "json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["cluster"]["ranks"] == report["cluster"]["ranks"]
    assert again["cluster"]["straggler_rank"] == 2


# ---- GPU jobs built from the real A100 rank trace ----------------------------------------------------------------
def test_a_gpu_straggler_is_found_with_its_wait_and_compute(gpu_straggler: Path) -> None:
    result = ingest_result(gpu_straggler)
    job = result.job
    assert job is not None and job.world_size == 4 and job.mode == "gpu" and job.slowest_rank == 2
    rows = _by_rank(result)
    source = rank_trace.read(Source(CONTROL))
    source_compute = source.total("compute_us") / len(source.window_us) / 1e6
    source_comm = source.total("comm_us") / len(source.window_us) / 1e6
    # the transformation: rank 2's computation takes 1.5x, its collectives keep their duration; the others wait
    assert rows[2].compute_s == pytest.approx(1.5 * source_compute, rel=0.02)
    assert rows[2].comm_s == pytest.approx(source_comm, rel=0.01)
    for r in (0, 1, 3):
        assert rows[r].compute_s == pytest.approx(source_compute, rel=0.02)
        assert rows[r].sync_wait_s == pytest.approx(0.5 * source_compute, rel=0.1)
        assert rows[r].exposed_comm_frac > rows[2].exposed_comm_frac
    assert rows[2].sync_wait_s == 0.0
    values = result.observations.values()
    assert values["num_gpus"] == 4 and values["hardware"] == "a100-40gb"
    assert values["compute_skew"] == pytest.approx(0.5, abs=0.05)
    assert values["comm_time_s"] == pytest.approx(source_comm, rel=0.01)  # measured on the rank that waits least
    report = expert.diagnose(result.observations)
    assert report.cluster is not None and report.cluster.straggler_rank == 2
    assert report.cluster.slow_link is True  # even rank 2's own transfers are exposed for >10 % of its step
    assert {"straggler_rank", "straggler_computes_longer", "slow_link"} <= {f.id for f in report.findings}


def test_a_fast_link_and_even_ranks_show_neither_straggler_nor_slow_link(gpu_fast_link: Path) -> None:
    result = ingest_result(gpu_fast_link)
    values = result.observations.values()
    assert values["sync_wait_s"] == 0.0 and values["comm_frac"] < 0.10
    report = expert.diagnose(result.observations)
    assert report.cluster is not None and report.cluster.world_size == 2
    assert report.cluster.straggler_rank is None and report.cluster.slow_link is False
    assert not {"straggler_rank", "stragglers", "slow_link"} & {f.id for f in report.findings}


def test_one_rank_of_eight_gives_the_world_size_but_no_comparison() -> None:
    if not CONTROL.is_file():
        pytest.skip(f"the shared real traces are not at {CONTROL.parent}")
    result = ingest_result(CONTROL)
    values = result.observations.values()
    assert values["world_size"] == 8 and values["num_gpus"] == 8
    assert result.files[0].stats["rank"] == 3 and result.files[0].stats["world_size"] == 8
    assert "1 of 8 ranks traced" in result.not_derived["sync_wait_s"]
    report = expert.diagnose(result.observations)
    assert report.cluster is not None and report.cluster.num_gpus == 8 and len(report.cluster.ranks) == 1
    assert report.cluster.straggler_rank is None and report.cluster.slow_link is None


def test_traces_of_two_jobs_are_told_apart(gpu_straggler: Path, gpu_fast_link: Path) -> None:
    both = [*gpu_straggler.glob("*.json.gz"), *gpu_fast_link.glob("*.json.gz")]
    with pytest.raises(ObservationError, match="not the ranks of one job; they hold 2 jobs"):
        ingest_result(both)
    sizes = {ingest_result(both, job=k).job.world_size for k in (1, 2)}  # type: ignore[union-attr]
    assert sizes == {2, 4}
    with pytest.raises(ObservationError, match="--job 3"):
        ingest_result(both, job=3)


def test_a_rank_given_twice_is_not_merged_into_the_job(gpu_fast_link: Path, tmp_path: Path) -> None:
    for p in gpu_fast_link.glob("*.json.gz"):
        shutil.copy(p, tmp_path / p.name)
    shutil.copy(gpu_fast_link / "rank0.json.gz", tmp_path / "copy_of_rank0.json.gz")
    with pytest.raises(ObservationError, match="2 jobs"):
        ingest_result(tmp_path)


def test_html_markdown_and_terminal_show_the_ranks(gpu_straggler: Path) -> None:
    report = expert.diagnose(expert.ingest(gpu_straggler))
    html = export(report, "html")
    assert 'id="straggler" data-rank="2"' in html and '<table id="ranks">' in html and "Cluster (C³" in html
    markdown = export(report, "markdown")
    assert "**Straggler: rank 2**" in markdown and "| 2 **straggler** | rank2.json.gz |" in markdown
    from rich.console import Console

    from expert.report.render.terminal import print_report

    console = Console(record=True, width=160)
    print_report(report, console)
    text = console.export_text()
    assert "Ranks (4 traced of 4; per step)" in text and "2 ◀" in text and "◀ straggler: rank 2" in text


# ---- NCCL kernel arguments (PyTorch >= 2.3 writes the collective's name, size, group and dtype) ------------------
def _tiny_rank(rank: int, comm_start: float, *, on_kernel: bool) -> dict[str, object]:
    """A hand-written two-rank trace in Kineto's shape: one step, one GEMM, one all-reduce of 25M floats."""
    size_args = {"Collective name": "allreduce", "In msg nelems": 25_000_000, "Out msg nelems": 25_000_000,
                 "Group size": 2, "dtype": "Float", "Process Group Name": "0"}
    kernel_args: dict[str, object] = {"device": rank, "stream": 7, "correlation": 11, "External id": 5}
    if on_kernel:
        kernel_args.update(size_args)
    events: list[dict[str, object]] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
         "args": {"correlation": 10}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20, "dur": 5,
         "args": {"correlation": 11}},
        {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16", "pid": rank, "tid": 7, "ts": 100, "dur": 500,
         "args": {"device": rank, "stream": 7, "correlation": 10}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long)",
         "pid": rank, "tid": 7, "ts": comm_start, "dur": 900 - comm_start, "args": kernel_args},
    ]
    if not on_kernel:  # older layout: the sizes only on the CPU operator, linked by External id
        events.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 18,
                       "dur": 3, "args": {"External id": 5, **size_args}})
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}], "traceEvents": events}


@pytest.mark.parametrize("on_kernel", [True, False], ids=["args-on-kernel", "args-on-record_param_comms"])
def test_collective_sizes_give_bus_bandwidth_on_the_rank_that_waits_least(tmp_path: Path, on_kernel: bool) -> None:
    for rank, start in ((0, 600.0), (1, 700.0)):  # rank 0 enters the all-reduce 100 us before rank 1
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(_tiny_rank(rank, start, on_kernel=on_kernel)))
    result = ingest_result(tmp_path)
    values = result.observations.values()
    assert values["slowest_rank"] == 1 and values["sync_wait_s"] == pytest.approx(100e-6)
    # 25M floats = 1e8 B; bus bytes 2(n-1)/n x 1e8 = 1e8 over rank 1's 200 us: 500 GB/s (nccl-tests busbw)
    assert values["bus_bandwidth"] == pytest.approx(500.0)
    assert values["gradient_bytes"] == pytest.approx(1e8)
    assert values["comm_time_s"] == pytest.approx(200e-6) and values["num_gpus"] == 2
    report = expert.diagnose({**values, "interconnect": "nvlink"})
    assert report.cluster is not None and report.cluster.bus_bandwidth == pytest.approx(500.0)


# ---- inputs, workers, memory -------------------------------------------------------------------------------------
def test_a_rank_trace_on_standard_input_is_spooled_and_read_twice(gloo_job: Path) -> None:
    with open(gloo_job / "rank1.json", "rb") as fh:
        result = ingest_result(fh)
    assert result.job is not None and [r.rank for r in result.job.ranks] == [1]
    assert result.observations.values()["world_size"] == 3
    assert "1 of 3 ranks traced" in result.not_derived["sync_wait_s"]



def test_a_directory_without_traces_and_a_glob_without_matches_are_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("hello")
    with pytest.raises(ObservationError, match="holds no trace or telemetry files"):
        ingest_result(tmp_path)
    with pytest.raises(ObservationError, match="no files match"):
        ingest_result(str(tmp_path / "rank*.json"))
    assert cli.main(["ingest", str(tmp_path)]) == 2
    (tmp_path / "job-a").mkdir()
    with pytest.raises(ObservationError, match=r"it has sub-folders \(job-a\): name the one"):
        ingest_result(tmp_path)


def test_a_directory_contributes_its_nsight_systems_exports(tmp_path: Path) -> None:
    from expert.ingest.rank_reading import expand

    for name in ("rank0.sqlite", "rank1.json.gz", "README.md"):
        (tmp_path / name).write_text("x")
    files, notes = expand([tmp_path])
    assert [Path(str(f)).name for f in files] == ["rank0.sqlite", "rank1.json.gz"]
    assert notes == [f"{tmp_path}: 1 file(s) that are not traces or telemetry logs skipped"]


def test_workers_are_bounded_by_memory_not_by_the_number_of_ranks(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    paths = []
    for r in range(8):  # eight "1 GB" rank files (sparse: only their size matters here)
        p = tmp_path / f"rank{r}.json"
        with open(p, "wb") as fh:
            fh.truncate(1 << 30)
        paths.append(p)
    monkeypatch.setattr(rank_reading, "_mem_available", lambda: 1 << 30)
    assert rank_reading.worker_count(paths, None) == 1  # one worker's share of 1 GB RAM: ~480 MB
    monkeypatch.setattr(rank_reading, "_mem_available", lambda: 64 << 30)
    monkeypatch.setattr(rank_reading.os, "cpu_count", lambda: 4)
    assert rank_reading.worker_count(paths, None) == 4
    assert rank_reading.worker_count(paths[:1], None) == 1
    assert rank_reading.worker_count(paths, 3) == 3


def test_rank_from_file_name_when_the_trace_does_not_record_it(gloo_job: Path, tmp_path: Path) -> None:
    for r in range(3):
        doc = json.loads((gloo_job / f"rank{r}.json").read_text())
        doc.pop("distributedInfo")
        (tmp_path / f"trace_rank-{r}.json").write_text(json.dumps(doc))
    result = ingest_result(tmp_path)
    assert result.job is not None and [r.rank for r in result.job.ranks] == [0, 1, 2]
    assert result.job.slowest_rank == 2 and "world_size" in result.not_derived


# ---- nccl-tests ------------------------------------------------------------------------------------------------------
def test_nccl_tests_output_gives_the_measured_bus_bandwidth() -> None:
    healthy = ingest_result(FIXTURES / "nccl_tests_all_reduce_h100.txt")
    assert healthy.files[0].format == "nccl-tests"
    values = healthy.observations.values()
    assert values["nccl_bus_bandwidth"] == pytest.approx(472.32) and values["hardware"] == "h100-sxm"
    assert healthy.files[0].stats["ranks"] == 8 and healthy.files[0].stats["test"] == "all_reduce_perf"
    report = expert.diagnose({**values, "interconnect": "nvlink", "num_gpus": 8, "comm_frac": 0.2})
    assert "link_below_rated" not in {f.id for f in report.findings}
    assert report.cluster is not None and report.cluster.nccl_bw_util == pytest.approx(472.32 / 450)
    tagged = ingest_result(FIXTURES / "nccl_tests_mpi_two_nodes.txt")  # mpirun --tag-output prefixes every line
    assert tagged.files[0].format == "nccl-tests" and tagged.files[0].stats["hosts"] == 2
    slow = expert.diagnose({**tagged.observations.values(), "interconnect": "ethernet", "num_gpus": 2,
                            "comm_frac": 0.2})
    assert "link_below_rated" in {f.id for f in slow.findings}


def test_malformed_nccl_tests_output_names_the_line(tmp_path: Path) -> None:
    text = (FIXTURES / "nccl_tests_all_reduce_h100.txt").read_text().splitlines()
    row = next(i for i, line in enumerate(text) if line.strip().startswith("1048576"))
    text[row] = "     1048576        262144     float     sum"
    bad = tmp_path / "bad.txt"
    bad.write_text("\n".join(text) + "\n")
    with pytest.raises(ObservationError, match=rf"bad.txt:{row + 1}: expected 13 columns"):
        ingest_result(bad)
    assert cli.main(["ingest", str(bad)]) == 2
