"""`dam rules lint`: structural errors and semantic lints for rule directories, each with an id, a severity and docs.

Errors (DAM0xx) are what would stop the rules from loading: invalid YAML, schema violations, unknown facts or
references, duplicates, reference and negation cycles. Lints (DAM1xx) are warnings about rules that load but are
probably wrong: thresholds outside a fact's range, conditions that can never hold, conclusions that contradict each
other, untested rules. Every diagnostic names a file and line. Waivers are data (``lint_waivers.yaml`` beside the
rules, rule id -> lint id -> reason), never comments; errors cannot be waived.

Conditions are analysed as unions of boxes (disjunctive normal form): a box holds, per fact, an interval, allowed
and excluded values and whether the fact must be known; a box is empty when some fact's constraints contradict.
"""

from __future__ import annotations

import difflib
import math
import string
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._resources import data_dir
from .._yaml import _Loader
from ..derive.formulas import DERIVATIONS
from ..errors import KnowledgeBaseError, Problem
from ..kb.knowledge import FactSpec, KnowledgeBase
from .evaluate import negate_op
from .model import (
    AllOf,
    AnyOf,
    Condition,
    ConditionRef,
    FactTest,
    FindingRef,
    NamedCondition,
    NotOf,
    RegimeTable,
    Rule,
    RuleFile,
)
from .ruleset import RuleSet, rule_file_paths
from .testing import RuleTestFile, run_suite

LintSeverity = Literal["error", "warning"]
YamlPath = tuple[str | int, ...]
Value = int | float | str
WAIVER_FILE = "lint_waivers.yaml"
_PLACEHOLDER_WORDS = frozenset({"todo", "tbd", "fixme", "xxx", "?", "...", "-"})


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
        key = tuple(path)
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key[:-1]
        return self.lines.get((), 1)


def load_positioned(path: Path) -> tuple[Any, dict[YamlPath, int], list[tuple[int, str]]]:
    """Parse YAML safely, recording each node's line; returns (data, lines, duplicate keys as (line, key))."""
    text = path.read_text(encoding="utf-8")
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    lines: dict[YamlPath, int] = {}
    duplicates: list[tuple[int, str]] = []
    if node is not None:
        _record(node, data, (), lines, duplicates)
    return data, lines, duplicates


def _record(node: yaml.Node, data: Any, path: YamlPath, lines: dict[YamlPath, int],
            duplicates: list[tuple[int, str]]) -> None:
    lines.setdefault(path, node.start_mark.line + 1)  # a mapping entry keeps the line of its key
    if isinstance(node, yaml.MappingNode) and isinstance(data, dict):
        by_text = {str(k): k for k in data}
        seen: set[str] = set()
        for key_node, value_node in node.value:
            text = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else None
            if text is None or text not in by_text:
                continue
            if text in seen:
                duplicates.append((key_node.start_mark.line + 1, text))
            seen.add(text)
            key = by_text[text]
            child = (*path, key if isinstance(key, (str, int)) else text)
            lines[child] = key_node.start_mark.line + 1
            _record(value_node, data[key], child, lines, duplicates)
    elif isinstance(node, yaml.SequenceNode) and isinstance(data, list):
        for i, (child, item) in enumerate(zip(node.value, data, strict=False)):
            _record(child, item, (*path, i), lines, duplicates)


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


# ---- condition text -----------------------------------------------------------------------------------------------

_SYMBOLS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=", "in": "in", "not_in": "not in"}


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


def condition_text(node: Condition) -> str:
    """A compact one-line rendering: ``all(gpu_util < 0.8, finding data_starved)``."""
    if isinstance(node, FactTest):
        parts = []
        if node.known is not None:
            parts.append(f"{node.fact} {'is known' if node.known else 'is unknown'}")
        parts += [f"{node.fact} {_SYMBOLS[op]} {_fmt(value)}" for op, value in node.ops()]
        return " and ".join(parts)
    if isinstance(node, FindingRef):
        return f"finding {node.finding}"
    if isinstance(node, ConditionRef):
        return f"ref {node.ref}"
    if isinstance(node, NotOf):
        return f"not({condition_text(node.not_)})"
    if isinstance(node, AllOf):
        return "all(" + ", ".join(condition_text(c) for c in node.all) + ")"
    if isinstance(node, AnyOf):
        return "any(" + ", ".join(condition_text(c) for c in node.any) + ")"
    raise TypeError(f"not a condition: {node!r}")


def walk_raw(node: Condition, path: YamlPath) -> Iterator[tuple[Condition, YamlPath]]:
    """Every node of an unresolved condition with its YAML path (named conditions are not entered)."""
    yield node, path
    if isinstance(node, AllOf):
        for i, child in enumerate(node.all):
            yield from walk_raw(child, (*path, "all", i))
    elif isinstance(node, AnyOf):
        for i, child in enumerate(node.any):
            yield from walk_raw(child, (*path, "any", i))
    elif isinstance(node, NotOf):
        yield from walk_raw(node.not_, (*path, "not"))


# ---- boxes: what a condition needs, as a union of per-fact constraints ------------------------------------------


@dataclass(frozen=True)
class Span:
    """Constraints on one fact: an interval, allowed and excluded values, and whether it must be known."""

    lo: float = -math.inf
    lo_open: bool = True
    hi: float = math.inf
    hi_open: bool = True
    only: frozenset[Value] | None = None
    never: frozenset[Value] = frozenset()
    known: bool | None = None
    void: bool = False

    def meet(self, other: Span) -> Span:
        if self.lo > other.lo or (self.lo == other.lo and self.lo_open):
            lo, lo_open = self.lo, self.lo_open
        else:
            lo, lo_open = other.lo, other.lo_open
        if self.hi < other.hi or (self.hi == other.hi and self.hi_open):
            hi, hi_open = self.hi, self.hi_open
        else:
            hi, hi_open = other.hi, other.hi_open
        only = other.only if self.only is None else (self.only if other.only is None else self.only & other.only)
        void = self.void or other.void or (
            self.known is not None and other.known is not None and self.known != other.known)
        known = self.known if self.known is not None else other.known
        return Span(lo, lo_open, hi, hi_open, only, self.never | other.never, known, void)

    def _ranged(self) -> bool:
        return self.lo > -math.inf or self.hi < math.inf

    def _inside(self, v: float) -> bool:
        above = v > self.lo or (v == self.lo and not self.lo_open)
        below = v < self.hi or (v == self.hi and not self.hi_open)
        return above and below

    def allowed(self, domain: frozenset[Value] | None = None) -> frozenset[Value] | None:
        """The values still allowed, when the constraints (or the fact's domain) enumerate them."""
        only = self.only if domain is None else (domain if self.only is None else self.only & domain)
        if only is None:
            return None
        out: set[Value] = set()
        for v in only:
            if v in self.never:
                continue
            if isinstance(v, str):
                if not self._ranged():
                    out.add(v)
            elif self._inside(float(v)):
                out.add(v)
        return frozenset(out)

    def empty(self, domain: frozenset[Value] | None = None) -> bool:
        if self.void:
            return True
        if self.known is False and (self._ranged() or self.only is not None or self.never):
            return True
        if self.lo > self.hi or (self.lo == self.hi and (self.lo_open or self.hi_open)):
            return True
        allowed = self.allowed(domain)
        if allowed is not None:
            return not allowed
        return self.lo == self.hi and self.lo in self.never

    def describe(self, fact: str) -> str:
        if self.known is False:
            return f"{fact} unknown"
        allowed = self.allowed()
        if allowed is not None:
            values = sorted(allowed, key=str)
            return f"{fact} = {_fmt(values[0])}" if len(values) == 1 else f"{fact} in {_fmt(values)}"
        parts = []
        if self.lo > -math.inf and self.hi < math.inf:
            parts.append(f"{_fmt(self.lo)} {'<' if self.lo_open else '<='} {fact} "
                         f"{'<' if self.hi_open else '<='} {_fmt(self.hi)}")
        elif self.lo > -math.inf:
            parts.append(f"{fact} {'>' if self.lo_open else '>='} {_fmt(self.lo)}")
        elif self.hi < math.inf:
            parts.append(f"{fact} {'<' if self.hi_open else '<='} {_fmt(self.hi)}")
        parts += [f"{fact} != {_fmt(v)}" for v in sorted(self.never, key=str)]
        return ", ".join(parts) or f"{fact} known"


def _span(op: str, value: Any) -> Span:
    if op == "lt":
        return Span(hi=float(value), hi_open=True, known=True)
    if op == "le":
        return Span(hi=float(value), hi_open=False, known=True)
    if op == "gt":
        return Span(lo=float(value), lo_open=True, known=True)
    if op == "ge":
        return Span(lo=float(value), lo_open=False, known=True)
    if op == "eq":
        return Span(only=frozenset([value]), known=True)
    if op == "ne":
        return Span(never=frozenset([value]), known=True)
    if op == "in":
        return Span(only=frozenset(value), known=True)
    return Span(never=frozenset(value), known=True)  # not_in


