"""Lints of the rule tests: untested rules and branches, test cases that cannot run."""

from __future__ import annotations

from collections.abc import Iterable

from ..testing import RuleTestFile
from .context import LintContext
from .core import Diagnostic, Lint, YamlPath, _suggest


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
