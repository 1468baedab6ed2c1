"""The shared default Expert (bundled rules and knowledge base), built once on first use.

The package facade registers how to build it (`set_factory`), so modules below the Expert in the layering (report
explanations, the consultation) can reach the default without importing upwards.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .expert import Expert

_factory: Callable[[], Expert] | None = None
_default: Expert | None = None
_lock = threading.Lock()


def _reset_lock() -> None:  # a fork while another thread holds the lock would leave it held in the child
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_lock)


def set_factory(factory: Callable[[], Expert]) -> None:
    """Say how the default Expert is built (called once, by the package facade)."""
    global _factory
    _factory = factory


def default_expert() -> Expert:
    """The shared Expert on the bundled rules (built on first use, once, even under concurrent first calls)."""
    global _default
    if _default is None:
        with _lock:
            if _default is None:
                if _factory is None:  # pragma: no cover - the facade always registers it on import
                    raise RuntimeError("expert._default: no factory registered (import the expert package)")
                _default = _factory()
    return _default
