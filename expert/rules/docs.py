"""Rule documentation generated from the YAML: one section per rule (like ruff's rule pages), as markdown.

`dam rules docs` writes the whole reference (docs/rules.md); `dam rules show ID` renders one rule's section with
its test cases and the rules around it. Everything shown comes from rules/, rules/tests/ and knowledge_base/.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..kb.knowledge import FactSpec, KnowledgeBase
from .conclusions import DOCS, conclusion_phrases
from .logic import OPERATORS, ConditionVisitor, findings_used, format_constant
from .model import AllOf, AnyOf, Condition, ConditionRef, FactTest, FindingRef, KnowledgeValue, NotOf
from .references import knowledge_value
from .ruleset import LoadedRule, RuleSet
from .testing import RuleTestCase, RuleTestFile

GENERATED_BY = "dam rules docs --output docs/rules.md"


def _number(value: float) -> str:
    return format_constant(float(value), 6)


def value_text(spec: FactSpec | None, value: Any) -> str:
    """A constant in the fact's terms: fractions as percentages, numbers with their unit."""
    if isinstance(value, list):
        return ", ".join(value_text(spec, v) for v in value)
    if isinstance(value, (bool, str)) or spec is None:
        return f"`{value}`"
    if spec.type == "fraction":
        return f"{_number(float(value) * 100)} %"
    unit = f" {spec.unit}" if spec.unit and spec.unit != "ratio" else ""
    return f"{_number(float(value))}{unit}"


def leaf_text(node: FactTest, kb: KnowledgeBase) -> str:
    """One fact test in plain words: "`gpu_util` is below 80 %"."""
    spec = kb.facts.get(node.fact)
    parts = []
    if node.known is not None:
        parts.append("is known" if node.known else "is not known (not measured)")
    parts += [f"{OPERATORS[op].words} {_threshold_text(spec, value, kb)}" for op, value in node.ops()]
    return f"`{node.fact}` " + " and ".join(parts)


def _threshold_text(spec: FactSpec | None, value: Any, kb: KnowledgeBase) -> str:
    """A constant as `value_text` words it; a `{kb: NAME}` threshold as the number it names and the name
    ("30 % (`scorecard.mfu.fail_below`)"), so the docs show what the rule compares with and where it comes from."""
    if not isinstance(value, KnowledgeValue):
        return value_text(spec, value)
    number = knowledge_value(kb, value)
    shown = value_text(spec, number) if number is not None else "an unknown value"
    return f"{shown} (`{value.kb}`)"


class _Describer(ConditionVisitor[list[str]]):
    """Markdown list lines for a condition, one item per node, named conditions expanded with their description."""

    def __init__(self, kb: KnowledgeBase, ruleset: RuleSet) -> None:
        self.kb = kb
        self.ruleset = ruleset

    def lines(self, node: Condition, depth: int = 0) -> list[str]:
        return self.visit(node, depth)

    def fact(self, node: FactTest, depth: int) -> list[str]:
        return [f"{'  ' * depth}- {leaf_text(node, self.kb)}"]

    def finding(self, node: FindingRef, depth: int) -> list[str]:
        producers = self.ruleset.producers.get(node.finding, [])
        by = f" (by {', '.join(f'`{p}`' for p in producers)})" if producers else ""
        return [f"{'  ' * depth}- the finding `{node.finding}` was concluded{by}"]

    def ref(self, node: ConditionRef, depth: int) -> list[str]:
        named = self.ruleset.conditions.get(node.ref)
        if named is None:
            return [f"{'  ' * depth}- the named condition `{node.ref}`"]
        head = f"{'  ' * depth}- `{node.ref}` — {named[1].description.rstrip('.')}"
        return _NamedBody(self, head).visit(named[1].when, depth)

    def not_of(self, node: NotOf, depth: int) -> list[str]:
        return [f"{'  ' * depth}- not:", *self.lines(node.not_, depth + 1)]

    def group(self, node: AllOf | AnyOf, parts: list[Condition], conjunctive: bool, depth: int) -> list[str]:
        head = "all of:" if conjunctive else "any of:"
        return [f"{'  ' * depth}- {head}", *[x for c in parts for x in self.lines(c, depth + 1)]]

    def top(self, node: Condition) -> list[str]:
        """The rule's condition: a top-level `all` as a flat list ("all of these hold")."""
        return _Top(self).visit(node)


