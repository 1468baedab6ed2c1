"""What every lint shares: diagnostics, YAML files with the line of every node, where definitions live, the
`Lint` base class and small helpers."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from ..._yaml import load_positioned, nearest_line
from ..logic import YamlPath, format_constant
from ..model import Condition, NamedCondition, RegimeTable, Rule
from ..references import suggest as _suggest

if TYPE_CHECKING:
    from .context import LintContext

LintSeverity = Literal["error", "warning"]
Value = int | float | str
WAIVER_FILE = "lint_waivers.yaml"
_PLACEHOLDER_WORDS = frozenset({"todo", "tbd", "fixme", "xxx", "?", "...", "-"})


def _fmt(value: object) -> str:
    return format_constant(value, 6)


def _blank(text: str) -> bool:
    return not text.strip() or text.strip().casefold() in _PLACEHOLDER_WORDS


# ---- diagnostics --------------------------------------------------------------------------------------------------


class Diagnostic(BaseModel):
    """One problem found in one place."""

    model_config = ConfigDict(extra="forbid")

    lint: str  # e.g. "DAM102"
    name: str  # e.g. "unsatisfiable-condition"
    severity: LintSeverity
    path: str
    line: int | None = None
    subject: str | None = None  # the rule id, named condition, table ("table/REGIME") or waiver it is about
    message: str
    hint: str = ""
    waived: str | None = None  # the waiver's reason, when waived

    def location(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path

    def __str__(self) -> str:
        about = f" {self.subject}:" if self.subject else ""
        text = f"{self.location()}: {self.lint} [{self.severity}]{about} {self.message}"
        return f"{text} ({self.hint})" if self.hint else text


class LintResult(BaseModel):
    """Everything one lint run found."""

    model_config = ConfigDict(extra="forbid")

    diagnostics: list[Diagnostic]  # not waived, errors first
    waived: list[Diagnostic] = []
    files: int = 0
    rules: int = 0
    tests_run: bool = False

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "warning"]

    @property
    def exit_code(self) -> int:
        """0 clean, 1 lint findings (warnings), 2 errors."""
        if self.errors:
            return 2
        return 1 if self.diagnostics else 0


# ---- YAML with positions -------------------------------------------------------------------------------------------


@dataclass
class SourceFile:
    """One YAML file: its data, the line of every node (by path of keys and indices), and its validated model."""

    path: Path
    display: str
    kind: Literal["rules", "tests", "waivers"]
    data: Any = None
    lines: dict[YamlPath, int] = field(default_factory=dict)
    model: Any = None
    target: bool = True  # diagnostics are reported only for target files

    def line(self, path: Sequence[str | int] = ()) -> int | None:
        """The line of the node at `path`, or of its nearest ancestor that exists."""
        return nearest_line(self.lines, tuple(path))


def _loc_path(data: Any, loc: Sequence[int | str]) -> YamlPath:
    """The data path of a pydantic error location (union tags in the location are skipped)."""
    path: list[str | int] = []
    node = data
    for key in loc:
        inside = (isinstance(node, dict) and key in node) or (
            isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node))
        if inside:
            node = node[key]
            path.append(key)
    return tuple(path)


# ---- sites: where each rule, named condition and table is defined ------------------------------------------------


@dataclass(frozen=True)
class RuleSite:
    """A rule where it is written; `when` is its condition with `{kb: NAME}` thresholds bound to numbers (what the
    lints of values analyse; `rule.when` is the condition as written)."""

    file: SourceFile
    index: int
    rule: Rule
    when: Condition

    @property
    def path(self) -> YamlPath:
        return ("rules", self.index)

    @property
    def line(self) -> int | None:
        return self.file.line((*self.path, "id"))


@dataclass(frozen=True)
class ConditionSite:
    """A named condition where it is written; `when` as for `RuleSite`."""

    file: SourceFile
    name: str
    condition: NamedCondition
    when: Condition

    @property
    def path(self) -> YamlPath:
        return ("conditions", self.name)


@dataclass(frozen=True)
class TableSite:
    file: SourceFile
    index: int
    table: RegimeTable

    @property
    def path(self) -> YamlPath:
        return ("tables", self.index)


# ---- lints --------------------------------------------------------------------------------------------------------


class Lint:
    """A check with an id, a name, a severity and a docs page. Subclasses yield diagnostics from `check`."""

    id: ClassVar[str]
    name: ClassVar[str]
    severity: ClassVar[LintSeverity]
    summary: ClassVar[str]
    docs: ClassVar[str]  # markdown: why it matters, an example, how to fix it
    needs_tests: ClassVar[bool] = False  # runs only when the rules load and their tests ran

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        return ()

    @classmethod
    def page(cls) -> str:
        """The lint's docs page (markdown)."""
        return f"## {cls.id} {cls.name} ({cls.severity})\n\n{cls.summary}\n\n{cls.docs.strip()}\n"


class _LoadLint(Lint):
    """Diagnostics produced while loading files."""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        return [d for d in ctx.load_errors if d.lint == self.id]


__all__ = ["WAIVER_FILE", "ConditionSite", "Diagnostic", "Lint", "LintResult", "LintSeverity", "RuleSite",
           "SourceFile", "TableSite", "Value", "YamlPath", "_blank", "_fmt", "_suggest", "load_positioned"]
