"""Lints of definitions: duplicates, cycles of named conditions or of findings, unused named conditions."""

from __future__ import annotations

from collections.abc import Iterable

from ..logic import condition_refs_at
from .context import LintContext
from .core import ConditionSite, Diagnostic, Lint, RuleSite, TableSite


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
            for node, _ in condition_refs_at(cs.when):
                if node.ref in ctx.conditions:
                    graph.add_edge(cs.name, node.ref)
        for cycle in nx.simple_cycles(graph):
            first = min(cycle)
            cs = ctx.condition_by_name[first]
            at = cycle.index(first)
            ordered = [*cycle[at:], *cycle[:at], first]
            yield ctx.diag(self.__class__, cs.file, cs.path,
                           f"named conditions refer to each other in a cycle: {' -> '.join(ordered)}", subject=first)


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
            used |= ctx.refs_of(site.when)
        for cs in ctx.conditions_sites:
            if cs.name not in used:
                yield ctx.diag(self.__class__, cs.file, cs.path, f"named condition {cs.name!r} is not used by any rule",
                               subject=cs.name)


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
