"""Lints of names that must exist: facts, values, named conditions, findings, regimes, optimizations and knowledge
values (the checks the loader makes too, from expert/rules/references.py), and thresholds that repeat a knowledge
value instead of naming it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ...kb.catalogs import BAND_BOUNDS
from ..logic import NEGATION, condition_refs_at, fact_tests_at, format_constant
from ..model import KnowledgeValue
from ..references import (
    ReferenceProblem,
    condition_problems,
    knowledge_value_problems,
    table_problems,
    then_problems,
)
from .context import LintContext
from .core import Diagnostic, Lint, SourceFile, _suggest


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
        yield from _condition_problems(ctx, self.__class__)
        yield from _then_problems(ctx, self.__class__)


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
        return _condition_problems(ctx, self.__class__)


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
            for node, path in condition_refs_at(cond, root):
                if node.ref not in ctx.conditions:
                    yield ctx.diag(self.__class__, file, (*path, "ref"), f"unknown named condition {node.ref!r}",
                                   subject=subject, hint=_suggest(node.ref, ctx.conditions))


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
        return _condition_problems(ctx, self.__class__)


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
        yield from _then_problems(ctx, self.__class__)
        yield from _table_problems(ctx, self.__class__)


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
        return _table_problems(ctx, self.__class__)


class UnknownKnowledgeValue(Lint):
    id = "DAM013"
    name = "unknown-knowledge-value"
    severity = "error"
    summary = "A threshold written as `{kb: NAME}` names no knowledge value."
    docs = """
**Why it matters.** A threshold may name a value of the knowledge base instead of repeating its number
(`{fact: mfu, lt: {kb: scorecard.mfu.fail_below}}`); the rule set replaces the name with the number when it loads,
and refuses a name the knowledge base does not define.

**Example.** `{fact: mfu, lt: {kb: scorecard.mfu.fail_bellow}}`, or a bound the metric does not set
(`scorecard.compression_ratio.fail_above`: its bands depend on the workload).

**Fix.** Use one of the names the message lists: `scorecard.<metric id>.<bound>` for a bound (fail_above,
pass_below, fail_below, pass_above) knowledge_base/scorecard.yaml sets.
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        return _reported(ctx, self.__class__, ((file, subject, knowledge_value_problems(cond, ctx.kb, root))
                                               for file, root, cond, subject in ctx.written_roots()))


class RepeatedBand(Lint):
    id = "DAM116"
    name = "repeated-band"
    severity = "warning"
    summary = "A threshold repeats a scorecard band of the same fact as a number instead of naming it."
    docs = """
**Why it matters.** knowledge_base/scorecard.yaml is where the seed's Table 5 bands live; a rule that tests the band
with its own copy of the number keeps firing at the old boundary when the band is changed there, and the report's
grade and the rule's finding disagree.

**Example.** `{fact: mfu, lt: 0.30}` where the scorecard's MFU fails below 0.30. Only a test of the band itself is
reported: the operator that grades against it (`lt` for a `*_below` bound, `gt` for an `*_above` one) or its
negation; `{fact: mfu, ge: 0.5}` (a contradiction threshold that happens to be 50 %) is not.

**Fix.** Name the band: `{fact: mfu, lt: {kb: scorecard.mfu.fail_below}}` (same behaviour; `dam rules docs` shows
the number and the name).
"""

    def check(self, ctx: LintContext) -> Iterable[Diagnostic]:
        bands: dict[str, list[tuple[str, float]]] = {}
        for metric in ctx.kb.scorecard.metrics:
            for bound in BAND_BOUNDS:
                value = getattr(metric, bound)
                if value is not None:
                    bands.setdefault(metric.fact, []).append((f"scorecard.{metric.id}.{bound}", value))
        for file, root, cond, subject in ctx.written_roots():
            for test, path in fact_tests_at(cond, root):
                for op, constant in test.ops():
                    if isinstance(constant, (bool, str, list, KnowledgeValue)):
                        continue
                    for name, value in bands.get(test.fact, []):
                        grading = "gt" if name.endswith("_above") else "lt"
                        if op in (grading, NEGATION[grading]) and float(constant) == value:
                            yield ctx.diag(self.__class__, file, (*path, op),
                                           f"`{op}: {format_constant(constant)}` repeats the scorecard band {name}",
                                           subject=subject, hint=f"write `{op}: {{kb: {name}}}`")


def _reported(ctx: LintContext, lint: type[Lint],
              found: Iterable[tuple[SourceFile, str, Iterable[ReferenceProblem]]]) -> Iterator[Diagnostic]:
    """The problems of one lint (those the linter words) as diagnostics: (file, subject, problems located by their
    path in the file)."""
    for file, subject, problems in found:
        for p in problems:
            if p.lint == lint.id and p.message is not None:
                yield ctx.diag(lint, file, p.path, p.message, subject=subject, hint=p.hint)


def _condition_problems(ctx: LintContext, lint: type[Lint]) -> Iterator[Diagnostic]:
    """The shared reference check of every rule's and named condition's `when`, as diagnostics of one lint."""
    return _reported(ctx, lint, ((file, subject, condition_problems(cond, ctx.kb, ctx.producers, root))
                                 for file, root, cond, subject in ctx.condition_roots()))


def _then_problems(ctx: LintContext, lint: type[Lint]) -> Iterator[Diagnostic]:
    return _reported(ctx, lint, ((site.file, site.rule.id, then_problems(site.rule.then, ctx.kb, (*site.path, "then")))
                                 for site in ctx.rules))


def _table_problems(ctx: LintContext, lint: type[Lint]) -> Iterator[Diagnostic]:
    return _reported(ctx, lint, ((ts.file, f"table/{ts.table.regime}",
                                  (p._replace(path=(*ts.path, *p.path)) for p in table_problems(ts.table, ctx.kb)))
                                 for ts in ctx.table_sites))