class _NamedBody(ConditionVisitor[list[str]]):
    """A named condition after its head: a fact test on the same line, the parts of an `all`/`any` below it."""

    def __init__(self, describer: _Describer, head: str) -> None:
        self.describer, self.head = describer, head

    def fact(self, node: FactTest, depth: int) -> list[str]:
        return [f"{self.head}: {leaf_text(node, self.describer.kb)}"]

    def group(self, node: AllOf | AnyOf, parts: list[Condition], conjunctive: bool, depth: int) -> list[str]:
        word = "all" if conjunctive else "any"
        return [f"{self.head}; {word} of:", *[x for c in parts for x in self.describer.lines(c, depth + 1)]]

    def default(self, node: Condition, depth: int) -> list[str]:
        return [f"{self.head}:", *self.describer.lines(node, depth + 1)]


class _Top(ConditionVisitor[list[str]]):
    def __init__(self, describer: _Describer) -> None:
        self.describer = describer

    def group(self, node: AllOf | AnyOf, parts: list[Condition], conjunctive: bool) -> list[str]:
        head = "All of these hold:" if conjunctive else "Any of these holds:"
        return [head, "", *[x for c in parts for x in self.describer.lines(c)]]

    def default(self, node: Condition) -> list[str]:
        return ["When:", "", *self.describer.lines(node)]


def describe_condition(node: Condition, kb: KnowledgeBase, ruleset: RuleSet) -> list[str]:
    """Markdown list lines describing an unresolved condition in plain words (named conditions expanded)."""
    return _Describer(kb, ruleset).top(node)


def cases_by_rule(test_files: Iterable[tuple[Path, RuleTestFile]]) -> dict[str, list[tuple[Path, RuleTestCase]]]:
    """Rule-test cases grouped by the rule they are about, in file order."""
    out: dict[str, list[tuple[Path, RuleTestCase]]] = {}
    for path, tf in test_files:
        for case in tf.cases:
            out.setdefault(case.rule, []).append((path, case))
    return out


def firing_example(rule_id: str, cases: list[tuple[Path, RuleTestCase]]) -> RuleTestCase | None:
    """The first (non-todo) case that expects the rule to fire."""
    return next((c for _, c in cases if not c.todo and rule_id in c.expect.fired), None)


def consumers(ruleset: RuleSet, finding: str) -> list[str]:
    """Rules whose condition reads a finding."""
    return sorted(lr.id for lr in ruleset.rules.values() if finding in set().union(*findings_used(lr.condition)))


def _yaml_value(value: Any) -> str:
    import yaml

    text: str = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, sort_keys=False,
                               width=10_000).strip()
    return text.removesuffix("...").strip()


def _concludes(lr: LoadedRule, kb: KnowledgeBase) -> list[str]:
    titles = {name: regime.title for name, regime in kb.regimes.regimes.items()}
    return conclusion_phrases(lr.rule.then, DOCS, titles)


def _relative(path: Path, roots: Iterable[Path]) -> str:
    for root in roots:
        try:
            return path.resolve().relative_to(root.resolve().parent).as_posix()
        except ValueError:
            continue
    return path.name


def rule_section(lr: LoadedRule, kb: KnowledgeBase, ruleset: RuleSet, cases: list[tuple[Path, RuleTestCase]],
                 roots: Iterable[Path] = (), level: int = 3, show_cases: bool = False) -> str:
    """One rule's page: what it detects, why it matters, when it fires, what it concludes, an example, the source."""
    rule = lr.rule
    h = "#" * level
    firing = sum(1 for _, c in cases if not c.todo and rule.id in c.expect.fired)
    silent = sum(1 for _, c in cases if not c.todo and rule.id in c.absent.fired)
    lines = [f"{h} `{rule.id}`", "", f"*{rule.severity}* · `{_relative(lr.path, roots)}` · "
             f"{len(cases)} test case{'s' if len(cases) != 1 else ''} ({firing} firing, {silent} silent)"
             + (f" · tags: {', '.join(rule.tags)}" if rule.tags else ""), ""]
    lines += [f"**What it detects.** {rule.title}.", "", f"**Why it matters.** {rule.rationale}", ""]
    lines += ["**When it fires.** " + describe_condition(rule.when, kb, ruleset)[0], "",
              *describe_condition(rule.when, kb, ruleset)[2:], ""]
    lines += ["**What it concludes.**", "", *_concludes(lr, kb), ""]
    read_by = consumers(ruleset, rule.then.finding.id) if rule.then.finding else []
    if read_by:
        lines += ["**Read by.** " + ", ".join(f"`{r}`" for r in read_by), ""]
    example = firing_example(rule.id, cases)
    if example is not None:
        command = " ".join(["$ dam diagnose", *(f"--set {shlex.quote(f'{k}={v}')}" for k, v in example.facts.items())])
        lines += [f"**Example that fires it** (test case `{example.name}`):", "", "```yaml",
                  *[f"{k}: {_yaml_value(v)}" for k, v in example.facts.items()], "```", "", "```console",
                  command, "```", ""]
    else:
        lines += ["**Example that fires it.** No firing test case yet.", ""]
    lines += [f"**Source.** {rule.source}", ""]
    if show_cases and cases:
        lines += ["**Test cases.**", ""]
        for path, c in cases:
            kind = "fires" if rule.id in c.expect.fired else ("silent" if rule.id in c.absent.fired else "checks")
            todo = f" (todo: {c.todo})" if c.todo else ""
            lines.append(f"- `{c.name}` ({kind}, {path.name}): {_yaml_value(c.facts)}{todo}")
        lines.append("")
    return "\n".join(lines)


