"""The streaming nsys analysis (expert/ingest/nsys/host_sweep.py, gpu_sweep.py, analysis_sweep.py) against the
in-memory timeline analysis it replaces (nsys.adapter -> timeline.analyse, timeline.steady_window,
cluster.device_rank) on the same rows: every number identical; the stream tools against their list versions; memory
that does not grow with the rows."""

from __future__ import annotations

import dataclasses
import math
import os
import random
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from nsys_export import Export, Kernel, Nvtx, Sync, steps, write

import expert
from expert.ingest import ingest_result, nsys
from expert.ingest._source import Source
from expert.ingest.intervals import Interval, intersect, union
from expert.ingest.nsys.adapter import device_timeline
from expert.ingest.nsys.cluster import device_rank
from expert.ingest.nsys.rows import open_export
from expert.ingest.timeline import Cover, analyse, intersect_all, steady_window, subtract
from expert.ingest.timeline.streams import (
    CoverCursor,
    CumTotal,
    IntersectStream,
    PointCover,
    UnionStream,
    intersect_iter,
    subtract_iter,
)

KB = expert.default_expert().kb
SHARED = Path(os.environ.get("DAM_SHARED") or Path(__file__).resolve().parents[1].parent / "shared")
REAL = sorted((SHARED / "traces" / "nsys").glob("*.sqlite")) if (SHARED / "traces" / "nsys").is_dir() else []

GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>(Params)"
ELEM = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>(int, float*)"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _plain(obj: Any) -> Any:
    return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) and not isinstance(obj, type) else obj


def _same(a: Any, b: Any) -> bool:
    """Equal; floats bit for bit where `sum()` adds left to right as the sweeps do (before Python 3.12, which
    compensates float sums), else to 1e-5 relative (a value rounded to six digits may round the other way)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and sys.version_info >= (3, 12):
        return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-12) or (a != a and b != b)
    return bool(a == b) or (isinstance(a, float) and a != a and isinstance(b, float) and b != b)


def assert_same_as_in_memory(path: Path) -> int:
    """Each device's streaming analysis equals the in-memory analysis of the same rows; the devices compared."""
    src = Source(path)
    got = nsys.analyse(src, KB)
    assert KB.kernels is not None
    compared = 0
    with open_export(src) as (export, _):
        first, last = export.extent() or (0.0, 0.0)
        procs = export.device_processes()
        for dev, d in got.devices.items():
            tl = device_timeline(export, dev, export.activities([dev]), procs[dev], d.loader)
            if d.n_steps == 0:
                assert steady_window(tl, first, last, {dev}, KB.kernels).windows == d.windows
            bd = d.analysis.breakdown if d.analysis is not None else None
            numbered = ([(st.number, a, b) for st, (a, b) in zip(bd.steps, d.windows, strict=True)]
                        if bd is not None and d.n_steps else [])
            ref = analyse(tl, d.windows, {dev}, KB.kernels, roof=None, source=src.name,
                          window=bd.window if bd else None, steps=numbered, kernel_wait_us=nsys.KERNEL_WAIT_US)
            if d.analysis is None:
                assert ref is None
            else:
                assert ref is not None
                assert ref.breakdown.roof is None and d.analysis.breakdown.roof is None
                assert _same(_plain(ref), _plain(d.analysis))
            rank = device_rank(tl, dev, d.windows, d.rank.steps, path=d.rank.path, name=d.rank.name,
                               label=d.rank.label)
            assert _same(_plain(rank), _plain(d.rank))
            compared += 1
    return compared


@pytest.mark.skipif(not REAL, reason=f"the shared real nsys exports are not at {SHARED / 'traces' / 'nsys'}")
@pytest.mark.parametrize("path", REAL, ids=[p.name for p in REAL])
def test_real_exports_stream_to_the_numbers_of_the_in_memory_analysis(path: Path) -> None:
    assert assert_same_as_in_memory(path) >= 1


def _operators_export(replicas: int = 3) -> Export:
    """Kernels launched from nested emit_nvtx operators, an nn.Module range, host compute between launches, a
    blocking synchronize, NCCL overlapping compute, repeated `replicas` times 10 ms apart (no steps: steady state)."""
    kernels: list[Kernel] = []
    nvtx: list[Nvtx] = []
    syncs: list[Sync] = []
    for r in range(replicas):
        t = r * 10_000.0
        nvtx += [Nvtx("nn.Module: Linear_0", t + 0, t + 400),
                 Nvtx(f"aten::linear, seq = {r}, op_id = {3 * r}", t + 5, t + 300),
                 Nvtx(f"aten::addmm, seq = {r}, op_id = {3 * r + 1}", t + 10, t + 60),
                 Nvtx(f"aten::relu, op_id = {3 * r + 2}", t + 100, t + 130),
                 Nvtx("python: prepare_batch", t + 450, t + 700), Nvtx("aten::cat", t + 710, t + 760, tid=2)]
        kernels += [Kernel(GEMM, t + 40, t + 200, t + 20), Kernel(ELEM, t + 200, t + 260, t + 110),
                    Kernel(NCCL, t + 230, t + 500, t + 120, stream=9), Kernel(ELEM, t + 900, t + 950, t + 880),
                    Kernel(GEMM, t + 960, t + 1200, t + 950)]
        syncs.append(Sync(t + 800, t + 870, 3))
    return Export(kernels=kernels, nvtx=nvtx, syncs=syncs, gpus={0: "NVIDIA H100 80GB HBM3"},
                  runtime_extra=[("cudaStreamSynchronize_v3020", r * 10_000.0 + 800, r * 10_000.0 + 870, 100)
                                 for r in range(replicas)])


