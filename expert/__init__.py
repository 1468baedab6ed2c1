"""dam-expert: tells ML engineers why a training job or an inference service is slow, and what to do about it.

>>> import expert
>>> report = expert.diagnose({"hardware": "h100-sxm", "dtype": "bf16", "gpu_util": 0.45,
...                           "data_wait_s": 0.12, "step_time_s": 0.30})
>>> report.bottleneck
'input'

The public names below are imported on first use, so `import expert` stays cheap.
"""

# isort: off
# Ctrl-C while the `dam` script imports the library: "interrupted" and exit 130 until `main()` can catch it
# (expert/_interrupt.py: why, and what follows). Here, before any import that reads a file, so that no Ctrl-C can
# land in this package before the guard is up; it loads only what Python has loaded at start-up. (So no
# `from __future__ import annotations` either: it imports `__future__`, which Python has not loaded; the annotations
# that name a lazily imported class are quoted instead.)
import os as _os
import sys as _sys

TYPE_CHECKING = False  # typing's is imported below: `typing` is not loaded at start-up
if TYPE_CHECKING:
    import signal as _signal
else:
    import _signal
_DAM_SCRIPTS = frozenset({"dam", "dam.exe", "dam-script.py"})  # what pip names the console script


def _startup_sigint(signum: int, frame: object) -> None:
    _os.write(2, b"interrupted\n")
    _os._exit(130)


if (_os.path.basename(getattr(_sys.modules.get("__main__"), "__file__", None) or "") in _DAM_SCRIPTS
        and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler):
    try:
        _signal.signal(_signal.SIGINT, _startup_sigint)
    except ValueError:  # not the main thread
        pass
    else:
        # pydantic-core imports `datetime` from Rust as it loads; a KeyboardInterrupt inside that import makes pyo3
        # panic (PanicException with a Rust backtrace). Imported here, under the guard, it is already loaded then.
        import datetime  # noqa: F401
# isort: on
import importlib
import sys
import types
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from . import _default
from ._version import __version__

if TYPE_CHECKING:
    from .breakdown import TimeBreakdown
    from .compare.model import Comparison
    from .consult.session import Consultation
    from .errors import EngineError, ExpertError, KnowledgeBaseError, ObservationError, Problem
    from .expert import Expert
    from .ingest import IngestResult, ingest, ingest_result
    from .observations.normalise import Observation, Observations
    from .report.model import Report

_LAZY = {
    "EngineError": "expert.errors",  # the errors too: `dam --version` needs none of them
    "ExpertError": "expert.errors",
    "KnowledgeBaseError": "expert.errors",
    "ObservationError": "expert.errors",
    "Problem": "expert.errors",
    "TimeBreakdown": "expert.breakdown",
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


_UNSET = object()
_DELETED = object()


def _subpackage_function(name: str) -> property:
    """`expert.NAME` as the function NAME of the subpackage expert.NAME, imported on first use.

    Importing the subpackage binds its name on the package; the setter ignores exactly that, and keeps any other
    assignment (a test's monkeypatch), which the deleter can take back."""

    def get(module: types.ModuleType) -> Any:
        override = module.__dict__.get("_overrides", {}).get(name, _UNSET)
        if override is _DELETED:
            raise AttributeError(f"module 'expert' has no attribute {name!r}")
        if override is not _UNSET:
            return override
        return getattr(importlib.import_module(f"expert.{name}"), name)

    def set_(module: types.ModuleType, value: object) -> None:
        if isinstance(value, types.ModuleType) and value.__name__ == f"expert.{name}":
            return  # the import system binding the subpackage; sys.modules still has it
        module.__dict__.setdefault("_overrides", {})[name] = value

    def delete(module: types.ModuleType) -> None:
        module.__dict__.setdefault("_overrides", {})[name] = _DELETED

    return property(get, set_, delete)


class _Facade(types.ModuleType):
    """The package module. `expert.ingest` and `expert.compare` are *functions*, although subpackages of the same
    names exist (see `_subpackage_function`)."""

    ingest: "Callable[..., Observations]" = _subpackage_function("ingest")  # type: ignore[assignment]
    compare: "Callable[..., Comparison]" = _subpackage_function("compare")  # type: ignore[assignment]


sys.modules[__name__].__class__ = _Facade


def _build_default() -> "Expert":
    from .expert import Expert

    return Expert()


_default.set_factory(_build_default)
default_expert = _default.default_expert


def diagnose(observations: "Mapping[str, Any] | Observations", *,
             time_breakdown: "TimeBreakdown | None" = None) -> "Report":
    """Diagnose observations with the bundled rules. See `Expert` for custom rules or engines (and `time_breakdown`)."""
    return default_expert().diagnose(observations, time_breakdown=time_breakdown)


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
    "TimeBreakdown",
    "__version__",
    "compare",
    "default_expert",
    "diagnose",
    "ingest",
    "ingest_result",
]
