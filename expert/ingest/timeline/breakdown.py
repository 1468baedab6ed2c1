"""Where the GPU time of a window goes: per kernel class, kernel, launching operator (top_class_ops) and
`nn.Module:`, with FLOPs and bytes of the operators from their recorded shapes (arithmetic intensity, achieved
TFLOP/s, share of the roofline), GEMM precision, per-step times: the `TimeBreakdown`."""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...breakdown import ClassShare, Roofline, RoofSpec, StepTime, TimeBreakdown, TimeEntry, TraceWindow
from ..opflops import OpCost, OpCostModel
from .classes import Classifier
from .model import KIND_KERNEL, Timeline
from .operators import Nesting, OpIndex
from .roofline import Roof, RoofAcc, sig6

if TYPE_CHECKING:
    from ...kb.catalogs import TorchTypes
    from ...kb.knowledge import KernelCatalog


def _gemm_precision(names: list[str], cls: Classifier,
                    per_kernel: dict[int, list[float]]) -> tuple[float, float, dict[str, float]]:
    """GEMM kernel time, the part of it in kernels named as 16-bit or narrower tensor-core math, and that part by the
    format the names spell (knowledge_base/kernels.yaml `low_precision_gemm`, its `formats`)."""
    low = cls.low_precision
    gemm = lowp = 0.0
    by_format: dict[str, float] = {}
    for nm, (t, _, kind) in per_kernel.items():
        if cls.of(names, nm, int(kind)) != "gemm":
            continue
        gemm += t
        if cls.tf32 is not None and cls.tf32.search(names[nm]):
            continue  # TF32 math on fp32 tensors: not 16-bit (kernels.yaml tf32_gemm)
        if low is not None and low.search(names[nm]):
            lowp += t
            fmt = next((f for f, rx in cls.low_formats if rx.search(names[nm])), None)
            if fmt is not None:
                by_format[fmt] = by_format.get(fmt, 0.0) + t
    return gemm, lowp, by_format


def _fused_memory_bound_us(names: list[str], cls: Classifier, per_kernel: dict[int, list[float]]) -> float:
    """GPU time of the compiler-fused memory-bound kernels (kernels.yaml fused_memory_bound) in classes that are not
    memory-bound by nature themselves (those count whole)."""
    rx = cls.fused_memory_bound
    if rx is None:
        return 0.0
    return sum(t for nm, (t, _, kind) in per_kernel.items()
               if int(kind) == KIND_KERNEL and rx.search(names[nm])
               and not cls.memory_bound.get(cls.of(names, nm, KIND_KERNEL), False))


def _collectives_us(names: list[str], cls: Classifier, per_kernel: dict[int, list[float]]) -> dict[str, float]:
    """GPU time of the communication kernels per collective kind (kernels.yaml `collectives`), and under the key ""
    the part in data-parallel kinds (all-reduce, reduce-scatter, all-gather)."""
    out: dict[str, float] = {}
    for nm, (t, _, kind) in per_kernel.items():
        if int(kind) != KIND_KERNEL or cls.of(names, nm, KIND_KERNEL) != "communication":
            continue
        which, data_parallel = cls.collective(names[nm])
        out[which] = out.get(which, 0.0) + t
        if data_parallel:
            out[""] = out.get("", 0.0) + t
    return out


