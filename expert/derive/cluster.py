"""Derivations at cluster scale (seed Table 6 and the C³ taxonomy): scaling efficiency, the communication term
(ring all-reduce bytes over the link), bus bandwidth, straggler waits, and coordination (checkpoint interval against
Young's and Daly's optimum, failures, restarts)."""

from __future__ import annotations

from collections.abc import Callable

from ..kb.knowledge import HardwareSpec, KnowledgeBase
from ..rules.model import Condition
from .derivation import (
    Derivation,
    Gate,
    Result,
    all_of,
    any_of,
    clamp_fraction,
    fact_test,
    hardware_of,
    num,
    num_or,
    required,
)
from .formulas import (
    Facts,
    comm_term,
    coordination_loss,
    daly_interval,
    exposed_comm,
    lost_share,
    ring_allreduce_bytes,
    scaling_efficiency,
    young_interval,
)

SEVERAL_GPUS = Gate("more than one GPU (one GPU has no all-reduce)", fact_test("num_gpus", ge=2))
SOME_COMM = Gate("the collectives take some of the step (comm_frac above 0)", fact_test("comm_frac", gt=0))
SOME_FAILURES = Gate("the job fails at all (no failures: no time between them)", fact_test("failures_per_day", gt=0))


def _own_links(kb: KnowledgeBase) -> Condition:
    """interconnect = nvlink (pcie) and hardware is one whose catalog entry gives its own NVLink (PCIe) link."""
    return any_of([all_of([fact_test("interconnect", eq=kind), fact_test(
        "hardware", **{"in": [hw.id for hw in kb.hardware.values() if _own_link(hw, kind) is not None]})])
        for kind in _HARDWARE_LINKS])


def _default_links(kb: KnowledgeBase) -> Condition:
    """interconnect is a link kind the interconnect catalog has a default entry for."""
    kinds = list(dict.fromkeys(i.kind for i in kb.interconnects.values() if i.default))
    return fact_test("interconnect", **{"in": kinds})


OWN_LINK = Gate("an NVLink or PCIe link the hardware catalog gives for this hardware", _own_links)
CATALOG_LINK = Gate("a link kind the interconnect catalog has a default for", _default_links)


def _scaling(value: float) -> Result:
    if value > 1.0:
        return Result(1.0, note=f"scaling efficiency came out at {value:.2f} (superlinear, e.g. per-GPU data now fits "
                      "in cache or memory); clamped to 1")
    return Result(max(0.0, value))


_HARDWARE_LINKS = {"nvlink": ("scale_up_link", "scale_up_gbs", "nvlink"),
                   "pcie": ("host_link", "host_link_gbs", "pcie")}


def _own_link(hw: HardwareSpec, kind: str) -> tuple[str, float] | None:
    """The hardware's own link of a kind (its name and bidirectional GB/s), if hardware.yaml gives one."""
    name_field, gbs_field, marker = _HARDWARE_LINKS[kind]
    name, total = getattr(hw, name_field), getattr(hw, gbs_field)
    if not name or total is None or marker not in str(name).casefold():
        return None
    return name, total


def _hardware_link(f: Facts, kb: KnowledgeBase) -> Result:
    """The hardware's own NVLink or PCIe figure (hardware.yaml quotes bidirectional totals; halved per direction)."""
    hw = hardware_of(f, kb)
    name, total = required(_own_link(hw, str(f["interconnect"])), f"a {f['interconnect']} link of {hw.id}")
    return Result(total / 2.0, {f"{hw.id} {name} (GB/s, bidirectional)": total, "source": hw.source})


def _parts_with_known_scale_up(kb: KnowledgeBase) -> Condition:
    """hardware is a part whose catalog entry gives no scale-up link, or gives its bandwidth."""
    return fact_test("hardware", **{"in": [hw.id for hw in kb.hardware.values()
                                           if hw.scale_up_link is None or hw.scale_up_gbs is not None]})


