"""The rule language: schema (pydantic), loading from rules/, named-condition resolution and stratification.

A condition is a tree of exactly-one-key nodes: ``{fact: x, lt: 0.8}``, ``{all: [...]}``, ``{any: [...]}``,
``{not: {...}}``, ``{ref: named_condition}``, ``{finding: id}``. There are no expression strings and no eval.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from ._yaml import load_yaml, validate
from .errors import KnowledgeBaseError, Problem
from .knowledge import KnowledgeBase, Strength

Number = Union[int, float]  # noqa: UP007 - runtime aliases pydantic reads on Python 3.10
Literal_ = Union[int, float, str]  # noqa: UP007
Severity = Literal["info", "warning", "critical"]
OPS = ("lt", "le", "gt", "ge", "eq", "ne", "in", "not_in")


class _Node(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class FactTest(_Node):
    """Compare one fact with constants; several operators in one node are ANDed. Unknown fact -> unknown."""

    fact: str
    lt: Number | None = None
    le: Number | None = None
    gt: Number | None = None
    ge: Number | None = None
    eq: Literal_ | None = None
    ne: Literal_ | None = None
    in_: list[Literal_] | None = Field(default=None, alias="in")
    not_in: list[Literal_] | None = None
    known: bool | None = None

    @model_validator(mode="after")
    def _one_op(self) -> FactTest:
        if not self.ops() and self.known is None:
            raise ValueError(f"a test of {self.fact!r} needs an operator: one of {', '.join(OPS)} or known")
        return self

    def ops(self) -> list[tuple[str, Any]]:
        """The (operator, constant) pairs of this test, in a fixed order."""
        return self._ops

    @cached_property
    def _ops(self) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        for op in OPS:
            value = getattr(self, "in_" if op == "in" else op)
            if value is not None:
                out.append((op, value))
        return out


class AllOf(_Node):
    all: list[Condition] = Field(min_length=1)


class AnyOf(_Node):
    any: list[Condition] = Field(min_length=1)


class NotOf(_Node):
    not_: Condition = Field(alias="not")


class ConditionRef(_Node):
    ref: str


class FindingRef(_Node):
    """True when another rule concluded this finding (forward chaining)."""

    finding: str


_TAGS = ("fact", "all", "any", "not", "ref", "finding")


def _tag(value: Any) -> str | None:
    if isinstance(value, dict):
        present = [k for k in _TAGS if k in value]
        return present[0] if len(present) == 1 else None
    tags: dict[type, str] = {FactTest: "fact", AllOf: "all", AnyOf: "any", NotOf: "not", ConditionRef: "ref",
                             FindingRef: "finding"}
    return tags.get(type(value))


Condition = Annotated[
    Annotated[FactTest, Tag("fact")]
    | Annotated[AllOf, Tag("all")]
    | Annotated[AnyOf, Tag("any")]
    | Annotated[NotOf, Tag("not")]
    | Annotated[ConditionRef, Tag("ref")]
    | Annotated[FindingRef, Tag("finding")],
    Discriminator(
        _tag,
        custom_error_type="condition",
        custom_error_message="a condition needs exactly one of: fact, all, any, not, ref, finding",
    ),
]

for _model in (AllOf, AnyOf, NotOf):
    _model.model_rebuild()


class NamedCondition(_Node):
    """A reusable condition (like a Falco macro, but structured)."""

    description: str
    when: Condition


class FindingSpec(_Node):
    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    message: str


class BottleneckVote(_Node):
    regime: str
    strength: Strength


class AxisVote(_Node):
    axis: Literal["data", "algorithm", "machine"]
    strength: Strength


class RecommendSpec(_Node):
    id: str
    why: str


class WasteSpec(_Node):
    id: str
    reason: str


class Then(_Node):
    finding: FindingSpec | None = None
    bottleneck: BottleneckVote | None = None
    axis: AxisVote | None = None
    recommend: list[RecommendSpec] = []
    waste: list[WasteSpec] = []
    measure: list[str] = []

    @model_validator(mode="after")
    def _concludes_something(self) -> Then:
        if not (self.finding or self.bottleneck or self.axis or self.recommend or self.waste or self.measure):
            raise ValueError("`then` must conclude something (finding, bottleneck, axis, recommend, waste or measure)")
        return self


class Rule(_Node):
    """One declarative rule: conditions on facts and findings, and what it concludes."""

    id: str = Field(pattern=r"^[a-z][a-z0-9-]*$")
    title: str
    source: str
    rationale: str
    severity: Severity = "info"
    when: Condition
    then: Then
    tags: list[str] = []


class WastedEntry(_Node):
    id: str
    reason: str


class RegimeTable(_Node):
    """Effective vs wasted optimizations for one regime (seed Table 3, one table per regime)."""

    regime: str
    source: str
    effective: list[str]
    wasted: list[WastedEntry]


class RuleFile(_Node):
    schema_version: Literal[1] = 1
    conditions: dict[str, NamedCondition] = {}
    rules: list[Rule] = []
    tables: list[RegimeTable] = []


# ---- loaded, resolved rule set ----------------------------------------------------------------------------------


class LoadedRule:
    """A rule with its named conditions inlined, the file it came from and its negation stratum."""

    def __init__(self, rule: Rule, path: Path, condition: Condition) -> None:
        self.id = rule.id
        self.rule = rule
        self.path = path
        self.condition = condition
        self.stratum = 0
        self.report_parts: Any = None  # per-rule report data that never changes (filled by diagnosis)
        self._evaluator: Any = None

    @property
    def evaluator(self) -> Any:
        """The condition compiled to a function (expert.evaluate.compile_condition), built on first use."""
        if self._evaluator is None:
            from .evaluate import compile_condition

            self._evaluator = compile_condition(self.condition)
        return self._evaluator

    def __repr__(self) -> str:
        return f"LoadedRule({self.id!r}, stratum={self.stratum})"


def walk(node: Condition) -> Iterator[Condition]:
    """Every node of a condition tree, depth first."""
    yield node
    if isinstance(node, AllOf):
        for child in node.all:
            yield from walk(child)
    elif isinstance(node, AnyOf):
        for child in node.any:
            yield from walk(child)
    elif isinstance(node, NotOf):
        yield from walk(node.not_)


def findings_used(node: Condition) -> tuple[set[str], set[str]]:
    """(positively, negatively) referenced findings of a resolved condition."""
    pos: set[str] = set()
    neg: set[str] = set()

    def visit(n: Condition, negated: bool) -> None:
        if isinstance(n, FindingRef):
            (neg if negated else pos).add(n.finding)
        elif isinstance(n, AllOf):
            for c in n.all:
                visit(c, negated)
        elif isinstance(n, AnyOf):
            for c in n.any:
                visit(c, negated)
        elif isinstance(n, NotOf):
            visit(n.not_, not negated)

    visit(node, False)
    return pos, neg


def facts_used(node: Condition) -> list[str]:
    """Fact names a resolved condition reads, in first-use order."""
    seen: list[str] = []
    for n in walk(node):
        if isinstance(n, FactTest) and n.fact not in seen:
            seen.append(n.fact)
    return seen


NOT_RULE_FILES = frozenset({"lint_waivers.yaml"})  # data for `dam rules lint`, kept beside the rules


def rule_file_paths(directory: Path) -> list[Path]:
    """The rule files of a rules directory: every *.yaml, sorted, except tests/ folders and NOT_RULE_FILES."""
    return [path for path in sorted(directory.rglob("*.yaml"))
            if "tests" not in path.relative_to(directory).parts and path.name not in NOT_RULE_FILES]


class RuleSet:
    """All rules and regime tables from one or more directories, resolved and checked against the knowledge base."""

    def __init__(self, files: list[tuple[Path, RuleFile]], kb: KnowledgeBase) -> None:
        self.kb = kb
        self.memo: dict[str, Any] = {}  # values computed from this (immutable) rule set on first use
        self.files = files
        problems: list[Problem] = []
        self.conditions: dict[str, tuple[Path, NamedCondition]] = {}
        for path, rf in files:
            for name, cond in rf.conditions.items():
                if name in self.conditions:
                    problems.append(Problem(f"{path}: conditions.{name}",
                                            f"named condition already defined in {self.conditions[name][0]}"))
                self.conditions[name] = (path, cond)
        self.rules: dict[str, LoadedRule] = {}
        for path, rf in files:
            for rule in rf.rules:
                if rule.id in self.rules:
                    problems.append(Problem(f"{path}: rule {rule.id}",
                                            f"duplicate rule id (also in {self.rules[rule.id].path})"))
                    continue
                try:
                    resolved = self._resolve(rule.when, path, rule.id, ())
                except KnowledgeBaseError as exc:
                    problems.extend(exc.problems)
                    continue
                self.rules[rule.id] = LoadedRule(rule, path, resolved)
        self.tables: dict[str, tuple[Path, RegimeTable]] = {}
        for path, rf in files:
            for table in rf.tables:
                if table.regime in self.tables:
                    problems.append(Problem(f"{path}: table {table.regime}", "a regime has exactly one table"))
                self.tables[table.regime] = (path, table)
        problems.extend(self._check_references())
        if problems:
            raise KnowledgeBaseError(problems, title="the rules cannot be loaded")
        self.producers = self._producers()
        problems = self._stratify()
        if problems:
            raise KnowledgeBaseError(problems, title="the rules cannot be ordered")

    @classmethod
    def load(cls, directories: list[Path], kb: KnowledgeBase) -> RuleSet:
        """Load every rule file under the directories (see `rule_file_paths`), in sorted order."""
        files: list[tuple[Path, RuleFile]] = []
        problems: list[Problem] = []
        for directory in directories:
            if not directory.is_dir():
                raise KnowledgeBaseError([Problem(str(directory), "rules directory does not exist")])
            for path in rule_file_paths(directory):
                try:
                    files.append((path, validate(RuleFile, load_yaml(path), path)))
                except KnowledgeBaseError as exc:
                    problems.extend(exc.problems)
        if problems:
            raise KnowledgeBaseError(problems, title="some rule files are invalid")
        return cls(files, kb)

    def _resolve(self, node: Condition, path: Path, rule_id: str, stack: tuple[str, ...]) -> Condition:
        where = f"{path}: rule {rule_id}: when"
        if isinstance(node, ConditionRef):
            if node.ref in stack:
                raise KnowledgeBaseError([Problem(where, f"named conditions refer to each other in a cycle: "
                                                  f"{' -> '.join((*stack, node.ref))}")])
            if node.ref not in self.conditions:
                raise KnowledgeBaseError([Problem(where, f"unknown named condition {node.ref!r}")])
            return self._resolve(self.conditions[node.ref][1].when, path, rule_id, (*stack, node.ref))
        if isinstance(node, AllOf):
            return AllOf(all=[self._resolve(c, path, rule_id, stack) for c in node.all])
        if isinstance(node, AnyOf):
            return AnyOf(any=[self._resolve(c, path, rule_id, stack) for c in node.any])
        if isinstance(node, NotOf):
            return NotOf(not_=self._resolve(node.not_, path, rule_id, stack))
        return node

    def _check_references(self) -> list[Problem]:
        kb = self.kb
        problems: list[Problem] = []
        concluded = {lr.rule.then.finding.id for lr in self.rules.values() if lr.rule.then.finding}
        for lr in self.rules.values():
            where = f"{lr.path}: rule {lr.id}"
            for n in walk(lr.condition):
                if isinstance(n, FactTest):
                    spec = kb.facts.get(n.fact)
                    if spec is None:
                        problems.append(Problem(f"{where}: when", f"unknown fact {n.fact!r}"))
                    elif spec.type == "text":
                        problems.extend(Problem(f"{where}: when", f"{n.fact} is text, quoted in messages; only "
                                                "`known` may test it") for op, _ in n.ops() if op != "known")
                    elif spec.type in ("enum", "hardware"):
                        for op, value in n.ops():
                            if op in ("lt", "le", "gt", "ge"):
                                problems.append(Problem(f"{where}: when",
                                                        f"{n.fact} is not numeric; {op} is meaningless"))
                            values = value if isinstance(value, list) else [value]
                            allowed = spec.choices if spec.type == "enum" else list(kb.hardware)
                            for v in values:
                                if v not in (allowed or []):
                                    problems.append(Problem(f"{where}: when", f"{v!r} is not a value of {n.fact}"))
                elif isinstance(n, FindingRef) and n.finding not in concluded:
                    problems.append(Problem(f"{where}: when", f"no rule concludes finding {n.finding!r}"))
            then = lr.rule.then
            if then.bottleneck and then.bottleneck.regime not in kb.regimes.regimes:
                problems.append(Problem(f"{where}: then.bottleneck", f"unknown regime {then.bottleneck.regime!r}"))
            for opt_id in [*(r.id for r in then.recommend), *(w.id for w in then.waste)]:
                if opt_id not in kb.optimizations:
                    problems.append(Problem(f"{where}: then", f"unknown optimization {opt_id!r}"))
            for fact in then.measure:
                if fact not in kb.facts:
                    problems.append(Problem(f"{where}: then.measure", f"unknown fact {fact!r}"))
        for regime, (path, table) in self.tables.items():
            where = f"{path}: table {regime}"
            if regime not in kb.regimes.regimes:
                problems.append(Problem(where, f"unknown regime {regime!r}"))
            for opt in [*table.effective, *(w.id for w in table.wasted)]:
                if opt not in kb.optimizations:
                    problems.append(Problem(where, f"unknown optimization {opt!r}"))
            both = set(table.effective) & {w.id for w in table.wasted}
            if both:
                problems.append(Problem(where, f"listed as both effective and wasted: {', '.join(sorted(both))}"))
        return problems

    def _producers(self) -> dict[str, list[str]]:
        producers: dict[str, list[str]] = {}
        for lr in self.rules.values():
            if lr.rule.then.finding:
                producers.setdefault(lr.rule.then.finding.id, []).append(lr.id)
        return producers

    def _stratify(self) -> list[Problem]:
        """stratum(r) >= stratum(producer of a positive finding), > stratum(producer of a negated one).

        Strata only grow; with n rules no stratum can exceed n unless negation runs through a cycle.
        """
        bound = len(self.rules)
        changed = True
        while changed:
            changed = False
            for lr in self.rules.values():
                pos, neg = findings_used(lr.condition)
                need = max([self.rules[p].stratum for f in pos for p in self.producers.get(f, [])]
                           + [self.rules[p].stratum + 1 for f in neg for p in self.producers.get(f, [])] + [0])
                if need > lr.stratum:
                    lr.stratum = need
                    changed = True
                    if need > bound:
                        cyclic = sorted(r.id for r in self.rules.values() if r.stratum > bound // 2)
                        first = self.rules[cyclic[0]] if cyclic else lr
                        return [Problem(f"{first.path}: rule {first.id}: when",
                                        f"negation through a cycle of findings among: {', '.join(cyclic)}",
                                        "a rule may not depend, through `not`, on its own conclusion")]
        return []

    @cached_property
    def by_id(self) -> list[LoadedRule]:
        """The rules sorted by id (the order reports list evaluations in)."""
        return sorted(self.rules.values(), key=lambda lr: lr.id)

    @cached_property
    def by_stratum(self) -> list[LoadedRule]:
        """The rules sorted by (stratum, id): the order conclusions are assembled in, whatever fired first."""
        return sorted(self.rules.values(), key=lambda lr: (lr.stratum, lr.id))

    @property
    def max_stratum(self) -> int:
        return max((lr.stratum for lr in self.rules.values()), default=0)

    def consumed_findings(self) -> set[str]:
        """Findings that some rule's condition reads (only these need to be asserted back into the engine)."""
        used: set[str] = set()
        for lr in self.rules.values():
            pos, neg = findings_used(lr.condition)
            used |= pos | neg
        return used
