"""The reference engine: a small stratified forward chainer in pure Python.

It evaluates each rule's resolved condition tree directly (Kleene logic), stratum by stratum, to a fixpoint.
It holds no per-run state, so one instance is safe to share across threads.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..rulebook import RuleSet, findings_used
from .base import EngineResult, Value


class PureEngine:
    """Stratified naive forward chaining; the reference the durable-rules backend is tested against."""

    name = "pure"

    def __init__(self, ruleset: RuleSet) -> None:
        self._strata = [
            sorted((lr for lr in ruleset.rules.values() if lr.stratum == s), key=lambda lr: lr.id)
            for s in range(ruleset.max_stratum + 1)
        ]
        self._uses = {lr.id: sorted(findings_used(lr.condition)[0]) for lr in ruleset.rules.values()}

    def run(self, facts: Mapping[str, Value]) -> EngineResult:
        result = EngineResult()
        fired: set[str] = set()
        for stratum in self._strata:
            changed = True
            while changed:
                changed = False
                for lr in stratum:
                    if lr.id in fired or lr.evaluator(facts, result.findings, None, False) != "true":
                        continue
                    fired.add(lr.id)
                    result.fired.append(lr.id)
                    result.matched[lr.id] = [f for f in self._uses[lr.id] if f in result.findings]
                    if lr.rule.then.finding is not None:
                        result.findings.add(lr.rule.then.finding.id)
                    changed = True
        return result