@dataclass(frozen=True)
class Box:
    """One way a condition can hold: constraints per fact, findings concluded and findings absent."""

    facts: tuple[tuple[str, Span], ...] = ()
    pos: frozenset[str] = frozenset()
    neg: frozenset[str] = frozenset()

    def meet(self, other: Box, domains: Mapping[str, frozenset[Value]]) -> Box | None:
        """The intersection, or None when it is empty."""
        if (self.pos & other.neg) or (self.neg & other.pos):
            return None
        merged = dict(self.facts)
        for fact, span in other.facts:
            merged[fact] = merged[fact].meet(span) if fact in merged else span
            if merged[fact].empty(domains.get(fact)):
                return None
        return Box(tuple(sorted(merged.items())), self.pos | other.pos, self.neg | other.neg)

    def describe(self) -> str:
        parts = [span.describe(fact) for fact, span in self.facts]
        return ", ".join(parts) or "always"


class _TooComplex(Exception):
    """The condition expands to too many boxes to analyse (the check is skipped)."""


class _Unresolvable(Exception):
    """The condition refers to an undefined or cyclic named condition (reported elsewhere)."""


class BoxAlgebra:
    """Disjunctive normal form of conditions, optionally expanding findings into their producers' conditions."""

    LIMIT = 4096

    def __init__(self, conditions: Mapping[str, NamedCondition], domains: Mapping[str, frozenset[Value]],
                 producers: Mapping[str, Sequence[Condition]] | None = None) -> None:
        self.conditions = conditions
        self.domains = domains
        self.producers = producers

    def boxes(self, node: Condition, negated: bool = False) -> list[Box]:
        return self._dnf(node, negated, (), ())

    def _meet_all(self, groups: list[list[Box]]) -> list[Box]:
        acc = [Box()]
        for group in groups:
            nxt: list[Box] = []
            for a in acc:
                for b in group:
                    m = a.meet(b, self.domains)
                    if m is not None:
                        nxt.append(m)
            if len(nxt) > self.LIMIT:
                raise _TooComplex
            acc = nxt
            if not acc:
                return []
        return acc

    def meet(self, a: list[Box], b: list[Box]) -> list[Box]:
        return self._meet_all([a, b])

    def _dnf(self, node: Condition, negated: bool, refs: tuple[str, ...], findings: tuple[str, ...]) -> list[Box]:
        if isinstance(node, FactTest):
            if not negated:
                span = Span()
                if node.known is not None:
                    span = span.meet(Span(known=node.known))
                for op, value in node.ops():
                    span = span.meet(_span(op, value))
                return [] if span.empty(self.domains.get(node.fact)) else [Box(((node.fact, span),))]
            parts: list[Span] = []
            if node.known is not None:
                parts.append(Span(known=not node.known))
            parts += [_span(negate_op(op), value) for op, value in node.ops()]
            return [Box(((node.fact, s),)) for s in parts if not s.empty(self.domains.get(node.fact))]
        if isinstance(node, FindingRef):
            name = node.finding
            if negated:
                return [Box(neg=frozenset([name]))]
            if self.producers is None:
                return [Box(pos=frozenset([name]))]
            if name in findings:
                return []  # least fixpoint: a finding cannot support its own conclusion
            out: list[Box] = []
            for cond in self.producers.get(name, []):
                out += self._meet_all([self._dnf(cond, False, (), (*findings, name)), [Box(pos=frozenset([name]))]])
            if len(out) > self.LIMIT:
                raise _TooComplex
            return out
        if isinstance(node, ConditionRef):
            if node.ref in refs or node.ref not in self.conditions:
                raise _Unresolvable
            return self._dnf(self.conditions[node.ref].when, negated, (*refs, node.ref), findings)
        if isinstance(node, NotOf):
            return self._dnf(node.not_, not negated, refs, findings)
        if isinstance(node, (AllOf, AnyOf)):
            children = node.all if isinstance(node, AllOf) else node.any
            conjunctive = isinstance(node, AllOf) != negated
            groups = [self._dnf(c, negated, refs, findings) for c in children]
            if conjunctive:
                return self._meet_all(groups)
            union = [box for group in groups for box in group]
            if len(union) > self.LIMIT:
                raise _TooComplex
            return union
        raise TypeError(f"not a condition: {node!r}")


# ---- sites: where each rule, named condition and table is defined ------------------------------------------------


@dataclass(frozen=True)
class RuleSite:
    file: SourceFile
    index: int
    rule: Rule

    @property
    def path(self) -> YamlPath:
        return ("rules", self.index)

    @property
    def line(self) -> int | None:
        return self.file.line((*self.path, "id"))


@dataclass(frozen=True)
class ConditionSite:
    file: SourceFile
    name: str
    condition: NamedCondition

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


class WaiverFile(BaseModel):
    """``lint_waivers.yaml``: per rule (or named condition, or ``table/REGIME``), lint id -> reason."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    waivers: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description="subject (rule id, named condition, or table/REGIME) -> {lint id: reason it is accepted}",
    )


# ---- the context every lint reads ---------------------------------------------------------------------------------


class LintContext:
    """The loaded files, the knowledge base and derived indexes, shared by every lint."""

    def __init__(self, kb: KnowledgeBase, kb_dir: Path, dirs: list[Path], files: list[SourceFile],
                 tests: list[SourceFile], waivers: list[SourceFile], load_errors: list[Diagnostic]) -> None:
        self.kb = kb
        self.kb_dir = kb_dir
        self.dirs = dirs
        self.files = files
        self.tests = tests
        self.waiver_files = waivers
        self.load_errors = load_errors
        self.rules: list[RuleSite] = []
        self.conditions_sites: list[ConditionSite] = []
        self.table_sites: list[TableSite] = []
        for f in files:
            if f.model is None:
                continue
            rf: RuleFile = f.model
            self.rules += [RuleSite(f, i, r) for i, r in enumerate(rf.rules)]
            self.conditions_sites += [ConditionSite(f, n, c) for n, c in rf.conditions.items()]
            self.table_sites += [TableSite(f, i, t) for i, t in enumerate(rf.tables)]
        self.rule_by_id: dict[str, RuleSite] = {}
        for site in self.rules:
            self.rule_by_id.setdefault(site.rule.id, site)
        self.conditions: dict[str, NamedCondition] = {}
        self.condition_by_name: dict[str, ConditionSite] = {}
        for cs in self.conditions_sites:
            self.conditions.setdefault(cs.name, cs.condition)
            self.condition_by_name.setdefault(cs.name, cs)
        self.tables: dict[str, TableSite] = {}
        for ts in self.table_sites:
            self.tables.setdefault(ts.table.regime, ts)
        self.producers: dict[str, list[RuleSite]] = {}
        for site in self.rules:
            if site.rule.then.finding:
                self.producers.setdefault(site.rule.then.finding.id, []).append(site)
        self.suite: Any = None  # the rule-test suite result, when the rules load

    # -- helpers lints use --

    def diag(self, lint: type[Lint], file: SourceFile, path: Sequence[str | int], message: str, *,
             subject: str | None = None, hint: str = "") -> Diagnostic:
        return Diagnostic(lint=lint.id, name=lint.name, severity=lint.severity, path=file.display,
                          line=file.line(path), subject=subject, message=message, hint=hint)

    def condition_roots(self) -> Iterator[tuple[SourceFile, YamlPath, Condition, str]]:
        """(file, path of `when`, condition, subject) for every rule and named condition."""
        for site in self.rules:
            yield site.file, (*site.path, "when"), site.rule.when, site.rule.id
        for cs in self.conditions_sites:
            yield cs.file, (*cs.path, "when"), cs.condition.when, cs.name

    @cached_property
    def domains(self) -> dict[str, frozenset[Value]]:
        """Enumerable fact domains (enum choices)."""
        return {name: frozenset(spec.choices) for name, spec in self.kb.facts.items()
                if spec.type == "enum" and spec.choices}

    @cached_property
    def algebra(self) -> BoxAlgebra:
        return BoxAlgebra(self.conditions, self.domains)

    @cached_property
    def expanded(self) -> BoxAlgebra:
        producers = {f: [s.rule.when for s in sites] for f, sites in self.producers.items()}
        return BoxAlgebra(self.conditions, self.domains, producers)

    def refs_of(self, node: Condition, stack: tuple[str, ...] = ()) -> set[str]:
        """Named conditions a condition uses, transitively (undefined and cyclic ones included, not entered)."""
        out: set[str] = set()
        for n, _ in walk_raw(node, ()):
            if isinstance(n, ConditionRef):
                out.add(n.ref)
                if n.ref in self.conditions and n.ref not in stack:
                    out |= self.refs_of(self.conditions[n.ref].when, (*stack, n.ref))
        return out

    def findings_of(self, node: Condition, negated: bool = False,
                    stack: tuple[str, ...] = ()) -> list[tuple[str, bool]]:
        """(finding, negated) references of a condition, through named conditions."""
        out: list[tuple[str, bool]] = []
        if isinstance(node, FindingRef):
            out.append((node.finding, negated))
        elif isinstance(node, ConditionRef):
            if node.ref in self.conditions and node.ref not in stack:
                out += self.findings_of(self.conditions[node.ref].when, negated, (*stack, node.ref))
        elif isinstance(node, NotOf):
            out += self.findings_of(node.not_, not negated, stack)
        elif isinstance(node, (AllOf, AnyOf)):
            for child in node.all if isinstance(node, AllOf) else node.any:
                out += self.findings_of(child, negated, stack)
        return out

    @cached_property
    def obtainable(self) -> set[str]:
        """Facts a user can give or expert/derive.py can compute from facts a user can give."""
        known = {name for name, spec in self.kb.facts.items() if spec.askable}
        changed = True
        while changed:
            changed = False
            for d in DERIVATIONS:
                if d.output not in known and all(i in known for i in d.inputs):
                    known.add(d.output)
                    changed = True
        return known

    @cached_property
    def finding_graph(self) -> Any:
        """networkx DiGraph: finding f -> finding g when a rule concluding g reads f (edge `negated`, `rules`)."""
        import networkx as nx

        graph = nx.DiGraph()
        for site in self.rules:
            then = site.rule.then
            if not then.finding:
                continue
            for f, neg in self.findings_of(site.rule.when):
                if graph.has_edge(f, then.finding.id):
                    data = graph.edges[f, then.finding.id]
                    data["negated"] = data["negated"] or neg
                    data["rules"].add(site.rule.id)
                else:
                    graph.add_edge(f, then.finding.id, negated=neg, rules={site.rule.id})
        return graph

    @cached_property
    def cycles(self) -> list[tuple[list[str], bool, list[str]]]:
        """(findings in the cycle, through negation?, rules on it) for every simple cycle of the finding graph."""
        import networkx as nx

        out = []
        graph = self.finding_graph
        for cycle in nx.simple_cycles(graph):
            edges = list(zip(cycle, [*cycle[1:], cycle[0]], strict=True))
            negated = any(graph.edges[a, b]["negated"] for a, b in edges)
            rules = sorted({r for a, b in edges for r in graph.edges[a, b]["rules"]})
            out.append((cycle, negated, rules))
        return out


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


class InvalidYaml(_LoadLint):
    id = "DAM001"
    name = "invalid-yaml"
    severity = "error"
    summary = "The file is not valid YAML, cannot be read, or a mapping repeats a key."
    docs = """