def test_operators_modules_host_compute_and_nccl_stream_to_the_same_numbers(tmp_path: Path) -> None:
    path = write(tmp_path / "ops.sqlite", _operators_export())
    assert assert_same_as_in_memory(path) == 1
    result = ingest_result(path)
    v = result.observations.values()
    assert v["top_op"] in ("aten::addmm", "aten::linear", "aten::relu")
    # the host time before aten::addmm launches is the dispatch of aten::linear; python: prepare_batch launches nothing
    assert v["idle_dispatch_ops"] == "aten::linear"
    assert 0 < v["host_dispatch_frac"] < v["host_compute_frac"]
    assert v["comm_kinds"] == "AllReduce 100%" and v["allreduce_comm_share"] == 1.0
    assert result.files[0].time_breakdown is not None
    assert result.files[0].time_breakdown.top_modules[0].name == "nn.Module: Linear"


def test_steps_several_devices_and_old_layouts_stream_to_the_same_numbers(tmp_path: Path) -> None:
    spec = _operators_export(4)
    spec.nvtx += steps("train_step", [(r * 10_000.0, r * 10_000.0 + 5000) for r in range(4)])
    spec.kernels += [dataclasses.replace(k, device=1, pid=200) for k in spec.kernels[:10]]
    assert assert_same_as_in_memory(write(tmp_path / "steps.sqlite", spec)) == 2
    old = _operators_export()
    old.drop_tables = ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "ENUM_CUDA_MEM_KIND", "TARGET_INFO_GPU")
    old.drop_columns = {"CUPTI_ACTIVITY_KIND_KERNEL": ("globalPid",), "NVTX_EVENTS": ("globalTid",)}
    assert assert_same_as_in_memory(write(tmp_path / "old.sqlite", old)) == 1


# -- the stream tools against their list versions --------------------------------------------------------------

def _intervals(rng: random.Random, n: int) -> list[Interval]:
    out, t = [], 0.0
    for _ in range(n):
        t += rng.choice((0.0, 0.5, rng.random() * 10))
        out.append((t, t + rng.choice((0.0, rng.random() * 20))))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_stream_tools_give_the_list_versions_numbers(seed: int) -> None:
    rng = random.Random(seed)
    raw = sorted(_intervals(rng, 60))
    a, b = union(raw), union(_intervals(rng, 40))
    got: list[Interval] = []
    u = UnionStream(lambda s, e: got.append((s, e)))
    for s, e in raw:
        u.add(s, e)
    u.close()
    assert got == a
    assert list(intersect_iter(a, b)) == intersect_all(a, b) == intersect(a, b)
    assert list(subtract_iter(a, b)) == subtract(a, b)
    pieces: list[Interval] = []
    inter = IntersectStream(lambda s, e: pieces.append((s, e)))
    for x, y in zip(a, b, strict=False):
        inter.push_a(*x)
        inter.push_b(*y)
    for x in a[len(b):]:
        inter.push_a(*x)
    for y in b[len(a):]:
        inter.push_b(*y)
    assert pieces == intersect_all(a, b)
    cover, cursor = Cover(a), CoverCursor(a)
    points = sorted(rng.random() * 400 for _ in range(30))
    point_cover = PointCover(points)
    cum = CumTotal()
    for s, e in a:
        point_cover.push(s, e)
        cum.push(s, e)
    assert point_cover.close() == [cover.upto(t) for t in points]
    assert cum.cum == cover.total
    for lo, hi in zip(points[::2], points[1::2], strict=False):
        assert cursor.contains(lo) == cover.contains(lo)
        assert cursor.between(lo, hi) == cover.between(lo, hi)


def test_memory_does_not_grow_with_the_rows(tmp_path: Path) -> None:
    """Peak Python memory of an export and of one with 8 times its rows differ by little: rows are swept, not held
    (the in-memory timeline held about 130 bytes per kernel and launch call, 12 MB more for the larger one here)."""
    peaks = []
    for n in (5_000, 40_000):
        spec = Export(kernels=[Kernel(GEMM if i % 2 else ELEM, i * 10.0, i * 10.0 + 8, i * 10.0 - 5)
                               for i in range(n)],
                      nvtx=[Nvtx("aten::mm", i * 10.0 - 6, i * 10.0 - 2) for i in range(n)])
        path = write(tmp_path / f"many{n}.sqlite", spec)
        ingest_result(path)  # warm caches (catalog, regexes)
        tracemalloc.start()
        try:
            result = ingest_result(path)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert result.observations.values()["gpu_util"] == pytest.approx(0.8, abs=1e-3)
        peaks.append(peak)
    assert peaks[1] - peaks[0] < 2 << 20, peaks


def test_launch_calls_versioned_names_and_dispatcher_operators_stream_to_the_same_numbers(tmp_path: Path) -> None:
    """Time inside launch calls (launch overhead), nsys's `_vNNNN` runtime names and operators beyond aten::."""
    from test_ingest_nsys import versioned_calls

    spec = versioned_calls()
    spec.nvtx += [Nvtx("flash_attn::_flash_attn_forward, op_id = 9", 2500, 2506), Nvtx("Model::forward", 100, 2000),
                  Nvtx("aten::empty, op_id = 3", 125, 130)]
    assert assert_same_as_in_memory(write(tmp_path / "versioned.sqlite", spec)) == 1
