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

`expect` lists what must be present, `absent` what must not be; `expect.bottleneck` (a regime or null),
`expect.state` (verdict, conflicting evidence, insufficient evidence), `expect.strength` (the strength of the named
verdict) and `expect.max_strength` (no candidate stronger than this) are checked only when given. A case reports
every false negative and false positive rather than stopping at one.

`run_suite` runs many cases and tallies them per rule, with coverage: a rule is covered when it has a case that
fires it and a case that leaves it silent, and a branch of an `any` is exercised when one of the rule's own
(non-todo) cases fires the rule with that branch true (for an `any` under `not`: leaves it silent with the branch
true). Branches inside a named condition are counted once, exercised through any rule that uses the condition.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from .._yaml import load_yaml, validate
from ..errors import ExpertError
from ..report.model import Report, VerdictState
from .evaluate import evaluate
from .logic import ConditionVisitor, children
from .model import AllOf, AnyOf, Condition, ConditionRef, FactTest, FindingRef, NotOf

if TYPE_CHECKING:
    from .model import NamedCondition
    from .ruleset import LoadedRule


Strength = Literal["suspect", "likely", "confirmed"]
_STRENGTH_ORDER: dict[str, int] = {"suspect": 0, "likely": 1, "confirmed": 2}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Expectation(_Model):
    fired: list[str] = []
    findings: list[str] = []
    recommended: list[str] = []
    wasted: list[str] = []
    candidates: list[str] = []  # regimes the report ranks as candidates (at any strength)
    measure: list[str] = []  # facts the report asks to measure next
    bottleneck: str | None = None  # checked only when explicitly given (null means "no verdict")
    state: VerdictState | None = None  # the report's verdict state, when given
    strength: Strength | None = None  # the strength of the verdict's own candidate, when given
    max_strength: Strength | None = None  # no candidate is stronger than this, when given


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
        "measure": {m.fact for m in report.next_measurements if m.fact is not None},
    }


def check(report: Report, case: RuleTestCase) -> tuple[list[str], list[str]]:
    """(false negatives, false positives) of one report against one case."""
    seen = observed(report)
    negatives: list[str] = []
    positives: list[str] = []
    for kind in ("fired", "findings", "recommended", "wasted", "candidates", "measure"):
        for item in getattr(case.expect, kind):
            if item not in seen[kind]:
                negatives.append(f"{kind}: {item} expected, not concluded")
    if "bottleneck" in case.expect.model_fields_set and report.bottleneck != case.expect.bottleneck:
        negatives.append(f"bottleneck: expected {case.expect.bottleneck}, got {report.bottleneck}")
    negatives.extend(_verdict_mismatches(report, case.expect))
    for kind in ("fired", "findings", "recommended", "wasted", "candidates"):
        for item in getattr(case.absent, kind):
            if item in seen[kind]:
                positives.append(f"{kind}: {item} concluded, expected absent")
    return negatives, positives


def _verdict_mismatches(report: Report, expect: Expectation) -> list[str]:
    """What differs from the expected verdict state and strengths."""
    out: list[str] = []
    if expect.state is not None and report.state != expect.state:
        out.append(f"state: expected {expect.state}, got {report.state}")
    if expect.strength is not None:
        verdict = next((c for c in report.candidates if c.regime == report.bottleneck), None)
        got = verdict.strength if verdict is not None and report.bottleneck is not None else "no verdict"
        if got != expect.strength:
            out.append(f"strength: expected {expect.strength}, got {got}")
    if expect.max_strength is not None:
        ceiling = _STRENGTH_ORDER[expect.max_strength]
        for c in report.candidates:
            if _STRENGTH_ORDER[c.strength] > ceiling:
                out.append(f"max_strength: {c.regime} is {c.strength}, above {expect.max_strength}")
    return out


def run_case(expert: Any, path: Path, case: RuleTestCase) -> CaseResult:
    """Diagnose a case's facts and compare; invalid facts are reported as an error of the case."""
    return run_case_with_report(expert, path, case)[0]


def run_case_with_report(expert: Any, path: Path, case: RuleTestCase) -> tuple[CaseResult, Report | None]:
    """`run_case`, also returning the report (None when the case's facts are invalid)."""
    try:
        report = expert.diagnose(case.facts)
    except ExpertError as exc:
        return CaseResult(file=str(path), case=case.name, rule=case.rule, todo=case.todo, fired=False,
                          false_negatives=[], false_positives=[], error=str(exc)), None
    negatives, positives = check(report, case)
    fired = case.rule in observed(report)["fired"]
    return CaseResult(file=str(path), case=case.name, rule=case.rule, todo=case.todo, fired=fired,
                      false_negatives=negatives, false_positives=positives), report


