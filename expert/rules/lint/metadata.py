"""Lints of what a rule tells its readers: blank metadata, placeholders that are not facts, unmeasurable facts."""

from __future__ import annotations

import string
from collections.abc import Iterable

from .context import LintContext
from .core import Diagnostic, Lint, YamlPath, _blank, _suggest


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


class UnknownPlaceholder(Lint):
    id = "DAM112"
    name = "unknown-placeholder"
    severity = "warning"
    summary = "A message, why or reason template has a `{placeholder}` that is neither a fact nor a scorecard band."
    docs = """
**Why it matters.** Templates are filled with fact values (`{gpu_util:.0%}`) and scorecard bands
(`{scorecard.mfu.fail_below}`, rendered "30 %", so that a message quotes knowledge_base/scorecard.yaml instead of
repeating its numbers). A fact not known when the rule fires drops the innermost parenthesis around its
placeholder ("one by one (mean kernel {mean_kernel_us:.1f} µs): ..." reads "one by one: ..."), or reads "unknown"
outside one; an unknown band renders as written.

**Fix.** Use a fact name from knowledge_base/facts.yaml (observed or derived), or `scorecard.<metric id>.<bound>`
for a bound (fail_above, pass_below, fail_below, pass_above) the metric sets, with an optional format spec.
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
                    if name.startswith("scorecard."):
                        if ctx.kb.scorecard.bound(name) is None:
                            bands = ctx.kb.scorecard.bound_names()
                            yield ctx.diag(self.__class__, site.file, (*site.path, *path),
                                           f"placeholder {{{name}}} is not a scorecard band; it renders as written",
                                           subject=site.rule.id,
                                           hint=_suggest(name, bands) or f"the scorecard bands: {', '.join(bands)}")
                    elif name not in ctx.kb.facts:
                        yield ctx.diag(self.__class__, site.file, (*site.path, *path),
                                       f"placeholder {{{name}}} is not a fact, so never known: its parenthesis "
                                       "is dropped, or it reads 'unknown'", subject=site.rule.id,
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