**Why it matters.** A file that does not parse cannot be loaded at all, and a repeated key silently keeps only the
last value (YAML 1.2 forbids duplicates), so half of what you wrote is ignored.

**Example.**
```yaml
- id: my-rule
  when: {fact: gpu_util, lt: 0.8}
  when: {fact: gpu_util, lt: 0.5}   # DAM001: duplicate key `when`
```
**Fix.** Correct the syntax at the line shown; keep one value per key.
"""


class SchemaViolation(_LoadLint):
    id = "DAM002"
    name = "schema-violation"
    severity = "error"
    summary = "The file does not match its schema (rule file, rule-test file or waiver file)."
    docs = """
**Why it matters.** The loader rejects the whole rules directory when one file does not match its schema.

**Example.** `severity: high` (the schema allows info, warning, critical); a condition with two keys
(`{fact: x, all: [...]}`); `then` that concludes nothing; a missing `rationale`.

**Fix.** Follow the message; editors validate as you type with `schemas/rules.schema.json`
(`dam schema rules`).
"""


class DuplicateDefinition(Lint):
    id = "DAM003"
    name = "duplicate-definition"
    severity = "error"
    summary = "A rule id, named condition or regime table is defined more than once."
    docs = """
**Why it matters.** Ids are how tests, waivers, reports and other rules refer to a rule; two definitions make every
reference ambiguous, and the loader refuses them.

**Fix.** Rename one of them, or delete the copy.
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        first_rule: dict[str, RuleSite] = {}
        for site in ctx.rules:
            other = first_rule.setdefault(site.rule.id, site)
            if other is not site:
                yield ctx.diag(self.__class__, site.file, (*site.path, "id"),
                               f"rule id {site.rule.id!r} is already defined at {other.file.display}:{other.line}",
                               subject=site.rule.id)
        first_cond: dict[str, ConditionSite] = {}
        for cs in ctx.conditions_sites:
            prev = first_cond.setdefault(cs.name, cs)
            if prev is not cs:
                yield ctx.diag(self.__class__, cs.file, cs.path,
                               f"named condition {cs.name!r} is already defined at "
                               f"{prev.file.display}:{prev.file.line(prev.path)}", subject=cs.name)
        first_table: dict[str, TableSite] = {}
        for ts in ctx.table_sites:
            prev_t = first_table.setdefault(ts.table.regime, ts)
            if prev_t is not ts:
                yield ctx.diag(self.__class__, ts.file, ts.path,
                               f"regime {ts.table.regime!r} already has a table at "
                               f"{prev_t.file.display}:{prev_t.file.line(prev_t.path)}",
                               subject=f"table/{ts.table.regime}", hint="a regime has exactly one table")


def _suggest(name: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.6)
    return f"did you mean {', '.join(close)}?" if close else ""


class UnknownFact(Lint):
    id = "DAM004"
    name = "unknown-fact"
    severity = "error"
    summary = "A condition or `measure` names a fact that knowledge_base/facts.yaml does not define."
    docs = """
**Why it matters.** Facts are the vocabulary observations, parsers and rules share; a misspelt fact is never known,
so the rule can never fire, and the loader refuses it.

**Example.** `{fact: gpu_utilization, lt: 0.8}` (the fact is `gpu_util`).

**Fix.** Use a name from knowledge_base/facts.yaml, or add the fact there first (with its type, unit, range and the
question to ask for it).
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        facts = ctx.kb.facts
        for file, root, cond, subject in ctx.condition_roots():
            for node, path in walk_raw(cond, root):
                if isinstance(node, FactTest) and node.fact not in facts:
                    yield ctx.diag(self.__class__, file, (*path, "fact"), f"unknown fact {node.fact!r}",
                                   subject=subject, hint=_suggest(node.fact, facts))
        for site in ctx.rules:
            for i, fact in enumerate(site.rule.then.measure):
                if fact not in facts:
                    yield ctx.diag(self.__class__, site.file, (*site.path, "then", "measure", i),
                                   f"`measure` names unknown fact {fact!r}", subject=site.rule.id,
                                   hint=_suggest(fact, facts))


class InvalidFactValue(Lint):
    id = "DAM005"
    name = "invalid-fact-value"
    severity = "error"
    summary = "An ordered comparison on a non-numeric fact, or a value that is not one of an enum fact's choices."
    docs = """
**Why it matters.** `dtype` or `hardware` have no order, and a value outside an enum's choices can never be
observed (observations are validated against the same choices); the loader refuses both.

**Example.** `{fact: dtype, eq: bfloat16}` (choices: fp32, tf32, bf16, fp16, fp8, int8); `{fact: phase, gt: 1}`.

**Fix.** Use one of the values the message lists; for hardware, a catalog id from `dam hardware list`.
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        for file, root, cond, subject in ctx.condition_roots():
            for node, path in walk_raw(cond, root):
                if not isinstance(node, FactTest):
                    continue
                spec = ctx.kb.facts.get(node.fact)
                if spec is None or spec.type not in ("enum", "hardware"):
                    continue
                allowed = (spec.choices or []) if spec.type == "enum" else list(ctx.kb.hardware)
                for op, value in node.ops():
                    where = (*path, op)
                    if op in ("lt", "le", "gt", "ge"):
                        yield ctx.diag(self.__class__, file, where,
                                       f"{node.fact} is not numeric, so `{op}` is meaningless", subject=subject,
                                       hint="use eq, ne, in or not_in")
                        continue
                    for v in value if isinstance(value, list) else [value]:
                        if v not in allowed:
                            yield ctx.diag(self.__class__, file, where, f"{v!r} is not a value of {node.fact}",
                                           subject=subject,
                                           hint=_suggest(str(v), allowed) or f"one of: {', '.join(allowed)}")


class UnknownCondition(Lint):
    id = "DAM006"
    name = "unknown-condition"
    severity = "error"
    summary = "A `ref` names a named condition that no rule file defines (a dangling reference)."
    docs = """
**Why it matters.** The loader cannot inline the condition, so it refuses the rules.

**Example.** `ref: compute_bussy` when rules/conditions.yaml defines `compute_busy`.

**Fix.** Correct the name, or define the condition under `conditions:` in a rule file (usually conditions.yaml).
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        for file, root, cond, subject in ctx.condition_roots():
            for node, path in walk_raw(cond, root):
                if isinstance(node, ConditionRef) and node.ref not in ctx.conditions:
                    yield ctx.diag(self.__class__, file, (*path, "ref"), f"unknown named condition {node.ref!r}",
                                   subject=subject, hint=_suggest(node.ref, ctx.conditions))


class ConditionCycle(Lint):
    id = "DAM007"
    name = "condition-cycle"
    severity = "error"
    summary = "Named conditions refer to each other in a cycle."
    docs = """