def render_rules_docs(kb: KnowledgeBase, ruleset: RuleSet, test_files: list[tuple[Path, RuleTestFile]],
                      roots: list[Path]) -> str:
    """The whole rule reference as markdown (deterministic: same rules in, same bytes out)."""
    from .lint import LINTS

    cases = cases_by_rule(test_files)
    by_file: dict[Path, list[LoadedRule]] = {}
    for lr in ruleset.rules.values():
        by_file.setdefault(lr.path, []).append(lr)
    out = [
        "# Rule reference",
        "",
        f"<!-- Generated by `{GENERATED_BY}` from rules/*.yaml and rules/tests/*.test.yaml. Do not edit by hand. -->",
        "",
        f"{len(ruleset.rules)} rules in {len(by_file)} files. Each rule is declarative YAML: conditions on facts "
        "(knowledge_base/facts.yaml) and on findings of other rules, and what it concludes. Run `dam rules lint` and "
        "`dam rules test` after editing; `dam rules show ID` prints one rule with its test cases. Editors validate "
        "and complete rule files with `schemas/rules.schema.json` (first line of a rule file: "
        "`# yaml-language-server: $schema=../schemas/rules.schema.json`). A threshold may name a knowledge value "
        "instead of repeating its number (`{fact: mfu, lt: {kb: scorecard.mfu.fail_below}}`, the names "
        "`scorecard.<metric>.<bound>` of knowledge_base/scorecard.yaml); the rule set binds it to the number when "
        "it loads, and the conditions below show both.",
        "",
        "| rule | what it detects | severity | file |",
        "|---|---|---|---|",
    ]
    for path, rules in by_file.items():
        for lr in rules:
            out.append(f"| [`{lr.id}`](#{lr.id}) | {lr.rule.title} | {lr.rule.severity} | "
                       f"{_relative(path, roots)} |")
    out.append("")
    for path, rules in by_file.items():
        out += [f"## {_relative(path, roots)}", ""]
        for lr in rules:
            out.append(rule_section(lr, kb, ruleset, cases.get(lr.id, []), roots))
    out += ["## Named conditions", "", "Reusable conditions, referenced from rules with `ref: NAME`.", ""]
    describer = _Describer(kb, ruleset)
    for name, (path, named) in sorted(ruleset.conditions.items()):
        out += [f"### `{name}`", "", f"{named.description} (`{_relative(path, roots)}`)", "",
                *describer.lines(named.when), ""]
    out += ["## Optimization tables", "",
            "What helps and what is wasted once a regime is the verdict (seed Table 3); a rule's `waste` adds to it.",
            ""]
    for regime, (path, table) in ruleset.tables.items():
        title = kb.regimes.regimes[regime].title if regime in kb.regimes.regimes else regime
        out += [f"### {regime}: {title}", "", f"Source: {table.source} (`{_relative(path, roots)}`)", "",
                "Effective: " + (", ".join(f"`{o}`" for o in table.effective) + "." if table.effective else
                                 "none for the regime as a whole: the rules that conclude it propose the fixes that "
                                 "fit the cause they measure."), "", "Wasted:", ""]
        out += [f"- `{w.id}`: {w.reason}" for w in table.wasted]
        out.append("")
    out += ["## Lint reference", "",
            "`dam rules lint` runs these checks. Errors (DAM0xx) stop the rules from loading; warnings (DAM1xx) are "
            "probable mistakes. Exit code: 0 clean, 1 warnings, 2 errors. Waive a warning for one rule in "
            "`lint_waivers.yaml` beside the rules (`RULE_ID: {LINT_ID: reason}`); errors cannot be waived.", ""]
    for lint in LINTS:
        out += [lint.page().replace("## ", "### ", 1).rstrip(), ""]
    return "\n".join(out).rstrip() + "\n"
