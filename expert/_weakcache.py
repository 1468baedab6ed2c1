"""One computed value per object, held weakly: how a module caches what it derives from an upstream object (a
knowledge base, a rule set, an Expert) without writing on that object or keeping it alive."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class PerObject(Generic[K, V]):
    """`cache(obj)` is `build(obj)`, computed once per object; entries go when their object does. The value must not
    refer back to its object (that would keep it alive). The last object looked up is kept at hand (weakly)."""

    def __init__(self, build: Callable[[K], V]) -> None:
        self._build = build
        self._values: weakref.WeakKeyDictionary[K, V] = weakref.WeakKeyDictionary()
        self._last: tuple[weakref.ref[K], V] | None = None

    def __call__(self, obj: K) -> V:
        last = self._last
        if last is not None and last[0]() is obj:
            return last[1]
        value = self._values.get(obj)
        if value is None:
            value = self._values[obj] = self._build(obj)
        self._last = (weakref.ref(obj, self._forget), value)
        return value

    def _forget(self, gone: weakref.ref[K]) -> None:
        """Drop the value kept at hand when its object goes (the value may refer to other upstream objects)."""
        last = self._last
        if last is not None and last[0] is gone:
            self._last = None
