"""A trace read like a performance engineer reads it: where GPU time goes, per-op rooflines, why the GPU idles, which
window counts, graph replay and evidence quality, on hand-made traces whose numbers are worked out here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kineto_builder import Trace

import expert
from expert import Report
from expert.ingest import ingest_result, kineto
from expert.ingest._source import Source

ROOT = Path(__file__).resolve().parents[1]
KB = expert.default_expert().kb
BF = "c10::BFloat16"
MM_DIMS = [[1024, 1024], [1024, 1024]]


def launch_bound(path: Path, steps: int = 3, per_step: int = 200) -> Path:
    """An eager loop of tiny kernels: each op launches a 5 us kernel 10 us after the previous one ended."""
    t = Trace()
    ts = 1000.0
    for s in range(steps):
        start = ts
        for _ in range(per_step):
            t.launch("aten::add_", "void at::native::vectorized_elementwise_kernel<4, add>", ts, ts + 10, 5,
                     op_dur=8)
            ts += 15
        t.step(s + 1, start, ts - start)
    return t.write(path)


def test_a_launch_bound_loop_is_latency_bound_with_graphs_recommended(tmp_path: Path) -> None:
    result = ingest_result(launch_bound(tmp_path / "eager.json"))
    values = result.observations.values()
    # per 15 us: 5 us busy, and a 10 us gap before a kernel launched after the previous one ended (< 50 us)
    assert values["gpu_util"] == pytest.approx(5 / 15, rel=1e-3)
    assert values["launch_overhead_frac"] == pytest.approx(10 / 15, rel=1e-3)
    assert values["host_compute_frac"] == 0 and values["unattributed_idle_frac"] == 0
    assert values["trace_kernels"] == 600 and values["uses_cuda_graphs"] == "no"
    assert values["top_kernel_class"] == "elementwise" and values["top_kernel_class_ops"] == "aten::add_"
    report = expert.diagnose(result.observations, time_breakdown=result.time_breakdown)
    assert report.bottleneck == "latency" and report.candidates[0].strength == "confirmed"
    recommended = [r.id for r in report.recommended]
    assert "cuda_graphs" in recommended and "kernel_fusion" in recommended
    assert report.time_breakdown is not None and report.time_breakdown.idle is not None
    assert report.time_breakdown.idle.launch == pytest.approx(10 / 15, rel=1e-3)


def test_preprocessing_in_the_loop_is_host_bound_not_latency_bound(tmp_path: Path) -> None:
    """Long kernels, and a `preprocess` python function covering half of each step: the GPU waits for the CPU."""
    t = Trace()
    ts = 0.0
    for s in range(3):
        start = ts
        t.python("train.py(40): preprocess", ts, 20_000)
        t.op("aten::resize_", ts + 100, 19_000)  # CPU tensor work inside it, launching nothing
        ts += 20_000
        gpu = ts + 20
        for _ in range(40):
            t.launch("aten::mm", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", ts, gpu, 500,
                     dims=MM_DIMS, types=[BF, BF])
            ts += 10
            gpu += 500
        ts = gpu
        t.step(s + 1, start, ts - start)
    result = ingest_result(t.write(tmp_path / "preprocess.json"))
    values = result.observations.values()
    assert values["host_compute_frac"] == pytest.approx(20_000 / 40_020, rel=1e-3)
    assert values["launch_overhead_frac"] < 0.01
    assert "preprocess" in str(values["idle_host_ops"]) or "aten::resize_" in str(values["idle_host_ops"])
    report = expert.diagnose(result.observations)
    assert report.bottleneck == "host"
    assert "latency" not in [c.regime for c in report.candidates]  # HTA host wait alone would say latency
    assert "cuda_graphs" not in [r.id for r in report.recommended]
    assert "cuda_graphs" in [w.id for w in report.wasted]
    assert "preprocess_in_workers" in [r.id for r in report.recommended]
    finding = next(f for f in report.findings if f.id == "host_compute")
    assert "50%" in finding.message
    # the CPU work launches nothing: only the microsecond each aten::mm spends before its launch call, when the GPU
    # has drained, is the dispatch of a GPU operator (3 us in 40 ms)
    assert values["host_dispatch_frac"] == pytest.approx(3 / 40_020, rel=1e-3)
    assert values["idle_dispatch_ops"] == "aten::mm"
    assert report.derived["dispatch_share_of_host"].value < 0.001


def test_dispatch_slower_than_the_gpu_is_overhead_bound_not_preprocessing(tmp_path: Path) -> None:
    """Each aten::conv2d spends 400 us on the CPU (inside aten::cudnn_convolution: heuristics, allocation) before it
    launches a 300 us kernel: the GPU drains its queue and waits inside the next operator's dispatch. No
    preprocessing anywhere, so moving it to DataLoader workers is no fix; a graph replay or a larger batch is."""
    t = Trace()
    ts = 0.0
    for s in range(3):
        start = ts
        for _ in range(40):
            t.op("aten::conv2d", ts, 410)
            ext = t.op("aten::cudnn_convolution", ts + 5, 400)
            corr = t.runtime("cudaLaunchKernel", ts + 398, 4, ext=ext)
            t.kernel("void cudnn::cnn::implicit_convolve_sgemm<float, 128>", ts + 410, 300, corr)
            ts += 410
        t.step(s + 1, start, ts - start)
    result = ingest_result(t.write(tmp_path / "dispatch.json"))
    values = result.observations.values()
    # per 410 us: 300 us busy; the 110 us before the next kernel pass inside the next conv2d, 4 us of them inside its
    # launch call (launch overhead), the rest host compute, all of it inside an operator that launched GPU work
    assert values["gpu_util"] == pytest.approx(300 / 410, rel=2e-2)
    assert values["host_compute_frac"] == pytest.approx(106 / 410, rel=5e-2)
    assert values["host_dispatch_frac"] == pytest.approx(values["host_compute_frac"], rel=1e-6)
    assert values["idle_dispatch_ops"] == "aten::conv2d"
    assert values["idle_host_ops"] == "aten::cudnn_convolution and aten::conv2d"  # conv2d's own 5 us after it
    report = expert.diagnose(result.observations)
    assert report.bottleneck == "latency" and report.candidates[0].strength == "confirmed"
    assert "host" not in [c.regime for c in report.candidates]
    recommended = [r.id for r in report.recommended]
    assert recommended[0] == "cuda_graphs" and "batching" in recommended
    wasted = [w.id for w in report.wasted]
    assert "preprocess_in_workers" in wasted and "gpu_data_preprocessing" in wasted
    assert "cuda_graphs" not in wasted  # 300 us kernels, but the trace measured the dispatch that replay removes
    finding = next(f for f in report.findings if f.id == "host_dispatch")
    assert "aten::conv2d" in finding.message and "100%" in finding.message


def test_item_every_step_is_sync_bound(tmp_path: Path) -> None:
    """Each step queues 8 ms of kernels, blocks in cudaStreamSynchronize (`.item()`), then spends 2 ms in Python
    before the next launch: the GPU idle time follows the blocking call."""
    t = Trace()
    ts = 0.0
    for s in range(4):
        start = ts
        gpu = ts + 20
        for _ in range(16):
            t.launch("aten::mm", "ampere_bf16_s16816gemm_bf16_128x128", ts, gpu, 500, dims=MM_DIMS, types=[BF, BF])
            ts += 10
            gpu += 500
        ext = t.op("aten::item", ts, gpu - ts + 5)
        t.runtime("cudaStreamSynchronize", ts + 1, gpu - ts + 2, ext=ext)
        ts = gpu + 2_000
        t.step(s + 1, start, ts - start)
    result = ingest_result(t.write(tmp_path / "sync.json"))
    values = result.observations.values()
    assert values["host_sync_frac"] == pytest.approx(2_020 / 10_020, rel=2e-2)
    report = expert.diagnose(result.observations)
    assert report.bottleneck == "host"
    assert "remove_host_syncs" in [r.id for r in report.recommended]


def test_graph_replay_is_never_told_to_use_graphs(tmp_path: Path) -> None:
    t = Trace()
    ts = 0.0
    for s in range(4):
        start = ts
        corr = t.runtime("cudaGraphLaunch", ts, 8)
        gpu = ts + 10
        for k in range(50):
            t.kernel(f"void at::native::vectorized_elementwise_kernel<4, op{k % 5}>", gpu, 6, corr)
            gpu += 7  # queued back to back inside the graph
        ts = gpu + 30  # a short gap before the next graph launch
        t.step(s + 1, start, ts - start)
    result = ingest_result(t.write(tmp_path / "graphs.json"))
    values = result.observations.values()
    assert values["uses_cuda_graphs"] == "yes"
    assert result.time_breakdown is not None and result.time_breakdown.graph_launches == 4
    report = expert.diagnose(result.observations)
    assert "cuda_graphs" not in [r.id for r in report.recommended]
    assert "cuda_graphs" in [w.id for w in report.wasted]
    assert "graphs_in_use" in [f.id for f in report.findings]


def test_a_handful_of_kernels_names_no_regime(tmp_path: Path) -> None:
    t = Trace()
    for k in range(5):
        t.launch("aten::add", "void at::native::vectorized_elementwise_kernel<4, add>", 1000 + 400 * k,
                 1010 + 400 * k, 3)
    t.step(1, 1000, 2100)
    result = ingest_result(t.write(tmp_path / "five.json"))
    report = expert.diagnose(result.observations)
    assert {"few_kernels", "thin_trace"} <= {f.id for f in report.findings}
    assert report.bottleneck is None
    assert all(c.strength == "suspect" for c in report.candidates)


def test_one_step_of_many_kernels_is_likely_at_best(tmp_path: Path) -> None:
    result = ingest_result(launch_bound(tmp_path / "one.json", steps=1, per_step=300))
    report = expert.diagnose(result.observations)
    assert report.bottleneck == "latency" and report.candidates[0].strength == "likely"
    assert "thin_trace" in [f.id for f in report.findings]


def test_nothing_to_judge_is_a_report_without_a_verdict(tmp_path: Path) -> None:
    t = Trace(device=None)
    t.op("aten::empty", 10, 5)
    t.op("aten::zeros", 30, 5)
    path = t.write(tmp_path / "nothing.json")
    proc = subprocess.run([sys.executable, str(ROOT / "cli.py"), "diagnose", "--from", str(path), "--format", "json"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = Report.model_validate_json(proc.stdout)
    assert report.bottleneck is None


def test_step_time_variance_is_a_finding(tmp_path: Path) -> None:
    t = Trace()
    ts = 0.0
    for s, length in enumerate([10_000, 10_000, 30_000, 10_000, 10_000]):
        start = ts
        gpu = ts + 10
        for _ in range(40):
            t.launch("aten::mm", "sm90_xmma_gemm_bf16bf16", ts, gpu, length / 40 - 1)
            ts += 2
            gpu += length / 40
        ts = gpu
        t.step(s + 1, start, ts - start)
    result = ingest_result(t.write(tmp_path / "steps.json"))
    values = result.observations.values()
    # steps of 10010, 10010, 30010, 10010, 10010 us (each extended to its last kernel): sample sd 8944 over mean 14010
    assert values["step_time_cv"] == pytest.approx(80e6 ** 0.5 / 14010, rel=1e-6)
    report = expert.diagnose(result.observations)
    assert "step_time_variance" in [f.id for f in report.findings]
    tb = result.time_breakdown
    assert tb is not None and [s.number for s in tb.steps] == [1, 2, 3, 4, 5]
    assert any("first-call warm-up" in n for n in result.notes) is False


def test_the_steady_state_window_leaves_out_init_warm_up_and_empty_stretches(tmp_path: Path) -> None:
    t = Trace()
    t.runtime("cudaMalloc", 0, 1_500_000)  # CUDA initialisation: 1.5 s before any GPU work
    ts = 2_000_000.0
    # first call: every kernel is new and slow (autotuning)
    for k in range(10):
        t.launch("aten::conv2d", f"cudnn_conv_kernel_{k}", ts, ts + 10, 5_000)
        ts += 5_100
    window_start = ts - 5_100 + 10 + 5_000  # the end of the last new kernel
    for it in range(8):
        for k in range(10):
            t.launch("aten::conv2d", f"cudnn_conv_kernel_{k}", ts, ts + 10, 100)
            ts += 150
        if it == 3:
            ts += 50_000  # 50 ms with no event at all, between requests
    result = ingest_result(t.write(tmp_path / "nosteps.json"))
    tb = result.time_breakdown
    assert tb is not None
    window = tb.window
    assert window.steps == 0 and window.excluded_us == pytest.approx(50_000 - 40, abs=100)
    assert window.start_us == pytest.approx(window_start, abs=1)
    for words in ("initialisation", "longest call cudaMalloc", "first-call warm-up", "1 stretch with no event"):
        assert words in window.reason, words
    assert result.observations.values()["trace_kernels"] == 80


def test_shapes_give_per_op_flops_intensity_and_roof(tmp_path: Path) -> None:
    """80 bf16 GEMMs of 1024^3 (2.147 GFLOP, 6 MiB each) at 4 us on an H100: 537 TFLOP/s, intensity 341 FLOP/B
    (right of the 295 ridge), so 54 % of the 989.4 TFLOP/s roof; and 20 elementwise adds of 1024^2 bf16."""
    t = Trace()
    ts = 0.0
    for s in range(2):
        start = ts
        gpu = ts + 10
        for _ in range(40):
            t.launch("aten::mm", "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNN", ts, gpu, 4, dims=MM_DIMS,
                     types=[BF, BF])
            ts += 2
            gpu += 4
        for _ in range(10):
            t.launch("aten::add", "void at::native::vectorized_elementwise_kernel<4, add>", ts, gpu, 4,
                     dims=[[1024, 1024], [1024, 1024], []], types=[BF, BF, "Scalar"], concrete=["", "", "1"])
            ts += 2
            gpu += 4
        ts = gpu
        t.step(s + 1, start, ts - start)
    result = ingest_result(t.write(tmp_path / "shapes.json"))
    tb = result.time_breakdown
    assert tb is not None and tb.roof is not None and tb.roof.hardware == "h100-sxm" and tb.roof.dtype == "bf16"
    mm = next(e for e in tb.top_ops if e.name == "aten::mm")
    flops, moved = 2 * 1024 ** 3, 3 * 1024 * 1024 * 2
    assert mm.count == 80 and mm.flops == pytest.approx(80 * flops, rel=1e-5)
    assert mm.arithmetic_intensity == pytest.approx(flops / moved, rel=1e-5)
    assert mm.pct_of_roof == pytest.approx(flops / 4e-6 / 989.4e12, rel=1e-4)
    add = next(e for e in tb.top_ops if e.name == "aten::add")
    # 1 FLOP per element over 3 x 2 MiB: bandwidth-bound; 6 MiB in 4 us = 1.57 TB/s of 3.35
    assert add.pct_of_roof == pytest.approx(3 * 2 * 1024 ** 2 / 4e-6 / 3350e9, rel=1e-4)
    assert [c.class_ for c in tb.classes] == ["gemm", "elementwise"]
    assert tb.classes[0].share == pytest.approx(0.8)
    values = result.observations.values()
    assert values["dtype"] == "bf16" and values["top_op"] == "aten::mm"
    assert values["flops"] == pytest.approx(40 * flops + 10 * 1024 ** 2, rel=1e-6)  # per step
    assert values["arithmetic_intensity"] == pytest.approx((80 * flops + 20 * 1024 ** 2) / (100 * moved), rel=1e-6)


def test_the_fusion_finding_quotes_the_breakdown(tmp_path: Path) -> None:
    """Per step 30 x 22 us of add_ and 30 x 18 us of mul (1200 us elementwise) and 10 x 70 us of GEMM: 63 %."""
    t = Trace()
    ts = 0.0
    for s in range(3):
        start = ts
        gpu = ts + 10
        for k in range(60):
            name, kernel, length = (("aten::add_", "vectorized_elementwise_kernel<4, add>", 22) if k % 2 else
                                    ("aten::mul", "vectorized_elementwise_kernel<4, mul>", 18))
            t.launch(name, kernel, ts, gpu, length)
            ts += 3
            gpu += length
        for _ in range(10):
            t.launch("aten::mm", "sm90_xmma_gemm_bf16bf16", ts, gpu, 70)
            ts += 3
            gpu += 70
        ts = gpu
        t.step(s + 1, start, ts - start)
    result = ingest_result(t.write(tmp_path / "fusible.json"))
    report = expert.diagnose(result.observations)
    finding = next(f for f in report.findings if f.id == "fusible_kernels")
    assert finding.message == ("63% of GPU time in elementwise kernels (launched by aten::add_ and aten::mul) — "
                               "fuse them (torch.compile).")
    assert "kernel_fusion" in [r.id for r in report.recommended]


def test_modules_from_python_functions(tmp_path: Path) -> None:
    t = Trace()
    ts = 0.0
    for s in range(2):
        start = ts
        t.python("nn.Module: Linear_0", ts, 100)
        t.launch("aten::addmm", "sm90_xmma_gemm_bf16bf16", ts + 5, ts + 20, 300)
        t.python("nn.Module: LayerNorm_0", ts + 400, 100)
        t.launch("aten::native_layer_norm", "vectorized_layer_norm_kernel", ts + 405, ts + 420, 100)
        ts += 600
        t.step(s + 1, start, 600)
    result = ingest_result(t.write(tmp_path / "modules.json"))
    tb = result.time_breakdown
    assert tb is not None
    assert [(m.name, m.count) for m in tb.top_modules] == [("nn.Module: Linear", 2), ("nn.Module: LayerNorm", 2)]
    assert tb.top_modules[0].share == pytest.approx(0.75)
    assert {c.class_ for c in tb.classes} == {"gemm", "reduction"}


def test_both_readers_give_the_same_breakdown(tmp_path: Path) -> None:
    path = launch_bound(tmp_path / "eager.json", steps=2, per_step=50)
    fast = kineto.parse(Source(path), KB)
    slow = kineto.parse(Source(path), KB, engine="ijson")
    assert fast.stats["reader"] != slow.stats["reader"]
    assert fast.time_breakdown == slow.time_breakdown
    assert kineto.parse(Source(path), KB, breakdown=False).time_breakdown is None


def test_time_breakdown_round_trips_through_ingest_json_and_the_report(tmp_path: Path) -> None:
    trace = launch_bound(tmp_path / "eager.json", steps=2, per_step=120)
    out = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, str(ROOT / "cli.py"), "ingest", str(trace), "--as", "json", "--output",
                           str(out)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    tb = data["time_breakdown"]
    assert tb["classes"][0]["class"] == "elementwise" and set(tb["window"]) >= {"start_us", "end_us", "reason"}
    assert {"name", "gpu_time_s", "share", "count"} <= set(tb["top_kernels"][0])
    for fmt, marker in (("json", '"time_breakdown"'), ("markdown", "## Where the time goes")):
        proc = subprocess.run([sys.executable, str(ROOT / "cli.py"), "diagnose", str(out), "--format", fmt],
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert proc.returncode == 0 and marker in proc.stdout, proc.stderr
        if fmt == "json":
            report = Report.model_validate_json(proc.stdout)
            assert report.time_breakdown is not None
            assert Report.model_validate_json(report.to_json()) == report  # lossless
            assert json.loads(report.to_json())["time_breakdown"]["classes"][0]["class"] == "elementwise"
    html = tmp_path / "r.html"
    proc = subprocess.run([sys.executable, str(ROOT / "cli.py"), "diagnose", "--from", str(trace), "--export", "html",
                           "--output", str(html)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0 and 'id="time-breakdown"' in html.read_text()
    proc = subprocess.run([sys.executable, str(ROOT / "cli.py"), "diagnose", "--from", str(trace)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0 and "Where the time goes" in proc.stdout and "elementwise" in proc.stdout


def test_a_broken_time_breakdown_in_an_observation_file_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"observations": {"gpu_util": 0.5}, "time_breakdown": {"window": 3}}))
    proc = subprocess.run([sys.executable, str(ROOT / "cli.py"), "diagnose", str(path)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "time_breakdown" in proc.stderr and "Traceback" not in proc.stderr


def test_implausible_values_are_not_derived_instead_of_failing(tmp_path: Path) -> None:
    """A 10^5-cube matmul in 2 us is 10^9 x the H100's roof: a corrupt trace, said so, not an ingest error."""
    t = Trace()
    for s in range(2):
        t.launch("aten::mm", "sm90_xmma_gemm_bf16bf16", 1000 * s, 1000 * s + 10, 2,
                 dims=[[100_000, 100_000], [100_000, 100_000]], types=[BF, BF])
        t.step(s + 1, 1000 * s, 900)
    result = ingest_result(t.write(tmp_path / "absurd.json"))
    assert "top_op_pct_of_roof" in result.not_derived and "implausible" in result.not_derived["top_op_pct_of_roof"]
    assert "achieved_tflops" in result.not_derived
    expert.diagnose(result.observations)  # what remains is valid input


