"""Typed errors. Every message names what was wrong, where, and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass, field


class ExpertError(Exception):
    """Base class of every error dam-expert raises on purpose."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input: where it is, what is wrong, what would be accepted."""

    where: str
    message: str
    hint: str = ""

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}"
        return f"{text} ({self.hint})" if self.hint else text


@dataclass
class _ProblemsError(ExpertError):
    problems: list[Problem] = field(default_factory=list)
    title: str = "invalid input"

    def __post_init__(self) -> None:
        super().__init__(str(self))

    def __str__(self) -> str:
        lines = [f"{self.title}:"] + [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


@dataclass
class ObservationError(_ProblemsError):
    """Observations that do not fit the fact vocabulary (unknown name, wrong type, out of range)."""

    title: str = "invalid observations"


@dataclass
class KnowledgeBaseError(_ProblemsError):
    """A knowledge-base or rule file that cannot be loaded (names the file, the entry and the field)."""

    title: str = "the knowledge base or rules cannot be loaded"


@dataclass
class OutputError(_ProblemsError):
    """An output that cannot be written (names the path and why: a missing folder, no permission, a full disk)."""

    title: str = "cannot write the output"


class EngineError(ExpertError):
    """The rule engine failed on a diagnosis (a bug or a durable-rules fault, never bad input)."""
