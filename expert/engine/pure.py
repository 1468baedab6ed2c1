"""The reference engine: a small stratified forward chainer in pure Python.

It evaluates each rule's resolved condition tree directly (Kleene logic), stratum by stratum, to a fixpoint.
It holds no per-run state, so one instance is safe to share across threads.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from ..rules.evaluate import WARM_RUNS, ConditionSource, TooLarge, generate_condition
from ..rules.logic import Outcome
from ..rules.model import Condition
from ..rules.ruleset import RuleSet
from .base import EngineResult, Value

# (rule id, compiled condition, finding it concludes, findings it reads): resolved once, read on every run
_Compiled = tuple[str, Callable[[Mapping[str, Value], Collection[str], Any, bool], Outcome], str | None,
                  tuple[str, ...]]
# a stratum's first pass over all its rules, as one generated function:
# (facts, findings, outcomes, fired, matched, new findings) -> None, filling the last five as `_run`'s loop does
_FirstPass = Callable[[Mapping[str, Value], set[str], dict[str, Outcome], list[str], dict[str, list[str]], set[str]],
                      None]
# the rules of a stratum; finding -> indices of its readers; the generated first pass (None: not generated)
_Stratum = tuple[list[_Compiled], dict[str, list[int]], _FirstPass | None]


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
        generated code (`generate_condition`, faster to run and slower to build: used once the engine is warm, with
        the stratum's first pass generated as one function), and which of them read each finding."""
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
            first = _generate_first_pass(compiled, [lr.condition for lr in members]) if generated else None
            strata.append((compiled, readers, first))
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
        for stratum, readers, first in strata:
            new: set[str] = set()
            if first is None:
                pending = stratum
            else:  # the same pass as the loop below makes first, as straight-line code
                first(facts, findings, outcomes, fired, matched, new)
                pending = _readers_of(stratum, readers, new, fired) if new else []
            while pending:
                new = set()
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
                pending = _readers_of(stratum, readers, new, fired)
        return result


def _readers_of(stratum: list[_Compiled], readers: dict[str, list[int]], new: set[str],
                fired: list[str]) -> list[_Compiled]:
    """The rules of `stratum` that read a finding in `new` and have not fired, in stratum order."""
    done = set(fired)
    return [stratum[i] for i in sorted({i for f in new for i in readers.get(f, ())}) if stratum[i][0] not in done]


class _PassSource(ConditionSource):
    """`ConditionSource` for many conditions in one function: constants named across all of them, the other names
    restarted for each condition (each is assigned before it is read, within its own condition's block)."""

    def __init__(self) -> None:
        super().__init__()
        self.constants = 0

    def const(self, value: object) -> str:
        self.constants += 1
        name = f"_k{self.constants}"
        self.env[name] = value
        return name


def _generate_first_pass(compiled: list[_Compiled], conditions: list[Condition]) -> _FirstPass | None:
    """One function that evaluates every rule of a stratum in order, as the first pass of `_run`'s loop does (no
    call per rule); a condition too large to generate calls its compiled evaluator. None if it will not compile."""
    source = _PassSource()
    lines = ["def first(facts, findings, outcomes, fired, matched, new):", "    get = facts.get"]
    for (rule_id, evaluator, finding, uses), condition in zip(compiled, conditions, strict=True):
        source.lines, source.names = [], 0
        try:
            source.visit(condition, "r", 1, 0)
            lines += source.lines
        except (TooLarge, RecursionError):
            lines.append(f"    r = {source.const(evaluator)}(facts, findings, None, False)")
        rule = source.const(rule_id)
        lines += ["    if r == 'true':", f"        fired.append({rule})",
                  f"        matched[{rule}] = [f for f in {source.const(uses)} if f in findings]" if uses
                  else f"        matched[{rule}] = []"]
        if finding is not None:
            concluded = source.const(finding)
            lines += [f"        if {concluded} not in findings:",
                      f"            findings.add({concluded})", f"            new.add({concluded})"]
        lines += ["    else:", f"        outcomes[{rule}] = r"]
    try:
        exec(compile("\n".join(lines), "<stratum>", "exec"), source.env)  # names and constants bound in env
    except (SyntaxError, RecursionError, MemoryError):
        return None
    function: _FirstPass = source.env.pop("first")  # type: ignore[assignment]  # (so no cycle via its globals)
    return function
