"""Real Nsight Systems exports from nsys-ai's test fixtures (shared/traces/nsys, see shared/traces/README.md)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import expert
from expert.ingest import ingest_result, nsys
from expert.ingest._source import Source
from expert.ingest.intervals import total, union

NSYS = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "nsys"
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
    for dev, tl in analysis.devices.items():
        rows = [(s / 1e3, e / 1e3) for t in ("KERNEL", "MEMCPY", "MEMSET") for s, e in conn.execute(
            f'SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_{t} WHERE deviceId = ?', (dev,))]
        (lo, hi), = analysis.windows[dev]
        busy = total((max(a, lo), min(b, hi)) for a, b in union(rows) if b > lo and a < hi)
        assert tl.busy_us == pytest.approx(busy, rel=1e-9)
        flash = conn.execute("SELECT count(*), sum(k.\"end\" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN "
                             "StringIds s ON s.id = k.shortName WHERE s.value = 'flash_fwd_kernel' AND deviceId = ?",
                             (dev,)).fetchone()
        top = tl.top_kernels(1)[0]
        assert "flash_fwd_kernel" in top["name"] and top["count"] == flash[0]
        assert top["gpu_time_s"] == pytest.approx(flash[1] / 1e9)
    conn.close()


def test_the_two_gpu_job_before_and_after_its_change() -> None:
    before, after = ingest_result(NSYS / "mfu_2gpu_before.sqlite"), ingest_result(NSYS / "mfu_2gpu_after.sqlite")
    for result in (before, after):
        assert result.observations.facts["gpu_util"].detail["devices"] == "0,1"
        assert "TARGET_INFO_GPU" in result.not_derived["hardware"] and "--set hardware=" in \
            result.not_derived["hardware"]
        assert result.observations.values()["comm_overlap_frac"] < 0.05  # SendRecv runs alone on the timeline
    assert after.observations.values()["comm_frac"] > before.observations.values()["comm_frac"]
    analysis = nsys.analyse(Source(NSYS / "mfu_2gpu_after.sqlite"), expert.default_expert().kb)
    names = [k["name"] for k in analysis.devices[1].top_kernels(3)]
    assert any(n.startswith("ncclDevKernel_SendRecv") for n in names)  # the README: NCCL SendRecv in the top kernels
    observations = dict(before.observations.values(), hardware="h100-sxm")
    assert expert.diagnose(observations).observations["hardware"].value == "h100-sxm"


def test_the_small_exports() -> None:
    healthy = ingest_result(NSYS / "healthy_1pct.sqlite")
    v = healthy.observations.values()
    assert v["hardware"] == "h100-sxm"
    assert v["gpu_util"] == pytest.approx(400 / 403.99, rel=1e-3)  # 400 x 1 ms kernels, 10 us apart
    assert v["host_wait_frac"] == pytest.approx(1 - 400 / 403.99, rel=1e-2)  # each launch came after the gap began
    assert any("globalPid" in n for n in healthy.notes)  # an older, smaller layout
    mock = ingest_result(NSYS / "mock.sqlite")
    assert "'NVIDIA GeForce RTX 3080' is not in the hardware catalog" in mock.not_derived["hardware"]


def test_a_named_nvtx_range_with_emit_nvtx_annotations_makes_steps() -> None:
    result = ingest_result(NSYS / "mfu_2gpu_before.sqlite", step_range="AllToAll4D")
    facts = result.observations.facts
    assert "'AllToAll4D'" in str(facts["step_time_s"].detail["method"])
    assert str(facts["gpu_util"].detail["window"]).startswith("NVTX 'AllToAll4D' #1–")
    assert facts["kernels_per_step"].value > 0
