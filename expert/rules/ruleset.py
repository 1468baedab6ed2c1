"""The loaded rule set: rule files read from rules/, named conditions resolved, knowledge values bound, references
checked, stratified."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._lazy import cached_property
from .._yaml import line_of, load_yaml, validate
from ..errors import KnowledgeBaseError, Problem, not_a_file
from ..kb.knowledge import KnowledgeBase
from .evaluate import compile_condition
from .logic import YamlPath, bind, findings_used, resolve
from .model import Condition, ConditionRef, NamedCondition, RegimeTable, Rule, RuleFile
from .references import condition_problems, knowledge_value, knowledge_value_problems, table_problems, then_problems


class LoadedRule:
    """A rule with its named conditions inlined and its `{kb: NAME}` thresholds bound to numbers (`condition`; the
    rule as written is `rule`), the file it came from and its negation stratum."""

    def __init__(self, rule: Rule, path: Path, condition: Condition) -> None:
        self.id = rule.id
        self.rule = rule
        self.path = path
        self.condition = condition
        self.stratum = 0
        self._evaluator: Any = None

    @property
    def evaluator(self) -> Any:
        """The condition compiled to a function (expert.evaluate.compile_condition), built on first use."""
        if self._evaluator is None:
            self._evaluator = compile_condition(self.condition)
        return self._evaluator

    def __repr__(self) -> str:
        return f"LoadedRule({self.id!r}, stratum={self.stratum})"


NOT_RULE_FILES = frozenset({"lint_waivers.yaml"})  # data for `dam rules lint`, kept beside the rules


def rule_file_paths(directory: Path) -> list[Path]:
    """The rule files of a rules directory: every *.yaml, sorted, except tests/ folders and NOT_RULE_FILES."""
    return [path for path in sorted(directory.rglob("*.yaml"))
            if "tests" not in path.relative_to(directory).parts and path.name not in NOT_RULE_FILES]


class RuleSet:
    """All rules and regime tables from one or more directories, resolved and checked against the knowledge base."""

    def __init__(self, files: list[tuple[Path, RuleFile]], kb: KnowledgeBase) -> None:
        self.kb = kb
        self.files = files
        problems: list[Problem] = []
        self.conditions: dict[str, tuple[Path, NamedCondition]] = {}
        for path, rf in files:
            for name, cond in rf.conditions.items():
                if name in self.conditions:
                    problems.append(Problem(f"{path}: conditions.{name}",
                                            f"named condition already defined in {self.conditions[name][0]}"))
                self.conditions[name] = (path, cond)
        problems.extend(self._check_knowledge_values(files))
        self.rules: dict[str, LoadedRule] = {}
        for path, rf in files:
            for rule in rf.rules:
                if rule.id in self.rules:
                    problems.append(Problem(f"{path}: rule {rule.id}",
                                            f"duplicate rule id (also in {self.rules[rule.id].path})"))
                    continue
                try:
                    resolved = self._resolve(rule.when, path, rule.id)
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
                what = not_a_file(directory)
                problem = ("rules directory does not exist" if what == "no such file"
                           else f"{what or 'a file'}, not a rules directory")
                raise KnowledgeBaseError([Problem(str(directory), problem,
                                                  "give a directory of rule files (*.yaml)")])
            for path in rule_file_paths(directory):
                try:
                    files.append((path, validate(RuleFile, load_yaml(path), path)))
                except KnowledgeBaseError as exc:
                    problems.extend(exc.problems)
        if problems:
            raise KnowledgeBaseError(problems, title="some rule files are invalid")
        return cls(files, kb)

    def _resolve(self, node: Condition, path: Path, rule_id: str) -> Condition:
        where = f"{path}: rule {rule_id}: when"

        def lookup(ref: ConditionRef, inside: tuple[str, ...]) -> Condition:
            if ref.ref in inside:
                raise KnowledgeBaseError([Problem(where, f"named conditions refer to each other in a cycle: "
                                                  f"{' -> '.join((*inside, ref.ref))}")])
            if ref.ref not in self.conditions:
                raise KnowledgeBaseError([Problem(where, f"unknown named condition {ref.ref!r}")])
            return self.conditions[ref.ref][1].when

        return bind(resolve(node, lookup), lambda value: knowledge_value(self.kb, value))

    def _check_knowledge_values(self, files: list[tuple[Path, RuleFile]]) -> list[Problem]:
        """Thresholds written as `{kb: NAME}` that name no knowledge value, located by file, line and rule."""
        problems: list[Problem] = []
        for path, rf in files:
            roots: list[tuple[YamlPath, str, Condition]] = [
                (("conditions", name, "when"), f"conditions.{name}", cond.when)
                for name, cond in rf.conditions.items()]
            roots += [(("rules", i, "when"), f"rule {rule.id}", rule.when) for i, rule in enumerate(rf.rules)]
            for root, subject, when in roots:
                for p in knowledge_value_problems(when, self.kb, root):
                    at = ".".join(str(k) for k in p.path[len(root) - 1:])
                    line = line_of(path, p.path)
                    problems.append(Problem(f"{path}:{line}: {subject}: {at}" if line else f"{path}: {subject}: {at}",
                                            p.loader or "", p.hint))
        return problems

    def _check_references(self) -> list[Problem]:
        """The reference checks `dam rules lint` reports as DAM004/005/008/009/010, in the loader's words."""
        kb = self.kb
        problems: list[Problem] = []
        concluded = {lr.rule.then.finding.id for lr in self.rules.values() if lr.rule.then.finding}
        for lr in self.rules.values():
            where = f"{lr.path}: rule {lr.id}"
            for p in [*condition_problems(lr.condition, kb, concluded), *then_problems(lr.rule.then, kb)]:
                if p.loader is not None:
                    problems.append(Problem(f"{where}: {p.loader_at}", p.loader))
        for regime, (path, table) in self.tables.items():
            problems += [Problem(f"{path}: table {regime}", p.loader) for p in table_problems(table, kb)
                         if p.loader is not None]
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
        uses = self.findings_read
        changed = True
        while changed:
            changed = False
            for lr in self.rules.values():
                pos, neg = uses[lr.id]
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

    @cached_property
    def findings_read(self) -> dict[str, tuple[set[str], set[str]]]:
        """Rule id -> the findings its condition reads (positively, under a `not`): `findings_used`, walked once."""
        return {rule_id: findings_used(lr.condition) for rule_id, lr in self.rules.items()}

    def consumed_findings(self) -> set[str]:
        """Findings that some rule's condition reads (only these need to be asserted back into the engine)."""
        used: set[str] = set()
        for pos, neg in self.findings_read.values():
            used |= pos | neg
        return used
