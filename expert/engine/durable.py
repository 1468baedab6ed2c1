"""The durable-rules backend: rules compiled from data into durable-rules rulesets, behind defences.

Hazards of durable-rules 2.0.28 and how this module defuses each (see ../shared/reference/durable-rules-notes.md):

* the default ``Host`` starts timer threads that segfault under concurrency, and its Python host (``Closure``,
  ``Promise``, callbacks) parses JSON per action and leaves reference cycles per run -> ``_Host``, a minimal host
  over the C extension: no threads, no cycles, the session state passed back as the string it came as;
* ``delete_state`` on a session where no action ran segfaults -> a no-op rule fires on every observation fact;
* more than 1,024 live sessions per ruleset crash -> one session per run, deleted in ``finally``, runs serialised;
* a fact no pattern accepts aborts a batch -> a never-completing ``sink`` join accepts every fact;
* exceptions inside actions are swallowed into state -> actions catch, record and the run re-raises;
* floats whose repr has an exponent but no '.' (1e-05) are rejected -> nudged by one ULP; NaN/inf/bool never get here;
* no truth maintenance -> rules that negate a finding are gated on a phase fact asserted after lower strata finish;
* a ruleset name cannot be redefined -> every engine registers a uniquely named ruleset on its own host;
* the release does not import on Python 3.13 -> ``available()`` says so and the caller falls back to the pure engine;
* it expands every ``$or`` into its own network paths, so a 500-value ``in`` list hangs the build (uninterruptibly) and
  22 two-way ``any``s take 14 GB -> a membership test of more than ``MAX_IN_VALUES`` values, and any fact-only
  sub-condition whose expansion exceeds ``MAX_PATTERN_BRANCHES``, is evaluated here and handed to the engine as a
  0/1 flag in the observation fact (``_Expr``);
* a ruleset of about 256 rules or more segfaults or fails (error 108, 303) -> more than ``MAX_DURABLE_RULES`` compiled
  rules is refused with ``TooLarge`` before durable-rules sees it, and ``make_engine("auto")`` uses the pure engine.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import threading
import uuid
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import EngineError
from ..rules.logic import compare, facts_used, finding_branches
from ..rules.ruleset import RuleSet
from .base import EngineResult, Value

_IMPORT_ERROR: str | None = None
try:  # pragma: no branch
    import durable_rules_engine as _dr  # the C extension; fails first on unsupported Pythons
except Exception as exc:  # ImportError, or undefined symbols on Python 3.13
    _dr = None
    _IMPORT_ERROR = f"{type(exc).__name__}: {exc}"


def available() -> tuple[bool, str | None]:
    """Whether durable-rules can be used here, and if not, why."""
    return _dr is not None, _IMPORT_ERROR


# ---- compiling conditions -----------------------------------------------------------------------------------------
# Each rule becomes one durable-rules rule per alternative branch of its condition (rules.logic.finding_branches):
# a pattern on the observation fact (the fact-only parts, in negation normal form) plus joins on finding facts.

def durable_number(value: float | int) -> float | int:
    """Make a number durable-rules' JSON parser accepts (it needs a fraction before an exponent)."""
    if isinstance(value, bool):
        raise TypeError("booleans are not numbers here")
    if isinstance(value, int):
        if abs(value) < 2**63:
            return value
        value = float(value)
    if math.isnan(value) or math.isinf(value):
        raise ValueError("NaN and infinity cannot be compared by durable-rules")
    while "e" in repr(value) and "." not in repr(value):
        value = math.nextafter(value, math.inf)  # 1 ULP (1e-05 -> 1.0000000000000001e-05); denormals take a few
    return value


MAX_IN_VALUES = 16  # a longer in/not_in list is one set test here, not an $or of equalities in the engine
MAX_PATTERN_BRANCHES = 64  # a fact-only sub-condition that durable-rules would expand into more paths is a flag
MAX_DURABLE_RULES = 200  # compiled rules (rule branches) per ruleset; durable-rules fails from about 256


class TooLarge(EngineError):
    """The rule set compiles to more durable-rules rules than the engine survives (use the pure engine)."""


