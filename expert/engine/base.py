"""The narrow engine interface: facts in, fired rules (in firing order) and concluded findings out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

Value = int | float | str


@dataclass
class EngineResult:
    """What one run of the rules concluded."""

    fired: list[str] = field(default_factory=list)  # rule ids, in firing order
    findings: set[str] = field(default_factory=set)
    matched: dict[str, list[str]] = field(default_factory=dict)  # rule id -> findings it matched on


class Engine(Protocol):
    """A forward-chaining engine over a loaded RuleSet. Implementations must be thread-safe."""

    name: str

    def run(self, facts: Mapping[str, Value]) -> EngineResult: ...
