"""Pydantic instances from values already checked: the instance state `Model.model_construct` gives, without its
generic per-field loop (the report, each observation and the observation set are built on the hot path)."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

_new = object.__new__
_set = object.__setattr__


def bare_model(cls: type[M], fields: dict[str, Any], fields_set: set[str]) -> M:
    """An instance of `cls` holding `fields` (every field, in declaration order), `fields_set` marked as set; no
    validation, no extra and no private attributes (the models using this declare none)."""
    obj: M = _new(cls)
    _set(obj, "__dict__", fields)
    _set(obj, "__pydantic_fields_set__", fields_set)
    _set(obj, "__pydantic_extra__", None)
    _set(obj, "__pydantic_private__", None)
    return obj