def _const(value: Any) -> Any:
    return value if isinstance(value, str) else durable_number(value)


Predicate = Callable[[Mapping[str, Any]], bool]


@dataclass
class _Expr:
    """A fact-only pattern being compiled: the durable-rules expression, how many paths durable-rules expands it
    into, and the same test in Python (true only where every fact it needs is known and passes, as in the engine)."""

    pattern: dict[str, Any]
    size: int
    test: Predicate


class _Compiler:
    """Folds fact-only conditions into durable-rules patterns, replacing what the engine cannot build (a long
    membership list, an expansion past MAX_PATTERN_BRANCHES) by a flag `__cN` the run computes in Python."""

    def __init__(self) -> None:
        self.flags: list[tuple[str, Predicate]] = []

    def flag(self, test: Predicate) -> _Expr:
        name = f"__c{len(self.flags)}"
        self.flags.append((name, test))
        return _Expr({name: 1}, 1, test)

    def leaf(self, fact: str, op: str, constant: Any) -> _Expr:
        def test(facts: Mapping[str, Any]) -> bool:
            value = facts.get(fact)
            if op == "known":
                return (value is not None) == bool(constant)
            return value is not None and compare(op, value, constant)

        if op in ("in", "not_in") and len(constant) > MAX_IN_VALUES:
            members = frozenset(constant)
            if op == "in":
                return self.flag(lambda f: f.get(fact) is not None and f.get(fact) in members)
            return self.flag(lambda f: f.get(fact) is not None and f.get(fact) not in members)
        pattern = _leaf(fact, op, constant)
        return _Expr(pattern, len(constant) if op == "in" else 1, test)

    def conj(self, parts: list[_Expr]) -> _Expr:
        size = math.prod(p.size for p in parts)
        tests = [p.test for p in parts]
        expr = _Expr(_and([p.pattern for p in parts]), size, lambda f: all(t(f) for t in tests))
        return self.flag(expr.test) if size > MAX_PATTERN_BRANCHES else expr

    def disj(self, parts: list[_Expr]) -> _Expr:
        size = sum(p.size for p in parts)
        tests = [p.test for p in parts]
        expr = _Expr(_or([p.pattern for p in parts]), size, lambda f: any(t(f) for t in tests))
        return self.flag(expr.test) if size > MAX_PATTERN_BRANCHES else expr


def _leaf(fact: str, op: str, constant: Any) -> dict[str, Any]:
    exists = {"$ex": {fact: 1}}
    if op == "known":
        return exists if constant else {"$nex": {fact: 1}}
    if op == "eq":
        return {fact: _const(constant)}
    if op == "ne":
        return {"$and": [exists, {"$neq": {fact: _const(constant)}}]}
    if op == "in":
        return {"$or": [{fact: _const(v)} for v in constant]}
    if op == "not_in":
        return {"$and": [exists, *({"$neq": {fact: _const(v)}} for v in constant)]}
    dr_op = {"lt": "$lt", "le": "$lte", "gt": "$gt", "ge": "$gte"}[op]
    return {dr_op: {fact: _const(constant)}}


def _and(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"$and": parts}


def _or(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"$or": parts}


# an action gets the facts its rule matched (alias -> fact) and returns the fact to assert back, if any
_Action = Any


