"""Rule engines behind one narrow interface: durable-rules (default) and the pure-Python reference."""

from __future__ import annotations

import warnings
from typing import Literal

from ..rules.ruleset import RuleSet
from .base import Engine, EngineResult
from .pure import PureEngine

EngineName = Literal["auto", "durable", "pure"]
_warned = False


def make_engine(ruleset: RuleSet, name: EngineName = "auto") -> Engine:
    """Build an engine; "auto" uses durable-rules where it loads and says once, clearly, when it falls back."""
    global _warned
    if name == "pure":
        return PureEngine(ruleset)
    from . import durable

    ok, why = durable.available()
    if ok:
        return durable.DurableEngine(ruleset)
    if name == "durable":
        from ..errors import EngineError

        raise EngineError(f"durable-rules cannot be loaded here ({why}); use engine='pure'")
    if not _warned:
        warnings.warn(f"durable-rules cannot be loaded ({why}); using the pure-Python engine", RuntimeWarning,
                      stacklevel=2)
        _warned = True
    return PureEngine(ruleset)


__all__ = ["Engine", "EngineName", "EngineResult", "PureEngine", "make_engine"]