def breakdown(tl: Timeline, cls: Classifier, cat: KernelCatalog, roof: Roof | None, in_w: list[int],
              classes: list[str], source: str, window: TraceWindow | None, steps: Sequence[tuple[int, float, float]],
              devices: list[int], graph_launches: int,
              torch_types: TorchTypes | None = None) -> tuple[TimeBreakdown, dict[str, Any]]:
    """The TimeBreakdown of the activities `in_w` (their `classes`), and the facts behind top_class_ops and the
    applied optimizations. `torch_types`: the element types of operator inputs (the knowledge base's
    `units.torch_types()`; None: the bundled ones)."""
    names = tl.names
    model, sig_names, costs = _op_costs(tl, torch_types)
    ops = OpIndex(tl, costs)
    gpu_total = sum(tl.g_end[i] - tl.g_start[i] for i in in_w)
    per_class: dict[str, list[float]] = {}
    per_kernel: dict[int, list[float]] = {}  # name -> [time, count, kind]
    # per activity (columns, in the order of in_w): the operator that launched it, and the operator instance
    # whose FLOPs it carries (the launcher if costed, else its innermost costed ancestor)
    n_ops = len(tl.o_start)
    act_op = array("q")
    act_inst = array("q")
    inst_time = array("d", bytes(8 * n_ops))  # kernel time per instance
    children: dict[int, set[str]] = {}  # instance -> the launching operators inside it (when not itself)
    child_costs: dict[tuple[int, frozenset[str]], OpCost | None] = {}
    for i in in_w:
        act_op.append(ops.launcher(i))
    ops.prepare_claims(act_op)
    g_start, g_end, g_name, g_kind, o_name = tl.g_start, tl.g_end, tl.g_name, tl.g_kind, tl.o_name
    claim = ops.claim
    for k, i in enumerate(in_w):
        d = g_end[i] - g_start[i]
        c = classes[i]
        pc = per_class.get(c)
        if pc is None:
            pc = per_class[c] = [0.0, 0.0]
        pc[0] += d
        pc[1] += 1
        nm = g_name[i]
        pk = per_kernel.get(nm)
        if pk is None:
            pk = per_kernel[nm] = [0.0, 0.0, g_kind[i]]
        pk[0] += d
        pk[1] += 1
        op = act_op[k]
        inst = claim(op) if op >= 0 else -1
        act_inst.append(inst)
        if inst >= 0 and g_kind[i] == KIND_KERNEL:
            inst_time[inst] += d
            if inst != op:
                children.setdefault(inst, set()).add(names[o_name[op]])
    # distribute each instance's FLOPs/bytes over its kernels by duration
    groups: dict[int, RoofAcc] = {}  # operator name id -> accumulator
    kern_roof: dict[int, RoofAcc] = {}
    counted = 0
    seen = bytearray(n_ops)  # operator instances already counted in their group
    group_count: dict[int, int] = {}
    class_groups: dict[str, dict[int, float]] = {}
    tf32: dict[int, bool] = {}  # kernel name id -> runs TF32 math (a tf32 kernel under fp32 inputs)
    o_shape = tl.o_shape
    for k, i in enumerate(in_w):
        op, inst = act_op[k], act_inst[k]
        d = g_end[i] - g_start[i]
        c = classes[i]
        if op >= 0:
            who = inst if inst >= 0 else op
            group = o_name[who]
            g = groups.get(group)
            if g is None:
                g = groups[group] = RoofAcc()
            g.time += d
            g.cls[c] = g.cls.get(c, 0.0) + d
            if not seen[who]:
                seen[who] = 1
                group_count[group] = group_count.get(group, 0) + 1
            cg = class_groups.setdefault(c, {})
            cg[group] = cg.get(group, 0.0) + d
        if inst < 0 or g_kind[i] != KIND_KERNEL:
            continue
        group = o_name[inst]
        sid = o_shape[inst]
        cost = costs[sid] if sid >= 0 else None
        if cost is not None and inst in children:
            key = (sid, frozenset(children[inst]))
            if key not in child_costs:
                shapes = tl.shapes[sid]
                child_costs[key] = model.cost(sig_names[sid], shapes, key[1]) if shapes is not None else None
            cost = child_costs[key]
        if cost is None:
            continue
        dtype = cost.dtype
        nm = g_name[i]
        if dtype == "fp32":
            is_tf32 = tf32.get(nm)
            if is_tf32 is None:
                is_tf32 = tf32[nm] = cls.tf32 is not None and cls.tf32.search(names[nm]) is not None
            if is_tf32:
                dtype = "tf32"
        share = d / inst_time[inst] if inst_time[inst] > 0 else 0.0
        f, b = cost.flops * share, cost.bytes * share
        kr = kern_roof.get(nm)
        if kr is None:
            kr = kern_roof[nm] = RoofAcc()
        groups[group].add(f, b, d, dtype)
        kr.add(f, b, d, dtype)
        counted += 1
    modules = _modules(tl, in_w, act_op, gpu_total, cat.analysis.top_n)
    kernels = sum(1 for i in in_w if tl.g_kind[i] == KIND_KERNEL)
    return assemble(names, names, cls, cat, roof, gpu_total=gpu_total, kernels=kernels, per_class=per_class,
                    per_kernel=per_kernel, groups=groups, group_count=group_count, class_groups=class_groups,
                    kern_roof=kern_roof, counted=counted, modules=modules, source=source, window=window, steps=steps,
                    devices=devices, graph_launches=graph_launches)


