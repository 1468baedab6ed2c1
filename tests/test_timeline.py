"""The format-neutral timeline analysis (expert/ingest/timeline/) on plain records, as any reader would fill it."""

from __future__ import annotations

import pytest

import expert
from expert.ingest.opflops import OpShapes
from expert.ingest.timeline import Classifier, Cover, Timeline, analyse, steady_window, step_windows, subtract

CATALOG = expert.default_expert().kb.kernels
assert CATALOG is not None


@pytest.mark.parametrize(("name", "kind", "expected"), [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "kernel", "gemm"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNN", "kernel", "gemm"),
    ("ampere_sgemm_32x32_sliced1x4_tn", "kernel", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>", "kernel", "gemm"),
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1", "kernel", "gemm"),  # hipBLASLt
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw", "kernel", "conv"),
    ("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>", "kernel", "conv"),
    ("naive_conv_fwd_nchw_float_double_float", "kernel", "conv"),  # MIOpen
    ("igemm_fwd_gtcx_nhwc_fp16_bx0_ex1_bt128x128x32", "kernel", "conv"),  # MIOpen implicit GEMM
    ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4>>", "kernel",
     "attention"),
    ("fmha_cutlassF_f16_aligned_64x64_rf_sm80", "kernel", "attention"),
    ("ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVSAsync>", "kernel", "attention"),  # ROCm CK
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", "kernel", "elementwise"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 4, 64, 64>", "kernel",
     "elementwise"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float>>>", "kernel",
     "reduction"),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>", "kernel", "reduction"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", "kernel", "reduction"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>", "kernel", "reduction"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "kernel", "communication"),
    ("triton_poi_fused_add_cos_sin_0", "kernel", "triton"),
    ("Memcpy HtoD (Pageable -> Device)", "memcpy", "host_transfer"),
    ("Memcpy DtoH (Device -> Pinned)", "memcpy", "host_transfer"),
    ("Memcpy DtoD (Device -> Device)", "memcpy", "memcpy"),
    ("Memset (Device)", "memset", "memset"),
    ("my_custom_kernel", "kernel", "other"),
    # ---- names from real traces and public profiles that were misread (kernels.yaml sources) ----
    # Inductor names a kernel after the ATen ops it fuses: pointwise kernels fused into a convolution or an
    # attention are Triton kernels, not convolutions / attention (Inductor output code); a fused all_reduce neither
    ("triton_poi_fused_convolution_relu_3", "kernel", "triton"),
    ("triton_red_fused_convolution_backward_sum_0", "kernel", "triton"),
    ("triton_poi_fused__scaled_dot_product_flash_attention_transpose_2", "kernel", "triton"),
    ("triton_per_fused_all_reduce_0", "kernel", "triton"),
    # FBGEMM's embedding index kernels (shared/traces/hta/trace_diff_*): not GEMMs because of the namespace
    ("void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*, int const*, int*)", "kernel",
     "elementwise"),
    ("void fbgemm_gpu::_offsets_range_cuda_kernel<long>(long, long, long const*, long*)", "kernel", "other"),
    # FlashInfer's non-attention kernels and vLLM's KV-cache write were read as attention by a bare 'flash'
    ("void flashinfer::norm::RMSNormKernel<(unsigned int)8, __half>(T2 *, T2 *, T2 *, unsigned int, unsigned int)",
     "kernel", "reduction"),
    ("void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheHeadParallelismKernel<(bool)0, (unsigned int)128, "
     "(unsigned int)8, (unsigned int)16, __half, long>(T5 *, T5 *)", "kernel", "elementwise"),
    ("void flashinfer::activation::act_and_mul_kernel<__nv_bfloat16, &silu>(__nv_bfloat16*, __nv_bfloat16 const*)",
     "kernel", "elementwise"),
    ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>", "kernel",
     "elementwise"),
    # ... while the attention kernels stay attention
    ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, 4u>(Params)", "kernel",
     "attention"),
    ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<KTraits, Params>(Params)", "kernel", "attention"),
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)64, (int)4, (bool)0, (bool)0, "
     "cutlass::bfloat16_t>>", "kernel", "attention"),  # shared/traces/nsys/mfu_2gpu_before.sqlite
    ("flash_fwd_splitkv_kernel", "kernel", "attention"),
    ("void flash::FlashAttnFwdSm90<CollectiveMainloopFwdSm90>(Params)", "kernel", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0", "kernel",
     "attention"),
    ("void vllm::paged_attention_v1_kernel<unsigned short, unsigned short, 128, 16, 128>", "kernel", "attention"),
    # a cast is not a convolution ('conv' of 'convert')
    ("convertFP32ToBF16Kernel", "kernel", "elementwise"),
    # CuTe-DSL kernels carry 'cutlass' in their names whatever they compute (an RMSNorm here)
    ("kernel_cutlass_kernel_flashinfernormkernelsfused_add_rmsnormFusedAddRMSNormKernel_object_at__ptr", "kernel",
     "reduction"),
    # GEMMs a name list missed: vLLM Marlin (W4A16), the Triton MoE GEMM, TensorRT-LLM's Blackwell bmm, hipBLASLt's
    # Custom_ prefix, vLLM's ROCm skinny GEMM
    ("void marlin::Marlin<(long)1125899906910725, (long)1125899906843648, (long)1125899906910725, (long)1>", "kernel",
     "gemm"),
    ("void marlin_moe_wna16::Marlin<__nv_bfloat16, 4>(int4 const*)", "kernel", "gemm"),
    ("fused_moe_kernel", "kernel", "gemm"),
    ("bmm_E4m3_E4m3E4m3_Fp32_t128x128x128", "kernel", "gemm"),
    ("Custom_Cijk_Alik_Bljk_BBS_BH_Bias_AS_SAV_UserArgs_MT256x256x64", "kernel", "gemm"),
    ("void wvSplitK_hf_sml_<__hip_bfloat16, 64, 4, 16, 8, 1, 4>(int)", "kernel", "gemm"),
    # GEMVs and split-K reductions stay GEMMs (their memory-boundness shows in the operator's roofline)
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>", "kernel", "gemm"),
    ("void splitKreduce_kernel<float, float, float, float, true, false, false>(cublasSplitKParams<float>)", "kernel",
     "gemm"),
    ("void cutlass::Kernel<cutlass::reduction::kernel::ReduceSplitK<cutlass::MatrixShape<4, 128>>>", "kernel",
     "gemm"),
    # collectives outside NCCL
    ("void deep_ep::intranode::dispatch<(int)2, (int)768, (int)8192>(int4 *, float *, float *)", "kernel",
     "communication"),
    ("userbuffers_fp16_sum_inplace_gpu_rr_rs", "kernel", "communication"),
    ("void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<1, __nv_bfloat16, 8>",
     "kernel", "communication"),
    # resampling and (de)quantization kernels fell to other; GEMMs naming a quantized format stay GEMMs
    ("void at::native::(anonymous namespace)::upsample_bilinear2d_out_frame<float, float>(int, float, float, bool)",
     "kernel", "elementwise"),
    ("void vllm::dynamic_per_token_scaled_fp8_quant_kernel<float>(c10::Float8_e4m3fn*, float*, float const*)",
     "kernel", "elementwise"),
    ("_w8a8_block_fp8_matmul", "kernel", "gemm"),
    ("void gemm_half_q_half_gptq_4bit_kernel<true, 1>(__half const*, unsigned int const*)", "kernel", "gemm"),
    # reductions in the real traces that fell to other (shared/traces/hta/trace_diff_*)
    ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float>(long, long, float const*)",
     "kernel", "reduction"),
    ("void cunn_ClassNLLCriterion_updateOutput_kernel<float, float>(float*, float*, float*, long*, float*)", "kernel",
     "reduction"),
])
def test_kernel_classes_from_cuda_and_rocm_names(name: str, kind: str, expected: str) -> None:
    tl = Timeline()
    tl.add_gpu(name, 0, 1, device=0, kind=kind)
    assert Classifier(CATALOG).of(tl.names, tl.g_name[0], tl.g_kind[0]) == expected