KNOWN_SCALE_UP = Gate("the hardware catalog says whether the part has a GPU-to-GPU link besides PCIe, and its speed",
                      _parts_with_known_scale_up)


def _scale_up(f: Facts, kb: KnowledgeBase) -> Result:
    """The part's own GPU-to-GPU link (NVLink, Infinity Fabric, ICI), bidirectional GB/s; 0 where it has none."""
    hw = hardware_of(f, kb)
    if hw.scale_up_link is None:
        return Result(0.0, {f"{hw.id} scale-up link": "none (hardware.yaml)", "source": hw.source})
    gbs = required(hw.scale_up_gbs, f"the scale-up bandwidth of {hw.id}")
    return Result(gbs, {f"{hw.id} {hw.scale_up_link} (GB/s, bidirectional)": gbs, "source": hw.source})


def _catalog_link(f: Facts, kb: KnowledgeBase) -> Result:
    link = required(kb.default_interconnect(str(f["interconnect"])), f"a default {f['interconnect']} link")
    return Result(link.per_direction_gbs, {f"{link.name} (GB/s per direction)": link.per_direction_gbs,
                                           "source": link.source}, link.notes)


def _faster_link(f: Facts, kb: KnowledgeBase) -> Result:
    """The fastest catalogued link of the interconnect kind's reach (interconnects.yaml `reach`) over today's."""
    kind = str(f["interconnect"])
    reach = next(i.reach for i in kb.interconnects.values() if i.kind == kind)
    best = max((i for i in kb.interconnects.values() if i.reach == reach), key=lambda i: i.per_direction_gbs)
    today = num(f, "interconnect_bandwidth")
    return Result(best.per_direction_gbs / today, {f"{best.name} (GB/s per direction)": best.per_direction_gbs,
                                                   "source": best.source})


def _reachable_links(kb: KnowledgeBase) -> Condition:
    """interconnect is a kind the interconnect catalog lists (so its reach, and the links of that reach, are known)."""
    return fact_test("interconnect", **{"in": sorted({i.kind for i in kb.interconnects.values()})})


REACHABLE_LINK = Gate("the interconnect catalog lists a link of the same reach (within a node, between nodes)",
                      _reachable_links)


def _mtbf_s(f: Facts) -> float:
    return num(f, "mtbf_h") * 3600.0


def _coordination(interval: str, with_restart: bool) -> Callable[[Facts, KnowledgeBase], Result]:
    def overhead(f: Facts, kb: KnowledgeBase) -> Result:
        restart = num(f, "restart_time_s") if with_restart else 0.0
        loss = coordination_loss(num(f, "checkpoint_write_s"), num(f, interval), _mtbf_s(f), restart)
        return Result(lost_share(loss), {"time lost per unit of useful time (x)": round(loss, 6)})

    return overhead


def _restart_share(f: Facts, kb: KnowledgeBase) -> Result:
    restart = num(f, "restart_time_s")
    loss = coordination_loss(num(f, "checkpoint_write_s"), num(f, "checkpoint_interval_s"), _mtbf_s(f), restart)
    return Result(restart / _mtbf_s(f) / (1.0 + loss), {"time lost per unit of useful time (x)": round(loss, 6)})


_ZERO_STAGES = ("Rajbhandari et al. 2020, ZeRO, arXiv:1910.02054, §5 and §7 (stage 3 partitions the parameters too "
                "and all-gathers them in forward and backward: 1.5x the communication of data parallelism, which "
                "stages 1 and 2 keep)")


_C3_SCALING = "seed C³ (C1 computation adds scaling-efficiency loss); scaling efficiency = per-GPU throughput N vs 1"
_C3_COMM = "seed Table 6 and C³ (C2 communication: the communication wall)"
_C3_COORD = "seed Table 6 (reliability wall, cluster MTBF) and C³ (C3 coordination)"
_NCCL = "NCCL ring all-reduce moves 2(N−1)/N × bytes per rank (nccl-tests doc/PERFORMANCE.md, bus bandwidth)"
_YOUNG = "Young 1974, CACM 17(9), https://doi.org/10.1145/361147.361115"
_DALY = "Daly 2006, FGCS 22, https://doi.org/10.1016/j.future.2004.11.016"

