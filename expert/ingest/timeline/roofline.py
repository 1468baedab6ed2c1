"""The roofline of the traced device (`Roof`) and the FLOP/byte accumulators of operators, kernels and classes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...kb.knowledge import KnowledgeBase


@dataclass(frozen=True)
class Roof:
    """The traced device's roofline: dense peak TFLOP/s per dtype (None where the part has none) and bandwidth."""

    hardware: str
    peak_tflops: dict[str, float | None]
    bandwidth_gbs: float

    def peak(self, dtype: str | None) -> float | None:
        if dtype is None:
            return None
        key = {"uint8": "int8", "int8": "int8"}.get(dtype, dtype)
        value = self.peak_tflops.get(key)
        return float(value) if value else None

    def pct(self, flops: float, moved: float, seconds: float, dtype: str | None) -> float | None:
        """Achieved over attainable: bytes/s over bandwidth left of the ridge, FLOP/s over peak right of it."""
        peak = self.peak(dtype)
        if peak is None or seconds <= 0 or moved <= 0:
            return None
        ridge = peak * 1e12 / (self.bandwidth_gbs * 1e9)
        if flops / moved <= ridge:
            return moved / seconds / (self.bandwidth_gbs * 1e9)
        return flops / seconds / (peak * 1e12)


def roof_of(kb: KnowledgeBase, measured: Mapping[str, Any]) -> Roof | None:
    """The roof of the part the trace measured (fact `hardware`), from the hardware catalog; None for a part not in
    the catalog or one without a published memory bandwidth (no roof without it)."""
    m = measured.get("hardware")
    hw = kb.hardware.get(str(m.value)) if m is not None else None
    if hw is None or hw.memory_bandwidth_gbs is None:
        return None
    return Roof(hardware=hw.id, peak_tflops={str(k): v for k, v in hw.peak_tflops.items()},
                bandwidth_gbs=hw.memory_bandwidth_gbs)



def sig6(x: float) -> float:
    """Six significant digits: readable, and exact through JSON."""
    return float(f"{x:.6g}")


@dataclass
class RoofAcc:
    time: float = 0.0  # all GPU time
    ktime: float = 0.0  # kernel time that carries FLOPs/bytes
    flops: float = 0.0
    bytes: float = 0.0
    cls: dict[str, float] = field(default_factory=dict)
    dtypes: dict[str, float] = field(default_factory=dict)  # dtype -> flops (bytes when no flops)

    def add(self, f: float, b: float, d: float, dtype: str | None) -> None:
        self.flops += f
        self.bytes += b
        self.ktime += d
        if dtype is not None:
            self.dtypes[dtype] = self.dtypes.get(dtype, 0.0) + (f or b)

    def merge(self, other: RoofAcc) -> None:
        self.flops += other.flops
        self.bytes += other.bytes
        self.ktime += other.ktime
        for k, v in other.dtypes.items():
            self.dtypes[k] = self.dtypes.get(k, 0.0) + v

    def dominant_dtype(self) -> str | None:
        return max(self.dtypes, key=lambda k: self.dtypes[k]) if self.dtypes else None

    def roofline(self, roof: Roof | None) -> dict[str, Any]:
        if self.flops <= 0 and self.bytes <= 0:
            return {}
        seconds = self.ktime / 1e6
        out: dict[str, Any] = {"flops": sig6(self.flops), "bytes": sig6(self.bytes),
                               "arithmetic_intensity": sig6(self.flops / self.bytes) if self.bytes > 0 else None,
                               "achieved_tflops": sig6(self.flops / seconds / 1e12) if seconds > 0 else None}
        dtype = self.dominant_dtype()
        if roof is not None:
            pct = roof.pct(self.flops, self.bytes, seconds, dtype)
            out["pct_of_roof"] = sig6(pct) if pct is not None else None
        if dtype is not None and "dtype" not in out:
            out["dtype"] = dtype
        return out

