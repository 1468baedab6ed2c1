"""Which collective a communication kernel runs (knowledge_base/kernels.yaml `collectives`), by the names NCCL, RCCL,
vLLM, Transformer Engine and DeepEP give their kernels."""

from __future__ import annotations

import pytest

import expert
from expert.ingest.timeline.classes import Classifier

KB = expert.default_expert().kb


@pytest.mark.parametrize(("name", "kind", "data_parallel"), [
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "AllReduce", True),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "AllReduce", True),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "ReduceScatter", True),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "AllGather", True),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, int)", "AllReduce",
     True),
    ("userbuffers_fp16_sum_inplace_gpu_rr_rs", "ReduceScatter", True),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", "SendRecv", False),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "SendRecv", False),
    ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)", "AllToAll", False),
    ("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "Broadcast", False),
    ("ncclDevKernel_Reduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "Reduce", False),
])
def test_each_communication_kernel_names_its_collective(name: str, kind: str, data_parallel: bool) -> None:
    assert KB.kernels is not None
    cls = Classifier(KB.kernels)
    assert cls.of([name], 0, 0) == "communication"
    assert cls.collective(name) == (kind, data_parallel)


def test_a_kernel_no_kind_matches_is_other() -> None:
    assert KB.kernels is not None
    assert Classifier(KB.kernels).collective("rccl_custom_thing") == ("other", False)