# cluster scale (seed Table 6, C³): computation, communication, coordination
_C3_KINDS = ("seed C³ (C2 communication) and Table 2 (async gradient sync overlaps the gradient all-reduce with "
             "backward); PyTorch DDP communication hooks act on gradient buckets, not on send/receive or all-to-all")

_LAYOUT = ("Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM, "
           "arXiv:2104.04473, §2 (n = p·t·d GPUs: pipeline, tensor and data parallel; the gradients are all-reduced "
           "across the d data-parallel replicas)")
ONE_REPLICA = Gate("one model replica spans every GPU (model_parallel_to_gpus at least 1)",
                   fact_test("model_parallel_to_gpus", ge=1))


def _replica_share(given: str, other: str) -> Callable[[Facts, KnowledgeBase], Result]:
    """`given` × `other` (1 when not known) / num_gpus."""
    def share(f: Facts, kb: KnowledgeBase) -> Result:
        return Result(num(f, given) * num_or(f, other, 1.0) / num(f, "num_gpus"))

    return share


GRADIENT_TRAFFIC = Gate("the collectives took some time and some gradient is all-reduced (one data-parallel replica "
                        "all-reduces none)",
                        all_of([fact_test("comm_time_s", gt=0), fact_test("allreduce_bytes", gt=0)]))


# a floor for the gradient all-reduce from the model's size, where the gradient bytes are not given: dense parameters
# (an expert's gradients are reduced among its own replicas only), a training job, more than one GPU
PARAM_GRADIENTS = Gate("a training job on several GPUs, its gradient bytes not given, every parameter dense (an "
                       "expert's gradients are all-reduced among its own replicas only)",
                       all_of([fact_test("workload", eq="training"), fact_test("num_gpus", ge=2),
                               fact_test("gradient_bytes", known=False),
                               any_of([fact_test("active_params", known=False),
                                       fact_test("compression_ratio", ge=1)])]))


def _param_allreduce_floor_share(f: Facts, kb: KnowledgeBase) -> Result:
    """The ring all-reduce of units.yaml `gradient_allreduce_bytes` per trained parameter (each model-parallel rank
    holds 1/(TP·PP) of them) over the data-parallel ranks, at full link speed, over the step time."""
    model_parallel = num_or(f, "model_parallel_to_gpus", 1.0 / num(f, "num_gpus")) * num(f, "num_gpus")  # TP · PP
    ranks = int(num_or(f, "data_parallel_size", num(f, "num_gpus") / model_parallel))
    if ranks < 2:
        return Result(0.0)
    trained = min(num_or(f, "trainable_params", num(f, "model_params")), num(f, "model_params"))
    grad_bytes = trained * kb.units.gradient_allreduce_bytes / model_parallel
    return Result(comm_term(ring_allreduce_bytes(grad_bytes, ranks), num(f, "interconnect_bandwidth"))
                  / num(f, "step_time_s"))


def _allreduce_bytes(f: Facts, kb: KnowledgeBase) -> Result:
    ranks = num_or(f, "data_parallel_size", num(f, "num_gpus"))
    return Result(ring_allreduce_bytes(num(f, "gradient_bytes"), int(ranks)))


# the parallel layout, before the all-reduce bytes (over the data-parallel ranks) and the accumulation steps read it
PARALLEL_LAYOUT: tuple[Derivation, ...] = (
    Derivation("model_parallel_to_gpus", ("tensor_parallel_size", "num_gpus"),
               "tensor_parallel_size × pipeline_parallel_size (1 when not given) / num_gpus", _LAYOUT,
               _replica_share("tensor_parallel_size", "pipeline_parallel_size"), optional=("pipeline_parallel_size",)),
    Derivation("model_parallel_to_gpus", ("pipeline_parallel_size", "num_gpus"),
               "pipeline_parallel_size × tensor_parallel_size (1 when not given) / num_gpus", _LAYOUT,
               _replica_share("pipeline_parallel_size", "tensor_parallel_size"), optional=("tensor_parallel_size",)),
    Derivation("data_parallel_size", ("model_parallel_to_gpus",),
               "1 where one model replica spans every GPU (model_parallel_to_gpus 1): nothing is data-parallel",
               _LAYOUT, lambda f, kb: Result(1), gate=ONE_REPLICA),
)

