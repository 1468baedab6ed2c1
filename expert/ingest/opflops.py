"""FLOPs and bytes of one operator from its recorded shapes (`record_shapes=True`: Input Dims, Input type, Concrete
Inputs), format-neutral: any trace that records operator names, input shapes and dtypes can use it.

Entry point::

    model = OpCostModel()
    for name, shapes in signatures:      # every distinct (operator, shapes) of the trace, once
        model.learn(name, shapes)        # backward ops teach the forward convolutions their output shapes
    cost = model.cost("aten::mm", OpShapes.of([[64, 128], [128, 32]], ["float", "float"]))
    cost.flops, cost.bytes, cost.dtype   # 524288.0, 57344.0, "fp32"

Conventions (each op kind is checked against a hand calculation in tests/test_opflops.py, and mm/addmm/bmm/baddbmm/
conv2d/add/mul against PyTorch's own `with_flops=True` counts):

- a multiply-add is 2 FLOPs: mm/addmm 2mkn, bmm/baddbmm 2bmkn, matmul and linear by their broadcast batch, as
  PyTorch's profiler counts them (the bias add of addmm is not counted, as there);
- convolution 2·N·C_out·prod(out)·(C_in/groups)·prod(k) (PyTorch's conv2d count); the output size comes from stride,
  padding and dilation when Concrete Inputs records them, otherwise from a backward op of the same trace that names
  the gradient of that output, otherwise it is unknown; the backward pass costs one forward per gradient computed
  (input and weight; both when the mask is not recorded);
- attention 2·B·H·L·S·(E + E_v) (QK^T and PV, torch.utils.flop_counter), times the share of the score matrix a
  causal mask keeps (top-left aligned, as SDPA's is_causal); the backward pass 2x the forward (flop_counter);
- layer/group norm 5 FLOPs per element with an affine weight (4 without), batch norm the same in training (2/1 in
  eval), RMS norm 4 (3), softmax 1, elementwise 1 per output element, reductions 1 per input element (DeepSpeed
  flops profiler conventions); their backward passes 2x the forward;
- copies, fills and gathers move bytes and do no FLOPs (concatenation is not counted: a TensorList records no
  dtype).

Bytes are the minimum traffic: every tensor operand read once and the result written once, at the recorded dtype.
Real kernels move at least this much, so an intensity computed from them is an upper bound (left of the ridge it is
decisive: the op is memory-bound).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from ..kb.catalogs import TorchTypes


@lru_cache(maxsize=1)
def bundled_torch_types() -> TorchTypes:
    """The bundled knowledge base's profiler `Input type` spellings (units.yaml `dtypes` and `element_types`), for
    shapes costed without a knowledge base of their own."""
    from ._kb import default_kb

    return default_kb().units.torch_types()


Shape = tuple[int, ...]


@dataclass(frozen=True)
class OpShapes:
    """The recorded inputs of one operator call: per input its dims, its type, and its concrete value if recorded."""

    dims: tuple[Any, ...]  # a shape (tuple of ints) per tensor input; a tuple of shapes for a TensorList; () else
    types: tuple[str, ...]
    concrete: tuple[str, ...] | None = None  # Kineto's Concrete Inputs ("[1, 1]", "True", "0.125", "" for tensors)
    # the element types by spelling (UnitTable.torch_types(); OpCostModel binds its own); None: the bundled ones
    torch_types: TorchTypes | None = field(default=None, compare=False, repr=False)

    def _types(self) -> TorchTypes:
        return self.torch_types if self.torch_types is not None else bundled_torch_types()

    @classmethod
    def of(cls, dims: Sequence[Any], types: Sequence[Any], concrete: Sequence[Any] | None = None) -> OpShapes:
        """Build from the JSON values a trace records (lists of ints, nested for tensor lists)."""
        def shape(d: Any) -> Any:
            if isinstance(d, (list, tuple)):
                if all(isinstance(x, int) and not isinstance(x, bool) for x in d):
                    return tuple(d)
                return tuple(shape(x) for x in d)
            return ()
        return cls(tuple(shape(d) for d in dims), tuple(str(t) for t in types),
                   tuple("" if c is None else str(c) for c in concrete) if concrete is not None else None)

    def tensor(self, i: int) -> Shape | None:
        """The shape of input i if it is a tensor (a 0-dim tensor is ()), else None."""
        if i >= len(self.types) or self.types[i] not in self._types() or i >= len(self.dims):
            return None
        d = self.dims[i]
        return d if all(isinstance(x, int) for x in d) else None

    def esize(self, i: int) -> int | float:
        """Bytes per element of input i (0 when its type is not a known tensor element type)."""
        known = self._types().get(self.types[i]) if i < len(self.types) else None
        return known[1] if known is not None else 0

    def dtype(self, i: int) -> str | None:
        known = self._types().get(self.types[i]) if i < len(self.types) else None
        return known[0] if known is not None else None

    def nbytes(self, i: int) -> float:
        shape = self.tensor(i)
        return float(numel(shape) * self.esize(i)) if shape is not None else 0.0

    def value(self, i: int) -> Any:
        """Input i's concrete value (int, float, bool, str or list), or None when not recorded."""
        if self.concrete is None or i >= len(self.concrete):
            return None
        return _parse(self.concrete[i])