# ---- suites: many cases, tallied per rule, with coverage -----------------------------------------------------------


class Branch(_Model):
    """One branch of an `any`, and whether a test case exercises it.

    Branches written in a rule belong to the rule; branches inside a named condition belong to the condition and
    are counted once, exercised by the cases of any rule that uses it.
    """

    where: str  # e.g. "when.all[1].any[0]" (relative to the rule, or to the named condition)
    negated: bool  # under an odd number of `not`s: exercising it means leaving the rule silent
    covered: bool = False


class RuleTally(_Model):
    """Every case about one rule, summed up."""

    rule: str
    cases: int = 0
    passed: int = 0
    false_negatives: int = 0  # count of expected conclusions that were missing, over failing cases
    false_positives: int = 0  # count of conclusions expected absent that were present
    errors: int = 0
    todo: int = 0
    firing: int = 0  # non-todo cases that fired the rule
    silent: int = 0  # non-todo cases that left it silent
    branches: list[Branch] = []  # the `any` branches written in the rule itself

    @property
    def failed(self) -> int:
        return self.cases - self.passed - self.todo

    @property
    def covered(self) -> bool:
        return self.firing > 0 and self.silent > 0

    @property
    def branches_covered(self) -> int:
        return sum(1 for b in self.branches if b.covered)


class Coverage(_Model):
    rules: int
    rules_covered: int  # with >= 1 firing and >= 1 silent case
    branches: int  # of rules and of the named conditions they use, each counted once
    branches_covered: int

    @property
    def complete(self) -> bool:
        return self.rules_covered == self.rules and self.branches_covered == self.branches

    def describe(self) -> str:
        def pct(a: int, b: int) -> str:
            return "100 %" if b == 0 else f"{100 * a / b:.0f} %"

        return (f"{self.rules_covered}/{self.rules} rules with a firing and a silent case "
                f"({pct(self.rules_covered, self.rules)}); {self.branches_covered}/{self.branches} `any` branches "
                f"exercised ({pct(self.branches_covered, self.branches)})")


class SuiteResult(_Model):
    results: list[CaseResult]
    rules: dict[str, RuleTally]
    conditions: dict[str, list[Branch]] = {}  # `any` branches of the named conditions the rules in scope use

    @property
    def failures(self) -> list[CaseResult]:
        """Non-todo cases with an error, a false negative or a false positive."""
        return [r for r in self.results if not r.todo and not r.passed]

    @property
    def unexpected_passes(self) -> list[CaseResult]:
        """Todo cases that now pass (their `todo` can go)."""
        return [r for r in self.results if r.todo and r.passed]

    def uncovered_branches(self) -> list[tuple[str, str]]:
        """(owner, where) of every branch not exercised; the owner is a rule id or a named condition."""
        out = [(t.rule, b.where) for t in self.rules.values() for b in t.branches if not b.covered]
        return out + [(name, b.where) for name, bs in self.conditions.items() for b in bs if not b.covered]

    def coverage(self) -> Coverage:
        tallies = self.rules.values()
        named = [b for bs in self.conditions.values() for b in bs]
        return Coverage(rules=len(self.rules), rules_covered=sum(1 for t in tallies if t.covered),
                        branches=sum(len(t.branches) for t in tallies) + len(named),
                        branches_covered=sum(t.branches_covered for t in tallies) + sum(b.covered for b in named))


class BranchKey(NamedTuple):
    owner: str | None  # None: the rule itself; else the named condition the branch is written in
    where: str
    negated: bool
    child: Condition  # the resolved branch


class _AnyBranches(ConditionVisitor[None]):
    """Walks a rule as written (entering named conditions) beside its resolved tree, collecting `any` branches."""

    def __init__(self, conditions: dict[str, tuple[Path, NamedCondition]]) -> None:
        self.conditions = conditions
        self.out: list[BranchKey] = []

    def ref(self, raw: ConditionRef, resolved: Condition, owner: str | None, where: str, negated: bool) -> None:
        self.visit(self.conditions[raw.ref][1].when, resolved, raw.ref, "when", negated)

    def group(self, raw: AllOf | AnyOf, parts: list[Condition], conjunctive: bool, resolved: Condition,
              owner: str | None, where: str, negated: bool) -> None:
        key = "all" if conjunctive else "any"
        for i, (r, c) in enumerate(zip(parts, children(resolved), strict=True)):
            if not conjunctive:
                self.out.append(BranchKey(owner, f"{where}.any[{i}]", negated, c))
            self.visit(r, c, owner, f"{where}.{key}[{i}]", negated)

    def not_of(self, raw: NotOf, resolved: Condition, owner: str | None, where: str, negated: bool) -> None:
        self.visit(raw.not_, children(resolved)[0], owner, f"{where}.not", not negated)

    def fact(self, raw: FactTest, *args: object) -> None:
        return None

    def finding(self, raw: FindingRef, *args: object) -> None:
        return None


