"""The bundled knowledge base, loaded once, for readers called without one."""

from __future__ import annotations

from functools import lru_cache

from ..kb.knowledge import KnowledgeBase


@lru_cache(maxsize=1)
def default_kb() -> KnowledgeBase:
    """The knowledge base shipped with the package (knowledge_base/), loaded on first use."""
    from .._resources import data_dir

    return KnowledgeBase.load(data_dir("knowledge_base"))
