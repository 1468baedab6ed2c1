"""`dam fleet` and `expert.fleet.run` on the local process pool: the same verdicts as `dam diagnose`, error rows for
bad, empty, oversized, missing and slow inputs, stuck and crashing workers, --resume, manifests, summary, query."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("fsspec")

import pyarrow.parquet as pq
from fleet_support import (
    REAL_TRACES,
    TELEMETRY,
    diagnose_cli,
    example_manifest,
    reference,
    write_inputs,
    write_slow_trace,
)

import cli
import expert
import expert.fleet
from expert.fleet import FleetInputError
from expert.fleet._table import list_parts


def by_key(result: Any) -> dict[str, dict[str, Any]]:
    return {row["job_key"]: row for row in result.rows}


def dataset(out: Path) -> list[dict[str, Any]]:
    return pq.read_table(out).to_pylist()  # type: ignore[no-any-return]


# ---- verdicts equal `dam diagnose` ---------------------------------------------------------------------------------


def test_typed_fact_jobs_equal_dam_diagnose(tmp_path: Path) -> None:
    manifest = tmp_path / "jobs.jsonl"
    keys = example_manifest(manifest)
    result = expert.fleet.run(manifest, out=tmp_path / "out", workers=2)
    rows = by_key(result)
    assert sorted(rows) == sorted(keys) and result.errors == 0 and result.ran == len(keys)
    for key in keys:
        row = rows[key]
        if key == "inline":
            want = diagnose_cli("--set", "hardware=h100-sxm", "--set", "gpu_util=45%", "--set", "data_wait_s=120 ms",
                                "--set", "step_time_s=300 ms")
        else:
            want = reference(row)
        assert json.loads(row["report_json"]) == want, key
        assert row["bottleneck"] == want["bottleneck"]
        assert row["recommended"] == [r["id"] for r in want["recommended"]]
        assert row["wasted"] == [w["id"] for w in want["wasted"]]
        assert row["labels"] == {"kind": "inline" if key == "inline" else "example"}
    assert 1 <= len(result.workers) <= 2  # the worker processes that did work said how much memory they used
    assert all(rss > 10 << 20 for rss in result.workers.values())


def test_telemetry_jobs_equal_dam_diagnose_from(tmp_path: Path) -> None:
    paths = write_inputs(tmp_path / "in")
    result = expert.fleet.run(tmp_path / "in", out=tmp_path / "out", workers=2)
    rows = by_key(result)
    for name in ["kineto_two_steps.json", "dcgmi_dmon.txt", "nvidia_smi_query.csv", "nvidia_smi_dmon.txt",
                 "dcgm_exporter.prom"]:
        row = rows[name]
        assert row["error"] is None, row["error"]
        assert row["files"] == [str(paths[name])]
        assert json.loads(row["report_json"]) == diagnose_cli("--from", str(paths[name])), name


@pytest.mark.skipif(not REAL_TRACES, reason="the shared real traces are not at ../shared/traces")
def test_real_traces_equal_dam_diagnose_from(tmp_path: Path) -> None:
    result = expert.fleet.run(str(REAL_TRACES[0].parents[1] / "*" / "*.json.gz"), out=tmp_path / "out", workers=2)
    assert result.jobs == len(REAL_TRACES) and result.errors == 0
    for row in result.rows:
        want = diagnose_cli("--from", row["files"][0])
        assert json.loads(row["report_json"]) == want, row["job_key"]
        assert row["bottleneck"] == want["bottleneck"]
    resnet = by_key(result)["kineto-resnet50/resnet50_num_workers_0.pt.trace.json.gz"]
    assert resnet["bottleneck"] == "input" and resnet["hardware"] == "v100-sxm2"


def test_files_of_one_job_are_ingested_together(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "job-7"
    run_dir.mkdir(parents=True)
    trace, dcgm = run_dir / "trace.json", run_dir / "dcgm.txt"
    shutil.copy(TELEMETRY / "kineto_two_steps.json", trace)
    shutil.copy(TELEMETRY / "dcgmi_dmon.txt", dcgm)
    result = expert.fleet.run(str(tmp_path / "runs" / "*" / "*"), job_key=r"runs/(?P<job>[^/]+)/", workers=1)
    (row,) = result.rows
    assert row["job_key"] == "job-7" and sorted(row["files"]) == sorted([str(trace), str(dcgm)])
    assert json.loads(row["report_json"]) == diagnose_cli("--from", *row["files"])
    assert row["report_json"] is not None and "dcgmi" in row["report_json"]


# ---- robustness ------------------------------------------------------------------------------------------------------


def test_corrupt_empty_missing_oversized_and_slow_inputs_become_error_rows(tmp_path: Path) -> None:
    paths = write_inputs(tmp_path / "in")
    slow = write_slow_trace(tmp_path / "slow.json.gz")
    lines = [{"job_id": name, "files": [str(path)]} for name, path in paths.items()]
    lines += [{"job_id": "slow", "files": [str(slow)]}, {"job_id": "missing", "files": ["nowhere/trace.json"]},
              {"job_id": "bad-fact", "facts": {"gpu_util": "150%"}}]
    manifest = tmp_path / "jobs.jsonl"
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    started = time.monotonic()
    # 3 s: far below the slow trace's ~9 s, far above a small file's ingest on a loaded machine
    result = expert.fleet.run(manifest, out=tmp_path / "out", workers=2, timeout=3.0)
    assert time.monotonic() - started < 30
    rows = by_key(result)
    assert rows["corrupt.json.gz"]["error_kind"] == "input"
    assert "corrupt" in rows["corrupt.json.gz"]["error"] and "corrupt.json.gz" in rows["corrupt.json.gz"]["error"]
    assert rows["empty.json"]["error_kind"] == "input" and "empty" in rows["empty.json"]["error"]
    assert rows["slow"]["error_kind"] == "timeout" and "timed out after 3 s" in rows["slow"]["error"]
    assert rows["missing"]["error_kind"] == "input" and "no such file" in rows["missing"]["error"]
    assert rows["bad-fact"]["error_kind"] == "input" and "gpu_util" in rows["bad-fact"]["error"]
    for name in ["kineto_two_steps.json", "dcgmi_dmon.txt"]:
        assert rows[name]["error"] is None and rows[name]["report_json"]
    for row in rows.values():
        if row["error"]:
            assert row["bottleneck"] is None and row["report_json"] is None
    assert result.errors == 5
    oversized = expert.fleet.run(manifest, workers=1, max_trace_gb=1e-6)  # 1 kB: every file with data is too big
    big = by_key(oversized)
    assert big["slow"]["error_kind"] == "too-large" and "over --max-trace-gb" in big["slow"]["error"]
    assert big["empty.json"]["error_kind"] == "input"  # empty: read (0 bytes is under any limit) and rejected


def test_a_job_stuck_in_native_code_loses_its_worker_and_the_run_goes_on(tmp_path: Path) -> None:
    import fleet_support

    jobs = [{"job_key": f"ok-{i}", "facts": {"hardware": "h100-sxm", "gpu_util": 0.45, "data_wait_s": 0.12,
                                             "step_time_s": 0.3}} for i in range(4)]
    jobs.insert(1, {"job_key": "hang", "facts": {"gpu_util": 0.5}})
    started = time.monotonic()
    result = expert.fleet.run(jobs, workers=1, timeout=0.5, chunk_size=5, _diagnose=fleet_support.hang_natively)
    assert time.monotonic() - started < 20  # 0.5 s + the 2 s grace, a new worker, not the 60 s sleep
    rows = by_key(result)
    assert rows["hang"]["error_kind"] == "timeout" and "worker process was killed" in rows["hang"]["error"]
    assert all(rows[f"ok-{i}"]["bottleneck"] == "input" for i in range(4))  # the rest of its chunk ran again


def test_a_crashing_worker_becomes_an_error_row_after_its_retries(tmp_path: Path) -> None:
    import fleet_support

    jobs = [{"job_key": "crash", "facts": {"gpu_util": 0.5}}, {"job_key": "fine", "facts": {"gpu_util": 0.5}}]
    result = expert.fleet.run(jobs, workers=1, retries=1, chunk_size=2, _diagnose=fleet_support.crash)
    rows = by_key(result)
    assert rows["crash"]["error_kind"] == "crash" and "exit code 3" in rows["crash"]["error"]
    assert rows["crash"]["attempts"] == 2  # the first attempt and one retry
    assert rows["fine"]["error"] is None


def test_spawn_start_method_gives_the_same_rows(tmp_path: Path) -> None:
    manifest = tmp_path / "jobs.jsonl"
    example_manifest(manifest)
    spawn = expert.fleet.run(manifest, workers=1, start_method="spawn")
    forkserver = expert.fleet.run(manifest, workers=1)
    assert [r["report_json"] for r in spawn.rows] == [r["report_json"] for r in forkserver.rows]


# ---- --resume ------------------------------------------------------------------------------------------------------


def test_resume_reruns_nothing_unchanged_and_only_the_changed_job(tmp_path: Path) -> None:
    src = tmp_path / "in"
    paths = write_inputs(src)
    facts = src / "run.yaml"
    facts.write_text("hardware: h100-sxm\ngpu_util: 45%\ndata_wait_s: 120 ms\nstep_time_s: 300 ms\n")
    out = tmp_path / "out"
    first = expert.fleet.run(src, out=out, workers=2)
    n = len(paths) + 1
    assert first.ran == n and first.resumed == 0
    assert sorted(r["job_key"] for r in dataset(out)) == sorted(by_key(first))

    again = expert.fleet.run(src, out=out, workers=2, resume=True)
    assert again.ran == 0 and again.resumed == n
    assert {r["job_key"]: r["run_id"] for r in again.rows} == {r["job_key"]: r["run_id"] for r in first.rows}

    facts.write_text("hardware: h100-sxm\ngpu_util: 97%\nstep_time_s: 300 ms\n")  # one file changes
    os.utime(facts, (time.time() + 5, time.time() + 5))
    changed = expert.fleet.run(src, out=out, workers=2, resume=True)
    assert changed.ran == 1 and changed.resumed == n - 1
    rows = by_key(changed)
    assert rows["run.yaml"]["run_id"] == changed.run_id and rows["run.yaml"]["gpu_util"] == 0.97
    assert all(r["run_id"] == first.run_id for k, r in rows.items() if k != "run.yaml")
    stored = dataset(out)
    assert len(stored) == n and len({r["job_key"] for r in stored}) == n  # the old row of run.yaml is gone

    (src / "dcgmi_dmon.txt").unlink()  # a job that left the input leaves the dataset
    fewer = expert.fleet.run(src, out=out, workers=1, resume=True)
    assert fewer.ran == 0 and len(dataset(out)) == n - 1

    fresh = expert.fleet.run(src, out=out, workers=1)  # without --resume the dataset is replaced
    assert fresh.ran == n - 1 and {r["run_id"] for r in dataset(out)} == {fresh.run_id}
    assert len(list_parts(str(out))) >= 1


def test_resume_reruns_jobs_that_timed_out(tmp_path: Path) -> None:
    slow = write_slow_trace(tmp_path / "slow.json.gz", events=600_000)
    out = tmp_path / "out"
    first = expert.fleet.run([str(slow)], out=out, workers=1, timeout=0.2)
    assert first.rows[0]["error_kind"] == "timeout"
    second = expert.fleet.run([str(slow)], out=out, workers=1, resume=True)
    assert second.ran == 1 and second.rows[0]["error"] is None


# ---- inputs --------------------------------------------------------------------------------------------------------


def test_csv_manifest_with_relative_files_facts_labels_and_extra_columns(tmp_path: Path) -> None:
    write_inputs(tmp_path / "in")
    (tmp_path / "jobs.csv").write_text(
        "job_id,files,facts,team\n"
        "a,in/kineto_two_steps.json;in/dcgmi_dmon.txt,hardware=h100-sxm;dtype=bf16,vision\n"
        'b,,"{""hardware"": ""h100-sxm"", ""gpu_util"": 0.45, ""data_wait_s"": 0.12, ""step_time_s"": 0.3}",nlp\n')
    jobs, notes = expert.fleet.collect_jobs([str(tmp_path / "jobs.csv")])
    assert [j.key for j in jobs] == ["a", "b"] and not notes
    assert jobs[0].files == [str(tmp_path / "in" / "kineto_two_steps.json"), str(tmp_path / "in" / "dcgmi_dmon.txt")]
    assert jobs[0].facts == {"hardware": "h100-sxm", "dtype": "bf16"} and jobs[0].labels == {"team": "vision"}
    result = expert.fleet.run(tmp_path / "jobs.csv", workers=1)
    rows = by_key(result)
    assert rows["b"]["bottleneck"] == "input" and rows["b"]["labels"] == {"team": "nlp"}
    want = diagnose_cli("--from", *jobs[0].files, "--set", "hardware=h100-sxm", "--set", "dtype=bf16")
    assert json.loads(rows["a"]["report_json"]) == want


@pytest.mark.parametrize(("text", "message"), [
    ('{"job_id": "a", "files": ["x"]}\nnot json\n', "jobs.jsonl:2: invalid JSON"),
    ('{"job_id": "a"}\n', "a job needs files or facts"),
    ('{"job_id": "a", "facts": {"gpu_util": 0.5}}\n{"job_id": "a", "facts": {"gpu_util": 0.6}}\n', "more than once"),
    ('{"job_id": "a", "facts": "gpu_util"}\n', "expected NAME=VALUE"),
])
def test_bad_manifests_are_named_errors(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "jobs.jsonl").write_text(text)
    with pytest.raises(FleetInputError, match=message):
        expert.fleet.collect_jobs([str(tmp_path / "jobs.jsonl")])


def test_job_key_groups_and_leaves_out_unmatched_files(tmp_path: Path) -> None:
    for run in ("r1", "r2"):
        (tmp_path / run).mkdir()
        for rank in (0, 1):
            shutil.copy(TELEMETRY / "dcgmi_dmon.txt", tmp_path / run / f"rank{rank}.txt")
    (tmp_path / "notes.txt").write_text("x")
    jobs, notes = expert.fleet.collect_jobs([str(tmp_path)], job_key=r"(r\d)/rank\d")
    assert {j.key: len(j.files) for j in jobs} == {"r1": 2, "r2": 2}
    assert notes and "notes.txt" in notes[0]
    with pytest.raises(FleetInputError, match="not a regular expression"):
        expert.fleet.collect_jobs([str(tmp_path)], job_key="(")
    with pytest.raises(FleetInputError, match="matches none of the 5 files"):
        expert.fleet.collect_jobs([str(tmp_path)], job_key="rank9")


def test_other_filesystems_through_fsspec(tmp_path: Path) -> None:
    """A non-local fsspec filesystem (memory://, as s3:// or gs:// would be): listed, read as a stream, named by URL."""
    import fsspec

    from expert.fleet._worker import ExpertOptions, WorkerState, diagnose_job

    fs = fsspec.filesystem("memory")
    fs.pipe("/fleet-test/trace.json", (TELEMETRY / "kineto_two_steps.json").read_bytes())
    fs.pipe("/fleet-test/facts.yaml", b"hardware: h100-sxm\ndtype: bf16\n")
    try:
        jobs, _ = expert.fleet.collect_jobs(["memory://fleet-test/*"], job_key="fleet-test")
        (job,) = jobs
        assert sorted(job.files) == ["memory:///fleet-test/facts.yaml", "memory:///fleet-test/trace.json"]
        assert job.refs is not None and all(r.size for r in job.refs)
        report = diagnose_job(WorkerState.create(ExpertOptions()), job, {})
        local = tmp_path / "trace.json"
        shutil.copy(TELEMETRY / "kineto_two_steps.json", local)
        facts = tmp_path / "facts.yaml"
        facts.write_text("hardware: h100-sxm\ndtype: bf16\n")
        want = diagnose_cli(str(facts), "--from", str(local))
        assert report.bottleneck == want["bottleneck"]
        assert report.observations["gpu_util"].value == want["observations"]["gpu_util"]["value"]
        assert report.observations["gpu_util"].source == "kineto:trace.json"
    finally:
        fs.rm("/fleet-test", recursive=True)


# ---- outputs -------------------------------------------------------------------------------------------------------


def test_parquet_columns_and_lossless_report(tmp_path: Path) -> None:
    manifest = tmp_path / "jobs.jsonl"
    example_manifest(manifest)
    out = tmp_path / "out"
    result = expert.fleet.run(manifest, out=out, workers=2, chunk_size=3)
    table = pq.read_table(out)
    for column in (*expert.fleet.COLUMNS, "labels", "axes", "hardware", "step_time_s", "gpu_util", "error_kind"):
        assert column in table.column_names
    parts = list_parts(str(out))
    assert len(parts) == -(-result.jobs // 3)  # one file per worker chunk
    row = by_key(result)["data_starved_training"]
    report = expert.Report.model_validate_json(row["report_json"])
    assert report.bottleneck == row["bottleneck"] == "input" and row["strength"] == "confirmed"
    assert row["axes"][0] == "data" and row["axis_data"] == 1.0 and row["hardware"] == "h100-sxm"
    assert row["max_speedup"] == max(r.expected_gain.max_speedup for r in report.recommended if r.expected_gain)


def test_the_largest_gains_are_ranked_among_jobs_with_a_verdict() -> None:
    """A job whose verdict is withheld (a 2-kernel trace: thin evidence) may still list bounded recommendations, but
    its bound ranks nothing: the summary's largest gains come from jobs with a verdict."""
    from expert.fleet._summary import summarize

    rows = [{"job_key": "thin.sqlite", "bottleneck": None, "top_recommendation": "preprocess_in_workers",
             "max_speedup": 43.3},
            {"job_key": "starved.json", "bottleneck": "input", "top_recommendation": "prefetching", "max_speedup": 1.6}]
    gains = summarize(rows).gains
    assert [g["job_key"] for g in gains] == ["starved.json"]


def test_summary_markdown_and_html(tmp_path: Path) -> None:
    manifest = tmp_path / "jobs.jsonl"
    keys = example_manifest(manifest)
    out = tmp_path / "out"
    expert.fleet.run(manifest, out=out, workers=1)
    markdown = (out / "_summary.md").read_text()
    assert f"{len(keys)} jobs: {len(keys)} diagnosed, 0 errors" in markdown
    for section in ["## Verdicts", "## Most common wasted spends", "## Jobs with the largest Amdahl-bounded gain",
                    "## Verdicts by label `kind`"]:
        assert section in markdown
    assert "| input |" in markdown and "Faster accelerator (more peak FLOP/s)" in markdown
    html = (out / "_summary.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "Jobs with the largest Amdahl-bounded gain" in html


# ---- the command line ----------------------------------------------------------------------------------------------


def test_cli_run_query_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_inputs(tmp_path / "in")
    out = tmp_path / ("a-folder-whose-path-is-wider-than-the-terminal-" * 2) / "out"
    assert cli.main(["fleet", str(tmp_path / "in"), "--out", str(out), "--workers", "2", "--timeout", "30"]) == 0
    printed = capsys.readouterr().out
    assert "7 jobs" in printed and "2 error rows" in printed
    assert f"rows: {out} (Parquet); summary: {out / '_summary.md'}" in printed  # paths to copy are never wrapped
    assert cli.main(["fleet", "query", str(out), "select job_key, error_kind from fleet where error is not null "
                     "order by 1", "--as", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ["job_key,error_kind", "corrupt.json.gz,input", "empty.json,input"]
    assert cli.main(["fleet", "query", str(out), "select count(*) as n from fleet", "--as", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"n": 7}
    assert cli.main(["fleet", "query", str(out), "select '[/x] ok' as \"[bold]name\" from fleet limit 1"]) == 0
    assert "[/x] ok" in (table := capsys.readouterr().out) and "[bold]name" in table  # text, never rich markup
    assert cli.main(["fleet", str(tmp_path / "in"), "--out", str(out), "--resume"]) == 0
    assert "7 unchanged" in capsys.readouterr().out


def test_cli_prints_paths_and_notes_as_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The --out folder and the files --job-key leaves out are the user's names, printed as text: "[/x]" in --out
    used to end `dam fleet` in a rich MarkupError traceback, and "[red]" in a file name was read as a colour."""
    (tmp_path / "in").mkdir()
    for name in ("a.csv", "b[red]x.csv"):
        shutil.copy(TELEMETRY / "nvidia_smi_query.csv", tmp_path / "in" / name)
    out = tmp_path / "o[" / "x]"
    assert cli.main(["fleet", str(tmp_path / "in"), "--out", str(out), "--job-key", r"a\.csv", "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    assert "left out:" in printed and "b[red]x.csv" in printed  # paths are never folded
    assert f"rows: {out} (Parquet)" in printed


@pytest.mark.parametrize("args", [
    ["fleet", "IN", "--out", "OUT", "--job-key", "("],
    ["fleet", "IN", "--out", "OUT", "--timeout", "0"],
    ["fleet", "IN", "--out", "OUT", "--retries", "-1"],
    ["fleet", "IN", "--out", "OUT", "--max-trace-gb", "0"],
    ["fleet", "IN"],
    ["fleet", "IN", "--out", "OUT", "--scheduler", "tcp://127.0.0.1:1"],
    ["fleet", "NOWHERE", "--out", "OUT"],
    ["fleet", "IN", "--out", "/proc/dam-fleet-out"],
    ["fleet", "query", "OUT"],
    ["fleet", "query", "IN", "select 1"],
    ["fleet", "query", "OUT", "select nonsense from fleet"],
])
def test_cli_bad_arguments_exit_2(tmp_path: Path, args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    write_inputs(tmp_path / "in")
    out = tmp_path / "out"
    expert.fleet.run(tmp_path / "in", out=out, workers=1)
    args = [a.replace("IN", str(tmp_path / "in")).replace("OUT", str(out)).replace("NOWHERE", str(tmp_path / "x"))
            for a in args]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("dam fleet:") and "Traceback" not in err


def test_resume_runs_again_what_was_too_large_once_the_limit_allows(tmp_path: Path) -> None:
    trace = tmp_path / "in" / "trace.json"
    trace.parent.mkdir()
    shutil.copy(TELEMETRY / "kineto_two_steps.json", trace)
    out = tmp_path / "out"
    first = expert.fleet.run(tmp_path / "in", out=out, workers=1, max_trace_gb=1e-7)
    assert first.rows[0]["error_kind"] == "too-large"
    second = expert.fleet.run(tmp_path / "in", out=out, workers=1, resume=True)
    assert second.ran == 1 and second.rows[0]["error"] is None


def test_a_single_telemetry_csv_is_a_job_not_a_manifest(tmp_path: Path) -> None:
    jobs, _ = expert.fleet.collect_jobs([str(TELEMETRY / "nvidia_smi_query.csv")])
    assert [j.files for j in jobs] == [[str(TELEMETRY / "nvidia_smi_query.csv")]]


def test_progress_is_reported_per_job(tmp_path: Path) -> None:
    write_inputs(tmp_path / "in")
    calls: list[tuple[int, int, int]] = []
    expert.fleet.run(tmp_path / "in", workers=2, chunk_size=2, progress=lambda *a: calls.append(a))
    assert calls[0] == (0, 7, 0) and calls[-1] == (7, 7, 2)
    assert [c[0] for c in calls] == list(range(8))


def test_a_program_read_from_stdin_can_run_a_fleet(tmp_path: Path) -> None:
    """`python - < script`: spawned workers would try to run "<stdin>" again; the pool hides it from them."""
    import subprocess
    import sys

    script = ("import expert.fleet\n"
              "rows = expert.fleet.run([{'job_key': 'a', 'facts': {'gpu_util': 0.5}}], workers=1).rows\n"
              "print(rows[0]['job_key'], rows[0]['error'])\n")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "a None"