def any_branches(rule: LoadedRule, conditions: dict[str, tuple[Path, NamedCondition]]) -> list[BranchKey]:
    """Every branch of every `any` in a rule, located in the YAML it is written in (the rule or a named condition)."""
    visitor = _AnyBranches(conditions)
    visitor.visit(rule.rule.when, rule.condition, None, "when", False)
    return visitor.out


def _exercised(key: BranchKey, report: Report, fired: bool) -> bool:
    if fired == key.negated:
        return False
    findings = {f.id for f in report.findings}
    return evaluate(key.child, report.facts(), findings) == "true"


def run_suite(
    expert: Any, test_files: Iterable[tuple[Path, RuleTestFile]], rules: Iterable[str] | None = None
) -> SuiteResult:
    """Run every case of the test files; tally per rule (all of the expert's rules, or `rules`) with coverage.

    A case naming a rule the expert does not have is reported as an error of that case.
    """
    ruleset = expert.ruleset
    scope = sorted(ruleset.rules) if rules is None else list(rules)
    tallies = {rule_id: RuleTally(rule=rule_id) for rule_id in scope}
    keys = {rule_id: any_branches(ruleset.rules[rule_id], ruleset.conditions)
            for rule_id in scope if rule_id in ruleset.rules}
    named: dict[str, dict[str, Branch]] = {}
    branch_of: dict[tuple[str, str | None, str], Branch] = {}
    for rule_id, rule_keys in keys.items():
        for key in rule_keys:
            if key.owner is None:
                branch = Branch(where=key.where, negated=key.negated)
                tallies[rule_id].branches.append(branch)
            else:
                branch = named.setdefault(key.owner, {}).setdefault(key.where,
                                                                   Branch(where=key.where, negated=key.negated))
            branch_of[(rule_id, key.owner, key.where)] = branch
    results: list[CaseResult] = []
    for path, case in iter_cases(test_files):
        if case.rule not in ruleset.rules:
            result = CaseResult(file=str(path), case=case.name, rule=case.rule, todo=case.todo, fired=False,
                                false_negatives=[], false_positives=[],
                                error=f"the case names rule {case.rule!r}, which is not loaded")
            report = None
        else:
            result, report = run_case_with_report(expert, path, case)
        results.append(result)
        tally = tallies.get(case.rule)
        if tally is None:
            continue
        tally.cases += 1
        if case.todo:
            tally.todo += 1
            continue
        if result.passed:
            tally.passed += 1
        tally.false_negatives += len(result.false_negatives)
        tally.false_positives += len(result.false_positives)
        if result.error is not None or report is None:
            tally.errors += 1
            continue
        if result.fired:
            tally.firing += 1
        else:
            tally.silent += 1
        for key in keys.get(case.rule, []):
            branch = branch_of[(case.rule, key.owner, key.where)]
            if not branch.covered and _exercised(key, report, result.fired):
                branch.covered = True
    return SuiteResult(results=results, rules=tallies,
                       conditions={name: list(bs.values()) for name, bs in sorted(named.items())})


def iter_cases(test_files: Iterable[tuple[Path, RuleTestFile]]) -> Iterator[tuple[Path, RuleTestCase]]:
    """(file, case) for every case of the files, in order."""
    for path, tf in test_files:
        for case in tf.cases:
            yield path, case


def rules_of_test_files(test_files: Iterable[tuple[Path, RuleTestFile]], ruleset: Any) -> list[str]:
    """The rules of the rule files that test files are about (``rule_file`` beside their ``tests/`` folder)."""
    targets: set[Path] = set()
    for path, tf in test_files:
        folder = path.parent.parent if path.parent.name == "tests" else path.parent
        targets.add((folder / tf.rule_file).resolve())
    return sorted(lr.id for lr in ruleset.rules.values() if lr.path.resolve() in targets)


CaseStatus = Literal["pass", "fail", "error", "todo", "xpass"]


def status(result: CaseResult) -> CaseStatus:
    """One word for a case result (xpass: a todo case that now passes)."""
    if result.todo:
        return "xpass" if result.passed else "todo"
    if result.error is not None:
        return "error"
    return "pass" if result.passed else "fail"
