"""How emit_nvtx names its NVTX ranges, and which of them are operators.

`torch.autograd.profiler.emit_nvtx()` opens one range per RecordFunction scope, named after it and annotated:
`aten::mm, seq = 3, op_id = 5` (PyTorch's getNvtxStr: the name, then `, seq = N` and/or `, op_id = N`, then
`, sizes = [...]` with record_shapes). The dispatcher's operators are the scopes named `namespace::op`: ATen's
(`aten::copy_`) and those of extensions and custom ops (`flash_attn::_flash_attn_forward`, `c10d::alltoall_base_`,
`torchvision::nms`), which a Kineto trace records as CPU operators too. Other scopes stay host spans (Kineto's user
annotations and python functions): autograd functions (`FlashAttnFunc`), record_function scopes
(`FSDP::pre_forward (blocks.2...)`, `ProfilerStep#3`) and plain user ranges.
"""

from __future__ import annotations

import re

OPERATOR = "aten::"
"""ATen's operators: always operators, with or without emit_nvtx's annotation."""
MODULE = "nn.Module: "
_DISPATCHER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_.]*")
_ANNOTATION = (" seq = ", " op_id = ")


def is_operator_range(name: str) -> bool:
    """An NVTX range that is an operator: `aten::...`, or `namespace::op` carrying emit_nvtx's `, seq = N` or
    `, op_id = N` (a user's own `Foo::bar` range, without it, is a host span)."""
    if name.startswith(OPERATOR):
        return True
    head, comma, rest = name.partition(",")
    return bool(comma) and rest.startswith(_ANNOTATION) and _DISPATCHER.fullmatch(head) is not None


def sql_is_operator(name: object) -> int:
    """`is_operator_range` as the SQLite function dam_is_op (registered on every export's connection)."""
    return 1 if isinstance(name, str) and is_operator_range(name) else 0


def operator_sql(name: str) -> str:
    """The SQL test of `is_operator_range` on the name expression `name` (the prefix test first: most rows are
    ATen's, and it spares the Python call)."""
    return f"(substr({name}, 1, {len(OPERATOR)}) = '{OPERATOR}' OR dam_is_op({name}))"