def assemble(kernel_names: list[str], op_names: list[str], cls: Classifier, cat: KernelCatalog,
             roof: Roof | None, *, gpu_total: float, kernels: int, per_class: dict[str, list[float]],
             per_kernel: dict[int, list[float]], groups: dict[int, RoofAcc], group_count: dict[int, int],
             class_groups: dict[str, dict[int, float]], kern_roof: dict[int, RoofAcc], counted: int,
             modules: list[TimeEntry], source: str, window: TraceWindow | None,
             steps: Sequence[tuple[int, float, float]], devices: list[int],
             graph_launches: int) -> tuple[TimeBreakdown, dict[str, Any]]:
    """The TimeBreakdown from the window's sums (any reader's: the in-memory timeline's or a streaming sweep's):
    GPU time and count per class (`per_class`), per kernel name id (`per_kernel`: time, count, kind), per launching
    operator name id (`groups`, `group_count` instances, `class_groups` per class), FLOP/byte sums per kernel
    (`kern_roof`, from `counted` kernels); and the facts behind top_class_ops and the applied optimizations."""
    top_n = cat.analysis.top_n
    class_roof: dict[str, RoofAcc] = {}
    totals = RoofAcc()
    for nm, kr in kern_roof.items():  # a kernel name has one class: classes and totals sum their kernels
        c = cls.of(kernel_names, nm, int(per_kernel[nm][2]))
        cr = class_roof.get(c)
        if cr is None:
            cr = class_roof[c] = RoofAcc()
        cr.merge(kr)
        totals.merge(kr)
    class_list = [ClassShare(class_=c, gpu_time_s=sig6(t / 1e6), share=sig6(t / gpu_total if gpu_total else 0.0),
                             count=int(cnt), memory_bound_by_nature=cls.memory_bound.get(c, False),
                             **class_roof.get(c, RoofAcc()).roofline(roof))
                  for c, (t, cnt) in per_class.items()]
    order: dict[str, int] = {c.id: k for k, c in enumerate(cat.classes)}
    class_list.sort(key=lambda x: (-x.gpu_time_s, order.get(x.class_, 99)))
    fused_us = _fused_memory_bound_us(kernel_names, cls, per_kernel)
    memory_us = sum(t for c, (t, _) in per_class.items() if cls.memory_bound.get(c, False)) + fused_us
    memory_share = memory_us / gpu_total if class_list and gpu_total else None
    # the classes that may read weights or the KV cache, less the fused pointwise/reduction kernels among them
    weight_us = max(0.0, sum(t for c, (t, _) in per_class.items() if c in cls.reads_weights) - fused_us)
    top_kernels = [TimeEntry(name=kernel_names[nm], gpu_time_s=sig6(t / 1e6),
                             share=sig6(t / gpu_total if gpu_total else 0.0),
                             count=int(cnt), class_=cls.of(kernel_names, nm, int(kind)),
                             **kern_roof.get(nm, RoofAcc()).roofline(roof))
                   for nm, (t, cnt, kind) in sorted(per_kernel.items(), key=lambda kv: -kv[1][0])[:top_n]]
    top_ops = [TimeEntry(name=op_names[g], gpu_time_s=sig6(acc.time / 1e6),
                         share=sig6(acc.time / gpu_total if gpu_total else 0), count=group_count.get(g, 0),
                         class_=max(acc.cls, key=lambda c: acc.cls[c]), **acc.roofline(roof))
               for g, acc in sorted(groups.items(), key=lambda kv: -kv[1].time)[:top_n]]
    step_times = [StepTime(number=num, duration_s=sig6((e - s) / 1e6)) for num, s, e in steps]
    cv = None
    if len(step_times) >= 2:
        durs = [x.duration_s for x in step_times]
        mu = sum(durs) / len(durs)
        sd = math.sqrt(sum((x - mu) ** 2 for x in durs) / (len(durs) - 1))
        cv = sig6(sd / mu) if mu > 0 else None
    roof_spec = None
    if roof is not None and totals.flops > 0:
        dtype = totals.dominant_dtype()
        peak = roof.peak(dtype)
        if peak is not None and dtype is not None:
            roof_spec = RoofSpec(hardware=roof.hardware, dtype=dtype, peak_tflops=peak,
                                 peak_bandwidth_gbs=roof.bandwidth_gbs,
                                 ridge_flop_per_byte=sig6(peak * 1e12 / (roof.bandwidth_gbs * 1e9)))
    launched = sum(acc.time for acc in groups.values())
    coverage = sum(acc.ktime for acc in groups.values() if acc.flops > 0 or acc.bytes > 0)
    notes: list[str] = []
    if groups and counted == 0:
        notes.append("no launching operator has a FLOP/byte count from its shapes (record_shapes=True records "
                     "them)")
    if graph_launches:
        notes.append(f"{graph_launches} graph launches: the GPU replays captured CUDA/HIP graphs")
    if fused_us and gpu_total:
        notes.append(f"memory-bound by nature includes {fused_us / gpu_total:.0%} of GPU time in compiler-fused "
                     "pointwise and reduction kernels (kernels.yaml fused_memory_bound), whatever class holds them")
    fast = cls.fast_convolution
    above = _above_roof_note(class_list, top_kernels, top_ops, fast is not None and any(
        int(kind) == KIND_KERNEL and fast.search(kernel_names[nm]) for nm, (_, _, kind) in per_kernel.items()))
    if above is not None:
        notes.append(above)
    bd = TimeBreakdown(
        source=source, window=window or TraceWindow(start_us=0.0, end_us=0.0, reason=""), devices=devices,
        gpu_time_s=sig6(gpu_total / 1e6), kernels=kernels,
        classes=class_list, memory_bound_share=sig6(memory_share) if memory_share is not None else None,
        top_kernels=top_kernels, top_ops=top_ops, top_modules=modules, steps=step_times, step_time_cv=cv,
        graph_launches=graph_launches, roof=roof_spec,
        totals=Roofline(**totals.roofline(roof)) if totals.flops > 0 or totals.bytes > 0 else None,
        flops_coverage=sig6(coverage / launched) if launched else None, notes=notes)
    facts: dict[str, Any] = {"window_flops": totals.flops, "window_bytes": totals.bytes,
                             "dtype": totals.dominant_dtype() if totals.flops > 0 else None,
                             "_weight_share": sig6(weight_us / gpu_total) if class_list and gpu_total else None,
                             "_weight_classes": [c.id for c in cat.classes if c.reads_weights]}
    facts["_gemm_us"], facts["_low_precision_gemm_us"], facts["_gemm_format_us"] = _gemm_precision(
        kernel_names, cls, per_kernel)
    if cat.low_precision_gemm is not None:
        facts["_low_precision_min_share"] = cat.low_precision_gemm.min_share
    if cat.fused_memory_bound is not None:
        facts["_fused_memory_bound_us"], facts["_memory_bound_us"] = fused_us, memory_us
        facts["_fused_min_share"] = cat.fused_memory_bound.min_share
    if cat.collectives is not None:
        facts["_collectives_us"] = _collectives_us(kernel_names, cls, per_kernel)
    if class_list:
        top = class_list[0].class_
        ranked = sorted(class_groups.get(top, {}).items(), key=lambda kv: -kv[1])
        picked: list[str] = []
        covered = 0.0
        total_c = sum(t for _, t in ranked)
        for name_id, t in ranked[:3]:
            picked.append(op_names[name_id])
            covered += t
            if total_c and covered / total_c >= 0.6:
                break
        if picked:
            facts["top_class_ops"] = (picked[0] if len(picked) == 1 else
                                      ", ".join(picked[:-1]) + " and " + picked[-1])
    return bd, facts


