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
        """Each stratum to its fixpoint. After the first pass only rules that read a finding the previous pass
        concluded are evaluated again: facts never change during a run, and negated findings come from lower strata,
        so nothing else can change its outcome."""
        result = EngineResult()
        fired: set[str] = set()
        for stratum in self._strata:
            pending = stratum
            while pending:
                new: set[str] = set()
                for lr in pending:
                    if lr.id in fired or lr.evaluator(facts, result.findings, None, False) != "true":
                        continue
                    fired.add(lr.id)
                    result.fired.append(lr.id)
                    result.matched[lr.id] = [f for f in self._uses[lr.id] if f in result.findings]
                    finding = lr.rule.then.finding
                    if finding is not None and finding.id not in result.findings:
                        result.findings.add(finding.id)
                        new.add(finding.id)
                pending = [lr for lr in stratum if lr.id not in fired and new.intersection(self._uses[lr.id])]
        return result