def test_cover_and_subtract() -> None:
    cover = Cover([(0.0, 10.0), (20.0, 30.0)])
    assert cover.between(5, 25) == 10 and cover.total == 20 and cover.contains(25) and not cover.contains(15)
    assert subtract([(0.0, 10.0), (20.0, 30.0)], [(5.0, 22.0)]) == [(0.0, 5.0), (22.0, 30.0)]


def _timeline(sync: bool = True) -> Timeline:
    """One device, window [0, 1000). Kernels: A [0, 100) launched at -10; B [130, 200) launched at 120 (a 30 us gap
    before a kernel launched after the GPU went idle: launch overhead); C [400, 500) launched at 390 after 190 us of
    `preprocess` (a python function that launches nothing); D [500, 600) queued at 150 (no gap); E [700, 900)
    launched at 610; then 100 us of idle with no host event (unattributed). With `sync`, a cudaStreamSynchronize
    [180, 605) is in progress when the GPU runs dry at 200 and at 600: both gaps are the sync's."""
    tl = Timeline()
    main = tl.thread("pid", "main")
    for name, start, dur, at in (("k_a", 0, 100, -10), ("k_b", 130, 70, 120), ("k_c", 400, 100, 390),
                                 ("k_d", 500, 100, 150), ("k_e", 700, 200, 610)):
        corr = len(tl.r_start)
        ext = len(tl.o_start)
        tl.add_op("aten::mm", at - 1, 6, thread=main, external_id=ext,
                  shapes=OpShapes.of([[64, 64], [64, 64]], ["float", "float"]))
        tl.add_runtime("cudaLaunchKernel", at, 4, correlation=corr, thread=main, external_id=ext)
        tl.add_gpu(f"ampere_sgemm_{name}", start, dur, device=0, stream=7, correlation=corr)
    tl.add_span("train.py(12): preprocess", 200, 190, thread=main)
    if sync:
        tl.add_runtime("cudaStreamSynchronize", 180, 425, thread=main)
    tl.finish()
    return tl


