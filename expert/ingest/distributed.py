"""knowledge_base/distributed.yaml for the multi-rank analysis: kernel classes (communication, memory, not compute),
the CPU collective spans of the gloo backend, collective kinds with their bus factors, dtype sizes and the file-name
patterns that state a rank; validated and compiled once."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict

from .._resources import data_dir
from .._yaml import load_yaml


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KernelClasses(_Strict):
    communication: list[str]
    memory: list[str]
    not_compute: list[str]
    source: str


class CollectiveSpec(_Strict):
    id: str
    names: list[str]
    bus_factor: Literal["2(n-1)/n", "(n-1)/n", "1", "0"]


class DistributedCatalog(_Strict):
    """knowledge_base/distributed.yaml."""

    schema_version: Literal[1]
    kernel_classes: KernelClasses
    cpu_collective_prefixes: list[str]
    cpu_comm_ops: list[str]
    collectives: list[CollectiveSpec]
    collectives_source: str
    dtype_bytes: dict[str, int]
    rank_file_patterns: list[str]


@dataclass(frozen=True)
class Catalog:
    """The distributed catalog with its patterns compiled."""

    data: DistributedCatalog
    comm: re.Pattern[str]
    memory: re.Pattern[str]
    not_compute: re.Pattern[str]
    kinds: tuple[tuple[str, str], ...]  # (normalised name, collective id), longest name first
    factors: dict[str, str]
    dtype_bytes: dict[str, int]
    rank_patterns: tuple[re.Pattern[str], ...]

    def kind(self, name: str) -> str:
        """The collective id a collective or kernel name contains ("unknown" when none)."""
        flat = re.sub(r"[^a-z0-9]", "", name.lower())
        for pattern, kind in self.kinds:
            if pattern in flat:
                return kind
        return "unknown"

    def bus_factor(self, kind: str, n: int) -> float | None:
        """nccl-tests' busbw / algbw for a collective of `kind` over `n` ranks (None when unknown)."""
        shape = self.factors.get(kind)
        if shape is None or n < 1:
            return None
        return {"2(n-1)/n": 2 * (n - 1) / n, "(n-1)/n": (n - 1) / n, "1": 1.0, "0": 0.0}[shape]

    def element_bytes(self, dtype: object) -> int | None:
        return self.dtype_bytes.get(dtype.strip().lower()) if isinstance(dtype, str) else None

    def rank_from_name(self, name: str) -> int | None:
        """The rank a file name states (rank3.json, trace_rank-3.pt.trace.json), or None."""
        for pattern in self.rank_patterns:
            match = pattern.search(name)
            if match:
                return int(match.group(1))
        return None


@lru_cache(maxsize=1)
def catalog() -> Catalog:
    """The bundled knowledge_base/distributed.yaml, validated and compiled."""
    path = data_dir("knowledge_base") / "distributed.yaml"
    data = DistributedCatalog.model_validate(load_yaml(path))
    kinds = sorted(((n, c.id) for c in data.collectives for n in c.names), key=lambda p: (-len(p[0]), p[0]))
    classes = data.kernel_classes
    return Catalog(
        data=data, comm=re.compile("|".join(classes.communication)), memory=re.compile("|".join(classes.memory)),
        not_compute=re.compile("|".join(classes.not_compute)), kinds=tuple(kinds),
        factors={c.id: c.bus_factor for c in data.collectives},
        dtype_bytes={k.lower(): v for k, v in data.dtype_bytes.items()},
        rank_patterns=tuple(re.compile(p, re.IGNORECASE) for p in data.rank_file_patterns))
