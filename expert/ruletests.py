"""Rule tests as data (in the spirit of `promtool test rules` and sqlfluff's YAML fixtures).

One file per rule file, under ``rules/tests/<stem>.test.yaml``::

    schema_version: 1
    rule_file: screening.yaml
    cases:
      - name: low-util-fires
        rule: screen-low-gpu-util          # the rule this case is about (for per-rule tables and coverage)
        facts: {gpu_util: 55%}
        expect: {fired: [screen-low-gpu-util], findings: [low_gpu_util]}
        absent: {recommended: [more_peak_flops]}
      - name: known-gap
        rule: ...
        todo: "misread as starvation"     # recorded, not failing

`expect` lists what must be present, `absent` what must not be; `expect.bottleneck` (a regime or null) is
checked only when given. A case reports every false negative and false positive rather than stopping at one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ._yaml import load_yaml, validate
from .errors import ExpertError
from .report import Report


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Expectation(_Model):
    fired: list[str] = []
    findings: list[str] = []
    recommended: list[str] = []
    wasted: list[str] = []
    bottleneck: str | None = None  # checked only when explicitly given (null means "no verdict")


class Absence(_Model):
    fired: list[str] = []
    findings: list[str] = []
    recommended: list[str] = []
    wasted: list[str] = []
    candidates: list[str] = []


class RuleTestCase(_Model):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    rule: str
    facts: dict[str, Any]
    expect: Expectation = Expectation()
    absent: Absence = Absence()
    todo: str | None = None


class RuleTestFile(_Model):
    schema_version: int = 1
    rule_file: str
    cases: list[RuleTestCase]


class CaseResult(_Model):
    file: str
    case: str
    rule: str
    todo: str | None
    fired: bool  # did the case's own rule fire
    false_negatives: list[str]
    false_positives: list[str]
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and not self.false_negatives and not self.false_positives


def load_rule_tests(directories: list[Path]) -> list[tuple[Path, RuleTestFile]]:
    """Every ``tests/*.test.yaml`` under the rules directories."""
    out: list[tuple[Path, RuleTestFile]] = []
    for directory in directories:
        for path in sorted((directory / "tests").glob("*.test.yaml")):
            out.append((path, validate(RuleTestFile, load_yaml(path), path)))
    return out


def observed(report: Report) -> dict[str, set[str]]:
    """What a report concluded, in the vocabulary of expectations."""
    return {
        "fired": {e.rule_id for e in report.evaluations if e.fired},
        "findings": {f.id for f in report.findings},
        "recommended": {r.id for r in report.recommended},
        "wasted": {w.id for w in report.wasted},
        "candidates": {c.regime for c in report.candidates},
    }


def check(report: Report, case: RuleTestCase) -> tuple[list[str], list[str]]:
    """(false negatives, false positives) of one report against one case."""
    seen = observed(report)
    negatives: list[str] = []
    positives: list[str] = []
    for kind in ("fired", "findings", "recommended", "wasted"):
        for item in getattr(case.expect, kind):
            if item not in seen[kind]:
                negatives.append(f"{kind}: {item} expected, not concluded")
    if "bottleneck" in case.expect.model_fields_set and report.bottleneck != case.expect.bottleneck:
        negatives.append(f"bottleneck: expected {case.expect.bottleneck}, got {report.bottleneck}")
    for kind in ("fired", "findings", "recommended", "wasted", "candidates"):
        for item in getattr(case.absent, kind):
            if item in seen[kind]:
                positives.append(f"{kind}: {item} concluded, expected absent")
    return negatives, positives


def run_case(expert: Any, path: Path, case: RuleTestCase) -> CaseResult:
    """Diagnose a case's facts and compare; invalid facts are reported as an error of the case."""
    try:
        report = expert.diagnose(case.facts)
    except ExpertError as exc:
        return CaseResult(file=str(path), case=case.name, rule=case.rule, todo=case.todo, fired=False,
                          false_negatives=[], false_positives=[], error=str(exc))
    negatives, positives = check(report, case)
    fired = case.rule in observed(report)["fired"]
    return CaseResult(file=str(path), case=case.name, rule=case.rule, todo=case.todo, fired=fired,
                      false_negatives=negatives, false_positives=positives)
