"""dam-expert: tells ML engineers why a training job or an inference service is slow, and what to do about it.

>>> import expert
>>> report = expert.diagnose({"hardware": "h100-sxm", "dtype": "bf16", "gpu_util": 0.45,
...                           "data_wait_s": 0.12, "step_time_s": 0.30})
>>> report.bottleneck
'input'
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from .breakdown import TimeBreakdown
from .consult import Consultation
from .errors import EngineError, ExpertError, KnowledgeBaseError, ObservationError, Problem
from .expert import Expert
from .ingest import IngestResult, ingest, ingest_result
from .observations import Observation, Observations
from .report import Report

__version__ = "0.1.0"

_default: Expert | None = None
_default_lock = threading.Lock()


def default_expert() -> Expert:
    """The shared Expert on the bundled rules (built on first use, once, even under concurrent first calls)."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Expert()
    return _default


def diagnose(observations: Mapping[str, Any] | Observations, *, time_breakdown: TimeBreakdown | None = None) -> Report:
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
    "default_expert",
    "diagnose",
    "ingest",
    "ingest_result",
]
