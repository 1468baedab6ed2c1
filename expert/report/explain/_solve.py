"""Where a derived fact crosses a value as one observed input moves (for what-if and counterfactuals)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ...derive.graph import derive
from ...derive.registry import DERIVATIONS
from ...errors import ExpertError
from ._shared import Value

if TYPE_CHECKING:
    from ...kb.knowledge import FactSpec, KnowledgeBase


def _numeric(spec: FactSpec | None) -> bool:
    return spec is not None and spec.type in ("fraction", "number", "integer")


def _numeric_inputs(kb: KnowledgeBase, name: str) -> list[str]:
    """Numeric observable facts a derived fact depends on (through any derivation), nearest and first-listed first."""
    out: list[str] = []
    queue, seen = [name], {name}
    while queue:
        current = queue.pop(0)
        for d in DERIVATIONS:
            if d.output != current:
                continue
            for inp in d.inputs:
                if inp in seen:
                    continue
                seen.add(inp)
                spec = kb.facts.get(inp)
                if spec is not None and spec.askable and _numeric(spec):
                    out.append(inp)
                if spec is None or spec.kind != "observed":
                    queue.append(inp)
    return out


class _Solver:
    """Where a derived fact crosses a value as one observed input moves, the others held (scan, then bisect)."""

    def __init__(self, kb: KnowledgeBase, observed: Mapping[str, Value], target: str, inp: str) -> None:
        self.kb, self.observed, self.target, self.inp = kb, dict(observed), target, inp
        self.spec = kb.facts[inp]
        x0 = observed.get(inp)
        self.x0 = float(x0) if isinstance(x0, (int, float)) else None
        self.samples = [(x, self.f(x)) for x in self._points()]

    def f(self, x: float) -> float | None:
        facts = {**self.observed, self.inp: round(x) if self.spec.type == "integer" else x}
        try:
            d = derive(facts, self.kb)
        except ExpertError:
            return None
        value = d.get(self.target)
        return value.value if value is not None else None

    def _domain(self) -> tuple[float, float]:
        if self.spec.type == "fraction":
            return 0.0, 1.0
        lo = self.spec.min if self.spec.min is not None else 0.0
        hi = min(self.spec.max if self.spec.max is not None else 1e24, 1e24)
        if self.spec.exclusive_min or lo <= 0:
            lo = max(lo, hi * 1e-30, 1e-12) if self.spec.type != "integer" else max(lo, 0.0)
        return lo, hi

    def _points(self) -> list[float]:
        lo, hi = self._domain()
        if self.spec.type == "fraction":
            points = [i / 40 for i in range(41)]
        else:
            start = self.x0 if self.x0 and self.x0 > 0 else math.sqrt(max(lo, 1e-12) * hi)
            points = [start * 2.0 ** k for k in range(-40, 41)]
            points += [lo, hi]
        if self.x0 is not None:
            points.append(self.x0)
        if self.spec.type == "integer":
            points = [float(round(p)) for p in points]
        return sorted({p for p in points if lo <= p <= hi})

    def boundaries(self, t: float) -> list[float]:
        """Input values at which the derived fact equals t (one per sign change of the scan)."""
        out: list[float] = []
        for (x1, f1), (x2, f2) in zip(self.samples, self.samples[1:], strict=False):
            if f1 is None or f2 is None or f1 == f2:
                continue
            if f1 == t:
                out.append(x1)
            elif (f1 - t) * (f2 - t) < 0:
                out.append(self._bisect(x1, f1, x2, t))
        return out

    def _bisect(self, a: float, fa: float, b: float, t: float) -> float:
        geometric = a > 0 and self.spec.type != "fraction"
        for _ in range(60):
            mid = math.sqrt(a * b) if geometric else (a + b) / 2
            fm = self.f(mid)
            if fm is None:
                break
            if (fa - t) * (fm - t) <= 0:
                b = mid
            else:
                a, fa = mid, fm
        return (a + b) / 2
