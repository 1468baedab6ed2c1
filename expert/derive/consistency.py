"""Consistency margins: pure functions over pairs of facts that physically must agree.

Each returns a number whose sign or size says whether two readings of the same quantity (or a reading and the
physical limit it cannot exceed) agree. The thresholds that call a margin a conflict live in rules/conflicts.yaml;
`expert.derive.registry` declares which facts feed which margin.
"""

from __future__ import annotations


def ratio_of_readings(reading: float, reference: float) -> float:
    """One reading over another of the same quantity (1.0: they agree). MFU 0.40 against achieved/peak 0.20: 2.0."""
    return reading / reference


def bytes_bandwidth_util(bytes_moved: float, step_time_s: float, peak_bandwidth_gbs: float) -> float:
    """Bandwidth utilization implied by the bytes a step moves: bytes / step time / peak (40 GB in 20 ms on
    3,350 GB/s: 40e9 / 0.02 / 3.35e12 = 0.597)."""
    return bytes_moved / step_time_s / (peak_bandwidth_gbs * 1e9)


def busy_idle_excess(gpu_util: float, idle_frac: float) -> float:
    """gpu_util + idle share − 1: the share of time two readings claim both busy and idle (0.99 busy, 0.60 idle:
    0.59). A kernel running and no kernel running exclude each other, so a consistent pair gives at most ≈ 0."""
    return gpu_util + idle_frac - 1.0


def excess(upper: float, lower: float) -> float:
    """How far a share that must not exceed another does exceed it: upper − lower (tensor pipe 0.85 active, SMs
    0.60 active: 0.25; a data wait of 40 % of the step with the GPU idle 10 %: 0.30)."""
    return upper - lower


def per_node(count: float, nodes: float) -> float:
    """GPUs per node: num_gpus / num_nodes (64 GPUs on 8 nodes: 8.0; below 1, some node holds no GPU)."""
    return count / nodes
