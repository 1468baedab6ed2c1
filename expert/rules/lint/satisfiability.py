"""Lints of conditions that cannot do what they say: thresholds outside a fact's range, conditions that can never
hold, rules that can never fire, facts that can never be known."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from ...kb.knowledge import FactSpec
from ..logic import (
    SYMBOLS,
    BoxAlgebra,
    ConditionVisitor,
    TooComplex,
    Unresolvable,
    condition_text,
    fact_tests_at,
    walk_paths,
)
from ..model import AllOf, Condition, FactTest
from ..references import condition_problems
from .context import LintContext
from .core import Diagnostic, Lint, YamlPath, _fmt


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
            for node, path in fact_tests_at(cond, root):
                if node.fact not in ctx.kb.facts:
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
                return (f"{spec.name} {SYMBOLS[op]} {_fmt(value)} {verb} holds: {_fmt(outside[0])} is outside "
                        f"its range ({range_text})", hint)
            return None
        c = float(value)
        never = {"lt": c <= lo, "le": c < lo or (c == lo and exclusive), "gt": c >= hi, "ge": c > hi}[op]
        always = {"lt": c > hi, "le": c >= hi, "gt": c < lo or (c == lo and exclusive), "ge": c <= lo}[op]
        if never or always:
            verb = "never" if never else "always"
            return (f"{spec.name} {SYMBOLS[op]} {_fmt(value)}{unit} {verb} holds: {spec.name} is {range_text}",
                    hint)
        return None


def _invalid_leaves(ctx: LintContext, cond: Condition) -> bool:
    """True when a fact test names an unknown fact or a value outside an enum or the hardware catalog."""
    roots = [cond, *(ctx.conditions[name].when for name in sorted(ctx.refs_of(cond)) if name in ctx.conditions)]
    return any(p.lint in ("DAM004", "DAM005") for root in roots for p in condition_problems(root, ctx.kb, ()))


def _pair_conflict(algebra: BoxAlgebra, children: Sequence[Condition], negated: bool) -> tuple[int, int] | None:
    groups = [algebra.boxes(c, negated) for c in children]
    for i in range(len(groups)):
        for j in range(i + 1, len(groups)):
            if not algebra.meet(groups[i], groups[j]):
                return i, j
    return None


class _Contradiction(ConditionVisitor["tuple[str, YamlPath] | None"]):
    """A node that can never be true on its own: (message, YAML path below the node to point at), or None."""

    def __init__(self, algebra: BoxAlgebra) -> None:
        self.algebra = algebra

    def fact(self, node: FactTest) -> tuple[str, YamlPath] | None:
        if len(node.ops()) + (node.known is not None) > 1 and not self.algebra.boxes(node):
            return f"`{condition_text(node)}` can never be true", ()
        return None

    def all_of(self, node: AllOf) -> tuple[str, YamlPath] | None:
        algebra = self.algebra
        if algebra.boxes(node):
            return None
        if any(not algebra.boxes(c) for c in node.all):
            return None  # a part is unsatisfiable on its own; reported there
        pair = _pair_conflict(algebra, node.all, False)
        if pair:
            a, b = (condition_text(node.all[k]) for k in pair)
            return f"`{a}` and `{b}` cannot both be true, so this `all` never holds", ("all",)
        return f"the parts of this `all` can never all be true: {condition_text(node)}", ("all",)

    def default(self, node: Condition) -> tuple[str, YamlPath] | None:
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
            except (TooComplex, Unresolvable):
                continue
            found = False
            contradiction = _Contradiction(algebra)
            for node, path in walk_paths(cond, root):
                try:
                    problem = contradiction.visit(node)
                except (TooComplex, Unresolvable):
                    problem = None
                if problem:
                    found = True
                    message, at = problem
                    yield ctx.diag(self.__class__, file, (*path, *at), message, subject=subject)
            if not whole and not found and not self._uses_unsatisfiable_ref(ctx, cond):
                yield ctx.diag(self.__class__, file, root, f"the condition can never be true: {condition_text(cond)}",
                               subject=subject)

    @staticmethod
    def _uses_unsatisfiable_ref(ctx: LintContext, cond: Condition) -> bool:
        for name in ctx.refs_of(cond):
            if name in ctx.conditions:
                try:
                    if not ctx.algebra.boxes(ctx.conditions[name].when):
                        return True
                except (TooComplex, Unresolvable):
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
            used = ctx.findings_of(site.when)
            if not used or rule.id in in_cycles or any(f not in ctx.producers for f, _ in used):
                continue
            try:
                if not ctx.algebra.boxes(site.when) or ctx.expanded.boxes(site.when):
                    continue
            except (TooComplex, Unresolvable):
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
            for node, path in fact_tests_at(cond, root):
                if node.fact in ctx.kb.facts and node.fact not in ctx.obtainable and node.ops():
                    yield ctx.diag(self.__class__, file, (*path, "fact"),
                                   f"{node.fact} can never be known: it is not askable and no derivation computes it "
                                   f"from askable facts", subject=subject)