**Why it matters.** Inlining a cycle never ends; the loader refuses it.

**Example.** `a: {when: {ref: b}}` and `b: {when: {any: [{ref: a}, ...]}}`.

**Fix.** Break the cycle: one of the conditions has to say what it means without the other.
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        import networkx as nx

        graph = nx.DiGraph()
        for cs in ctx.conditions_sites:
            graph.add_node(cs.name)
            for node, _ in walk_raw(cs.condition.when, ()):
                if isinstance(node, ConditionRef) and node.ref in ctx.conditions:
                    graph.add_edge(cs.name, node.ref)
        for cycle in nx.simple_cycles(graph):
            first = min(cycle)
            cs = ctx.condition_by_name[first]
            at = cycle.index(first)
            ordered = [*cycle[at:], *cycle[:at], first]
            yield ctx.diag(self.__class__, cs.file, cs.path,
                           f"named conditions refer to each other in a cycle: {' -> '.join(ordered)}", subject=first)


class UnknownFinding(Lint):
    id = "DAM008"
    name = "unknown-finding"
    severity = "error"
    summary = "A `finding` condition names a finding that no rule concludes."
    docs = """
**Why it matters.** The condition can never be true, so the rule never fires; the loader refuses it.

**Example.** `{finding: data_starvation}` when the rule that detects it concludes `data_starved`.

**Fix.** Use the id a rule concludes (`dam rules show RULE`), or add the rule that concludes it.
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        for file, root, cond, subject in ctx.condition_roots():
            for node, path in walk_raw(cond, root):
                if isinstance(node, FindingRef) and node.finding not in ctx.producers:
                    yield ctx.diag(self.__class__, file, (*path, "finding"),
                                   f"no rule concludes finding {node.finding!r}", subject=subject,
                                   hint=_suggest(node.finding, ctx.producers))


class UnknownReference(Lint):
    id = "DAM009"
    name = "unknown-reference"
    severity = "error"
    summary = "A conclusion or regime table names a regime or an optimization the knowledge base does not define."
    docs = """
**Why it matters.** Regimes come from knowledge_base/regimes.yaml and optimizations from
knowledge_base/optimizations.yaml (with their how-to and source); the loader refuses anything else.

**Fix.** Use an id from those files, or add the optimization/regime there first.
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        kb = ctx.kb
        regimes = kb.regimes.regimes
        for site in ctx.rules:
            then = site.rule.then
            base = (*site.path, "then")
            if then.bottleneck and then.bottleneck.regime not in regimes:
                yield ctx.diag(self.__class__, site.file, (*base, "bottleneck", "regime"),
                               f"unknown regime {then.bottleneck.regime!r}", subject=site.rule.id,
                               hint=f"one of: {', '.join(regimes)}")
            ids = [("recommend", i, r.id) for i, r in enumerate(then.recommend)]
            ids += [("waste", i, w.id) for i, w in enumerate(then.waste)]
            for key, i, opt_id in ids:
                if opt_id not in kb.optimizations:
                    yield ctx.diag(self.__class__, site.file, (*base, key, i, "id"),
                                   f"unknown optimization {opt_id!r}", subject=site.rule.id,
                                   hint=_suggest(opt_id, kb.optimizations))
        for ts in ctx.table_sites:
            subject = f"table/{ts.table.regime}"
            if ts.table.regime not in regimes:
                yield ctx.diag(self.__class__, ts.file, (*ts.path, "regime"),
                               f"unknown regime {ts.table.regime!r}", subject=subject)
            for i, opt in enumerate(ts.table.effective):
                if opt not in kb.optimizations:
                    yield ctx.diag(self.__class__, ts.file, (*ts.path, "effective", i),
                                   f"unknown optimization {opt!r}", subject=subject,
                                   hint=_suggest(opt, kb.optimizations))
            for i, w in enumerate(ts.table.wasted):
                if w.id not in kb.optimizations:
                    yield ctx.diag(self.__class__, ts.file, (*ts.path, "wasted", i),
                                   f"unknown optimization {w.id!r}", subject=subject,
                                   hint=_suggest(w.id, kb.optimizations))


class EffectiveAndWasted(Lint):
    id = "DAM010"
    name = "effective-and-wasted"
    severity = "error"
    summary = "A regime table lists an optimization as both effective and wasted."
    docs = """
**Why it matters.** The table is the answer to "what helps when the job is X-bound"; saying both is no answer, and
the loader refuses it.

**Fix.** Decide: keep it in one list (a rule with a narrower condition can still mark it wasted with `waste`).
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        for ts in ctx.table_sites:
            wasted = {w.id for w in ts.table.wasted}
            for i, opt in enumerate(ts.table.effective):
                if opt in wasted:
                    yield ctx.diag(self.__class__, ts.file, (*ts.path, "effective", i),
                                   f"{opt} is listed as both effective and wasted for {ts.table.regime}",
                                   subject=f"table/{ts.table.regime}")


class NegationCycle(Lint):
    id = "DAM011"
    name = "negation-cycle"
    severity = "error"
    summary = "A rule depends, through `not`, on its own conclusion (a cycle of findings with a negation on it)."
    docs = """
**Why it matters.** Rules are evaluated in strata so that `not: {finding: f}` is read only after every rule that
could conclude `f` has run; a cycle through a negation has no such order (the rule would retract its own premise),
so the loader refuses it.

**Example.** `a` concludes `fa` when `not: {finding: fb}`, and `b` concludes `fb` when `{finding: fa}`.

**Fix.** Conclude one of the findings from facts alone, or drop the negation.
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        for cycle, negated, rules in ctx.cycles:
            if negated:
                site = ctx.rule_by_id[rules[0]]
                yield ctx.diag(self.__class__, site.file, (*site.path, "when"),
                               f"negation through a cycle of findings {' -> '.join([*cycle, cycle[0]])} "
                               f"(rules {', '.join(rules)})", subject=site.rule.id)


class LoadError(_LoadLint):
    id = "DAM012"
    name = "load-error"
    severity = "error"
    summary = "The rules fail to load for a reason no other check names (the loader's own message)."
    docs = """
**Why it matters.** `dam diagnose` would refuse these rules with the same message.

**Fix.** Follow the message; it names the file, the rule and the field.
"""


# -- warnings --


def _domain(spec: FactSpec) -> tuple[float, float, bool] | None:
    """(min, max, exclusive_min) of a numeric fact."""
    if spec.type == "fraction":
        return 0.0, 1.0, False
    if spec.type in ("number", "integer"):
        lo = -math.inf if spec.min is None else spec.min
        hi = math.inf if spec.max is None else spec.max
        return lo, hi, spec.exclusive_min
    return None


