"""knowledge_base/kernels.yaml compiled for the timeline analysis: the class of each GPU activity (by name and kind)
and the roles of runtime call names (blocking, graph launch, launch)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .model import KINDS

if TYPE_CHECKING:
    from ...kb.knowledge import KernelCatalog


class Classifier:
    """knowledge_base/kernels.yaml compiled: a class per GPU activity name and kind, roles of runtime call names."""

    def __init__(self, catalog: KernelCatalog) -> None:
        self.catalog = catalog
        self.classes = [(c.id, {KINDS[a] for a in c.activities},
                         re.compile("|".join(f"(?:{p})" for p in c.patterns), re.IGNORECASE))
                        for c in catalog.classes]
        self.memory_bound: dict[str, bool] = {c.id: c.memory_bound_by_nature for c in catalog.classes}
        self.blocking = re.compile("|".join(f"(?:{p})" for p in catalog.calls.blocking.patterns))
        self.graph = re.compile("|".join(f"(?:{p})" for p in catalog.calls.graph_launch.patterns))
        self.launch = re.compile("|".join(f"(?:{p})" for p in catalog.calls.launch.patterns))
        low = catalog.low_precision_gemm
        self.low_precision = re.compile("|".join(f"(?:{p})" for p in low.patterns), re.IGNORECASE) if low else None
        self.low_formats = [(fmt, re.compile("|".join(f"(?:{p})" for p in pats), re.IGNORECASE))
                            for fmt, pats in (low.formats if low else {}).items() if pats]
        fused = catalog.fused_memory_bound
        self.fused_memory_bound = (re.compile("|".join(f"(?:{p})" for p in fused.patterns), re.IGNORECASE)
                                   if fused else None)
        fast = catalog.fast_convolution
        self.fast_convolution = (re.compile("|".join(f"(?:{p})" for p in fast.patterns), re.IGNORECASE)
                                 if fast else None)
        tf32 = catalog.tf32_gemm
        self.tf32 = re.compile("|".join(f"(?:{p})" for p in tf32.patterns), re.IGNORECASE) if tf32 else None
        self._cache: dict[tuple[int, int], str] = {}

    def of(self, names: list[str], name: int, kind: int) -> str:
        key = (name, kind)
        found = self._cache.get(key)
        if found is None:
            text = names[name]
            found = next((cid for cid, kinds, rx in self.classes if kind in kinds and rx.search(text)), "other")
            self._cache[key] = found
        return found

