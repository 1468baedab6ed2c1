"""Device frees inside steady-state steps (the caching allocator flushing its cache): counted from a Kineto trace and
an Nsight Systems export, and what the rules make of them with the allocator's retry count typed in."""

from __future__ import annotations

from pathlib import Path

import pytest
from kineto_builder import Trace
from nsys_export import Export, Kernel, Nvtx, write

import expert
from expert.ingest import ingest_result
from expert.ingest.timeline.classes import Classifier

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"


def _flushing_steps(frees_in_step_2: int) -> Trace:
    """Two 1,000 us steps, one GEMM each (launched at +10, running [+20, +620)); step 2 also calls cudaFree
    `frees_in_step_2` times at +700, 20 us each, with the GPU idle (the caching allocator releasing its cache)."""
    t = Trace()
    for number, start in ((1, 1000.0), (2, 2000.0)):
        t.step(number, start, 1000.0)
        t.launch("aten::mm", GEMM, start + 10, start + 20, 600.0)
    for k in range(frees_in_step_2):
        t.runtime("cudaFree", 2700.0 + 20 * k, 20.0)
    t.runtime("cudaFreeHost", 1700.0, 5.0)  # pinned host memory: not the device allocator's
    return t


def test_a_kineto_trace_counts_the_cuda_frees_per_step(tmp_path: Path) -> None:
    result = ingest_result(_flushing_steps(6).write(tmp_path / "flush.json"))
    frees = result.observations.facts["device_frees_per_step"]
    assert frees.value == pytest.approx(3.0)  # 6 cudaFree in 2 steps; cudaFreeHost is not counted
    assert "6 cudaFree/hipFree calls" in str(frees.detail["method"])
    clean = ingest_result(_flushing_steps(0).write(tmp_path / "clean.json"))
    assert clean.observations.values()["device_frees_per_step"] == 0.0


def test_the_diagnosis_names_the_allocator_and_recommends_tuning_it(tmp_path: Path) -> None:
    result = ingest_result(_flushing_steps(6).write(tmp_path / "flush.json"))
    report = expert.default_expert().diagnose(result.observations.values())
    facts = result.observations.values()
    assert facts["host_sync_frac"] >= 0.02  # the frees idle the GPU 120 us of the 2,000
    assert "device_frees" in {f.id for f in report.findings}
    assert "allocator_tuning" in {r.id for r in report.recommended}
    assert "host" in {c.regime for c in report.candidates}


def test_an_nsys_export_counts_the_cuda_frees_per_step(tmp_path: Path) -> None:
    """Two `step` ranges [0, 3000) and [3000, 6000) us; kernels launched by 2 us calls; the launching thread calls
    cudaFree_v3020 (nsys's versioned name) three times in step 2, and cudaFreeAsync (stream-ordered: no flush) once."""
    export = Export(kernels=[Kernel(GEMM, 10, 2900, 5), Kernel(GEMM, 3010, 5000, 3005)],
                    nvtx=[Nvtx("step", 0, 3000, tid=2), Nvtx("step", 3000, 6000, tid=2)],
                    runtime_extra=[("cudaFree_v3020", 5100, 5200, 100), ("cudaFree_v3020", 5200, 5300, 100),
                                   ("cudaFree_v3020", 5300, 5400, 100), ("cudaFreeAsync_v11020", 5400, 5410, 100)],
                    gpus={0: "NVIDIA H100 80GB HBM3"})
    result = ingest_result(write(tmp_path / "frees.sqlite", export))
    assert result.observations.values()["device_frees_per_step"] == pytest.approx(1.5)


def test_only_device_frees_are_device_frees() -> None:
    kernels = expert.default_expert().kb.kernels
    assert kernels is not None
    cls = Classifier(kernels)
    for name in ("cudaFree", "cudaFree_v3020", "hipFree", "cuMemFree_v2"):
        assert cls.is_device_free(name) and cls.is_blocking(name), name
    for name in ("cudaFreeHost", "cudaFreeAsync", "hipFreeAsync", "cudaStreamSynchronize", "cudaMalloc"):
        assert not cls.is_device_free(name), name