class ThresholdOutOfRange(Lint):
    id = "DAM101"
    name = "threshold-out-of-range"
    severity = "warning"
    summary = "A comparison's constant is outside the fact's range or of the wrong kind, so it never (or always) holds."
    docs = """
**Why it matters.** Fractions are stored in [0, 1] (`62%` on input becomes 0.62), times and sizes in the fact's
canonical unit, so `{fact: gpu_util, lt: 80}` is always true and `{fact: gpu_util, gt: 80}` never is. Comparing
a number with a string (`{fact: step_time_s, eq: "10 ms"}`) never matches.

**Example.**
```yaml
when: {fact: mem_bw_util, ge: 70}     # DAM101: a fraction; use 0.7 for 70 %
```
**Fix.** Write the threshold in the fact's canonical unit (knowledge_base/facts.yaml: `type`, `unit`, `min`,
`max`).
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        for file, root, cond, subject in ctx.condition_roots():
            for node, path in walk_raw(cond, root):
                if not isinstance(node, FactTest) or node.fact not in ctx.kb.facts:
                    continue
                spec = ctx.kb.facts[node.fact]
                domain = _domain(spec)
                if domain is None:
                    continue
                for op, value in node.ops():
                    problem = self._problem(spec, domain, op, value)
                    if problem:
                        message, hint = problem
                        yield ctx.diag(self.__class__, file, (*path, op), message, subject=subject, hint=hint)

    @staticmethod
    def _problem(spec: FactSpec, domain: tuple[float, float, bool], op: str,
                 value: Any) -> tuple[str, str] | None:
        lo, hi, exclusive = domain
        unit = f" {spec.unit}" if spec.unit else ""
        range_text = spec.range_text()
        values = value if isinstance(value, list) else [value]
        strings = [v for v in values if isinstance(v, str)]
        if strings:
            return (f"{spec.name} is a number but is compared with {_fmt(strings[0])!r}, which never matches",
                    f"write a plain number in the fact's canonical unit{f' ({spec.unit})' if spec.unit else ''}")
        if spec.type == "integer" and op in ("eq", "ne", "in", "not_in"):
            odd = [v for v in values if float(v) != int(v)]
            if odd:
                return f"{spec.name} is an integer, so it never equals {_fmt(odd[0])}", ""
        hint = ""
        if spec.type == "fraction" and any(1 < float(v) <= 100 for v in values):
            hint = f"fractions are stored in [0, 1]: use {_fmt(float(values[0]) / 100)} for {_fmt(values[0])} %"
        if op in ("eq", "ne", "in", "not_in"):
            outside = [v for v in values if not (lo <= float(v) <= hi) or (exclusive and float(v) == lo)]
            if outside:
                verb = "never" if op in ("eq", "in") else "always"
                return (f"{spec.name} {_SYMBOLS[op]} {_fmt(value)} {verb} holds: {_fmt(outside[0])} is outside "
                        f"its range ({range_text})", hint)
            return None
        c = float(value)
        never = {"lt": c <= lo, "le": c < lo or (c == lo and exclusive), "gt": c >= hi, "ge": c > hi}[op]
        always = {"lt": c > hi, "le": c >= hi, "gt": c < lo or (c == lo and exclusive), "ge": c <= lo}[op]
        if never or always:
            verb = "never" if never else "always"
            return (f"{spec.name} {_SYMBOLS[op]} {_fmt(value)}{unit} {verb} holds: {spec.name} is {range_text}",
                    hint)
        return None


def _invalid_leaves(ctx: LintContext, cond: Condition) -> bool:
    """True when a fact test names an unknown fact or a value outside an enum or the hardware catalog."""
    roots = [cond, *(ctx.conditions[name].when for name in sorted(ctx.refs_of(cond)) if name in ctx.conditions)]
    for node, _ in (pair for root in roots for pair in walk_raw(root, ())):
        if not isinstance(node, FactTest):
            continue
        spec = ctx.kb.facts.get(node.fact)
        if spec is None:
            return True
        if spec.type in ("enum", "hardware"):
            allowed = set(spec.choices or []) if spec.type == "enum" else set(ctx.kb.hardware)
            for op, value in node.ops():
                values = value if isinstance(value, list) else [value]
                if op in ("lt", "le", "gt", "ge") or any(v not in allowed for v in values):
                    return True
    return False


def _pair_conflict(algebra: BoxAlgebra, children: Sequence[Condition], negated: bool) -> tuple[int, int] | None:
    groups = [algebra.boxes(c, negated) for c in children]
    for i in range(len(groups)):
        for j in range(i + 1, len(groups)):
            if not algebra.meet(groups[i], groups[j]):
                return i, j
    return None


class UnsatisfiableCondition(Lint):
    id = "DAM102"
    name = "unsatisfiable-condition"
    severity = "warning"
    summary = "A condition (or a part of one) can never be true: its tests on one fact contradict each other."
    docs = """
**Why it matters.** A rule whose condition can never hold never fires, and a branch of an `any` that can never hold
is dead weight that looks like coverage. Usually one comparison points the wrong way.

**Example.**
```yaml
when:
  all:
    - {fact: mem_bw_util, lt: 0.5}
    - {fact: mem_bw_util, gt: 0.8}     # DAM102: cannot both hold
```
**Fix.** Flip the comparison that is wrong, or split the rule. The analysis intersects, per fact, the intervals,
allowed values and known/unknown requirements of every way the condition can hold (named conditions inlined,
`not` pushed inwards).
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        algebra = ctx.algebra
        for file, root, cond, subject in ctx.condition_roots():
            if _invalid_leaves(ctx, cond):
                continue  # DAM004/DAM005 report it
            try:
                whole = algebra.boxes(cond)
            except (_TooComplex, _Unresolvable):
                continue
            found = False
            for node, path in walk_raw(cond, root):
                message = self._node_problem(algebra, node)
                if message:
                    found = True
                    at = (*path, "all") if isinstance(node, AllOf) else path
                    yield ctx.diag(self.__class__, file, at, message, subject=subject)
            if not whole and not found and not self._uses_unsatisfiable_ref(ctx, cond):
                yield ctx.diag(self.__class__, file, root, f"the condition can never be true: {condition_text(cond)}",
                               subject=subject)

    @staticmethod
    def _node_problem(algebra: BoxAlgebra, node: Condition) -> str | None:
        try:
            if isinstance(node, FactTest) and len(node.ops()) + (node.known is not None) > 1:
                if not algebra.boxes(node):
                    return f"`{condition_text(node)}` can never be true"
            elif isinstance(node, AllOf) and not algebra.boxes(node):
                if any(not algebra.boxes(c) for c in node.all):
                    return None  # a part is unsatisfiable on its own; reported there
                pair = _pair_conflict(algebra, node.all, False)
                if pair:
                    a, b = (condition_text(node.all[k]) for k in pair)
                    return f"`{a}` and `{b}` cannot both be true, so this `all` never holds"
                return f"the parts of this `all` can never all be true: {condition_text(node)}"
        except (_TooComplex, _Unresolvable):
            return None
        return None

    @staticmethod
    def _uses_unsatisfiable_ref(ctx: LintContext, cond: Condition) -> bool:
        for name in ctx.refs_of(cond):
            if name in ctx.conditions:
                try:
                    if not ctx.algebra.boxes(ctx.conditions[name].when):
                        return True
                except (_TooComplex, _Unresolvable):
                    continue
        return False


class UnreachableRule(Lint):
    id = "DAM103"
    name = "unreachable-rule"
    severity = "warning"
    summary = "A rule can never fire: the findings it needs are never concluded alongside the rest of its condition."
    docs = """
**Why it matters.** The rule's own condition is consistent, but with each `finding` replaced by the conditions of
the rules that conclude it, nothing satisfies it: it reads a conclusion no rule can reach in that situation.

**Example.** `{finding: low_gpu_util}` (concluded when `gpu_util < 0.8`) together with `{fact: gpu_util, gt: 0.95}`.

**Fix.** Read the finding whose rule actually covers this situation, or fix the producer's threshold. (Findings in a
cycle are reported as DAM108 instead.)
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        in_cycles = {r for _, _, rules in ctx.cycles for r in rules}
        for site in ctx.rules:
            rule = site.rule
            used = ctx.findings_of(rule.when)
            if not used or rule.id in in_cycles or any(f not in ctx.producers for f, _ in used):
                continue
            try:
                if not ctx.algebra.boxes(rule.when) or ctx.expanded.boxes(rule.when):
                    continue
            except (_TooComplex, _Unresolvable):
                continue
            needs = sorted({f for f, neg in used if not neg})
            detail = "; ".join(f"{f} (from {', '.join(s.rule.id for s in ctx.producers[f])})" for f in needs)
            yield ctx.diag(self.__class__, site.file, (*site.path, "when"),
                           f"can never fire: no situation satisfies both its condition and the rules that conclude "
                           f"the findings it needs: {detail}", subject=rule.id)


class UnobtainableFact(Lint):
    id = "DAM104"
    name = "unobtainable-fact"
    severity = "warning"
    summary = "A rule compares a fact that is neither askable (observed) nor derivable from askable facts."
    docs = """
**Why it matters.** A fact of kind `derived` with no derivation in expert/derive.py (or whose inputs cannot all be
obtained) is never known, so the comparison is never true and nobody is ever asked for it.

**Fix.** Make the fact `observed`/`both` in knowledge_base/facts.yaml (with a question), add its derivation, or
compare a fact that can be known.
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        for file, root, cond, subject in ctx.condition_roots():
            for node, path in walk_raw(cond, root):
                if isinstance(node, FactTest) and node.fact in ctx.kb.facts and node.fact not in ctx.obtainable \
                        and node.ops():
                    yield ctx.diag(self.__class__, file, (*path, "fact"),
                                   f"{node.fact} can never be known: it is not askable and no derivation computes it "
                                   f"from askable facts", subject=subject)


class UnusedCondition(Lint):
    id = "DAM105"
    name = "unused-condition"
    severity = "warning"
    summary = "A named condition is defined but no rule uses it (directly or through another named condition)."
    docs = """
**Why it matters.** Dead definitions mislead readers about what the rules check, and drift out of date unnoticed.

**Fix.** Use it with `ref: NAME`, or delete it.
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        used: set[str] = set()
        for site in ctx.rules:
            used |= ctx.refs_of(site.rule.when)
        for cs in ctx.conditions_sites:
            if cs.name not in used:
                yield ctx.diag(self.__class__, cs.file, cs.path, f"named condition {cs.name!r} is not used by any rule",
                               subject=cs.name)


class ConflictingConclusions(Lint):
    id = "DAM106"
    name = "conflicting-conclusions"
    severity = "warning"
    summary = ("Two rules that can fire together contradict each other: one recommends what the other marks wasted, "
               "or they vote different regimes at full strength with no precedence between them.")
    docs = """