def _op_costs(tl: Timeline, torch_types: TorchTypes | None) -> tuple[OpCostModel, list[str], list[OpCost | None]]:
    model = OpCostModel(torch_types)
    sig_names = [""] * len(tl.shapes)
    for i in range(len(tl.o_shape)):
        sid = tl.o_shape[i]
        if sid >= 0 and not sig_names[sid]:
            sig_names[sid] = tl.names[tl.o_name[i]]
    for sid, shapes in enumerate(tl.shapes):
        if shapes is not None and sig_names[sid]:
            model.learn(sig_names[sid], shapes)
    return model, sig_names, [model.cost(sig_names[sid], shapes) if shapes is not None and sig_names[sid]
                              else None for sid, shapes in enumerate(tl.shapes)]


def _modules(tl: Timeline, in_w: list[int], act_op: array[int], gpu_total: float, top_n: int) -> list[TimeEntry]:
    """GPU time by the innermost `nn.Module:` python function around each launching operator (module type)."""
    mods = [i for i in range(len(tl.s_start)) if tl.names[tl.s_name[i]].startswith("nn.Module: ")]
    if not mods:
        return []
    nest = Nesting(tl.s_start, tl.s_end, tl.s_thread, mods)
    per: dict[str, list[float]] = {}
    seen: dict[str, set[int]] = {}
    for k, i in enumerate(in_w):
        op = act_op[k]
        if op < 0:
            continue
        m = nest.innermost(tl.o_thread[op], tl.o_start[op], tl.o_end[op])
        if m < 0:
            continue
        label = re.sub(r"_\d+$", "", tl.names[tl.s_name[m]][len("nn.Module: "):])
        acc = per.setdefault(label, [0.0])
        acc[0] += tl.g_end[i] - tl.g_start[i]
        seen.setdefault(label, set()).add(m)
    return [TimeEntry(name=f"nn.Module: {label}", gpu_time_s=sig6(t[0] / 1e6),
                      share=sig6(t[0] / gpu_total if gpu_total else 0.0), count=len(seen[label]))
            for label, t in sorted(per.items(), key=lambda kv: -kv[1][0])[:top_n]]


