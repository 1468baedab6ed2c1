"""dam-expert: tells ML engineers why a training job or an inference service is slow, and what to do about it.

>>> import expert
>>> report = expert.diagnose({"hardware": "h100-sxm", "dtype": "bf16", "gpu_util": 0.45,
...                           "data_wait_s": 0.12, "step_time_s": 0.30})
>>> report.bottleneck
'input'

The public names below are imported on first use, so `import expert` stays cheap.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from . import _default
from ._version import __version__
from .errors import EngineError, ExpertError, KnowledgeBaseError, ObservationError, Problem

if TYPE_CHECKING:
    from .consult.session import Consultation
    from .expert import Expert
    from .ingest import IngestResult, ingest, ingest_result
    from .observations.normalise import Observation, Observations
    from .report.model import Report

_LAZY = {
    "Consultation": "expert.consult.session",
    "Expert": "expert.expert",
    "IngestResult": "expert.ingest",
    "ingest_result": "expert.ingest",
    "Observation": "expert.observations.normalise",
    "Observations": "expert.observations.normalise",
    "Report": "expert.report.model",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'expert' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


class _Facade(types.ModuleType):
    """The package module. `expert.ingest` is the ingest *function*, although a subpackage of the same name exists:
    importing the subpackage binds its name on the package, and this property keeps the function there instead."""

    @property
    def ingest(self) -> Callable[..., Observations]:
        return importlib.import_module("expert.ingest").ingest  # type: ignore[no-any-return]

    @ingest.setter
    def ingest(self, value: object) -> None:
        pass  # the import system binding the expert.ingest subpackage; sys.modules still has it


sys.modules[__name__].__class__ = _Facade


def _build_default() -> Expert:
    from .expert import Expert

    return Expert()


_default.set_factory(_build_default)
default_expert = _default.default_expert


def diagnose(observations: Mapping[str, Any] | Observations) -> Report:
    """Diagnose observations with the bundled rules. See `Expert` for custom rules or engines."""
    return default_expert().diagnose(observations)


__all__ = [
    "Consultation",
    "EngineError",
    "Expert",
    "ExpertError",
    "IngestResult",
    "KnowledgeBaseError",
    "Observation",
    "ObservationError",
    "Observations",
    "Problem",
    "Report",
    "__version__",
    "default_expert",
    "diagnose",
    "ingest",
    "ingest_result",
]