**Why it matters.** When both rules fire, the report silently keeps one side: a `waste` always removes the same
optimization from the recommendations, and a tie between "confirmed" verdicts is broken by strength, score and then
`precedence` in knowledge_base/regimes.yaml. The author of the losing rule should know.

Two rules *can fire together* when some set of facts satisfies both conditions, each `finding` replaced by the
conditions of the rules that conclude it. The message gives such facts.

Votes for different regimes are reported only when a regime is missing from `precedence`; the loader requires the
list to name every regime, so with a valid knowledge base every verdict tie is ordered and declared.

**Example.** `input-host-cpu-saturated` wastes `more_dataloader_workers` (the host CPU is pegged) while a rule for
`num_workers: 0` recommends it: with both facts the recommendation disappears.

**Fix.** Make the conditions exclusive (e.g. add `host_cpu_util < 0.9` to the recommending rule), or, if the
override is intended, waive it in lint_waivers.yaml with the reason.
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        expanded = ctx.expanded
        boxes: dict[str, list[Box] | None] = {}

        def of(site: RuleSite) -> list[Box] | None:
            if site.rule.id not in boxes:
                try:
                    boxes[site.rule.id] = expanded.boxes(site.rule.when)
                except (_TooComplex, _Unresolvable):
                    boxes[site.rule.id] = None
            return boxes[site.rule.id]

        wasters: dict[str, list[RuleSite]] = {}
        for site in ctx.rules:
            for w in site.rule.then.waste:
                wasters.setdefault(w.id, []).append(site)
        for site in ctx.rules:
            for i, rec in enumerate(site.rule.then.recommend):
                for other in wasters.get(rec.id, []):
                    if other.rule.id == site.rule.id:
                        continue
                    witness = self._together(expanded, of(site), of(other))
                    if witness is not None:
                        yield ctx.diag(self.__class__, site.file, (*site.path, "then", "recommend", i),
                                       f"recommends {rec.id}, but {other.rule.id} marks it wasted and both can fire "
                                       f"together (e.g. {witness.describe()}); the waste wins", subject=site.rule.id,
                                       hint="make the conditions exclusive, or waive it with the reason")
        precedence = set(ctx.kb.regimes.precedence)
        confirmed = [s for s in ctx.rules if s.rule.then.bottleneck and s.rule.then.bottleneck.strength == "confirmed"]
        for i, a in enumerate(confirmed):
            for b in confirmed[i + 1:]:
                ra, rb = a.rule.then.bottleneck.regime, b.rule.then.bottleneck.regime  # type: ignore[union-attr]
                if ra == rb or (ra in precedence and rb in precedence):
                    continue
                witness = self._together(expanded, of(a), of(b))
                if witness is not None:
                    missing = ", ".join(sorted({ra, rb} - precedence))
                    yield ctx.diag(self.__class__, a.file, (*a.path, "then", "bottleneck"),
                                   f"votes {ra} (confirmed) while {b.rule.id} votes {rb} (confirmed) and both can "
                                   f"fire together (e.g. {witness.describe()}); {missing} is not in `precedence`",
                                   subject=a.rule.id, hint="list every regime in knowledge_base/regimes.yaml "
                                                           "`precedence`")

    @staticmethod
    def _together(algebra: BoxAlgebra, a: list[Box] | None, b: list[Box] | None) -> Box | None:
        if a is None or b is None:
            return None
        try:
            both = algebra.meet(a, b)
        except _TooComplex:
            return None
        return min(both, key=lambda box: (len(box.facts), box.describe())) if both else None


class RecommendsWasted(Lint):
    id = "DAM107"
    name = "recommends-wasted"
    severity = "warning"
    summary = "A rule recommends an optimization that its own regime's table (or its own `waste`) lists as wasted."
    docs = """
**Why it matters.** A rule that votes regime R and recommends what R's table in rules/optimization_tables.yaml
says is wasted for R contradicts itself; when R wins, the recommendation is silently dropped.

**Example.** A rule voting `memory` that recommends `more_peak_flops`.

**Fix.** Recommend something from R's `effective` list, or correct the vote or the table.
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        for site in ctx.rules:
            then = site.rule.then
            own = {w.id for w in then.waste}
            table = ctx.tables.get(then.bottleneck.regime) if then.bottleneck else None
            table_wasted = {w.id for w in table.table.wasted} if table else set()
            for i, rec in enumerate(then.recommend):
                where = (*site.path, "then", "recommend", i)
                if rec.id in own:
                    yield ctx.diag(self.__class__, site.file, where, f"recommends {rec.id} and marks it wasted",
                                   subject=site.rule.id)
                elif rec.id in table_wasted and then.bottleneck:
                    yield ctx.diag(self.__class__, site.file, where,
                                   f"votes {then.bottleneck.regime} but recommends {rec.id}, which the "
                                   f"{then.bottleneck.regime} table lists as wasted", subject=site.rule.id)


class FindingCycle(Lint):
    id = "DAM108"
    name = "finding-cycle"
    severity = "warning"
    summary = "Findings depend on each other in a cycle, so the rules on it can only fire if one already has."
    docs = """
**Why it matters.** Rule A concludes `fa` from `fb` and rule B concludes `fb` from `fa`: neither can fire first
(forward chaining starts from facts), so both are dead unless another rule concludes one of the findings.

**Fix.** Conclude one of the findings from facts, or merge the rules.
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        for cycle, negated, rules in ctx.cycles:
            if not negated:
                site = ctx.rule_by_id[rules[0]]
                yield ctx.diag(self.__class__, site.file, (*site.path, "when"),
                               f"findings depend on each other in a cycle: {' -> '.join([*cycle, cycle[0]])} "
                               f"(rules {', '.join(rules)})", subject=site.rule.id)


def _blank(text: str) -> bool:
    return not text.strip() or text.strip().casefold() in _PLACEHOLDER_WORDS


class MissingMetadata(Lint):
    id = "DAM109"
    name = "missing-metadata"
    severity = "warning"
    summary = "A rule's title, source or rationale (or a message, reason or description) is blank or a placeholder."
    docs = """
**Why it matters.** The title, rationale and source are what the report, `dam rules show` and docs/rules.md show to
explain a conclusion; a rule without a source cannot be checked against the literature.

**Fix.** Write them: title (what it detects), rationale (why it matters), source (the seed table or reference).
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        for site in ctx.rules:
            rule = site.rule
            for key in ("title", "source", "rationale"):
                if _blank(getattr(rule, key)):
                    yield ctx.diag(self.__class__, site.file, (*site.path, key), f"`{key}` is blank or a placeholder",
                                   subject=rule.id)
            then = rule.then
            if then.finding and _blank(then.finding.message):
                yield ctx.diag(self.__class__, site.file, (*site.path, "then", "finding", "message"),
                               "the finding's `message` is blank", subject=rule.id)
            texts = [("recommend", i, "why", r.id, r.why) for i, r in enumerate(then.recommend)]
            texts += [("waste", i, "reason", w.id, w.reason) for i, w in enumerate(then.waste)]
            for key, i, attr, opt_id, text in texts:
                if _blank(text):
                    yield ctx.diag(self.__class__, site.file, (*site.path, "then", key, i, attr),
                                   f"`{attr}` of {opt_id} is blank", subject=rule.id)
        for cs in ctx.conditions_sites:
            if _blank(cs.condition.description):
                yield ctx.diag(self.__class__, cs.file, (*cs.path, "description"),
                               "`description` is blank or a placeholder", subject=cs.name)
        for ts in ctx.table_sites:
            if _blank(ts.table.source):
                yield ctx.diag(self.__class__, ts.file, (*ts.path, "source"), "`source` is blank or a placeholder",
                               subject=f"table/{ts.table.regime}")


class UntestedRule(Lint):
    id = "DAM110"
    name = "untested-rule"
    severity = "warning"
    summary = "A rule has no rule-test case that fires it, or none that leaves it silent."
    docs = """
**Why it matters.** A firing case proves the rule can fire and concludes what it should; a silent case (just past a
threshold, or with the deciding fact missing) proves it does not fire everywhere. Cases live in
`tests/<file>.test.yaml` beside the rules and run with `dam rules test` and pytest.

**Example.**
```yaml
- name: low-util-fires
  rule: screen-low-gpu-util
  facts: {gpu_util: 55%}
  expect: {fired: [screen-low-gpu-util]}
- name: low-util-boundary-silent
  rule: screen-low-gpu-util
  facts: {gpu_util: 0.80}
  absent: {fired: [screen-low-gpu-util]}
```
"""
    needs_tests = True

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        for site in ctx.rules:
            tally = ctx.suite.rules.get(site.rule.id)
            if tally is None:
                continue
            missing = [kind for kind, n in (("firing", tally.firing), ("silent", tally.silent)) if n == 0]
            if missing:
                yield ctx.diag(self.__class__, site.file, (*site.path, "id"),
                               f"no {' and no '.join(missing)} rule-test case", subject=site.rule.id,
                               hint=f"add cases with `rule: {site.rule.id}` to tests/{site.file.path.stem}.test.yaml")


class UntestedBranch(Lint):
    id = "DAM111"
    name = "untested-branch"
    severity = "warning"
    summary = "A branch of an `any` is never the reason a rule fires in the rule tests."
    docs = """