def _above_roof_note(classes: list[ClassShare], kernels: list[TimeEntry], ops: list[TimeEntry],
                     fast_convolution: bool) -> str | None:
    """Why a class, kernel or operator shows more than 100 % of the roof, where one does: its FLOPs are the
    launching operator's count from its shapes (the direct algorithm), which a fast convolution algorithm
    (kernels.yaml fast_convolution, `fast_convolution`: one ran) beats."""
    parts = [f"class {c.class_} at {c.pct_of_roof:.0%}" for c in classes if (c.pct_of_roof or 0) > 1]
    for what, entries in (("top kernels", kernels), ("top operators", ops)):
        over = [e.pct_of_roof for e in entries if e.pct_of_roof is not None and e.pct_of_roof > 1]
        if over:
            parts.append(f"{len(over)} of the {what} (up to {max(over):.0%})")
    if not parts:
        return None
    if fast_convolution:
        reason = ("cuDNN ran Winograd or FFT convolution kernels, which do fewer multiply-adds than that count: read "
                  "these as effective FLOP/s, not as work above the hardware's peak")
    else:
        reason = "no kernel runs above the roof, so that count overstates the work these kernels did"
    return (f"above the roof: {', '.join(parts)}; FLOPs are counted from each launching operator's shapes (the "
            f"direct algorithm) and split over its kernels by GPU time; {reason}")
