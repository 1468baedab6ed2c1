"""The narrow engine interface: facts in, fired rules (in firing order) and concluded findings out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ..rules.logic import Outcome

Value = int | float | str


@dataclass
class EngineResult:
    """What one run of the rules concluded."""

    fired: list[str] = field(default_factory=list)  # rule ids, in firing order
    findings: set[str] = field(default_factory=set)
    matched: dict[str, list[str]] = field(default_factory=dict)  # rule id -> findings it matched on
    # the outcome of each rule that did not fire, on the final findings, where the engine knows it (None: it does not)
    outcomes: dict[str, Outcome] | None = None


class Engine(Protocol):
    """A forward-chaining engine over a loaded RuleSet. Implementations must be thread-safe."""

    name: str

    def run(self, facts: Mapping[str, Value]) -> EngineResult: ...
