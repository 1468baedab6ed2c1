"""`expert.fleet.run(engine="dask")` and `dam fleet --engine dask` on a real Dask LocalCluster (2 worker processes,
one thread each, loopback, no dashboard; one cluster for the module): the same rows as `dam diagnose`, error rows,
abandoned stuck jobs, --resume, --scheduler ADDR and a cluster of its own."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("distributed")

import dask
import fleet_support
import pyarrow.parquet as pq
from distributed import Client
from fleet_support import REAL_TRACES, diagnose_cli, example_manifest, reference, write_inputs, write_slow_trace

import cli
import expert.fleet
from expert.fleet._dask import local_cluster


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with contextlib.ExitStack() as stack:
        with dask.config.set({"distributed.scheduler.allowed-failures": 1}):  # a crashing job fails sooner
            cluster = stack.enter_context(local_cluster(2))
        yield stack.enter_context(Client(cluster))


def by_key(result: Any) -> dict[str, dict[str, Any]]:
    return {row["job_key"]: row for row in result.rows}


def test_typed_fact_jobs_equal_dam_diagnose(client: Client, tmp_path: Path) -> None:
    manifest = tmp_path / "jobs.jsonl"
    keys = example_manifest(manifest)
    result = expert.fleet.run(manifest, out=tmp_path / "out", engine="dask", client=client, chunk_size=2)
    rows = by_key(result)
    assert sorted(rows) == sorted(keys) and result.errors == 0
    for key in keys:
        if key == "inline":
            continue
        want = reference(rows[key])
        assert json.loads(rows[key]["report_json"]) == want, key
        assert rows[key]["bottleneck"] == want["bottleneck"]
    assert rows["inline"]["bottleneck"] == "input"
    assert len(result.workers) == 2 and all(rss > 10 << 20 for rss in result.workers.values())


def test_telemetry_and_bad_files_equal_the_local_pool(client: Client, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in")
    dask = expert.fleet.run(tmp_path / "in", engine="dask", client=client)
    local = expert.fleet.run(tmp_path / "in", workers=2)
    strip = ("worker", "run_id", "finished_at", "duration_s")
    assert [{k: v for k, v in r.items() if k not in strip} for r in dask.rows] == \
           [{k: v for k, v in r.items() if k not in strip} for r in local.rows]
    rows = by_key(dask)
    for name in ["kineto_two_steps.json", "dcgmi_dmon.txt", "nvidia_smi_query.csv"]:
        assert json.loads(rows[name]["report_json"]) == diagnose_cli("--from", rows[name]["files"][0])
    assert rows["corrupt.json.gz"]["error_kind"] == "input" and "corrupt" in rows["corrupt.json.gz"]["error"]
    assert rows["empty.json"]["error_kind"] == "input" and "empty" in rows["empty.json"]["error"]


@pytest.mark.skipif(not REAL_TRACES, reason="the shared real traces are not at ../shared/traces")
def test_real_traces_equal_dam_diagnose_from(client: Client, tmp_path: Path) -> None:
    result = expert.fleet.run([str(p) for p in REAL_TRACES], engine="dask", client=client)
    assert result.errors == 0
    for row in result.rows:
        assert json.loads(row["report_json"]) == diagnose_cli("--from", row["files"][0]), row["job_key"]


def test_a_slow_job_times_out_and_a_stuck_one_is_abandoned(client: Client, tmp_path: Path) -> None:
    slow = write_slow_trace(tmp_path / "slow.json.gz")
    facts = {"hardware": "h100-sxm", "gpu_util": 0.45, "data_wait_s": 0.12, "step_time_s": 0.3}
    jobs = [{"job_key": "slow", "files": [str(slow)]}, {"job_key": "hang", "facts": facts},
            {"job_key": "fine", "facts": facts}]
    started = time.monotonic()
    result = expert.fleet.run(jobs, engine="dask", client=client, timeout=0.5, chunk_size=3,
                              _diagnose=fleet_support.hang_natively)
    assert time.monotonic() - started < 30
    rows = by_key(result)
    assert rows["slow"]["error_kind"] == "timeout" and "timed out after 0.5 s" in rows["slow"]["error"]
    assert rows["hang"]["error_kind"] == "timeout" and "abandoned" in rows["hang"]["error"]
    assert rows["fine"]["bottleneck"] == "input"
    assert result.abandoned == 1


def test_resume_reruns_nothing_unchanged_and_only_the_changed_job(client: Client, tmp_path: Path) -> None:
    src = tmp_path / "in"
    paths = write_inputs(src)
    out = tmp_path / "out"
    first = expert.fleet.run(src, out=out, engine="dask", client=client)
    assert first.ran == len(paths)
    again = expert.fleet.run(src, out=out, engine="dask", client=client, resume=True)
    assert again.ran == 0 and again.resumed == len(paths)
    changed = src / "nvidia_smi_query.csv"
    changed.write_text(changed.read_text().replace("99 %", "98 %"))
    os.utime(changed, (time.time() + 5, time.time() + 5))
    third = expert.fleet.run(src, out=out, engine="dask", client=client, resume=True)
    assert third.ran == 1 and third.resumed == len(paths) - 1
    assert by_key(third)["nvidia_smi_query.csv"]["run_id"] == third.run_id
    assert len(pq.read_table(out).to_pylist()) == len(paths)


def test_cli_with_a_scheduler_address(client: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "jobs.jsonl"
    keys = example_manifest(manifest)
    out = tmp_path / "out"
    address = client.scheduler.address
    assert address.startswith("tcp://127.0.0.1:")
    assert cli.main(["fleet", str(manifest), "--out", str(out), "--engine", "dask", "--scheduler", address]) == 0
    assert f"{len(keys)} jobs" in capsys.readouterr().out
    assert len(pq.read_table(out)) == len(keys)


def test_cli_starts_its_own_local_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_inputs(tmp_path / "in")
    out = tmp_path / "out"
    assert cli.main(["fleet", str(tmp_path / "in"), "--out", str(out), "--engine", "dask", "--workers", "2"]) == 0
    assert "7 jobs" in capsys.readouterr().out
    assert len(pq.read_table(out)) == 7


def test_unreachable_scheduler_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_inputs(tmp_path / "in")
    args = ["fleet", str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--engine", "dask", "--scheduler",
            "tcp://127.0.0.1:9"]
    import dask

    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):
        assert cli.main(args) == 2
    assert "cannot connect to the Dask scheduler" in capsys.readouterr().err


def test_a_job_that_kills_its_worker_becomes_an_error_row(client: Client, tmp_path: Path) -> None:
    facts = {"hardware": "h100-sxm", "gpu_util": 0.45, "data_wait_s": 0.12, "step_time_s": 0.3}
    jobs = [{"job_key": "crash", "facts": facts}, {"job_key": "fine", "facts": facts}]
    result = expert.fleet.run(jobs, engine="dask", client=client, chunk_size=2, _diagnose=fleet_support.crash)
    rows = by_key(result)
    assert rows["crash"]["error_kind"] == "crash" and "the Dask task failed" in rows["crash"]["error"]
    assert rows["fine"]["bottleneck"] == "input"  # its chunk was split, and it ran on its own
    client.wait_for_workers(2, timeout=60)


def test_a_worker_removed_before_it_was_seen_does_not_break_closing_the_cluster() -> None:
    # dask/distributed#5407: the cluster's worker-status watcher dies of a KeyError on a worker it never saw added
    # (a worker restarted after a crash and removed at once), and closing the cluster raised it again
    with local_cluster(1) as cluster, Client(cluster) as c:
        address = next(iter(cluster.scheduler_info["workers"]))
        del cluster.scheduler_info["workers"][address]  # as if its "add" had not arrived yet
        c.retire_workers([address])
        deadline = time.monotonic() + 30
        while not cluster._watch_worker_status_task.done() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert isinstance(cluster._watch_worker_status_task.exception(), KeyError)
    assert cluster.status.name == "closed"