def test_idle_gaps_split_by_what_the_host_was_doing() -> None:
    tl = _timeline()
    result = analyse(tl, [(0.0, 1000.0)], None, CATALOG)
    assert result is not None
    idle = result.idle
    assert idle["busy"] == pytest.approx(0.57)  # 100 + 70 + 100 + 100 + 200 us
    assert idle["launch"] == pytest.approx(30 / 1000)  # [100, 130)
    assert idle["sync"] == pytest.approx((200 + 100) / 1000)  # [200, 400) and [600, 700) began inside the sync
    assert idle["host"] == 0
    assert idle["unattributed"] == pytest.approx(100 / 1000)  # [900, 1000): nothing ran on the host
    assert idle["gpu_wait"] == 0
    free = analyse(_timeline(sync=False), [(0.0, 1000.0)], None, CATALOG)
    assert free is not None
    # without the sync: [200, 395) is preprocess and the launching op, [395, 400) nothing; [600, 700) has the op
    # [609, 615) that launched E and 94 us of nothing; the launch calls inside them ([390, 394), [610, 614)) are
    # launch overhead, not host compute
    assert free.idle["host"] == pytest.approx((195 - 4 + 6 - 4) / 1000)
    assert free.idle["launch"] == pytest.approx((30 + 4 + 4) / 1000)
    assert free.idle["unattributed"] == pytest.approx((5 + 94 + 100) / 1000)
    assert free.idle["sync"] == 0 and free.breakdown.host_during_idle[0].name == "train.py(12): preprocess"
    assert result.kernels == 5 and result.breakdown.top_ops[0].name == "aten::mm"
    assert result.breakdown.top_ops[0].count == 5


