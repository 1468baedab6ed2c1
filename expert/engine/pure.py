"""The reference engine: a small stratified forward chainer in pure Python.

It evaluates each rule's resolved condition tree directly (Kleene logic), stratum by stratum, to a fixpoint.
It holds no per-run state, so one instance is safe to share across threads.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from ..rules.evaluate import WARM_RUNS, generate_condition
from ..rules.logic import Outcome
from ..rules.ruleset import RuleSet
from .base import EngineResult, Value

# (rule id, compiled condition, finding it concludes, findings it reads): resolved once, read on every run
_Compiled = tuple[str, Callable[[Mapping[str, Value], Collection[str], Any, bool], Outcome], str | None,
                  tuple[str, ...]]
_Stratum = tuple[list[_Compiled], dict[str, list[int]]]  # the rules of a stratum; finding -> indices of its readers


class PureEngine:
    """Stratified naive forward chaining; the reference the durable-rules backend is tested against."""

    name = "pure"

    def __init__(self, ruleset: RuleSet) -> None:
        self._ruleset = ruleset
        self._runs = 0
        self._generated = False
        self._strata = self._compile(generated=False)

    def _compile(self, generated: bool) -> list[_Stratum]:
        """The rules by stratum, each with its condition as closures (`compile_condition`, cheap to build) or as
        generated code (`generate_condition`, faster to run and slower to build: used once the engine is warm), and
        which of them read each finding."""
        ruleset = self._ruleset
        strata: list[_Stratum] = []
        for s in range(ruleset.max_stratum + 1):
            members = sorted((lr for lr in ruleset.rules.values() if lr.stratum == s), key=lambda lr: lr.id)
            compiled: list[_Compiled] = [
                (lr.id, generate_condition(lr.condition) if generated else lr.evaluator,
                 lr.rule.then.finding.id if lr.rule.then.finding else None,
                 tuple(sorted(ruleset.findings_read[lr.id][0])))
                for lr in members
            ]
            readers: dict[str, list[int]] = {}
            for i, rule in enumerate(compiled):
                for finding in rule[3]:
                    readers.setdefault(finding, []).append(i)
            strata.append((compiled, readers))
        return strata

    def run(self, facts: Mapping[str, Value]) -> EngineResult:
        self._runs += 1  # a lost update under threads only delays the switch
        if self._runs >= WARM_RUNS and not self._generated:
            self._generated = True
            self._strata = self._compile(generated=True)
        return self._run(self._strata, facts)

    @staticmethod
    def _run(strata: list[_Stratum], facts: Mapping[str, Value]) -> EngineResult:
        """Each stratum to its fixpoint. After the first pass only rules that read a finding the previous pass
        concluded are evaluated again: facts never change during a run, and negated findings come from lower strata,
        so nothing else can change its outcome: the outcome of a rule's last evaluation is its outcome on the final
        findings (recorded for the rules that did not fire)."""
        outcomes: dict[str, Outcome] = {}
        result = EngineResult(outcomes=outcomes)
        fired, findings, matched = result.fired, result.findings, result.matched
        for stratum, readers in strata:
            pending = stratum
            while pending:
                new: set[str] = set()
                for rule_id, evaluator, finding, uses in pending:
                    outcome = evaluator(facts, findings, None, False)
                    if outcome != "true":  # a rule's last evaluation is on the final findings it reads
                        outcomes[rule_id] = outcome
                        continue
                    outcomes.pop(rule_id, None)
                    fired.append(rule_id)
                    matched[rule_id] = [f for f in uses if f in findings] if uses else []
                    if finding is not None and finding not in findings:
                        findings.add(finding)
                        new.add(finding)
                if not new:
                    break
                done = set(fired)  # the rules that read a new finding and have not fired, in stratum order
                pending = [stratum[i] for i in sorted({i for f in new for i in readers.get(f, ())})
                           if stratum[i][0] not in done]
        return result