CLUSTER: tuple[Derivation, ...] = (
    Derivation("per_gpu_throughput", ("cluster_throughput", "num_gpus"), "cluster_throughput / num_gpus", _C3_SCALING,
               lambda f, kb: Result(num(f, "cluster_throughput") / num(f, "num_gpus"))),
    Derivation("scaling_efficiency", ("per_gpu_throughput", "single_gpu_throughput"),
               "per_gpu_throughput / single_gpu_throughput", _C3_SCALING,
               lambda f, kb: _scaling(scaling_efficiency(num(f, "per_gpu_throughput"),
                                                         num(f, "single_gpu_throughput")))),
    Derivation("scaling_efficiency", ("single_gpu_step_time_s", "step_time_s"),
               "single_gpu_step_time_s / step_time_s (weak scaling: same per-GPU batch)", _C3_SCALING,
               lambda f, kb: _scaling(num(f, "single_gpu_step_time_s") / num(f, "step_time_s"))),
    Derivation("effective_gpus", ("num_gpus", "scaling_efficiency"), "num_gpus × scaling_efficiency", _C3_SCALING,
               lambda f, kb: Result(num(f, "num_gpus") * num(f, "scaling_efficiency"))),
    Derivation("exposed_comm_s", ("comm_time_s", "comm_overlap_frac"), "comm_time_s × (1 − comm_overlap_frac)",
               _C3_COMM,
               lambda f, kb: Result(exposed_comm(num(f, "comm_time_s"), num(f, "comm_overlap_frac")))),
    Derivation("comm_frac", ("exposed_comm_s", "step_time_s"), "exposed_comm_s / step_time_s", _C3_COMM,
               lambda f, kb: clamp_fraction(num(f, "exposed_comm_s") / num(f, "step_time_s"),
                                             "exposed communication share")),
    Derivation("comm_kernel_frac", ("comm_time_s", "step_time_s"), "comm_time_s / step_time_s", _C3_COMM,
               lambda f, kb: clamp_fraction(num(f, "comm_time_s") / num(f, "step_time_s"),
                                            "communication kernels' share of the step")),
    Derivation("exposed_allreduce_frac", ("comm_frac", "allreduce_comm_share"), "comm_frac × allreduce_comm_share",
               _C3_KINDS, lambda f, kb: Result(num(f, "comm_frac") * num(f, "allreduce_comm_share"))),
    # without a trace's collective mix the exposed communication is taken as data-parallel collectives (what a
    # data-parallel job's collectives are; an inference service's gradient techniques are wasted by a rule)
    Derivation("exposed_allreduce_frac", ("comm_frac",),
               "comm_frac (the collectives' kinds not measured: all of it taken as data-parallel collectives)",
               _C3_KINDS, lambda f, kb: Result(num(f, "comm_frac"))),
    Derivation("interconnect_bandwidth", ("interconnect", "hardware"),
               "the hardware's own link (hardware.yaml, bidirectional total) / 2", "knowledge_base/hardware.yaml",
               _hardware_link, gate=OWN_LINK),
    Derivation("scale_up_link_gbs", ("hardware",),
               "the part's GPU-to-GPU link besides PCIe (hardware.yaml scale_up_gbs, bidirectional); 0 where the "
               "catalog gives it none", "knowledge_base/hardware.yaml (scale_up_link, scale_up_gbs)", _scale_up,
               gate=KNOWN_SCALE_UP),
    Derivation("interconnect_bandwidth", ("interconnect",), "catalog default per-direction bandwidth of the link kind",
               "knowledge_base/interconnects.yaml", _catalog_link, gate=CATALOG_LINK),
    Derivation("allreduce_bytes", ("gradient_bytes", "num_gpus"),
               "2(N − 1)/N × gradient_bytes (ring all-reduce over N = data_parallel_size, or num_gpus when not given: "
               "every GPU data-parallel, as in plain DDP or FSDP)", _NCCL, _allreduce_bytes,
               optional=("data_parallel_size",), gate=SEVERAL_GPUS),
    Derivation("faster_link_ratio", ("interconnect", "interconnect_bandwidth"),
               "the fastest catalogued link of the same reach (NVLink within a node; InfiniBand or Ethernet between "
               "nodes) / interconnect_bandwidth", "knowledge_base/interconnects.yaml (per-direction bandwidths)",
               _faster_link, gate=REACHABLE_LINK),
    Derivation("t_comm_s", ("allreduce_bytes", "interconnect_bandwidth"), "allreduce_bytes / interconnect_bandwidth",
               f"{_NCCL}; seed Table 6 (communication wall)",
               lambda f, kb: Result(comm_term(num(f, "allreduce_bytes"), num(f, "interconnect_bandwidth")))),
    Derivation("comm_term_share", ("t_comm_s", "step_time_s"), "t_comm_s / step_time_s", _C3_COMM,
               lambda f, kb: Result(num(f, "t_comm_s") / num(f, "step_time_s"))),
    Derivation("param_allreduce_floor_share", ("model_params", "num_gpus", "interconnect_bandwidth", "step_time_s"),
               "2(N − 1)/N × 2 B × trained parameters (trainable_params, else model_params) / (TP × PP) / "
               "interconnect_bandwidth / step_time_s, N = data_parallel_size (num_gpus / (TP × PP) when not given)",
               f"{_NCCL}; seed Table 6 (communication wall)", _param_allreduce_floor_share,
               optional=("trainable_params", "data_parallel_size", "model_parallel_to_gpus"),
               gate=PARAM_GRADIENTS),
    Derivation("bus_bandwidth", ("allreduce_bytes", "comm_time_s"), "allreduce_bytes / comm_time_s", _NCCL,
               lambda f, kb: Result(num(f, "allreduce_bytes") / num(f, "comm_time_s") / 1e9), gate=GRADIENT_TRAFFIC),
    Derivation("bus_bw_util", ("bus_bandwidth", "interconnect_bandwidth"), "bus_bandwidth / interconnect_bandwidth",
               _NCCL,
               lambda f, kb: clamp_fraction(num(f, "bus_bandwidth") / num(f, "interconnect_bandwidth"),
                                             "bus bandwidth utilization")),
    Derivation("nccl_bw_util", ("nccl_bus_bandwidth", "interconnect_bandwidth"),
               "nccl_bus_bandwidth / interconnect_bandwidth", _NCCL,
               lambda f, kb: Result(num(f, "nccl_bus_bandwidth") / num(f, "interconnect_bandwidth"))),
    Derivation("sync_wait_frac", ("sync_wait_s", "step_time_s"), "sync_wait_s / step_time_s", _C3_COORD,
               lambda f, kb: clamp_fraction(num(f, "sync_wait_s") / num(f, "step_time_s"), "straggler wait share")),
    Derivation("wait_share_of_comm", ("sync_wait_frac", "comm_frac"), "min(1, sync_wait_frac / comm_frac)",
               f"{_C3_COORD}; NCCL collectives finish only when the last rank joins, so a rank that arrives early "
               "waits inside the collective kernel (Holistic Trace Analysis, communication-computation overlap)",
               lambda f, kb: Result(min(1.0, num(f, "sync_wait_frac") / num(f, "comm_frac"))), gate=SOME_COMM),
    Derivation("mtbf_h", ("failures_per_day",), "24 h / failures_per_day", _C3_COORD,
               lambda f, kb: Result(24.0 / num(f, "failures_per_day")), gate=SOME_FAILURES),
    Derivation("mtbf_h", ("node_mtbf_h", "num_nodes"), "node_mtbf_h / num_nodes (independent node failures)", _C3_COORD,
               lambda f, kb: Result(num(f, "node_mtbf_h") / num(f, "num_nodes"))),
    Derivation("young_interval_s", ("checkpoint_write_s", "mtbf_h"), "√(2·δ·M), δ = checkpoint_write_s, M = mtbf_h",
               _YOUNG,
               lambda f, kb: Result(young_interval(num(f, "checkpoint_write_s"), _mtbf_s(f)))),
    Derivation("daly_interval_s", ("checkpoint_write_s", "mtbf_h"),
               "√(2δM)·[1 + ⅓·√(δ/2M) + (δ/2M)/9] − δ for δ < 2M, else M", _DALY,
               lambda f, kb: Result(daly_interval(num(f, "checkpoint_write_s"), _mtbf_s(f)))),
    Derivation("checkpoint_interval_ratio", ("checkpoint_interval_s", "daly_interval_s"),
               "checkpoint_interval_s / daly_interval_s", _DALY,
               lambda f, kb: Result(num(f, "checkpoint_interval_s") / num(f, "daly_interval_s"))),
    Derivation("checkpoint_write_frac", ("checkpoint_write_s", "checkpoint_interval_s"),
               "δ / (τ + δ) (failures not counted: rework and restarts lengthen the run, so the share is at most this)",
               f"{_YOUNG} (δ: the time a checkpoint blocks training, τ: the training time between two)",
               lambda f, kb: Result(num(f, "checkpoint_write_s")
                                    / (num(f, "checkpoint_interval_s") + num(f, "checkpoint_write_s")))),
    Derivation("coordination_overhead", ("checkpoint_write_s", "checkpoint_interval_s", "mtbf_h", "restart_time_s"),
               "x / (1 + x), x = δ/τ + τ/2M + R/M", f"{_YOUNG}; {_DALY}", _coordination("checkpoint_interval_s", True)),
    Derivation("coordination_overhead", ("checkpoint_write_s", "checkpoint_interval_s", "mtbf_h"),
               "x / (1 + x), x = δ/τ + τ/2M (restart time unknown)", f"{_YOUNG}; {_DALY}",
               _coordination("checkpoint_interval_s", False)),
    Derivation("optimal_coordination_overhead", ("checkpoint_write_s", "daly_interval_s", "mtbf_h", "restart_time_s"),
               "x / (1 + x), x = δ/τ* + τ*/2M + R/M at Daly's τ*", f"{_YOUNG}; {_DALY}",
               _coordination("daly_interval_s", True)),
    Derivation("optimal_coordination_overhead", ("checkpoint_write_s", "daly_interval_s", "mtbf_h"),
               "x / (1 + x), x = δ/τ* + τ*/2M at Daly's τ* (restart time unknown)", f"{_YOUNG}; {_DALY}",
               _coordination("daly_interval_s", False)),
    Derivation("optimal_checkpoint_overhead", ("checkpoint_write_s", "daly_interval_s", "mtbf_h"),
               "x / (1 + x), x = δ/τ* + τ*/2M at Daly's τ* (writes and rework only: restarts left out)",
               f"{_YOUNG}; {_DALY}", _coordination("daly_interval_s", False)),
    Derivation("restart_frac", ("restart_time_s", "mtbf_h", "checkpoint_write_s", "checkpoint_interval_s"),
               "(R/M) / (1 + x), x = δ/τ + τ/2M + R/M (the restarts' part of the wall time coordination loses)",
               f"{_YOUNG}; {_DALY}", _restart_share),
    Derivation("restart_frac", ("restart_time_s", "mtbf_h"),
               "R / (M + R) (every M hours of work, one restart of R; checkpoint figures unknown, so their rework is "
               "not counted)", f"{_YOUNG}; {_DALY}",
               lambda f, kb: Result(num(f, "restart_time_s") / (_mtbf_s(f) + num(f, "restart_time_s")))),
    Derivation("coordination_frac", ("coordination_overhead", "sync_wait_frac"),
               "coordination_overhead + sync_wait_frac (checkpoints and rework, plus straggler waits)", _C3_COORD,
               lambda f, kb: clamp_fraction(num(f, "coordination_overhead") + num(f, "sync_wait_frac"),
                                             "coordination share")),
    Derivation("coordination_frac", ("coordination_overhead",), "coordination_overhead (no straggler measured)",
               _C3_COORD, lambda f, kb: Result(num(f, "coordination_overhead"))),
    Derivation("coordination_frac", ("sync_wait_frac",), "sync_wait_frac (no checkpoint figures)", _C3_COORD,
               lambda f, kb: Result(num(f, "sync_wait_frac"))),
    Derivation("excess_coordination_overhead", ("coordination_overhead", "optimal_coordination_overhead"),
               "max(0, coordination_overhead − optimal_coordination_overhead)", _DALY,
               lambda f, kb: Result(max(0.0, num(f, "coordination_overhead")
                                        - num(f, "optimal_coordination_overhead")))),
)


