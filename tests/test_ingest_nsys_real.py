"""Real Nsight Systems exports from nsys-ai's test fixtures (shared/traces/nsys, see shared/traces/README.md)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

import expert
from expert.ingest import ingest_result, nsys
from expert.ingest._source import Source
from expert.ingest.intervals import total, union

NSYS = Path(os.environ.get("DAM_SHARED") or Path(__file__).resolve().parents[1].parent / "shared") / "traces" / "nsys"
ALL = sorted(NSYS.glob("*.sqlite")) if NSYS.is_dir() else []
pytestmark = pytest.mark.skipif(not ALL, reason=f"the shared real nsys exports are not at {NSYS}")


@pytest.mark.parametrize("path", ALL, ids=[p.name for p in ALL])
def test_every_real_export_ingests_with_an_honest_account(path: Path) -> None:
    result = ingest_result(path)
    file = result.files[0]
    assert file.format == "nsys" and file.stats["reader"] == "sqlite3 cursors"
    assert set(file.measured) | set(file.not_derived) == set(nsys.FACTS)
    assert all(reason and reason != "not derived from this export" for reason in result.not_derived.values())
    expert.diagnose(result.observations)


def test_busy_time_agrees_with_a_plain_union_of_the_rows() -> None:
    path = NSYS / "mfu_2gpu_before.sqlite"
    analysis = nsys.analyse(Source(path), expert.default_expert().kb)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    for dev, done in analysis.devices.items():
        assert done.analysis is not None
        rows = union((s / 1e3, e / 1e3) for t in ("KERNEL", "MEMCPY", "MEMSET") for s, e in conn.execute(
            f'SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_{t} WHERE deviceId = ?', (dev,)))
        busy = sum(total((max(a, lo), min(b, hi)) for a, b in rows if b > lo and a < hi) for lo, hi in done.windows)
        assert done.analysis.idle["busy"] * total(done.windows) == pytest.approx(busy, rel=1e-9)
        lo, hi = done.windows[0][0], done.windows[-1][1]
        flash = conn.execute("SELECT count(*), sum(k.\"end\" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN "
                             "StringIds s ON s.id = k.shortName WHERE s.value = 'flash_fwd_kernel' AND deviceId = ? "
                             "AND k.start >= ? AND k.start < ?", (dev, lo * 1e3, hi * 1e3)).fetchone()
        top = done.analysis.breakdown.top_kernels[0]
        assert "flash_fwd_kernel" in top.name and top.count == flash[0] and top.class_ == "attention"
        assert top.gpu_time_s == pytest.approx(flash[1] / 1e9, rel=1e-5)
    conn.close()


def test_the_two_gpu_job_before_and_after_its_change() -> None:
    before, after = ingest_result(NSYS / "mfu_2gpu_before.sqlite"), ingest_result(NSYS / "mfu_2gpu_after.sqlite")
    for result in (before, after):
        assert result.observations.facts["gpu_util"].detail["devices"] == "0,1"
        assert "TARGET_INFO_GPU" in result.not_derived["hardware"] and "--set hardware=" in \
            result.not_derived["hardware"]
        assert result.observations.values()["comm_overlap_frac"] < 0.05  # SendRecv runs alone on the timeline
        assert result.observations.values()["top_kernel_class"] == "attention"
        assert "--step-range" in result.not_derived["slowest_rank"]  # no step ranges: collectives not matched
        assert result.job is not None and [r.rank for r in result.observations.ranks] == [0, 1]
    assert after.observations.values()["comm_frac"] > before.observations.values()["comm_frac"]
    assert after.observations.values()["gpu_util"] < before.observations.values()["gpu_util"]
    analysis = nsys.analyse(Source(NSYS / "mfu_2gpu_after.sqlite"), expert.default_expert().kb)
    assert analysis.devices[1].analysis is not None
    names = [k.name for k in analysis.devices[1].analysis.breakdown.top_kernels[:3]]
    assert any(n.startswith("ncclDevKernel_SendRecv") for n in names)  # the README: NCCL SendRecv in the top kernels
    observations = dict(before.observations.values(), hardware="h100-sxm")
    assert expert.diagnose(observations).observations["hardware"].value == "h100-sxm"


def test_the_two_gpu_export_gets_the_cluster_view_of_per_rank_traces() -> None:
    """Each device a rank: the multi-rank analysis Kineto rank traces get (expert/ingest/ranks.py), on the NVTX
    steps both processes record. Checked by pairing the SendRecv kernels of the two processes by step and order
    in SQL: per AllToAll4D step, device 0 spends 0.36 ms more
    inside its SendRecv kernels than device 1 does in the same ones (it waits for device 1)."""
    for name, slowest in (("mfu_2gpu_before.sqlite", 1), ("mfu_2gpu_after.sqlite", 0)):
        result = ingest_result(NSYS / name, step_range="AllToAll4D")
        facts = result.observations.facts
        assert facts["slowest_rank"].value == slowest and facts["slowest_rank"].source == f"nsys:{name}"
        assert facts["sync_wait_s"].value > 0 and facts["sync_wait_s"].detail["slowest_rank"] == slowest
        assert "compute_skew" in facts and "step_time_skew" in facts
        assert facts["comm_frac"].detail["rank"] == slowest  # measured on the device the others wait for
        assert result.job is not None and result.job.slowest_rank == slowest
        rows = result.observations.ranks
        assert [r.rank for r in rows] == [0, 1] and all(r.steps and r.step_time_s for r in rows)
        assert rows[1 - slowest].sync_wait_s == pytest.approx(facts["sync_wait_s"].value)
        report = expert.diagnose(result.observations)
        assert report.cluster is not None and [r.rank for r in report.cluster.ranks] == [0, 1]
        assert report.cluster.sync_wait_frac is not None and report.cluster.sync_wait_frac > 0
    before = ingest_result(NSYS / "mfu_2gpu_before.sqlite", step_range="AllToAll4D")
    assert before.observations.values()["sync_wait_s"] == pytest.approx(0.356e-3, rel=0.01)


def test_the_small_exports() -> None:
    healthy = ingest_result(NSYS / "healthy_1pct.sqlite")
    v = healthy.observations.values()
    assert v["hardware"] == "h100-sxm"
    # 400 x 1 ms kernels, 10 us apart; the steady window leaves out the first (first-call warm-up), as for Kineto
    assert v["gpu_util"] == pytest.approx(399 / 402.99, rel=1e-3)
    assert v["host_wait_frac"] == pytest.approx(1 - 399 / 402.99, rel=1e-2)  # each launch came after the gap began
    assert "one device" in healthy.not_derived["slowest_rank"]
    assert any("globalPid" in n for n in healthy.notes)  # an older, smaller layout
    mock = ingest_result(NSYS / "mock.sqlite")
    assert "'NVIDIA GeForce RTX 3080' is not in the hardware catalog" in mock.not_derived["hardware"]


def test_a_named_nvtx_range_with_emit_nvtx_annotations_makes_steps() -> None:
    result = ingest_result(NSYS / "mfu_2gpu_before.sqlite", step_range="AllToAll4D")
    facts = result.observations.facts
    assert "'AllToAll4D'" in str(facts["step_time_s"].detail["method"])
    assert str(facts["gpu_util"].detail["window"]).startswith("NVTX 'AllToAll4D' #1–")
    assert facts["kernels_per_step"].value > 0
