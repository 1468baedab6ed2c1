"""Per-operator FLOPs and bytes from recorded shapes: every op kind against a hand calculation, and the kinds PyTorch
counts itself (with_flops) against PyTorch on a CPU trace generated here (tests/gen_traces/make_traces.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from expert.ingest.opflops import KNOWN_OPS, OpCostModel, OpShapes, causal_share

F4 = "float"
BF = "c10::BFloat16"


def cost(name: str, dims: list[Any], types: list[str], concrete: list[str] | None = None,
         model: OpCostModel | None = None, children: frozenset[str] = frozenset()) -> tuple[float, float, str | None]:
    found = (model or OpCostModel()).cost(name, OpShapes.of(dims, types, concrete), children)
    assert found is not None, name
    return found.flops, found.bytes, found.dtype


# ---- matrix multiplies: 2 FLOPs per multiply-add ------------------------------------------------------------------

def test_mm_and_addmm() -> None:
    # [64, 128] x [128, 32]: 2*64*128*32 FLOPs; bytes: A 64*128, B 128*32, C 64*32 floats
    assert cost("aten::mm", [[64, 128], [128, 32]], [F4, F4]) == (524288.0, (8192 + 4096 + 2048) * 4, "fp32")
    # the bias is read (32 floats) but its add is not counted, as PyTorch's with_flops does
    assert cost("aten::addmm", [[32], [64, 128], [128, 32], [], []], [F4, F4, F4, "Scalar", "Scalar"]) == (
        524288.0, (32 + 8192 + 4096 + 2048) * 4, "fp32")
    assert OpCostModel().cost("aten::mm", OpShapes.of([[64, 128], [64, 32]], [F4, F4])) is None  # k mismatch


def test_bmm_baddbmm_matmul_linear() -> None:
    assert cost("aten::bmm", [[4, 8, 16], [4, 16, 12]], [BF, BF]) == (
        2 * 4 * 8 * 16 * 12, (512 + 768 + 384) * 2, "bf16")
    assert cost("aten::baddbmm", [[4, 8, 12], [4, 8, 16], [4, 16, 12], [], []], [F4] * 3 + ["Scalar"] * 2)[0] == (
        2 * 4 * 8 * 16 * 12)
    # matmul broadcasts the batch: [2, 1, 8, 16] x [3, 16, 4] -> batch 2*3
    assert cost("aten::matmul", [[2, 1, 8, 16], [3, 16, 4]], [F4, F4])[0] == 2 * 6 * 8 * 16 * 4
    assert cost("aten::matmul", [[16], [16]], [F4, F4])[0] == 32  # dot
    assert cost("aten::matmul", [[8, 16], [16]], [F4, F4])[0] == 2 * 8 * 16  # matrix x vector
    # linear: [5, 7, 16] input rows 35, weight [32, 16]: 2*35*16*32; bytes input, weight, bias, output
    assert cost("aten::linear", [[5, 7, 16], [32, 16], [32]], [F4] * 3) == (
        2 * 35 * 16 * 32, (560 + 512 + 32 + 35 * 32) * 4, "fp32")
    assert cost("aten::mv", [[8, 16], [16]], [F4, F4])[0] == 256


# ---- convolutions -------------------------------------------------------------------------------------------------

CONV2D_TYPES = [F4, F4, F4, "ScalarList", "ScalarList", "ScalarList", "Scalar"]


def test_conv2d_strided_padded_grouped_dilated() -> None:
    # [2, 3, 17, 19] * [6, 3, 3, 3], stride 2, pad 1: out (17+2-2-1)//2+1 = 9, (19+2-2-1)//2+1 = 10
    flops, moved, _ = cost("aten::conv2d", [[2, 3, 17, 19], [6, 3, 3, 3], [6], [], [], [], []], CONV2D_TYPES,
                           ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"])
    assert flops == 2 * 2 * 6 * 9 * 10 * 3 * 9
    assert moved == (2 * 3 * 17 * 19 + 6 * 27 + 6 + 2 * 6 * 9 * 10) * 4
    # groups 2, dilation 2: weight [8, 2, 3, 3] is C_in/groups = 2; out (9 - 2*2 - 1) + 1 = 5
    assert cost("aten::conv2d", [[2, 4, 9, 9], [8, 2, 3, 3], [], [], [], [], []],
                [F4, F4, "", "ScalarList", "ScalarList", "ScalarList", "Scalar"],
                ["", "", "", "[1, 1]", "[0, 0]", "[2, 2]", "2"])[0] == 2 * 2 * 8 * 5 * 5 * 2 * 9
    # padding="same" at stride 1 keeps the size
    assert cost("aten::conv2d", [[1, 4, 8, 8], [4, 4, 3, 3], [], [], [], [], []],
                [F4, F4, "", "ScalarList", "String", "ScalarList", "Scalar"],
                ["", "", "", "[1, 1]", "same", "[1, 1]", "1"])[0] == 2 * 4 * 64 * 4 * 9


def test_cudnn_convolution_argument_order_and_transposed() -> None:
    # cudnn_convolution(self, weight, padding, stride, dilation, groups, ...): padding comes before stride
    assert cost("aten::cudnn_convolution", [[1, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], [], [], []],
                [F4, F4, "ScalarList", "ScalarList", "ScalarList", "Int", "Bool", "Bool", "Bool"],
                ["", "", "[0, 0]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"])[0] == 2 * 4 * 3 * 3 * 3 * 9
    # conv_transpose2d(input, weight[C_in, C_out/g, k, k], bias, stride, padding, output_padding, groups, dilation):
    # each input element scatters to C_out * 9 outputs; out (9-1)*2 - 2 + 2 + 0 + 1 = 17
    flops, moved, _ = cost("aten::conv_transpose2d", [[2, 4, 9, 9], [4, 3, 3, 3], [], [], [], [], [], []],
                           [F4, F4, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList"],
                           ["", "", "", "[2, 2]", "[1, 1]", "[0, 0]", "1", "[1, 1]"])
    assert flops == 2 * 2 * 4 * 81 * 3 * 9
    assert moved == (2 * 4 * 81 + 4 * 27 + 2 * 3 * 17 * 17) * 4


def test_old_traces_learn_the_output_shape_from_the_backward_op() -> None:
    # resnet50's first convolution, recorded without Concrete Inputs (PyTorch 1.8): no stride in the trace
    fwd = ([[32, 3, 224, 224], [64, 3, 7, 7], [], [], [], [], [], [], []],
           [F4, F4, "GenericList", "GenericList", "GenericList", "Int", "Bool", "Bool", "Bool"])
    assert OpCostModel().cost("aten::cudnn_convolution", OpShapes.of(*fwd)) is None
    model = OpCostModel()
    model.learn("aten::cudnn_convolution_backward", OpShapes.of(
        [[32, 3, 224, 224], [32, 64, 112, 112], [64, 3, 7, 7]], [F4] * 3))
    assert cost("aten::cudnn_convolution", *fwd, model=model)[0] == 2 * 32 * 64 * 112 * 112 * 3 * 49


def test_conv_backward_counts_one_forward_per_gradient() -> None:
    dims = [[32, 64, 56, 56], [32, 64, 56, 56], [64, 64, 3, 3]]
    fwd = 2 * (32 * 64 * 56 * 56) * 64 * 9
    # convolution_backward(grad_output, input, weight, ..., output_mask): [True, True, False] -> 2 forwards
    assert cost("aten::convolution_backward", [dims[0], dims[1], dims[2], [], [], [], [], [], [], [], []],
                [F4] * 3 + ["ScalarList"] * 8,
                ["", "", "", "[64]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[True, True, False]"])[0] \
        == 2 * fwd
    assert cost("aten::convolution_backward", [dims[0], dims[1], dims[2], [], [], [], [], [], [], [], []],
                [F4] * 3 + ["ScalarList"] * 8,
                ["", "", "", "[64]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[False, True, False]"])[0] \
        == fwd
    old = ([dims[1], dims[0], dims[2], [], [], [], [], [], [], [], []], [F4] * 3 + ["GenericList"] * 8)
    assert cost("aten::cudnn_convolution_backward", *old)[0] == 2 * fwd  # no mask recorded: both gradients
    # the first layer of a network computes only the weight gradient: its child ops say so
    assert cost("aten::cudnn_convolution_backward", *old,
                children=frozenset({"aten::cudnn_convolution_backward_weight"}))[0] == fwd


# ---- attention ----------------------------------------------------------------------------------------------------

SDPA_TYPES = [BF, BF, BF, "", "Scalar", "Scalar", "Scalar", "Scalar"]


def test_sdpa_counts_both_matmuls() -> None:
    # q [2, 4, 10, 8], k [2, 4, 12, 8], v [2, 4, 12, 6]: QK^T 2*8*10*12*8 and PV 2*8*10*12*6
    flops, moved, dtype = cost("aten::scaled_dot_product_attention",
                               [[2, 4, 10, 8], [2, 4, 12, 8], [2, 4, 12, 6], [], [], [], [], []], SDPA_TYPES,
                               ["", "", "", "", "0.", "False", "", "False"])
    assert flops == 2 * 8 * 10 * 12 * 8 + 2 * 8 * 10 * 12 * 6
    assert moved == (640 + 768 + 576 + 2 * 4 * 10 * 6) * 2 and dtype == "bf16"


def test_causal_masks_keep_the_lower_triangle() -> None:
    assert causal_share(4, 4) == pytest.approx(10 / 16)  # rows keep 1 + 2 + 3 + 4 of 16
    assert causal_share(2, 5) == pytest.approx(3 / 10)  # top-left aligned: rows keep 1 and 2 keys
    flops = cost("aten::_scaled_dot_product_flash_attention",
                 [[1, 2, 16, 64], [1, 2, 16, 64], [1, 2, 16, 64], [], [], [], []], [BF] * 3 + ["Scalar"] * 4,
                 ["", "", "", "0.", "True", "False", "0.125"])[0]
    assert flops == 4 * 2 * 16 * 16 * 64 * (136 / 256)


def test_flash_attention_layout_gqa_and_backward() -> None:
    # _flash_attention_forward takes [B, L, H, E]; grouped-query attention: 2 KV heads serve 8 query heads
    dims = [[1, 559, 8, 64], [1, 559, 2, 64], [1, 559, 2, 64]] + [[]] * 12
    types = [BF] * 3 + ["", ""] + ["Scalar"] * 6 + [""] * 4
    concrete = ["", "", "", "", "", "559", "559", "0.", "False", "False", "0.125", "", "", "", ""]
    fwd = cost("aten::_flash_attention_forward", dims, types, concrete)[0]
    assert fwd == 4 * 8 * 559 * 559 * 64
    back = cost("aten::_scaled_dot_product_flash_attention_backward",
                [[1, 8, 559, 64], [1, 8, 559, 64], [1, 2, 559, 64], [1, 2, 559, 64]] + [[]] * 11,
                [BF] * 4 + [""] * 11, [""] * 11 + ["False", "", "", ""])[0]
    assert back == 2 * fwd  # torch.utils.flop_counter: the backward pass is twice the forward


# ---- norms, softmax, elementwise, data movement -------------------------------------------------------------------

def test_norms() -> None:
    # layer norm with weight and bias: 5 FLOPs per element; bytes: in + out + weight + bias
    assert cost("aten::layer_norm", [[8, 16], [], [16], [16], [], []], [F4, "ScalarList", F4, F4, "Scalar", "Bool"]
                ) == (5 * 128, (2 * 128 + 32) * 4, "fp32")
    no_affine = cost("aten::native_layer_norm", [[8, 16], [], [], [], []], [F4, "ScalarList", "", "", "Scalar"])
    assert no_affine[0] == 4 * 128
    assert cost("aten::rms_norm", [[8, 16], [], [16], []], [BF, "ScalarList", BF, "Scalar"]) == (
        4 * 128, (2 * 128 + 16) * 2, "bf16")
    train = cost("aten::cudnn_batch_norm", [[4, 6, 5, 5], [6], [6], [6], [6], [], [], []],
                 [F4] * 5 + ["Bool", "Double", "Double"], ["", "", "", "", "", "True", "0.1", "1e-05"])
    assert train[0] == 5 * 600
    evaluation = cost("aten::cudnn_batch_norm", [[4, 6, 5, 5], [6], [6], [6], [6], [], [], []],
                      [F4] * 5 + ["Bool", "Double", "Double"], ["", "", "", "", "", "False", "0.1", "1e-05"])
    assert evaluation[0] == 2 * 600
    # backward: twice the training forward; reads input and gradient, writes the input gradient
    assert cost("aten::cudnn_batch_norm_backward", [[4, 6, 5, 5], [4, 6, 5, 5], [6], [6], [6], [6], [6], [], []],
                [F4] * 7 + ["Double", ""])[0] == 2 * 5 * 600


def test_softmax_elementwise_and_copies() -> None:
    assert cost("aten::_softmax", [[8, 16], [], []], [F4, "Int", "Bool"]) == (128, 2 * 128 * 4, "fp32")
    assert cost("aten::_softmax_backward_data", [[8, 16], [8, 16], [], []], [F4, F4, "Int", "Int"])[0] == 256
    # binary op broadcast: [8, 1] + [8, 16] -> 128 results; reads both operands, writes the result
    assert cost("aten::add", [[8, 1], [8, 16], []], [F4, F4, "Scalar"]) == (128, (8 + 128 + 128) * 4, "fp32")
    assert cost("aten::mul_", [[8, 16], []], [F4, "Scalar"]) == (128, 2 * 128 * 4, "fp32")  # in place
    # an out= tensor recorded after the operands (PyTorch 1.8 traces) is written, not read
    assert cost("aten::clamp_min", [[32, 64], [], [32, 64]], [F4, "Scalar", F4]) == (2048, 2 * 2048 * 4, "fp32")
    assert cost("aten::copy_", [[8, 16], [8, 16], []], [BF, F4, "Bool"]) == (0, 128 * 4 + 128 * 2, "bf16")
    assert cost("aten::fill_", [[8, 16], []], [F4, "Scalar"]) == (0, 128 * 4, "fp32")
    assert cost("aten::embedding", [[1000, 64], [4, 7], [], [], []], [BF, "long int", "Scalar", "Bool", "Bool"]) == (
        0, 2 * 28 * 64 * 2 + 28 * 8, "bf16")
    assert cost("aten::index_select", [[1000, 64], [], [10]], [F4, "Scalar", "long int"],
                ["", "0", ""]) == (0, 2 * 10 * 64 * 4 + 80, "fp32")
    assert cost("aten::mean", [[16, 559, 1024], [], [], []], [F4, "ScalarList", "Scalar", ""])[0] == 16 * 559 * 1024


def test_unknown_ops_and_broken_shapes_are_not_counted() -> None:
    model = OpCostModel()
    assert model.cost("aten::my_custom_op", OpShapes.of([[4, 4]], [F4])) is None
    assert model.cost("aten::mm", OpShapes.of([[4, 4]], [F4])) is None
    assert model.cost("aten::conv2d", OpShapes.of([[1, 2, 3], [1, 2, 3, 3]], [F4, F4])) is None
    assert model.cost("aten::add", OpShapes.of([[4, 3], [5, 3]], [F4, F4])) is None  # not broadcastable
    assert "aten::scaled_dot_product_attention" in KNOWN_OPS and "aten::layer_norm" in KNOWN_OPS


# ---- against PyTorch's own with_flops -----------------------------------------------------------------------------

SCRIPT = Path(__file__).parent / "gen_traces" / "make_traces.py"


@pytest.fixture(scope="module")
def ops_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch", reason="torch is not installed (pip install -e .[traces])")
    out = tmp_path_factory.mktemp("op_traces")
    subprocess.run([sys.executable, str(SCRIPT), str(out), "--steps", "2"], check=True, capture_output=True,
                   timeout=180)
    return out / "ops.json"


def test_every_op_pytorch_counts_matches_its_count(ops_trace: Path) -> None:
    counts = json.loads(ops_trace.with_suffix(".flops.json").read_text())
    events = {str(e["args"]["External id"]): e for e in json.loads(ops_trace.read_text())["traceEvents"]
              if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    model = OpCostModel()
    kinds: set[str] = set()
    assert len(counts) >= 15
    for ext, flops in counts.items():
        ev = events[ext]
        a = ev["args"]
        found = model.cost(ev["name"], OpShapes.of(a["Input Dims"], a["Input type"], a.get("Concrete Inputs")))
        assert found is not None and found.flops == flops, (ev["name"], a["Input Dims"], found, flops)
        kinds.add(ev["name"])
    assert {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::conv2d", "aten::add", "aten::mul"} <= kinds


def test_every_op_kind_of_the_generated_trace_is_costed(ops_trace: Path) -> None:
    """The operators PyTorch does not count (attention, norms, softmax, activations, transposed convolution) are
    costed too, by the formulas checked by hand above."""
    names: dict[str, Any] = {}
    for e in json.loads(ops_trace.read_text())["traceEvents"]:
        if e.get("cat") == "cpu_op":
            names.setdefault(e["name"], e["args"])  # the first call of each (the non-causal attention)
    model = OpCostModel()
    for name in ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_attention_math", "aten::layer_norm",
                 "aten::native_layer_norm", "aten::rms_norm", "aten::_softmax", "aten::relu", "aten::gelu",
                 "aten::conv_transpose2d", "aten::linear", "aten::matmul", "aten::native_batch_norm"):
        a = names.get(name)
        assert a is not None, f"{name} not in the generated trace"
        found = model.cost(name, OpShapes.of(a["Input Dims"], a["Input type"], a.get("Concrete Inputs")))
        assert found is not None and found.flops > 0 and found.bytes > 0, name
    sdpa = names["aten::scaled_dot_product_attention"]
    found = model.cost("aten::scaled_dot_product_attention",
                       OpShapes.of(sdpa["Input Dims"], sdpa["Input type"], sdpa.get("Concrete Inputs")))
    assert found is not None and found.flops == 2 * 8 * 10 * 12 * 8 + 2 * 8 * 10 * 12 * 6
