"""Before and after: compare two diagnoses, and gate a change on the result (`dam compare A B --fail-if ...`).

>>> import expert
>>> before = {"hardware": "h100-sxm", "gpu_util": 0.45, "data_wait_s": 0.12, "step_time_s": 0.30}
>>> after = {"hardware": "h100-sxm", "gpu_util": 0.80, "data_wait_s": 0.01, "step_time_s": 0.19}
>>> c = expert.compare(before, after, fail_if=["step_time_s > +5%"])
>>> c.before.bottleneck, c.gate.passed
('input', True)

Each side is a trace/telemetry set (paths, ingested and merged), an observation file, a saved report JSON, a
`Report`, or observations. Modules: `model` (the pydantic `Comparison`), `compute`, `gate` (the --fail-if
language), `render` (terminal and Markdown), `sides` (reading a side), `catalog` (knowledge_base/compare.yaml).
This module stays small; the rest loads on first use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .model import Comparison

if TYPE_CHECKING:
    from ..expert import Expert
    from .sides import IngestOptions


def compare(before: Any, after: Any, *, fail_if: Sequence[str] = (), expert: Expert | None = None,
            ingest: IngestOptions | None = None) -> Comparison:
    """Compare two sides (each paths, a Report, or observations) and evaluate the --fail-if conditions.

    expert: the Expert that diagnoses both sides (default: the shared one on the bundled rules).
    ingest: how traces and telemetry are read (`IngestOptions`: steps, window, gpus, ...), the same for both sides.
    Raises ObservationError for unreadable input or a malformed condition.
    """
    from .compute import compare as run

    if expert is None:
        from .._default import default_expert

        expert = default_expert()
    return run(before, after, expert=expert, fail_if=fail_if, ingest=ingest)


def __getattr__(name: str) -> Any:
    if name in ("Comparison", "FactChange", "Gate", "Side", "BreakdownDelta", "Prediction"):
        from . import model

        return getattr(model, name)
    if name == "IngestOptions":
        from .sides import IngestOptions

        return IngestOptions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BreakdownDelta", "Comparison", "FactChange", "Gate", "IngestOptions", "Prediction", "Side", "compare"]