**Why it matters.** Each branch of an `any` is a separate way to conclude; an untested branch can be wrong (a typo,
a flipped comparison) with every test still green. A branch written in a rule is exercised when one of the rule's own
(non-todo) cases fires the rule with that branch true (for an `any` under `not`: leaves it silent with the branch
true). A branch inside a named condition is counted once, exercised by the cases of any rule that uses it.

**Fix.** Add a firing case whose facts make that branch true (and the other branches false, to be sure).
"""
    needs_tests = True

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        for site in ctx.rules:
            tally = ctx.suite.rules.get(site.rule.id)
            if tally is None or not tally.covered:
                continue  # DAM110 reports the rule first
            for branch in tally.branches:
                if not branch.covered:
                    yield ctx.diag(self.__class__, site.file, _branch_path(site.path, branch.where),
                                   f"branch {branch.where} is not exercised by any of the rule's test cases",
                                   subject=site.rule.id)
        for name, branches in ctx.suite.conditions.items():
            cs = ctx.condition_by_name.get(name)
            if cs is None:
                continue
            for branch in branches:
                if not branch.covered:
                    yield ctx.diag(self.__class__, cs.file, _branch_path(cs.path, branch.where),
                                   f"branch {branch.where} of named condition {name} is not exercised by the test "
                                   f"cases of any rule that uses it", subject=name)


def _branch_path(base: YamlPath, where: str) -> YamlPath:
    """The YAML path of a branch label such as "when.all[1].any[0]"."""
    path: list[str | int] = [*base]
    for part in where.split("."):
        name, _, index = part.partition("[")
        path.append(name)
        if index:
            path.append(int(index.rstrip("]")))
    return tuple(path)


class UnknownPlaceholder(Lint):
    id = "DAM112"
    name = "unknown-placeholder"
    severity = "warning"
    summary = "A message, why or reason template has a `{placeholder}` that is not a fact name."
    docs = """
**Why it matters.** Templates are filled with fact values (`{gpu_util:.0%}`); anything else renders as `?` in the
report.

**Fix.** Use a fact name from knowledge_base/facts.yaml (observed or derived), with an optional format spec.
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        for site in ctx.rules:
            then = site.rule.then
            texts: list[tuple[YamlPath, str]] = []
            if then.finding:
                texts.append((("then", "finding", "message"), then.finding.message))
            texts += [(("then", "recommend", i, "why"), r.why) for i, r in enumerate(then.recommend)]
            texts += [(("then", "waste", i, "reason"), w.reason) for i, w in enumerate(then.waste)]
            for path, text in texts:
                for name in _placeholders(text):
                    if name not in ctx.kb.facts:
                        yield ctx.diag(self.__class__, site.file, (*site.path, *path),
                                       f"placeholder {{{name}}} is not a fact; it renders as '?'", subject=site.rule.id,
                                       hint=_suggest(name, ctx.kb.facts))


def _placeholders(template: str) -> list[str]:
    try:
        return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError:
        return ["<unbalanced braces>"]


class UnmeasurableFact(Lint):
    id = "DAM113"
    name = "unmeasurable-fact"
    severity = "warning"
    summary = "`measure` names a fact that cannot be measured (derived only) or has no measurement in tools.yaml."
    docs = """
**Why it matters.** `measure` turns into "next measurement" advice (tool and command) only for facts with a
measurement in knowledge_base/tools.yaml; others are dropped from the report without a word.

**Fix.** Measure an observable fact, or add a measurement for it to knowledge_base/tools.yaml (or a `measure` key
on the fact in facts.yaml).
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        kb = ctx.kb
        for site in ctx.rules:
            for i, fact in enumerate(site.rule.then.measure):
                spec = kb.facts.get(fact)
                if spec is None:
                    continue
                where = (*site.path, "then", "measure", i)
                key = spec.measure or fact
                if not spec.askable:
                    yield ctx.diag(self.__class__, site.file, where, f"{fact} is derived, so it cannot be measured",
                                   subject=site.rule.id, hint="measure the facts it is derived from")
                elif key not in kb.tools.measurements:
                    yield ctx.diag(self.__class__, site.file, where,
                                   f"{fact} has no measurement in knowledge_base/tools.yaml, so the advice is dropped",
                                   subject=site.rule.id)


class InvalidRuleTest(Lint):
    id = "DAM114"
    name = "invalid-rule-test"
    severity = "warning"
    summary = "A rule-test case names a rule that does not exist, uses unknown facts, or cannot run."
    docs = """
**Why it matters.** Such a case tests nothing (and `dam rules test` reports it as an error).

**Fix.** Name an existing rule in `rule:`, use fact names from knowledge_base/facts.yaml, and valid values.
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        for tf in ctx.tests:
            if tf.model is None:
                continue
            model: RuleTestFile = tf.model
            folder = tf.path.parent.parent
            if not (folder / model.rule_file).is_file():
                yield ctx.diag(self.__class__, tf, ("rule_file",), f"rule file {model.rule_file!r} does not exist")
            names: set[str] = set()
            for i, case in enumerate(model.cases):
                where: YamlPath = ("cases", i)
                if case.name in names:
                    yield ctx.diag(self.__class__, tf, (*where, "name"), f"duplicate case name {case.name!r}",
                                   subject=case.rule)
                names.add(case.name)
                if case.rule not in ctx.rule_by_id:
                    yield ctx.diag(self.__class__, tf, (*where, "rule"), f"case {case.name} names unknown rule "
                                   f"{case.rule!r}", subject=case.rule, hint=_suggest(case.rule, ctx.rule_by_id))
                for fact in case.facts:
                    if fact not in ctx.kb.facts:
                        yield ctx.diag(self.__class__, tf, (*where, "facts", fact),
                                       f"case {case.name} gives unknown fact {fact!r}", subject=case.rule,
                                       hint=_suggest(fact, ctx.kb.facts))
        if ctx.suite is None:
            return
        by_file = {str(tf.path): tf for tf in ctx.tests}
        for result in ctx.suite.results:
            tf_or_none = by_file.get(result.file)
            if tf_or_none is None or not result.error or "not loaded" in result.error:
                continue
            case = next(c for c in tf_or_none.model.cases if c.name == result.case)
            if all(fact in ctx.kb.facts for fact in case.facts):  # unknown facts are reported above
                index = next(i for i, c in enumerate(tf_or_none.model.cases) if c.name == result.case)
                first = result.error.splitlines()[-1].strip(" -")
                yield ctx.diag(self.__class__, tf_or_none, ("cases", index, "facts"),
                               f"case {result.case} cannot run: {first}", subject=result.rule)


class UnusedWaiver(Lint):
    id = "DAM115"
    name = "unused-waiver"
    severity = "warning"
    summary = "A waiver suppresses nothing, names an unknown lint, or tries to waive an error."
    docs = """
**Why it matters.** Stale waivers hide future problems of the same kind on the same rule. Errors cannot be waived:
the loader refuses the rules whatever the waiver says.

**Fix.** Delete the waiver (or correct its rule id or lint id).
"""


LINTS: tuple[type[Lint], ...] = (
    InvalidYaml, SchemaViolation, DuplicateDefinition, UnknownFact, InvalidFactValue, UnknownCondition,
    ConditionCycle, UnknownFinding, UnknownReference, EffectiveAndWasted, NegationCycle, LoadError,
    ThresholdOutOfRange, UnsatisfiableCondition, UnreachableRule, UnobtainableFact, UnusedCondition,
    ConflictingConclusions, RecommendsWasted, FindingCycle, MissingMetadata, UntestedRule, UntestedBranch,
    UnknownPlaceholder, UnmeasurableFact, InvalidRuleTest, UnusedWaiver,
)
LINTS_BY_ID: dict[str, type[Lint]] = {lint.id: lint for lint in LINTS}


def lint_page(lint_id: str) -> str:
    """The docs page of one lint; raises KnowledgeBaseError for an unknown id."""
    lint = LINTS_BY_ID.get(lint_id.upper())
    if lint is None:
        raise KnowledgeBaseError([Problem(f"lint {lint_id}", "no such lint",
                                          _suggest(lint_id.upper(), LINTS_BY_ID) or "see dam rules lint --list")])
    return lint.page()


