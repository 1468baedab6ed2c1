"""Merging the facts of several files (a trace plus a DCGM log of the same run) into one observation set."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._result import FileResult, Measured

PRECEDENCE = {"kineto": 0, "nsys": 0, "dcgmi": 1, "prometheus": 1, "serving-metrics": 1, "nvidia-smi": 2,
              "nvidia-smi-dmon": 2}
"""Lower wins when two files measure the same fact: a trace measures the profiled steps themselves, DCGM samples the
device's counters, nvidia-smi only the coarse duty cycle. Between equals, the first file given wins."""


def _show(m: Measured) -> str:
    return f"{m.value:.4g}" if isinstance(m.value, float) else str(m.value)


def merge(files: Sequence[FileResult]) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """(raw observations for validation, facts no file could derive with the reasons, notes)."""
    chosen: dict[str, tuple[int, FileResult, Measured]] = {}
    notes: list[str] = []
    for f in files:
        rank = PRECEDENCE.get(f.format, 3)
        for fact, m in f.measured.items():
            if fact not in chosen:
                chosen[fact] = (rank, f, m)
                continue
            old_rank, old_file, old = chosen[fact]
            winner, loser = ((f, m), (old_file, old)) if rank < old_rank else ((old_file, old), (f, m))
            if rank < old_rank:
                chosen[fact] = (rank, f, m)
            if winner[1].value != loser[1].value:
                if fact == "hardware":
                    notes.append(f"the files name different hardware ({winner[0].name}: {winner[1].value}, "
                                 f"{loser[0].name}: {loser[1].value}); are they from the same machine? used "
                                 f"{winner[1].value}")
                else:
                    notes.append(f"{fact}: used {_show(winner[1])} from {winner[0].name} ({winner[0].format}); "
                                 f"{loser[0].name} ({loser[0].format}) gave {_show(loser[1])}")
    raw = {fact: {"value": m.value, "source": m.source, "detail": dict(m.detail)} for fact, (_, _, m) in chosen.items()}
    not_derived: dict[str, str] = {}
    several = len(files) > 1
    for f in files:
        for fact, reason in f.not_derived.items():
            if fact in chosen:
                continue
            text = f"{f.name}: {reason}" if several else reason
            not_derived[fact] = f"{not_derived[fact]}; {text}" if fact in not_derived else text
        notes.extend(f"{f.name}: {n}" if several else n for n in f.notes)
    return raw, not_derived, notes
