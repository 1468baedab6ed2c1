"""Lints of conclusions that contradict each other or their regime's table."""

from __future__ import annotations

from collections.abc import Iterable

from ..logic import Box, BoxAlgebra, TooComplex, Unresolvable
from .context import LintContext
from .core import Diagnostic, Lint, RuleSite


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
                    boxes[site.rule.id] = expanded.boxes(site.when)
                except (TooComplex, Unresolvable):
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
        except TooComplex:
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