# ---- running -------------------------------------------------------------------------------------------------------


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _load_file(path: Path, kind: Literal["rules", "tests", "waivers"], model: type[BaseModel], target: bool,
               errors: list[Diagnostic]) -> SourceFile:
    source = SourceFile(path=path, display=_display(path), kind=kind, target=target)

    def error(lint: type[Lint], line: int | None, message: str, hint: str = "") -> None:
        errors.append(Diagnostic(lint=lint.id, name=lint.name, severity="error", path=source.display, line=line,
                                 message=message, hint=hint))

    try:
        data, lines, duplicates = load_positioned(path)
    except (OSError, UnicodeDecodeError) as exc:
        error(InvalidYaml, None, f"cannot read the file: {exc}")
        return source
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        context = getattr(exc, "context_mark", None)
        what = getattr(exc, "context", None)
        opened = f" ({what} at line {context.line + 1})" if context is not None and what else ""
        error(InvalidYaml, mark.line + 1 if mark is not None else None,
              f"invalid YAML: {getattr(exc, 'problem', None) or exc}{opened}")
        return source
    source.data, source.lines = data, lines
    for line, key in duplicates:
        error(InvalidYaml, line, f"duplicate key {key!r} (only the last value would be used)")
    if data is None:
        error(SchemaViolation, None, "the file is empty", "it must hold a YAML mapping")
        return source
    try:
        source.model = model.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            loc = _loc_path(data, err["loc"])
            field_name = ".".join(str(k) for k in err["loc"])
            error(SchemaViolation, source.line(loc), f"{field_name or 'file'}: {err['msg']}")
    return source


def _targets(paths: Sequence[Path]) -> tuple[list[Path], set[Path]]:
    """(rules directories, resolved target files) for the paths given on the command line."""
    dirs: list[Path] = []
    targets: set[Path] = set()
    for path in paths:
        if not path.exists():
            raise KnowledgeBaseError([Problem(str(path), "no such file or directory")],
                                     title="cannot lint")
        if path.is_dir():
            folder = path
            targets |= {p.resolve() for p in rule_file_paths(path)}
            targets |= {p.resolve() for p in (path / "tests").glob("*.test.yaml")}
            if (path / WAIVER_FILE).is_file():
                targets.add((path / WAIVER_FILE).resolve())
        else:
            folder = path.parent.parent if path.parent.name == "tests" else path.parent
            targets.add(path.resolve())
        if folder.resolve() not in {d.resolve() for d in dirs}:
            dirs.append(folder)
    return dirs, targets


def lint_paths(paths: Sequence[str | Path] = (), *, builtin: bool = True,
               knowledge_base: str | Path | KnowledgeBase | None = None, run_tests: bool = True) -> LintResult:
    """Lint rule directories or files (default: the built-in rules).

    Diagnostics are reported for the given paths only; the built-in rules are loaded beside them as context (so a
    team's rules may read built-in findings and named conditions) unless `builtin` is False. The rule tests of the
    directories run (with the knowledge base's directory) unless `run_tests` is False. Raises KnowledgeBaseError
    only when a path does not exist or the knowledge base itself cannot be loaded.
    """
    builtin_dir = data_dir("rules")
    given = [Path(p) for p in paths] or [builtin_dir]
    dirs, targets = _targets(given)
    if builtin and builtin_dir.resolve() not in {d.resolve() for d in dirs}:
        dirs.append(builtin_dir)
    if isinstance(knowledge_base, KnowledgeBase):
        kb = knowledge_base
        kb_dir = kb.source or data_dir("knowledge_base")
    else:
        kb_dir = Path(knowledge_base) if knowledge_base is not None else data_dir("knowledge_base")
        kb = KnowledgeBase.load(kb_dir)

    load_errors: list[Diagnostic] = []
    files = [_load_file(p, "rules", RuleFile, p.resolve() in targets, load_errors)
             for d in dirs for p in rule_file_paths(d)]
    tests = [_load_file(p, "tests", RuleTestFile, p.resolve() in targets, load_errors)
             for d in dirs for p in sorted((d / "tests").glob("*.test.yaml"))]
    waivers = [_load_file(d / WAIVER_FILE, "waivers", WaiverFile, (d / WAIVER_FILE).resolve() in targets, load_errors)
               for d in dirs if (d / WAIVER_FILE).is_file()]
    ctx = LintContext(kb, kb_dir, dirs, files, tests, waivers, load_errors)

    diagnostics: list[Diagnostic] = []
    for lint in LINTS:
        if not lint.needs_tests and lint is not InvalidRuleTest:
            diagnostics += lint().check(ctx)
    errors = [d for d in diagnostics if d.severity == "error"]
    if not errors:
        try:
            ruleset = RuleSet([(f.path, f.model) for f in files], kb)
        except KnowledgeBaseError as exc:
            diagnostics += _load_problems(ctx, exc.problems)
        else:
            if run_tests:
                ctx.suite = _run_tests(ctx, ruleset)
                for lint in LINTS:
                    if lint.needs_tests:
                        diagnostics += lint().check(ctx)
    diagnostics += InvalidRuleTest().check(ctx)

    shown_paths = {f.display for f in [*files, *tests, *waivers] if f.target}
    reported = [d for d in diagnostics if d.path in shown_paths]
    kept, waived = _apply_waivers(ctx, reported)
    kept.sort(key=lambda d: (d.severity != "error", d.path, d.line or 0, d.lint))
    waived.sort(key=lambda d: (d.path, d.line or 0, d.lint))
    return LintResult(diagnostics=kept, waived=waived, files=len([f for f in files if f.target]),
                      rules=len([s for s in ctx.rules if s.file.target]), tests_run=ctx.suite is not None)


def _load_problems(ctx: LintContext, problems: Iterable[Problem]) -> list[Diagnostic]:
    """The loader's problems as DAM012 diagnostics, located at the rule they name when possible."""
    out = []
    for problem in problems:
        file = next((f for f in ctx.files if problem.where.startswith(str(f.path))), None)
        site = None
        if file is not None:
            rest = problem.where[len(str(file.path)):]
            site = next((s for s in ctx.rules if s.file is file and f"rule {s.rule.id}" in rest), None)
        target = file or (ctx.files[0] if ctx.files else None)
        if target is None:
            continue
        out.append(Diagnostic(lint=LoadError.id, name=LoadError.name, severity="error", path=target.display,
                              line=site.line if site else None, subject=site.rule.id if site else None,
                              message=problem.message, hint=problem.hint))
    return out


def _run_tests(ctx: LintContext, ruleset: RuleSet) -> Any:
    from ..expert import Expert

    expert = Expert(rules_dirs=ctx.dirs, knowledge_base=ctx.kb_dir, engine="pure")
    test_files = [(tf.path, tf.model) for tf in ctx.tests if tf.model is not None]
    scope = [s.rule.id for s in ctx.rules if s.file.target and s.rule.id in ruleset.rules]
    return run_suite(expert, test_files, scope)


def _apply_waivers(ctx: LintContext, diagnostics: list[Diagnostic]) -> tuple[list[Diagnostic], list[Diagnostic]]:
    waivers: dict[tuple[str, str], tuple[str, SourceFile, YamlPath]] = {}
    problems: list[Diagnostic] = []
    for wf in ctx.waiver_files:
        if wf.model is None:
            continue
        model: WaiverFile = wf.model
        for subject, lints in model.waivers.items():
            for lint_id, reason in lints.items():
                path: YamlPath = ("waivers", subject, lint_id)
                lint = LINTS_BY_ID.get(lint_id)
                if lint is None:
                    problems.append(ctx.diag(UnusedWaiver, wf, path, f"unknown lint {lint_id!r}", subject=subject,
                                             hint=_suggest(lint_id, LINTS_BY_ID)))
                elif lint.severity == "error":
                    problems.append(ctx.diag(UnusedWaiver, wf, path, f"{lint_id} is an error and cannot be waived",
                                             subject=subject))
                elif _blank(reason):
                    problems.append(ctx.diag(UnusedWaiver, wf, path, "a waiver needs a reason", subject=subject))
                else:
                    waivers[(subject, lint_id)] = (reason, wf, path)
    kept: list[Diagnostic] = []
    waived: list[Diagnostic] = []
    used: set[tuple[str, str]] = set()
    for d in diagnostics:
        key = (d.subject or "", d.lint)
        if d.severity == "warning" and key in waivers:
            waived.append(d.model_copy(update={"waived": waivers[key][0]}))
            used.add(key)
        else:
            kept.append(d)
    for key, (_, wf, at) in waivers.items():
        if key not in used and wf.target and (ctx.suite is not None or not LINTS_BY_ID[key[1]].needs_tests):
            kept.append(ctx.diag(UnusedWaiver, wf, at, f"waiver of {key[1]} for {key[0]} suppresses nothing",
                                 subject=key[0]))
    kept += [d for d in problems if any(f.display == d.path and f.target for f in ctx.waiver_files)]
    return kept, waived


__all__ = [
    "LINTS",
    "LINTS_BY_ID",
    "Diagnostic",
    "Lint",
    "LintContext",
    "LintResult",
    "WaiverFile",
    "condition_text",
    "lint_page",
    "lint_paths",
    "load_positioned",
]