class _Host:
    """The part of durable-rules' Python host this engine uses, over the C extension directly: assert a fact, run
    the actions it (and the facts they assert) make ready, delete a session. Unlike ``durable.engine.Host`` it starts
    no timer threads, builds no closures (so a run leaves no reference cycles) and hands the session state back to
    the engine as the JSON string it came as."""

    def __init__(self, name: str, definition: dict[str, dict[str, Any]], actions: dict[str, _Action]) -> None:
        self._actions = actions
        self._handle = _dr.create_ruleset(name, json.dumps(definition, ensure_ascii=False))

    def _assert(self, fact: dict[str, Any]) -> int | None:
        result = _dr.assert_fact(self._handle, json.dumps(fact, ensure_ascii=False))
        if result[0] == 1:
            raise EngineError(f"durable-rules did not handle the fact {fact!r}")
        if result[0] == 2:
            raise EngineError(f"durable-rules had already observed the fact {fact!r}")
        return None if result[0] == 3 else int(result[1])

    def assert_fact(self, fact: dict[str, Any]) -> None:
        """Assert a fact, then run every action it makes ready, in the engine's order, to quiescence."""
        state_handle = self._assert(fact)
        if state_handle is None:
            return
        started = _dr.start_action_for_state(self._handle, state_handle)
        if not started:
            return
        state, message = started[0], json.loads(started[1])
        sid = fact["sid"]
        while True:
            for action_name, matched in message.items():
                action = self._actions.get(action_name)
                back = action(matched) if action is not None else None
                if back is not None:
                    self._assert({**back, "sid": sid})
                break
            _dr.update_state(self._handle, state)
            new = _dr.complete_and_start_action(self._handle, state_handle)
            if not new:
                return
            message = json.loads(new)

    def delete_state(self, sid: str) -> None:
        _dr.delete_state(self._handle, sid)

    def free(self) -> None:
        """Free the C ruleset (durable-rules never does: 784 kB per engine, issue 21)."""
        if self._handle is not None:
            _dr.delete_ruleset(self._handle)
            self._handle = None


@dataclass
class _Run:
    result: EngineResult = field(default_factory=EngineResult)
    errors: list[str] = field(default_factory=list)


_LIVE: weakref.WeakSet[DurableEngine] = weakref.WeakSet()


def _free_ruleset(host: _Host, pid: int) -> None:
    """Free the C ruleset of a host no engine uses any more (not in a forked child: the parent owns it)."""
    if pid == os.getpid():
        host.free()


def _after_fork_in_child() -> None:
    """A fork copies the engine's lock as it was: held, when another thread was running a diagnosis, and never
    released in the child (the deadlock of issue 22). The child gets fresh locks, and rebuilds its host on first use
    (the copied C state may hold that thread's half-finished session)."""
    for engine in list(_LIVE):
        engine._lock = threading.Lock()
        engine._forked = True


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


