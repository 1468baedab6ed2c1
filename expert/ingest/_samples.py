"""Sample windows for telemetry logs: picking samples by number or time, and running mean/min/max per field."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ._result import FileResult, Scalar


@dataclass
class Stat:
    """Running count, mean, min and max of one field."""

    count: int = 0
    total: float = 0.0
    lo: float = math.inf
    hi: float = -math.inf

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        if value < self.lo:
            self.lo = value
        if value > self.hi:
            self.hi = value

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else math.nan


@dataclass
class Selector:
    """Keeps the samples inside --samples A:B (1-based sample numbers, one number per polling round over all
    devices) and --window A:B (seconds from the first timestamp in the log), and only the chosen devices."""

    samples: tuple[float | None, float | None] | None = None
    window: tuple[float | None, float | None] | None = None
    gpus: frozenset[int] | None = None
    number: int = 0
    kept_rounds: set[int] = field(default_factory=set)
    t0: float | None = None
    t_first: float | None = None
    t_last: float | None = None
    entities: set[str] = field(default_factory=set)
    timestamps: bool = False
    _seen: set[str] = field(default_factory=set)

    def keep(self, entity: str, gpu: int | None, t: float | None = None, device: str | None = None) -> bool:
        """Count one row (a polling round starts again when an entity repeats) and say whether it is kept."""
        if not self._seen or entity in self._seen:
            self.number += 1
            self._seen = set()
        self._seen.add(entity)
        if t is not None:
            self.timestamps = True
            if self.t0 is None:
                self.t0 = t
        if self.gpus is not None and (gpu is None or gpu not in self.gpus):
            return False
        if self.samples is not None:
            lo, hi = self.samples
            if (lo is not None and self.number < lo) or (hi is not None and self.number > hi):
                return False
        if self.window is not None and t is not None and self.t0 is not None:
            lo, hi = self.window
            rel = t - self.t0
            if (lo is not None and rel < lo) or (hi is not None and rel > hi):
                return False
        self.kept_rounds.add(self.number)
        self.entities.add(device or entity)
        if t is not None:
            self.t_first = t if self.t_first is None else min(self.t_first, t)
            self.t_last = t if self.t_last is None else max(self.t_last, t)
        return True

    def describe(self) -> str:
        """The window the kept samples cover, in words."""
        if not self.kept_rounds:
            return "no samples"
        lo, hi = min(self.kept_rounds), max(self.kept_rounds)
        text = f"samples {lo}–{hi} of {self.number}"
        if self.t_first is not None and self.t_last is not None and self.t0 is not None:
            text += f" ({self.t_first - self.t0:.3g}–{self.t_last - self.t0:.3g} s)"
        return text

    def finish(self, result: FileResult, has_timestamps: bool) -> None:
        """Notes about options that could not apply to this log."""
        if self.window is not None and not has_timestamps:
            result.notes.append("--window needs timestamps, which this log does not have; all samples were used "
                                "(pick samples by number with --samples)")


def add_fact(result: FileResult, fact: str, value: float, stat: Stat, *, field_name: str, scale: float,
             selector: Selector, extra: dict[str, Scalar | None] | None = None) -> None:
    """Record a sampled fact: mean over the window with min, max and sample count in its provenance."""
    result.add(fact, value, metric=field_name, method=f"mean of {stat.count} samples of {field_name}",
               window=selector.describe(), samples=stat.count, min=round(stat.lo * scale, 6),
               max=round(stat.hi * scale, 6), devices=",".join(sorted(selector.entities)), file=result.path,
               **(extra or {}))