_TENSOR_SPAN = ("Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU Clusters Using "
                "Megatron-LM, arXiv:2104.04473, §3.3 (takeaway #1: tensor model parallelism up to the GPUs of one "
                "server, pipeline parallelism across servers)")

_SHARDING_SPAN = ("Zhao et al. 2023, PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel, "
                  "arXiv:2304.11277 (hybrid sharding: shard within a node, replicate across nodes); Wang et al. 2023, "
                  "ZeRO++, arXiv:2306.10209 (hpZ: a secondary copy of the weights sharded within each node, so the "
                  "all-gathers stay inside it)")

# after gpus_per_node, which margins.CONSISTENCY_MARGINS derives from num_gpus and num_nodes
TOPOLOGY: tuple[Derivation, ...] = (
    Derivation("tensor_parallel_span", ("tensor_parallel_size", "gpus_per_node"),
               "tensor_parallel_size / gpus_per_node", _TENSOR_SPAN,
               lambda f, kb: Result(num(f, "tensor_parallel_size") / num(f, "gpus_per_node")),
               gate=Gate("every node holds a GPU (gpus_per_node at least 1)", fact_test("gpus_per_node", ge=1))),
    Derivation("sharding_span", ("sharding_degree", "gpus_per_node"), "sharding_degree / gpus_per_node",
               _SHARDING_SPAN, lambda f, kb: Result(num(f, "sharding_degree") / num(f, "gpus_per_node")),
               gate=Gate("every node holds a GPU (gpus_per_node at least 1)", fact_test("gpus_per_node", ge=1))),
    # the model states per GPU were they not sharded at all (every GPU a full copy, as DDP keeps them)
    Derivation("replicated_state_to_hbm", ("model_state_to_hbm", "sharding_degree"),
               "model_state_to_hbm · sharding_degree (the states unsharded: a full copy on every GPU)", _ZERO_STAGES,
               lambda f, kb: Result(num(f, "model_state_to_hbm") * num(f, "sharding_degree")),
               gate=Gate("the states are sharded (sharding_degree above 1)", fact_test("sharding_degree", gt=1))),
    # the model states per GPU were they sharded over one node's GPUs only (hybrid sharding): model_state_to_hbm
    # counts them over sharding_degree GPUs, sharding_span times as many as one node holds
    Derivation("node_sharded_state_to_hbm", ("model_state_to_hbm", "sharding_span"),
               "model_state_to_hbm · sharding_span (the states sharded over one node's GPUs)", _SHARDING_SPAN,
               lambda f, kb: Result(num(f, "model_state_to_hbm") * num(f, "sharding_span")),
               gate=Gate("the states are sharded over more than one node (sharding_span above 1)",
                         fact_test("sharding_span", gt=1))),
)