@dataclass(frozen=True)
class OpCost:
    flops: float
    bytes: float
    dtype: str | None
    kind: str  # matmul, conv, attention, norm, softmax, elementwise, reduction, copy


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape) if shape else 1


def _parse(text: str) -> Any:
    t = text.strip()
    if not t:
        return None
    if t in ("True", "False"):
        return t == "True"
    if t.startswith("[") and t.endswith("]"):
        inner = t[1:-1].strip()
        if not inner:
            return []
        items = [_parse(x) for x in inner.split(",")]
        return items
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        return t


def _ints(value: Any, n: int) -> list[int] | None:
    """An int-list argument (stride, padding, ...) expanded to n spatial dims, or None when unknown."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return [value] * n
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value) * n if len(value) == 1 else (list(value) if len(value) == n else None)
    return None


def _broadcast(shapes: Sequence[Shape]) -> Shape | None:
    out: list[int] = []
    for shape in shapes:
        for k, d in enumerate(reversed(shape)):
            if k >= len(out):
                out.append(d)
            elif out[k] == 1:
                out[k] = d
            elif d not in (1, out[k]):
                return None
    return tuple(reversed(out))


# ---- matrix multiplies -------------------------------------------------------------------------------------------

def _mm(s: OpShapes, a: int, b: int, extra: Sequence[int] = ()) -> OpCost | None:
    x, y = s.tensor(a), s.tensor(b)
    if x is None or y is None or len(x) != 2 or len(y) != 2 or x[1] != y[0]:
        return None
    m, k, n = x[0], x[1], y[1]
    out = m * n * s.esize(a)
    return OpCost(2.0 * m * k * n, s.nbytes(a) + s.nbytes(b) + sum(s.nbytes(i) for i in extra) + out, s.dtype(a),
                  "matmul")


def _bmm(s: OpShapes, a: int, b: int, extra: Sequence[int] = ()) -> OpCost | None:
    x, y = s.tensor(a), s.tensor(b)
    if x is None or y is None or len(x) != 3 or len(y) != 3 or x[2] != y[1] or x[0] != y[0]:
        return None
    bt, m, k, n = x[0], x[1], x[2], y[2]
    out = bt * m * n * s.esize(a)
    return OpCost(2.0 * bt * m * k * n, s.nbytes(a) + s.nbytes(b) + sum(s.nbytes(i) for i in extra) + out,
                  s.dtype(a), "matmul")


def _matmul(s: OpShapes) -> OpCost | None:
    x, y = s.tensor(0), s.tensor(1)
    if x is None or y is None or not x or not y:
        return None
    if len(x) == 1 and len(y) == 1:
        if x[0] != y[0]:
            return None
        return OpCost(2.0 * x[0], s.nbytes(0) + s.nbytes(1) + s.esize(0), s.dtype(0), "matmul")
    xs = (1, *x) if len(x) == 1 else x
    ys = (*y, 1) if len(y) == 1 else y
    if xs[-1] != ys[-2]:
        return None
    batch = _broadcast([xs[:-2], ys[:-2]])
    if batch is None:
        return None
    m, k, n = xs[-2], xs[-1], ys[-1]
    b = numel(batch)
    out = b * (m if len(x) > 1 else 1) * (n if len(y) > 1 else 1) * s.esize(0)
    return OpCost(2.0 * b * m * k * n, s.nbytes(0) + s.nbytes(1) + out, s.dtype(0), "matmul")


def _linear(s: OpShapes) -> OpCost | None:
    x, w = s.tensor(0), s.tensor(1)
    if x is None or w is None or not x or len(w) != 2 or x[-1] != w[1]:
        return None
    rows = numel(x) // x[-1] if x[-1] else 0
    out = rows * w[0] * s.esize(0)
    return OpCost(2.0 * rows * w[1] * w[0], s.nbytes(0) + s.nbytes(1) + s.nbytes(2) + out, s.dtype(0), "matmul")


def _mv(s: OpShapes, a: int, v: int, extra: Sequence[int] = ()) -> OpCost | None:
    x, y = s.tensor(a), s.tensor(v)
    if x is None or y is None or len(x) != 2 or len(y) != 1 or x[1] != y[0]:
        return None
    return OpCost(2.0 * x[0] * x[1], s.nbytes(a) + s.nbytes(v) + sum(s.nbytes(i) for i in extra) + x[0] * s.esize(a),
                  s.dtype(a), "matmul")


def _dot(s: OpShapes) -> OpCost | None:
    x, y = s.tensor(0), s.tensor(1)
    if x is None or y is None or len(x) != 1 or x != y:
        return None
    return OpCost(2.0 * x[0], s.nbytes(0) + s.nbytes(1) + s.esize(0), s.dtype(0), "matmul")


# ---- convolutions ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _ConvArgs:
    stride: int | None
    padding: int | None
    dilation: int | None
    groups: int | None = None
    transposed: int | None = None  # index of the `transposed` flag (aten::convolution)
    output_padding: int | None = None
    bias: int | None = None
    always_transposed: bool = False


_CONV: dict[str, _ConvArgs] = {
    "aten::conv1d": _ConvArgs(3, 4, 5, 6, bias=2),
    "aten::conv2d": _ConvArgs(3, 4, 5, 6, bias=2),
    "aten::conv3d": _ConvArgs(3, 4, 5, 6, bias=2),
    "aten::convolution": _ConvArgs(3, 4, 5, 8, transposed=6, output_padding=7, bias=2),
    "aten::_convolution": _ConvArgs(3, 4, 5, 8, transposed=6, output_padding=7, bias=2),
    "aten::cudnn_convolution": _ConvArgs(3, 2, 4, 5),
    "aten::miopen_convolution": _ConvArgs(4, 3, 5, 6, bias=2),
    "aten::mkldnn_convolution": _ConvArgs(4, 3, 5, 6, bias=2),
    "aten::_slow_conv2d_forward": _ConvArgs(4, 5, None, None, bias=3),
    "aten::cudnn_convolution_transpose": _ConvArgs(4, 2, 5, 6, output_padding=3, always_transposed=True),
    "aten::conv_transpose1d": _ConvArgs(3, 4, 7, 6, output_padding=5, bias=2, always_transposed=True),
    "aten::conv_transpose2d": _ConvArgs(3, 4, 7, 6, output_padding=5, bias=2, always_transposed=True),
    "aten::conv_transpose3d": _ConvArgs(3, 4, 7, 6, output_padding=5, bias=2, always_transposed=True),
}
"""Argument positions (in the operator's schema) of stride, padding, dilation, groups, ... for each forward
convolution PyTorch records."""

_CONV_BACKWARD: dict[str, tuple[int, int, int, int | None, int | None]] = {
    # name: (grad_output, input, weight, output_mask, transposed flag)
    "aten::convolution_backward": (0, 1, 2, 10, 7),
    "aten::cudnn_convolution_backward": (1, 0, 2, 10, None),
    "aten::miopen_convolution_backward": (1, 0, 2, 9, None),
}


def _out_size(n_in: int, k: int, s: int, p: int, d: int) -> int:
    return (n_in + 2 * p - d * (k - 1) - 1) // s + 1


class OpCostModel:
    """Costs operators from their shapes; `learn` first from every signature of the trace (see the module doc)."""

    def __init__(self, torch_types: TorchTypes | None = None) -> None:
        """`torch_types`: the element types by profiler spelling, from the knowledge base the reader was given
        (`kb.units.torch_types()`); None: the bundled knowledge base's."""
        self._conv_out: dict[tuple[Shape, Shape], Shape | None] = {}
        self.torch_types = torch_types if torch_types is not None else bundled_torch_types()

    def _bind(self, shapes: OpShapes) -> OpShapes:
        """The shapes, reading their element types from this model's table."""
        return shapes if shapes.torch_types is self.torch_types else replace(shapes, torch_types=self.torch_types)

    def learn(self, name: str, shapes: OpShapes) -> None:
        """Remember the output shape of a convolution that a backward op reveals (grad_output has its shape)."""
        spec = _CONV_BACKWARD.get(name)
        if spec is None:
            return
        shapes = self._bind(shapes)
        g, i, w = (shapes.tensor(k) for k in spec[:3])
        if g is None or i is None or w is None or not i:
            return
        key = (i, w)
        if self._conv_out.get(key, g) != g:
            self._conv_out[key] = None  # two different outputs for the same input and weight: ambiguous
        else:
            self._conv_out[key] = g

    def cost(self, name: str, shapes: OpShapes, children: frozenset[str] = frozenset()) -> OpCost | None:
        """FLOPs and bytes of one call, or None when the op is not one this model knows or its shapes do not allow.

        `children`: the names of the operators inside this call that launched its kernels, when known; a
        convolution backward whose gradient mask is not recorded takes it from them (cuDNN's backward_input and
        backward_weight calls)."""
        shapes = self._bind(shapes)
        try:
            fn = _TABLE.get(name)
            if fn is not None:
                return fn(self, shapes)
            if name in _CONV:
                return self._conv(name, shapes)
            if name in _CONV_BACKWARD:
                return self._conv_backward(name, shapes, children)
            if name in _ATTENTION:
                return _attention(_ATTENTION[name], shapes)
        except (ValueError, TypeError, ZeroDivisionError, IndexError, OverflowError):
            return None  # shapes a trace got wrong (negative sizes, mismatched lists): not counted
        return None

    def _conv(self, name: str, s: OpShapes) -> OpCost | None:
        spec = _CONV[name]
        x, w = s.tensor(0), s.tensor(1)
        if x is None or w is None or len(x) < 3 or len(w) != len(x):
            return None
        n_sp = len(x) - 2
        transposed = spec.always_transposed
        if spec.transposed is not None:
            flag = s.value(spec.transposed)
            transposed = flag if isinstance(flag, bool) else False  # not recorded: a plain (forward) convolution
        kernel = w[2:]
        out_sp: Shape | None = None
        stride = _ints(s.value(spec.stride), n_sp) if spec.stride is not None else [1] * n_sp
        pad_value = s.value(spec.padding) if spec.padding is not None else 0
        dilation = _ints(s.value(spec.dilation), n_sp) if spec.dilation is not None else [1] * n_sp
        if name == "aten::_slow_conv2d_forward":
            kernel = tuple(_ints(s.value(2), n_sp) or kernel)
        if transposed:
            out_pad = _ints(s.value(spec.output_padding), n_sp) if spec.output_padding is not None else [0] * n_sp
            padding = _ints(pad_value, n_sp)
            if stride and padding and dilation and out_pad:
                out_sp = tuple((x[2 + i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (kernel[i] - 1)
                               + out_pad[i] + 1 for i in range(n_sp))
            groups = s.value(spec.groups) if spec.groups is not None else 1
            if out_sp is None or not isinstance(groups, int) or isinstance(groups, bool):
                return None
            flops = 2.0 * x[0] * x[1] * numel(x[2:]) * w[1] * numel(kernel)
            out = x[0] * w[1] * groups * numel(out_sp)
        else:
            if pad_value == "valid":
                pad_value = 0
            if pad_value == "same":
                out_sp = x[2:] if stride == [1] * n_sp else None
            else:
                padding = _ints(pad_value, n_sp)
                if stride and padding and dilation:
                    out_sp = tuple(_out_size(x[2 + i], kernel[i], stride[i], padding[i], dilation[i])
                                   for i in range(n_sp))
            if out_sp is None:
                learned = self._conv_out.get((x, w))
                out_sp = learned[2:] if learned is not None and len(learned) == len(x) else None
            if out_sp is None or any(o <= 0 for o in out_sp):
                return None
            flops = 2.0 * x[0] * w[0] * numel(out_sp) * w[1] * numel(kernel)
            out = x[0] * w[0] * numel(out_sp)
        bias = s.nbytes(spec.bias) if spec.bias is not None else 0.0
        return OpCost(flops, s.nbytes(0) + s.nbytes(1) + bias + out * s.esize(0), s.dtype(0), "conv")

    def _conv_backward(self, name: str, s: OpShapes, children: frozenset[str] = frozenset()) -> OpCost | None:
        gi, ii, wi, mask_at, transposed_at = _CONV_BACKWARD[name]
        g, x, w = s.tensor(gi), s.tensor(ii), s.tensor(wi)
        if g is None or x is None or w is None or len(w) < 3 or len(g) != len(w) or len(x) != len(w):
            return None
        transposed = s.value(transposed_at) is True if transposed_at is not None else False
        mask = s.value(mask_at) if mask_at is not None else None
        if not (isinstance(mask, list) and len(mask) >= 2 and all(isinstance(m, bool) for m in mask)):
            grads = [any(c.endswith("_backward_input") for c in children),
                     any(c.endswith("_backward_weight") for c in children)]
            mask = grads if any(grads) else [True, True]  # not recorded and no children seen: both gradients
        fwd = 2.0 * numel(x if transposed else g) * w[1] * numel(w[2:])
        gb, xb, wb = s.nbytes(gi), s.nbytes(ii), s.nbytes(wi)
        flops = fwd * (int(mask[0]) + int(mask[1]))
        moved = (gb + wb + xb) * int(mask[0]) + (gb + xb + wb) * int(mask[1])
        if not (mask[0] or mask[1]):
            return None
        return OpCost(flops, moved, s.dtype(gi), "conv")


# ---- attention ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Attn:
    q: int
    k: int
    v: int
    heads_second: bool  # [B, H, L, E] (SDPA) rather than [B, L, H, E] (flash/efficient internals)
    causal: int | None  # index of is_causal, or of custom_mask_type when mask_type
    backward: bool = False
    mask_type: bool = False


_ATTENTION: dict[str, _Attn] = {
    "aten::scaled_dot_product_attention": _Attn(0, 1, 2, True, 5),
    "aten::_scaled_dot_product_flash_attention": _Attn(0, 1, 2, True, 4),
    "aten::_scaled_dot_product_flash_attention_for_cpu": _Attn(0, 1, 2, True, 4),
    "aten::_scaled_dot_product_efficient_attention": _Attn(0, 1, 2, True, 6),
    "aten::_scaled_dot_product_cudnn_attention": _Attn(0, 1, 2, True, 6),
    "aten::_scaled_dot_product_attention_math": _Attn(0, 1, 2, True, 5),
    "aten::_flash_attention_forward": _Attn(0, 1, 2, False, 8),
    "aten::_efficient_attention_forward": _Attn(0, 1, 2, False, 9, mask_type=True),
    "aten::_scaled_dot_product_flash_attention_backward": _Attn(1, 2, 3, True, 11, backward=True),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": _Attn(1, 2, 3, True, 7, backward=True),
    "aten::_scaled_dot_product_efficient_attention_backward": _Attn(1, 2, 3, True, 11, backward=True),
    "aten::_scaled_dot_product_cudnn_attention_backward": _Attn(1, 2, 3, True, 14, backward=True),
    "aten::_flash_attention_backward": _Attn(1, 2, 3, False, 11, backward=True),
    "aten::_efficient_attention_backward": _Attn(1, 2, 3, False, 14, backward=True, mask_type=True),
}


def causal_share(q_len: int, k_len: int) -> float:
    """Share of the L x S score matrix a top-left-aligned causal mask keeps (SDPA is_causal: query i sees keys <= i)."""
    if q_len <= 0 or k_len <= 0:
        return 0.0
    full = min(q_len, k_len)  # rows 0..full-1 keep i+1 keys; the rest keep all S
    kept = full * (full + 1) / 2 + (q_len - full) * k_len
    return kept / (q_len * k_len)


def _attention(spec: _Attn, s: OpShapes) -> OpCost | None:
    q, k, v = s.tensor(spec.q), s.tensor(spec.k), s.tensor(spec.v)
    if q is None or k is None or v is None or len(q) != 4 or len(k) != 4 or len(v) != 4:
        return None
    if spec.heads_second:
        b, h, lq, e = q
        sk, ev = k[2], v[3]
    else:
        b, lq, h, e = q
        sk, ev = k[1], v[3]
    flops = 2.0 * b * h * lq * sk * e + 2.0 * b * h * lq * sk * ev
    flag = s.value(spec.causal) if spec.causal is not None else None
    causal = flag in (1, 2) if spec.mask_type else flag is True
    if causal:
        flops *= causal_share(lq, sk)
    out = b * h * lq * ev * s.esize(spec.q)
    moved = s.nbytes(spec.q) + s.nbytes(spec.k) + s.nbytes(spec.v) + out
    if spec.backward:
        flops *= 2.0
        moved = 2.0 * (s.nbytes(spec.q) + s.nbytes(spec.k) + s.nbytes(spec.v)) + 2.0 * out
    return OpCost(flops, moved, s.dtype(spec.q), "attention")


# ---- normalization, softmax, elementwise, reductions, data movement -----------------------------------------------

def _norm(affine: float, plain: float, x: int, weight: int, *, grad: int | None = None, training: int | None = None,
          always_eval: bool = False) -> Callable[[OpCostModel, OpShapes], OpCost | None]:
    """A normalization: `affine`/`plain` FLOPs per element with/without a weight (training; 2/1 in eval), the
    backward pass (`grad` given) 2x that. Bytes: the input read, the output written, weight and bias (the tensor
    after the weight in every schema listed) read; a backward pass reads the gradient too."""
    def cost(_: OpCostModel, s: OpShapes) -> OpCost | None:
        shape = s.tensor(x)
        if shape is None:
            return None
        has_weight = s.tensor(weight) is not None
        flag = s.value(training) if training is not None else None
        train = not always_eval and flag is not False  # not recorded: training, as in the traces of training steps
        per = (affine if has_weight else plain) if train else (2.0 if has_weight else 1.0)
        n = numel(shape)
        params = s.nbytes(weight) + s.nbytes(weight + 1)
        if grad is not None:
            return OpCost(2.0 * per * n, s.nbytes(x) + s.nbytes(grad) + n * s.esize(x) + 2.0 * params, s.dtype(x),
                          "norm")
        return OpCost(per * n, 2.0 * s.nbytes(x) + params, s.dtype(x), "norm")
    return cost


def _softmax(backward: bool = False) -> Callable[[OpCostModel, OpShapes], OpCost | None]:
    def cost(_: OpCostModel, s: OpShapes) -> OpCost | None:
        x = s.tensor(0)
        if x is None:
            return None
        n = numel(x)
        if backward:
            return OpCost(2.0 * n, 3.0 * s.nbytes(0), s.dtype(0), "softmax")
        return OpCost(float(n), 2.0 * s.nbytes(0), s.dtype(0), "softmax")
    return cost


def _elementwise(flops_per: float, *, arity: int = 2, inplace: bool = False, write_only: bool = False,
                 kind: str = "elementwise") -> Callable[[OpCostModel, OpShapes], OpCost | None]:
    """`arity` tensors are read (the schema's tensor inputs); tensors recorded after them are `out=` arguments,
    written, not read. The result has the broadcast shape (self's shape when in place)."""
    def cost(_: OpCostModel, s: OpShapes) -> OpCost | None:
        tensors = [(i, t) for i in range(len(s.types)) if (t := s.tensor(i)) is not None]
        if not tensors:
            return None
        read = tensors[:arity]
        shape = s.tensor(0) if inplace else _broadcast([t for _, t in read])
        if shape is None:
            return None
        n = numel(shape)
        out = n * s.esize(read[0][0])
        if write_only:
            return OpCost(0.0, float(out), s.dtype(read[0][0]), kind)
        reads = sum(s.nbytes(i) for i, _ in read if not (inplace and i == 0 and kind == "copy"))
        return OpCost(float(flops_per * n), reads + out, s.dtype(read[0][0]), kind)
    return cost


def _reduction(_: OpCostModel, s: OpShapes) -> OpCost | None:
    x = s.tensor(0)
    if x is None:
        return None
    return OpCost(float(numel(x)), s.nbytes(0), s.dtype(0), "reduction")


def _embedding(_: OpCostModel, s: OpShapes) -> OpCost | None:
    w, idx = s.tensor(0), s.tensor(1)
    if w is None or idx is None or len(w) != 2:
        return None
    rows = numel(idx)
    out = rows * w[1] * s.esize(0)
    return OpCost(0.0, 2.0 * out + s.nbytes(1), s.dtype(0), "copy")


def _index_select(_: OpCostModel, s: OpShapes) -> OpCost | None:
    x, idx = s.tensor(0), s.tensor(2)
    dim = s.value(1)
    if x is None or idx is None or not x or not isinstance(dim, int) or isinstance(dim, bool):
        return None
    d = dim % len(x)
    out = numel(x) // x[d] * numel(idx) * s.esize(0) if x[d] else 0
    return OpCost(0.0, 2.0 * out + s.nbytes(2), s.dtype(0), "copy")


def _method(fn: Callable[[OpShapes], OpCost | None]) -> Callable[[OpCostModel, OpShapes], OpCost | None]:
    return lambda _, s: fn(s)


_TABLE: dict[str, Callable[[OpCostModel, OpShapes], OpCost | None]] = {
    "aten::mm": _method(lambda s: _mm(s, 0, 1)),
    "aten::addmm": _method(lambda s: _mm(s, 1, 2, extra=(0,))),
    "aten::_scaled_mm": _method(lambda s: _mm(s, 0, 1)),
    "aten::bmm": _method(lambda s: _bmm(s, 0, 1)),
    "aten::baddbmm": _method(lambda s: _bmm(s, 1, 2, extra=(0,))),
    "aten::matmul": _method(_matmul),
    "aten::linear": _method(_linear),
    "aten::mv": _method(lambda s: _mv(s, 0, 1)),
    "aten::addmv": _method(lambda s: _mv(s, 1, 2, extra=(0,))),
    "aten::dot": _method(_dot),
    "aten::layer_norm": _norm(5, 4, 0, 2),
    "aten::native_layer_norm": _norm(5, 4, 0, 2),
    "aten::native_layer_norm_backward": _norm(5, 4, 1, 5, grad=0),
    "aten::group_norm": _norm(5, 4, 0, 2),
    "aten::native_group_norm": _norm(5, 4, 0, 1),
    "aten::native_group_norm_backward": _norm(5, 4, 1, 4, grad=0),
    "aten::rms_norm": _norm(4, 3, 0, 2),
    "aten::_fused_rms_norm": _norm(4, 3, 0, 2),
    "aten::_fused_rms_norm_backward": _norm(4, 3, 1, 4, grad=0),
    "aten::batch_norm": _norm(5, 4, 0, 1, training=5),
    "aten::native_batch_norm": _norm(5, 4, 0, 1, training=5),
    "aten::_native_batch_norm_legit": _norm(5, 4, 0, 1, training=5),
    "aten::_native_batch_norm_legit_no_training": _norm(5, 4, 0, 1, always_eval=True),
    "aten::cudnn_batch_norm": _norm(5, 4, 0, 1, training=5),
    "aten::miopen_batch_norm": _norm(5, 4, 0, 1, training=5),
    "aten::_batch_norm_impl_index": _norm(5, 4, 0, 1, training=5),
    "aten::native_batch_norm_backward": _norm(5, 4, 1, 2, grad=0, training=7),
    "aten::cudnn_batch_norm_backward": _norm(5, 4, 0, 2, grad=1),
    "aten::miopen_batch_norm_backward": _norm(5, 4, 0, 2, grad=1),
    "aten::softmax": _softmax(),
    "aten::_softmax": _softmax(),
    "aten::_safe_softmax": _softmax(),
    "aten::log_softmax": _softmax(),
    "aten::_log_softmax": _softmax(),
    "aten::_softmax_backward_data": _softmax(backward=True),
    "aten::_log_softmax_backward_data": _softmax(backward=True),
    "aten::embedding": _embedding,
    "aten::index_select": _index_select,
    "aten::copy_": _elementwise(0, inplace=True, kind="copy"),
    "aten::clone": _elementwise(0, arity=1, kind="copy"),
    "aten::fill_": _elementwise(0, arity=1, inplace=True, write_only=True, kind="copy"),
    "aten::zero_": _elementwise(0, arity=1, inplace=True, write_only=True, kind="copy"),
    "aten::mean": _reduction,
    "aten::sum": _reduction,
    "aten::amax": _reduction,
    "aten::amin": _reduction,
    "aten::norm": _reduction,
    "aten::linalg_vector_norm": _reduction,
    "aten::argmax": _reduction,
    "aten::max": _reduction,
    "aten::min": _reduction,
    "aten::var_mean": _reduction,
    "aten::std": _reduction,
    "aten::var": _reduction,
}

_UNARY = (
    "neg", "reciprocal", "abs", "clamp", "clamp_min", "clamp_max", "threshold", "relu", "sigmoid", "tanh", "exp", "log",
    "sqrt", "rsqrt", "square", "silu", "gelu", "sin", "cos", "hardtanh", "leaky_relu", "elu", "softplus", "erf", "sign",
    "floor", "round", "logical_not", "hardswish", "mish",
)
_BINARY = (
    "add", "sub", "rsub", "mul", "div", "maximum", "minimum", "pow", "eq", "ne", "lt", "gt", "le", "ge", "masked_fill",
    "bitwise_and", "threshold_backward", "sigmoid_backward", "tanh_backward", "silu_backward", "gelu_backward",
)
_TERNARY = ("where", "addcmul", "addcdiv", "lerp")
for _names, _arity in ((_UNARY, 1), (_BINARY, 2), (_TERNARY, 3)):
    for _base in _names:
        _TABLE.setdefault(f"aten::{_base}", _elementwise(1, arity=_arity))
        _TABLE.setdefault(f"aten::{_base}_", _elementwise(1, arity=_arity, inplace=True))

KNOWN_OPS = frozenset([*_TABLE, *_CONV, *_CONV_BACKWARD, *_ATTENTION])
"""Every operator name the model can cost."""
