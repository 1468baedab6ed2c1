"""knowledge_base/kernels.yaml compiled for the timeline analysis: the class of each GPU activity (by name and kind)
and the roles of runtime call names (blocking, graph launch, launch, host copy).

Nsight Systems names CUDA runtime calls with the version of the API they were introduced in (`cudaLaunchKernel_v7000`,
`cudaStreamSynchronize_v3020`, `cudaStreamGetCaptureInfo_v2_v11030`) where Kineto writes `cudaLaunchKernel`: the role
of a call is judged on `api_name`, the name without that suffix, so both formats classify alike."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .model import KINDS

if TYPE_CHECKING:
    from ...kb.knowledge import KernelCatalog


_API_VERSION = re.compile(r"_v\d{4,}$")
"""nsys's runtime-API version suffix: the CUDA version as 1000 * major + 10 * minor (`_v3020` is CUDA 3.2). Only
4 digits or more: a driver API's `_v2` (`cuMemcpyDtoH_v2`, `cudaStreamGetCaptureInfo_v2`) is part of its name."""


def api_name(name: str) -> str:
    """A runtime call's name without Nsight Systems' API-version suffix: `cudaLaunchKernel_v7000` -> `cudaLaunchKernel`
    (names without one are returned as they are)."""
    return _API_VERSION.sub("", name) if "_v" in name else name


class Classifier:
    """knowledge_base/kernels.yaml compiled: a class per GPU activity name and kind, roles of runtime call names."""

    def __init__(self, catalog: KernelCatalog) -> None:
        self.catalog = catalog
        self.classes = [(c.id, {KINDS[a] for a in c.activities},
                         re.compile("|".join(f"(?:{p})" for p in c.patterns), re.IGNORECASE))
                        for c in catalog.classes]
        self.memory_bound: dict[str, bool] = {c.id: c.memory_bound_by_nature for c in catalog.classes}
        self.reads_weights: frozenset[str] = frozenset(c.id for c in catalog.classes if c.reads_weights)
        self.blocking = re.compile("|".join(f"(?:{p})" for p in catalog.calls.blocking.patterns))
        self.graph = re.compile("|".join(f"(?:{p})" for p in catalog.calls.graph_launch.patterns))
        self.launch = re.compile("|".join(f"(?:{p})" for p in catalog.calls.launch.patterns))
        copy = catalog.calls.host_copy
        self.host_copy = re.compile("|".join(f"(?:{p})" for p in copy.patterns)) if copy is not None else None
        free = catalog.calls.device_free
        self.device_free = re.compile("|".join(f"(?:{p})" for p in free.patterns)) if free is not None else None
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
        kinds = catalog.collectives.kinds if catalog.collectives is not None else []
        self.collectives = [(k.id, k.data_parallel, re.compile("|".join(f"(?:{p})" for p in k.patterns),
                                                               re.IGNORECASE)) for k in kinds]
        self._cache: dict[tuple[int, int], str] = {}

    def collective(self, name: str) -> tuple[str, bool]:
        """(kind, data-parallel) of a communication kernel's name (kernels.yaml `collectives`; ("other", False) when
        no kind matches)."""
        return next(((kind, dp) for kind, dp, rx in self.collectives if rx.search(name)), ("other", False))

    # the roles of runtime call names (operator names pass through api_name unchanged)
    def is_blocking(self, name: str) -> bool:
        """A call that blocks the host until the GPU catches up (synchronize, free, synchronous copy)."""
        return self.blocking.search(api_name(name)) is not None

    def is_graph_launch(self, name: str) -> bool:
        return self.graph.search(api_name(name)) is not None

    def is_host_copy(self, name: str) -> bool:
        """An operator or call that copies data between host and device (kernels.yaml calls.host_copy)."""
        return self.host_copy is not None and self.host_copy.search(api_name(name)) is not None

    def is_device_free(self, name: str) -> bool:
        """A call that returns device memory to the driver (kernels.yaml calls.device_free: cudaFree, hipFree)."""
        return self.device_free is not None and self.device_free.search(api_name(name)) is not None

    def is_launch_call(self, name: str) -> bool:
        """A call that puts work on a stream (kernels.yaml calls.launch, calls.graph_launch), other than a copy: the
        time the launching thread spends inside one while the GPU idles is launch overhead. A copy call
        (calls.host_copy: a cudaMemcpyAsync from pageable memory holds the thread while it stages the data) stays
        host work, the host copy it is."""
        base = api_name(name)
        if self.launch.search(base) is None and self.graph.search(base) is None:
            return False
        return self.host_copy is None or self.host_copy.search(base) is None

    def of(self, names: list[str], name: int, kind: int) -> str:
        key = (name, kind)
        found = self._cache.get(key)
        if found is None:
            text = names[name]
            found = next((cid for cid, kinds, rx in self.classes if kind in kinds and rx.search(text)), "other")
            self._cache[key] = found
        return found

