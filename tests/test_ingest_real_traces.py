"""Real Kineto traces from other projects (shared/traces, see its README): the resnet50 pair and every other file."""

from __future__ import annotations

from pathlib import Path

import pytest

import expert
from expert.ingest import ingest_result, kineto
from expert.ingest._source import Source

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
ALL = sorted(TRACES.glob("*/*.json.gz")) if TRACES.is_dir() else []
pytestmark = pytest.mark.skipif(not ALL, reason=f"the shared real traces are not at {TRACES}")


def _resnet(workers: int) -> Path:
    return TRACES / "kineto-resnet50" / f"resnet50_num_workers_{workers}.pt.trace.json.gz"


def test_resnet50_with_a_single_process_dataloader_is_input_bound() -> None:
    result = ingest_result(_resnet(0))
    values = result.observations.values()
    share = values["data_wait_s"] / values["step_time_s"]
    assert 0.35 <= share <= 0.45  # the README: DataLoader ≈ 40 % of the step
    assert values["num_workers"] == 0
    assert values["hardware"] == "v100-sxm2"
    assert values["kernels_per_step"] == 1462
    assert values["pageable_copy_frac"] == 1.0
    report = expert.diagnose(result.observations)
    assert report.bottleneck == "input"
    assert result.observations.facts["gpu_util"].detail["window"] == "ProfilerStep#5–#10 (6 steps)"


def test_resnet50_with_four_workers_is_not_input_bound() -> None:
    result = ingest_result(_resnet(4))
    values = result.observations.values()
    assert values["data_wait_s"] / values["step_time_s"] < 0.02  # the README: ≈ 1 %
    assert "_MultiProcessingDataLoaderIter" in result.not_derived["num_workers"]
    assert expert.diagnose(result.observations).bottleneck != "input"
    # cuDNN's non-fused Winograd runs volta_sgemm kernels, credited with the direct convolution's FLOPs: the gemm
    # class shows more than 100 % of the V100's fp32 roof, and a note says why
    tb = result.time_breakdown
    assert tb is not None
    gemm = next(c for c in tb.classes if c.class_ == "gemm")
    assert gemm.pct_of_roof is not None and gemm.pct_of_roof > 1
    (note,) = [n for n in tb.notes if n.startswith("above the roof")]
    assert f"class gemm at {gemm.pct_of_roof:.0%}" in note and "Winograd" in note


@pytest.mark.parametrize("path", ALL, ids=[p.name for p in ALL])
def test_every_real_trace_ingests_with_an_honest_account(path: Path) -> None:
    result = ingest_result(path)
    file = result.files[0]
    assert file.format == "kineto"
    assert set(file.measured) | set(file.not_derived) == set(kineto.FACTS)  # each fact: a value or a reason
    assert all(reason and reason != "not derived from this trace" for reason in result.not_derived.values())
    expert.diagnose(result.observations)  # the observations are valid input


