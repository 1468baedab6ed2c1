"""`cached_property` without a lock: computed on first access and stored in the instance's `__dict__`.

Before Python 3.12, `functools.cached_property` takes one RLock per class attribute, shared by every instance: threads
diagnosing in parallel queue on it, and a process forked while another thread holds it deadlocks on first access in
the child (issue 22). Python 3.12 dropped that lock; this is the same descriptor, on every version. Two threads may
both compute a value the first time; both results are equal, and one of them is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

_T = TypeVar("_T")


class cached_property(Generic[_T]):
    """A lock-free functools.cached_property (the Python 3.12 semantics)."""

    def __init__(self, func: Callable[[Any], _T]) -> None:
        self.func = func
        self.attrname: str | None = None
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.attrname = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> cached_property[_T]: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> _T: ...

    def __get__(self, instance: object | None, owner: type | None = None) -> cached_property[_T] | _T:
        if instance is None:
            return self
        name = self.attrname
        if name is None:
            raise TypeError("cached_property used without __set_name__")
        cache = instance.__dict__
        try:
            return cache[name]  # type: ignore[no-any-return]
        except KeyError:
            value = cache[name] = self.func(instance)
            return value