def test_a_figure_above_the_roof_gets_a_note_saying_why() -> None:
    from expert.breakdown import ClassShare, TimeEntry
    from expert.ingest.timeline.breakdown import _above_roof_note

    def cls(name: str, pct: float | None) -> ClassShare:
        return ClassShare(class_=name, gpu_time_s=1.0, share=0.5, count=1, memory_bound_by_nature=False,
                          pct_of_roof=pct)

    def entry(pct: float | None) -> TimeEntry:
        return TimeEntry(name="k", gpu_time_s=1.0, share=0.5, count=1, class_="gemm", pct_of_roof=pct)

    assert _above_roof_note([cls("gemm", 0.9), cls("copy", None)], [entry(1.0)], [entry(None)], False) is None
    winograd = _above_roof_note([cls("gemm", 1.42)], [entry(1.58), entry(1.1), entry(0.5)], [entry(0.7)], True)
    assert winograd is not None
    assert "class gemm at 142%, 2 of the top kernels (up to 158%)" in winograd and "Winograd or FFT" in winograd
    from expert.ingest.timeline.classes import Classifier

    fast = Classifier(expert.default_expert().kb.kernels).fast_convolution  # kernels.yaml fast_convolution
    assert fast is not None and fast.search("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>")
    assert fast.search("fft2d_r2c_32x32<float, false, 1u, false>") and not fast.search("volta_sgemm_64x64_nt")
    plain = _above_roof_note([], [], [entry(1.3)], False)
    assert plain is not None
    assert "1 of the top operators (up to 130%)" in plain and "overstates the work" in plain