def test_a_caller_python_function_is_not_host_compute() -> None:
    """A python frame that launches GPU work (a forward, the training loop) covers everything; only frames that
    launch nothing count as host compute."""
    tl = Timeline()
    main = tl.thread("main")
    tl.add_span("train.py(1): <module>", 0, 1000, thread=main)  # the whole loop
    tl.add_runtime("cudaLaunchKernel", 10, 4, correlation=1, thread=main)
    tl.add_gpu("k", 20, 100, device=0, correlation=1)
    tl.add_runtime("cudaLaunchKernel", 500, 4, correlation=2, thread=main)
    tl.add_gpu("k", 510, 100, device=0, correlation=2)
    tl.finish()
    result = analyse(tl, [(0.0, 700.0)], None, CATALOG)
    assert result is not None
    # only the launch call inside the gap [120, 510), which is launch overhead (the host sat in cudaLaunchKernel)
    # ([0, 20) before the first kernel is a short gap before a launch: launch overhead too)
    assert result.idle["host"] == 0 and result.idle["launch"] == pytest.approx((20 + 4) / 700)
    assert result.idle["unattributed"] == pytest.approx((390 - 4 + 90) / 700)


def test_a_slow_first_launch_is_launch_overhead_and_named() -> None:
    """A 2 ms cudaLaunchKernel (a first launch loading its module) while the GPU idles is neither launch overhead (a
    latency verdict on it would propose CUDA graphs) nor host compute: unattributed, and the note names it; launch
    calls under 1 ms stay launch overhead and are not named."""
    from expert.ingest.timeline.result import slow_launch_note

    tl = Timeline()
    main = tl.thread("main")
    tl.add_span("train.py(1): <module>", 0, 5000, thread=main)
    tl.add_runtime("cudaLaunchKernel", 10, 4, correlation=1, thread=main)
    tl.add_gpu("k", 20, 100, device=0, correlation=1)
    tl.add_runtime("cudaLaunchKernel", 200, 2000, correlation=2, thread=main)  # [200, 2200)
    tl.add_gpu("k2", 2210, 100, device=0, correlation=2)
    tl.finish()
    result = analyse(tl, [(0.0, 2400.0)], None, CATALOG)
    assert result is not None
    assert result.idle["host"] == 0
    assert result.idle["launch"] == pytest.approx(20 / 2400)  # [0, 20): a short gap before a launched kernel
    assert result.idle["unattributed"] == pytest.approx((2210 - 120 + 90) / 2400)  # the slow call's gap, the end
    note = slow_launch_note(result.facts["_slow_launch"], "the window")
    assert note is not None and note.startswith("cudaLaunchKernel took 2 ms inside the window")
    assert "unattributed, not as launch overhead" in note
    quick = Timeline()
    quick.add_runtime("cudaLaunchKernel", 10, 4, correlation=1, thread=quick.thread("main"))
    quick.add_gpu("k", 20, 100, device=0, correlation=1)
    quick.finish()
    fast = analyse(quick, [(0.0, 200.0)], None, CATALOG)
    assert fast is not None and slow_launch_note(fast.facts["_slow_launch"], "the window") is None


def test_windows_steps_and_no_activity() -> None:
    tl = _timeline()
    numbered = step_windows(tl, [(1, 0.0, 300.0), (2, 300.0, 650.0)], None)
    # step 1 launched D at 150 (it ends at 600), so step 1 extends to 600 and step 2 starts there
    assert numbered == [(1, 0.0, 600.0), (2, 600.0, 900.0)]
    assert analyse(tl, [(2000.0, 3000.0)], None, CATALOG) is None
    empty = Timeline()
    empty.add_op("aten::empty", 0, 10)
    empty.finish()
    window = steady_window(empty, 0, 10, None, CATALOG)
    assert window.windows == [(0, 10)] and "no GPU activity" in window.reason
