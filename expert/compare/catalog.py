"""knowledge_base/compare.yaml: when a fact moved beyond its noise, and which facts each optimization moves.

Loaded once per knowledge base and checked against it (fact names, optimization ids), so a typo in the data is a
KnowledgeBaseError naming the entry, not a comparison that silently never matches.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .._yaml import load_yaml, validate
from ..errors import KnowledgeBaseError, Problem
from ..kb.knowledge import KnowledgeBase

FILE = "compare.yaml"
Direction = Literal["up", "down", "changed"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Significance(_Strict):
    z: float = Field(gt=0)
    relative: float = Field(gt=0)
    relative_source: str
    fraction_points: float = Field(ge=0)
    fraction_points_source: str
    spread: dict[str, list[str]]
    settings: list[str]

    def spread_facts(self, fmt: str) -> frozenset[str] | None:
        """Facts whose detail min/max are per-sample values for this format ("*" for all), or None."""
        names = self.spread.get(fmt)
        return None if names is None else frozenset(names)


class Move(_Strict):
    fact: str
    moves: Direction


class Signature(_Strict):
    optimization: str
    markers: list[Move] = []
    effects: list[Move] = []


class CompareCatalog(_Strict):
    schema_version: int = 1
    significance: Significance
    signatures: list[Signature]

    @property
    def by_optimization(self) -> dict[str, Signature]:
        return {s.optimization: s for s in self.signatures}


_cache: dict[Path, CompareCatalog] = {}
_lock = threading.Lock()


def _reset_lock() -> None:  # a fork while another thread holds the lock would leave it held in the child
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_lock)


def load_catalog(kb: KnowledgeBase) -> CompareCatalog:
    """The compare catalog beside the knowledge base's own files (the bundled one when the KB has no copy)."""
    from .._resources import data_dir

    directory = kb.source if kb.source is not None and (kb.source / FILE).is_file() else data_dir("knowledge_base")
    path = (directory / FILE).resolve()
    with _lock:
        cached = _cache.get(path)
        if cached is None:
            cached = validate(CompareCatalog, load_yaml(path), path)
            check(cached, kb, str(path))
            _cache[path] = cached
    return cached


def check(catalog: CompareCatalog, kb: KnowledgeBase, where: str) -> None:
    """Every fact and optimization the catalog names exists in the knowledge base."""
    problems: list[Problem] = []
    sig = catalog.significance
    for name in sig.settings:
        if name not in kb.facts:
            problems.append(Problem(f"{where}: significance.settings", f"unknown fact {name!r}"))
    for fmt, names in sig.spread.items():
        for name in names:
            if name != "*" and name not in kb.facts:
                problems.append(Problem(f"{where}: significance.spread.{fmt}", f"unknown fact {name!r}"))
    seen: set[str] = set()
    for s in catalog.signatures:
        at = f"{where}: signatures.{s.optimization}"
        if s.optimization not in kb.optimizations:
            problems.append(Problem(at, "unknown optimization", "see knowledge_base/optimizations.yaml"))
        if s.optimization in seen:
            problems.append(Problem(at, "listed twice"))
        seen.add(s.optimization)
        if not s.markers and not s.effects:
            problems.append(Problem(at, "names no markers and no effects"))
        for move in [*s.markers, *s.effects]:
            if move.fact not in kb.facts:
                problems.append(Problem(at, f"unknown fact {move.fact!r}"))
    if problems:
        raise KnowledgeBaseError(problems, title="knowledge_base/compare.yaml refers to things it does not define")