def test_no_steps_rocm_and_counter_only_traces_say_what_is_missing() -> None:
    alexnet = ingest_result(TRACES / "hta" / "critical_path_alexnet_trace.json.gz")
    assert "ProfilerStep" in alexnet.not_derived["step_time_s"]
    assert "steady state" in str(alexnet.observations.facts["gpu_util"].detail["window"])
    cupti = ingest_result(TRACES / "hta" / "cupti_profiler_trace.json.gz")
    assert "GPU activity was not recorded" in cupti.not_derived["gpu_util"]
    mi250 = ingest_result(TRACES / "hta" / "amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert "AMD Radeon Graphics" in mi250.not_derived["hardware"]
    assert any("ROCm" in n for n in mi250.notes)
    mi300 = ingest_result(TRACES / "tracelens" / "mi300_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    assert mi300.observations.values()["hardware"] == "mi300x"


def test_both_readers_agree_on_a_real_trace() -> None:
    path = TRACES / "tracelens" / "h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    kb = expert.default_expert().kb
    fast = kineto.parse(Source(path), kb)
    slow = kineto.parse(Source(path), kb, engine="ijson")
    assert fast.stats["reader"] != slow.stats["reader"]
    assert {k: m.value for k, m in fast.measured.items()} == {k: m.value for k, m in slow.measured.items()}


# ---- the trace read like a performance engineer ------------------------------------------------------------------

def test_resnet50_time_goes_to_convolutions_and_its_flops_match_the_model() -> None:
    result = ingest_result(_resnet(0))
    tb = result.time_breakdown
    assert tb is not None and tb.roof is not None and (tb.roof.hardware, tb.roof.dtype) == ("v100-sxm2", "fp32")
    assert tb.classes[0].class_ == "conv" and 0.5 < tb.classes[0].share < 0.65
    assert {c.class_ for c in tb.classes} >= {"conv", "reduction", "elementwise", "gemm", "host_transfer"}
    assert tb.top_ops[0].name == "aten::cudnn_convolution_backward"
    assert tb.top_ops[1].name == "aten::cudnn_convolution" and tb.top_ops[1].count == 318  # 53 convs x 6 steps
    # ResNet-50 at 224x224 is ~4.1 GMACs (8.2 GFLOP) per image forward; a training step of 32 images is ~3x that
    flops = result.observations.values()["flops"]
    assert 0.95 * 3 * 32 * 8.2e9 < flops < 1.05 * 3 * 32 * 8.2e9
    assert tb.flops_coverage is not None and tb.flops_coverage > 0.9
    conv = tb.top_ops[1]
    assert conv.arithmetic_intensity is not None and conv.arithmetic_intensity > tb.roof.ridge_flop_per_byte
    assert conv.pct_of_roof is not None and 0.5 < conv.pct_of_roof < 1.0
    report = expert.diagnose(result.observations, time_breakdown=tb)
    assert report.bottleneck == "input" and report.candidates[0].strength == "confirmed"


def test_resnet50_with_workers_waits_on_the_dispatch_of_its_own_operators_not_preprocessing() -> None:
    """With 4 DataLoader workers the GPU still idles 16 % of the window while the training thread is on the CPU, but
    not in preprocessing: 71 % of that time is inside aten::conv2d, aten::batch_norm and aten::relu_ (the CPU side of
    the model's own GPU operators), and most of the rest in the pageable copy of each batch (aten::to)."""
    result = ingest_result(_resnet(4))
    values = result.observations.values()
    assert values["host_compute_frac"] > 0.15 > values["launch_overhead_frac"]
    assert 0.65 < values["host_dispatch_frac"] / values["host_compute_frac"] < 0.8
    assert values["idle_dispatch_ops"] == "aten::conv2d, aten::batch_norm and aten::relu_"
    assert "aten::conv2d 3" in str(result.observations.facts["host_dispatch_frac"].detail["method"])
    report = expert.diagnose(result.observations)
    assert report.bottleneck == "latency" and report.candidates[0].strength == "confirmed"
    assert "host" not in [c.regime for c in report.candidates]
    assert report.recommended[0].id == "cuda_graphs"
    wasted = {w.id for w in report.wasted}
    assert {"preprocess_in_workers", "gpu_data_preprocessing"} <= wasted
    # a quarter of that host time is the copy of each batch from pageable memory (aten::copy_): pinning can save
    # at most the copies and that part, not the whole host term
    assert 0.03 < values["host_copy_frac"] < 0.06
    assert "aten::copy_" in str(result.observations.facts["host_copy_frac"].detail["method"])
    gains = {r.id: r.expected_gain for r in report.recommended}
    pinned, graphs = gains["pin_memory"], gains["cuda_graphs"]
    assert pinned is not None and graphs is not None and pinned.max_speedup < graphs.max_speedup
    assert pinned.max_speedup == pytest.approx(1 / (1 - values["h2d_copy_frac"] - values["host_copy_frac"]),
                                               abs=1e-3)


def test_initialisation_and_warm_up_are_left_out_of_a_trace_without_steps() -> None:
    """The PARAM AlexNet benchmark: 30 s of CUDA initialisation, a 12.7 s warm-up pass (cuDNN autotuning, cudaFree,
    cudaMalloc) and two measured passes with a CPU cache-clearing step between them."""
    result = ingest_result(TRACES / "hta" / "critical_path_alexnet_trace.json.gz")
    tb = result.time_breakdown
    assert tb is not None and tb.window.steps == 0
    assert tb.window.start_us > 43e6 and "cudaDeviceGetStreamPriorityRange" in tb.window.reason
    assert "first-call warm-up" in tb.window.reason
    report = expert.diagnose(result.observations)
    assert report.bottleneck == "host" and report.candidates[0].strength == "likely"  # 46 kernels: thin
    assert "thin_trace" in [f.id for f in report.findings]


def test_rocm_gemms_triton_and_flash_attention_are_classified() -> None:
    mi250 = ingest_result(TRACES / "hta" / "amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz").time_breakdown
    assert mi250 is not None
    assert any(k.class_ == "gemm" and k.name.startswith("Cijk_") for k in mi250.top_kernels)
    triton = ingest_result(TRACES / "hta" / "triton_example_triton_example.json.gz")
    assert triton.time_breakdown is not None and triton.time_breakdown.classes[0].class_ == "triton"
    assert expert.diagnose(triton.observations).bottleneck is None  # one kernel: nothing to judge
    for gpu in ("h100", "mi300"):
        qwen = ingest_result(TRACES / "tracelens" / f"{gpu}_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
        tb = qwen.time_breakdown
        assert tb is not None and tb.roof is not None and tb.roof.dtype == "bf16"
        classes = {c.class_ for c in tb.classes}
        assert {"gemm", "attention", "elementwise"} <= classes
        flash = next(e for e in tb.top_ops if e.name == "aten::_flash_attention_forward")
        assert flash.class_ == "attention" and flash.flops and flash.pct_of_roof
        assert any(m.name == "nn.Module: Qwen2Attention" for m in tb.top_modules)
        assert "thin_trace" in [f.id for f in expert.diagnose(qwen.observations).findings]  # one step


def test_a_trace_that_replays_graphs_is_never_told_to_use_them() -> None:
    result = ingest_result(TRACES / "hta" / "trace_diff_test_test.json.gz")
    assert result.observations.values()["uses_cuda_graphs"] == "yes"
    report = expert.diagnose(result.observations)
    assert "cuda_graphs" not in [r.id for r in report.recommended]


def test_tf32_gemms_on_an_a100_are_not_read_as_16_bit_math() -> None:
    # HTA's trace_diff sample: fp32 matmuls on A100s run cuBLAS 11's cutlass_80_tensorop_s1688gemm (TF32) kernels;
    # they were read as fp16 (lower_precision "applied") and held to the CUDA-core fp32 roof (gemm at 128 %)
    result = ingest_result(TRACES / "hta" / "trace_diff_control_control.json.gz")
    assert "applied_optimizations" not in result.observations.facts
    assert result.observations.facts["dtype"].value == "tf32"
    tb = result.time_breakdown
    assert tb is not None
    gemm = next(c for c in tb.classes if c.class_ == "gemm")
    assert gemm.dtype == "tf32" and gemm.pct_of_roof is not None and gemm.pct_of_roof < 1
    assert not [n for n in tb.notes if n.startswith("above the roof")]


@pytest.mark.parametrize(("path", "reason"), [
    # hipBLASLt's Cijk_Alik_Bljk_B_BS_BH_* under aten::mm on c10::BFloat16 (MI300X) and cuBLAS 12's nvjet_tst_* of a
    # bf16 job (the nsys export, flash attention on cutlass::bfloat16_t): both were read as no 16-bit GEMM time
    ("tracelens/mi300_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "mi300x also has fp8"),
    ("nsys/mfu_2gpu_before.sqlite", "the hardware is unknown"),
])
def test_bf16_gemms_of_hipblaslt_and_nvjet_are_read_as_bf16(path: str, reason: str) -> None:
    source = TRACES / path
    if not source.is_file():
        pytest.skip(f"{source} is not here")
    result = ingest_result(source)
    why = result.files[0].not_derived["applied_optimizations"]
    assert "mostly bf16" in why and reason in why


def _hta(name: str) -> Path:
    return TRACES / "hta" / f"{name}.json.gz"


def test_sums_over_a_minority_of_shaped_operators_are_not_published() -> None:
    """HTA's V100 trace records shapes for operators that launched 8 % of its GPU time (its GEMMs run inside compiled
    regions): FLOPs and bytes summed from them would put MFU at 1 % and the D/BW term at 3 %, a lower bound by an
    unknown factor. They are left out with the coverage as the reason, and no verdict rests on them."""
    result = ingest_result(_hta("trace_diff_test_test"))
    assert result.time_breakdown is not None and result.time_breakdown.flops_coverage is not None
    assert result.time_breakdown.flops_coverage < 0.5
    for fact in ("flops", "bytes_moved", "arithmetic_intensity", "achieved_tflops"):
        assert fact not in result.observations.facts
        assert "launched only 8%" in result.not_derived[fact]
    report = expert.diagnose(result.observations)
    assert "mfu" not in report.derived and "screen-below-ridge" not in {f.rule_id for f in report.findings}
    # the resnet50 traces have shapes for ~96 % of their GPU time: their sums stand
    assert "flops" in ingest_result(_resnet(4)).observations.facts


def test_host_device_copies_are_not_memory_bound_by_nature() -> None:
    """A host-to-device copy is paced by PCIe, not by HBM: it is the host_transfer class, outside the memory-bound
    share; a device-to-device copy stays a memory-bound memcpy."""
    result = ingest_result(_hta("trace_diff_test_test"))
    tb = result.time_breakdown
    assert tb is not None
    by_class = {c.class_: c for c in tb.classes}
    assert not by_class["host_transfer"].memory_bound_by_nature and by_class["memcpy"].memory_bound_by_nature
    classes = {k.name: k.class_ for k in tb.top_kernels}
    assert classes["Memcpy HtoD (Pinned -> Device)"] == "host_transfer"
    assert classes["Memcpy DtoD (Device -> Device)"] == "memcpy"
    shares = {c.class_: c.share for c in tb.classes if c.memory_bound_by_nature}
    assert tb.memory_bound_share == pytest.approx(sum(shares.values()), abs=1e-3)
    assert tb.memory_bound_share is not None and tb.memory_bound_share < 0.5  # 52 % when the HtoD copies counted


def test_a_dlrm_style_exchange_is_overlapped_not_bucketed() -> None:
    """HTA's trace_diff control trace: 8 ranks, 19 % of the step in exposed NCCL time, 80 % of it SendRecv (the
    embedding all-to-all NCCL runs as grouped send/receive) and 20 % AllReduce. Gradient bucketing, compression and
    asynchronous gradient sync act on the all-reduce alone, so they are bounded by its share and ranked after the
    remedies for the exchange."""
    path = TRACES / "hta" / "trace_diff_control_control.json.gz"
    result = ingest_result(path)
    values = result.observations.values()
    assert values["allreduce_comm_share"] == pytest.approx(0.2, abs=0.02)
    assert str(values["comm_kinds"]).startswith("SendRecv 80%, AllReduce 20%")
    report = expert.diagnose(result.observations)
    assert report.bottleneck == "communication"
    assert "exchange_communication" in {f.id for f in report.findings}
    order = [r.id for r in report.recommended]
    assert order.index("overlap_exchange") < order.index("gradient_bucketing")
    gains = {r.id: r.expected_gain for r in report.recommended}
    exposed = report.derived["exposed_allreduce_frac"].value
    assert exposed == pytest.approx(values["comm_frac"] * values["allreduce_comm_share"], rel=1e-9)
    for technique in ("gradient_bucketing", "async_grad_sync", "gradient_compression"):
        gain = gains[technique]
        assert gain is not None and gain.max_speedup == pytest.approx(1 / (1 - exposed), abs=1e-3)
    overlap = gains["overlap_exchange"]
    assert overlap is not None and overlap.max_speedup == pytest.approx(1 / (1 - values["comm_frac"]), abs=1e-3)


def test_fusion_and_quantization_are_bounded_by_the_kernels_whose_bytes_they_cut() -> None:
    """TraceLens's Qwen1.5-0.5B step on an H100: 61 % of GPU time in elementwise kernels, 28 % in GEMMs, 9 % in
    flash attention. The D/BW term (bytes from the operators' shapes over the peak bandwidth) is 28 % of the step,
    yet the memory-bound kernels take 58 % of it: they run well below the peak bandwidth. Fusion can save at most
    their time, quantization at most the time of the kernels that read the weights and the KV cache; both were
    bounded by the D/BW term (1.39x each) before the kernel mix was read. Quantization shrinks those bytes at most to
    4-bit values (a quarter of bf16)."""
    result = ingest_result(TRACES / "tracelens" / "h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    tb = result.time_breakdown
    assert tb is not None
    values = result.observations.values()
    shares = {c.class_: c.share for c in tb.classes}
    readers = sum(shares.get(c, 0.0) for c in ("gemm", "conv", "attention", "triton", "other"))
    assert values["weight_kernel_frac"] == pytest.approx(readers, abs=1e-4)
    assert 0.3 < float(values["weight_kernel_frac"]) < 0.4
    report = expert.diagnose(result.observations)
    util = float(values["gpu_util"])
    fusible, quantizable = report.derived["fusible_frac"].value, report.derived["quantizable_frac"].value
    assert fusible == pytest.approx(float(values["memory_bound_kernel_frac"]) * util, rel=1e-9)
    assert quantizable == pytest.approx(float(values["weight_kernel_frac"]) * util, rel=1e-9)
    assert fusible > report.derived["share_data"].value  # the kernels run below the peak bandwidth D/BW assumes
    gains = {r.id: r.expected_gain for r in report.recommended}
    fusion, quantization = gains["kernel_fusion"], gains["quantization"]
    assert fusion is not None and fusion.max_speedup == pytest.approx(1 / (1 - fusible), abs=1e-3)
    # bf16 (the trace's dtype) to 4-bit values: the weight and KV-cache kernels' time falls at best to a quarter
    assert quantization is not None
    assert quantization.max_speedup == pytest.approx(1 / (1 - quantizable + quantizable / 4), abs=1e-3)
    assert "fusible_frac" in fusion.assumptions and "quantizable_frac" in quantization.assumptions
    order = [r.id for r in report.recommended]
    assert order.index("kernel_fusion") < order.index("quantization")