class DurableEngine:
    """Runs a RuleSet on durable-rules. Thread-safe: runs are serialised (the C engine never releases the GIL).
    Fork-safe: a child process gets fresh locks and its own host."""

    name = "durable-rules"

    def __init__(self, ruleset: RuleSet) -> None:
        if _dr is None:
            raise EngineError(f"durable-rules is not available: {_IMPORT_ERROR}")
        self._lock = threading.Lock()
        self._sids = itertools.count()
        self._current: _Run | None = None
        self._max_stratum = ruleset.max_stratum
        # only facts some rule reads go into the engine (fewer keys to serialise and parse per run)
        self._read = frozenset(name for lr in ruleset.rules.values() for name in facts_used(lr.condition))
        self._ruleset_name = f"dam_{uuid.uuid4().hex}"
        self._compiler = _Compiler()
        definition, actions = self._compile(ruleset)
        if len(definition) - 2 > MAX_DURABLE_RULES:
            raise TooLarge(f"the rules compile to {len(definition) - 2} durable-rules rules, more than the "
                           f"{MAX_DURABLE_RULES} durable-rules 2.0.28 survives (it fails from about 256)")
        self._flags = tuple(self._compiler.flags)
        self._definition, self._actions = definition, actions
        self._forked = False
        self._host = _Host(self._ruleset_name, definition, actions)
        _LIVE.add(self)
        # free the C ruleset with the engine; the actions hold the engine weakly, so the host does not keep it alive
        self._finalizer = weakref.finalize(self, _free_ruleset, self._host, os.getpid())

    def _compile(self, ruleset: RuleSet) -> tuple[dict[str, Any], dict[str, _Action]]:
        consumed = ruleset.consumed_findings()
        definition: dict[str, Any] = {
            # accepts every fact so no assert is ever "not handled"; the second pattern never matches
            "zz_sink": {"all": [{"a0": {"$ex": {"t": 1}}}, {"a1": {"t": "__never__"}}]},
            # runs an action (none: nothing to do) in every session as soon as the observations arrive, so
            # delete_state is safe
            "zz_done": {"all": [{"d": {"t": "obs"}}]},
        }
        actions: dict[str, _Action] = {}
        for lr in sorted(ruleset.rules.values(), key=lambda r: r.id):
            finding = lr.rule.then.finding.id if lr.rule.then.finding else None
            action = self._action(lr.id, finding, assert_back=finding in consumed)
            compiler = self._compiler
            for k, branch in enumerate(finding_branches(lr.condition, compiler.leaf, compiler.conj, compiler.disj)):
                patterns: list[dict[str, Any]] = []
                if lr.stratum > 0 and branch.neg:
                    patterns.append({"ph": {"$and": [{"t": "phase"}, {"n": lr.stratum}]}})
                facts = list(branch.facts)
                if math.prod(e.size for e in facts) > MAX_PATTERN_BRANCHES:
                    facts = [compiler.conj(facts)]  # one flag for the whole fact-only part of the branch
                obs = [{"t": "obs"}, *(e.pattern for e in facts)]
                patterns.append({"o": {"$and": obs}})
                for j, fid in enumerate(branch.pos):
                    patterns.append({f"f{j}": {"$and": [{"t": "finding"}, {"id": fid}]}})
                for j, fid in enumerate(branch.neg):
                    patterns.append({f"n{j}$not": {"$and": [{"t": "finding"}, {"id": fid}]}})
                definition[f"{lr.id}#{k}"] = {"all": patterns}
                actions[f"{lr.id}#{k}"] = action
        return definition, actions

    def _action(self, rule_id: str, finding: str | None, assert_back: bool) -> _Action:
        engine = weakref.ref(self)

        def action(m: dict[str, Any]) -> dict[str, Any] | None:
            me = engine()
            run = me._current if me is not None else None
            if run is None:  # pragma: no cover - only reachable if durable-rules fired outside run()
                return None
            try:
                if rule_id in run.result.matched:
                    return None  # a rule fires once, whichever branch or finding fact matched first
                matched = sorted(fact["id"] for alias, fact in m.items() if alias.startswith("f") and "id" in fact)
                run.result.fired.append(rule_id)
                run.result.matched[rule_id] = matched
                if finding is None:
                    return None
                new = finding not in run.result.findings
                run.result.findings.add(finding)
                if new and assert_back:  # only findings some rule reads go back into the engine
                    return {"t": "finding", "id": finding, "by": rule_id}
            except Exception as exc:  # keep it, so the run can re-raise it after the session is deleted
                run.errors.append(f"{rule_id}: {type(exc).__name__}: {exc}")
            return None

        return action

    def run(self, facts: Mapping[str, Value]) -> EngineResult:
        payload: dict[str, Any] = {"t": "obs"}
        read = self._read
        for name, value in facts.items():
            if name in read:
                payload[name] = value if isinstance(value, str) else durable_number(value)
        for flag, test in self._flags:  # the sub-conditions durable-rules could not build, evaluated here
            payload[flag] = 1 if test(facts) else 0
        with self._lock:
            if self._forked:  # first run in a forked child: a host of its own, without the parent's sessions
                self._ruleset_name = f"dam_{uuid.uuid4().hex}"
                self._host = _Host(self._ruleset_name, self._definition, self._actions)
                self._finalizer = weakref.finalize(self, _free_ruleset, self._host, os.getpid())
                self._forked = False
            sid = f"s{next(self._sids)}"
            run = _Run()
            self._current = run
            created = False
            try:
                payload["sid"] = sid
                self._host.assert_fact(payload)
                created = True
                for stratum in range(1, self._max_stratum + 1):
                    self._host.assert_fact({"t": "phase", "n": stratum, "sid": sid})
            except Exception as exc:
                raise EngineError(f"durable-rules failed: {type(exc).__name__}: {exc}") from exc
            finally:
                self._current = None
                if created:  # the obs fact made the session and fired zz_done, so deleting is safe
                    self._host.delete_state(sid)
        if run.errors:
            raise EngineError("a rule action failed: " + "; ".join(run.errors))
        return run.result
