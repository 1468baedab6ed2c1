"""The durable-rules backend: rules compiled from data into durable-rules rulesets, behind defences.

Hazards of durable-rules 2.0.28 and how this module defuses each (see ../shared/reference/durable-rules-notes.md):

* the default ``Host`` starts timer threads that segfault under concurrency, and its Python host (``Closure``,
  ``Promise``, callbacks) parses JSON per action and leaves reference cycles per run -> ``_Host``, a minimal host
  over the C extension: no threads, no cycles, the session state passed back as the string it came as;
* ``delete_state`` on a session where no action ran segfaults -> a no-op rule fires on every observation fact;
* more than 1,024 live sessions per ruleset crash -> one session per run, deleted in ``finally``, and a ruleset
  serves one run at a time (a pool of at most ``MAX_SLOTS`` copies, ``_Slot``; threads take turns on them);
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
* a ruleset of about 256 rules or more segfaults or fails (error 108, 303) -> a rule set compiling to more than
  ``MAX_DURABLE_RULES`` rules is split into several rulesets run as one (``DurableEngine``), and a rule whose finding
  alternatives exceed ``MAX_RULE_BRANCHES`` (a product of ``any``s over findings) is evaluated in Python in its
  stratum instead of being expanded.
"""

from __future__ import annotations

import collections
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
from ..rules.logic import NnfFold, compare, facts_used, finding_branches, findings_used
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
MAX_RULE_BRANCHES = 64  # a rule whose finding alternatives exceed this is evaluated in Python, not compiled
MAX_GROUP_WIDTH = 56  # tests one observation fact may match at once per group; durable-rules fails (303) past 63


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
    width: int = 1  # how many of its alpha nodes one fact can match at once (equalities on one fact: one)


class _Compiler:
    """Folds fact-only conditions into durable-rules patterns, replacing what the engine cannot build (a long
    membership list, an expansion past MAX_PATTERN_BRANCHES) by a flag `__cN` the run computes in Python."""

    def __init__(self) -> None:
        self.flags: list[tuple[str, Predicate]] = []

    def flag(self, test: Predicate) -> _Expr:
        name = f"__c{len(self.flags)}"
        self.flags.append((name, test))
        return _Expr({name: 1}, 1, test, 1)

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
        return _Expr(pattern, len(constant) if op == "in" else 1, test, 1)

    def conj(self, parts: list[_Expr]) -> _Expr:
        size = math.prod(p.size for p in parts)
        tests = [p.test for p in parts]
        expr = _Expr(_and([p.pattern for p in parts]), size, lambda f: all(t(f) for t in tests),
                     math.prod(p.width for p in parts))
        return self.flag(expr.test) if size > MAX_PATTERN_BRANCHES else expr

    def disj(self, parts: list[_Expr]) -> _Expr:
        size = sum(p.size for p in parts)
        tests = [p.test for p in parts]
        expr = _Expr(_or([p.pattern for p in parts]), size, lambda f: any(t(f) for t in tests),
                     sum(p.width for p in parts))
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


# an action gets the run and the facts its rule matched (alias -> fact) and returns the fact to assert back, if any
_Action = Callable[["_Run", dict[str, Any]], "dict[str, Any] | None"]


class _Host:
    """The part of durable-rules' Python host this engine uses, over the C extension directly: assert a fact, run
    the actions it (and the facts they assert) make ready, delete a session. Unlike ``durable.engine.Host`` it starts
    no timer threads, builds no closures (so a run leaves no reference cycles) and hands the session state back to
    the engine as the JSON string it came as.

    One host holds one ruleset, a chunk of the rule set: ``consumes`` are the findings its rules read (a finding an
    action concludes goes back into this host only if it is one of them), ``phases`` the strata its negating rules
    wait for. ``delivered`` (per run) holds the findings this host's session has been given."""

    def __init__(self, name: str, definition: dict[str, dict[str, Any]], actions: dict[str, _Action],
                 consumes: frozenset[str] = frozenset(), phases: frozenset[int] = frozenset(),
                 groups: list[tuple[int, frozenset[str]]] | None = None) -> None:
        self._actions = actions
        self.definition, self.consumes, self.phases = definition, consumes, phases
        self.groups = groups or []
        self.delivered: set[str] = set()
        self._handle = _dr.create_ruleset(name, json.dumps(definition, ensure_ascii=False))

    def _assert(self, fact: dict[str, Any]) -> int | None:
        result = _dr.assert_fact(self._handle, json.dumps(fact, ensure_ascii=False))
        if result[0] == 1:
            raise EngineError(f"durable-rules did not handle the fact {fact!r}")
        if result[0] == 2:
            raise EngineError(f"durable-rules had already observed the fact {fact!r}")
        return None if result[0] == 3 else int(result[1])

    def assert_fact(self, fact: dict[str, Any], run: _Run) -> None:
        """Assert a fact, then run every action it makes ready (for `run`), in the engine's order, to quiescence."""
        if fact.get("t") == "finding":
            self.delivered.add(fact["id"])
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
                back = action(run, matched) if action is not None else None
                if back is not None and back["id"] in self.consumes and back["id"] not in self.delivered:
                    self.delivered.add(back["id"])
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
    facts: Mapping[str, Value]
    result: EngineResult = field(default_factory=EngineResult)
    errors: list[str] = field(default_factory=list)
    queue: collections.deque[tuple[str, str]] = field(default_factory=collections.deque)  # (finding, rule) to pass on


_LIVE: weakref.WeakSet[DurableEngine] = weakref.WeakSet()

# Copies of the C rulesets one engine keeps for runs at once (~1.7 MB each with the bundled rules). One: durable-rules
# never releases the GIL, so a second copy lets no two runs compute at once; it only lets more threads contend for the
# GIL mid-run. Measured on 2 cores (bench/bench_diagnose.py --only concurrency, 8 threads on one Expert against 1):
# 0.83-0.86x with one copy, 0.78x with four; a script alternating them, 0.88x against 0.67-0.71x. A run waiting for
# the copy sleeps on a condition, off the GIL. The pool stays, for a release that computes without the GIL.
MAX_SLOTS = 1


def _free_rulesets(hosts: list[_Host], pid: int) -> None:
    """Free the C rulesets of hosts no engine uses any more (not in a forked child: the parent owns them)."""
    if pid == os.getpid():
        for host in hosts:
            host.free()


class _Slot:
    """One copy of the engine's C rulesets (a host per chunk) and which of them read each finding. A slot serves one
    run at a time: a run checks one out of the engine's pool and returns it when done (runs in different threads are
    interleaved by the GIL, which durable-rules never releases; see MAX_SLOTS). Its rulesets are freed when
    the slot is dropped (with its engine), except in a forked child of the process that made it."""

    __slots__ = ("__weakref__", "consumers", "hosts", "pid")

    def __init__(self, plans: list[_Plan], actions: dict[str, _Action]) -> None:
        self.pid = os.getpid()
        self.hosts: list[_Host] = []
        weakref.finalize(self, _free_rulesets, self.hosts, self.pid)
        for plan in plans:  # appended one by one, so a failing build still frees the rulesets made before it
            self.hosts.append(_Host(f"dam_{uuid.uuid4().hex}", plan.definition, actions, plan.consumes, plan.phases,
                                    plan.groups))
        self.consumers: dict[str, list[_Host]] = {}
        for host in self.hosts:
            for fid in host.consumes:
                self.consumers.setdefault(fid, []).append(host)


def _after_fork_in_child() -> None:
    """A fork copies the engine's lock as it was: held, when another thread was checking a slot in or out, and never
    released in the child (the deadlock of issue 22). The child gets a fresh lock and an empty pool, and builds its
    own slots on first use (a copied slot may hold another thread's half-finished session; the copies are left to
    the parent, which owns them)."""
    for engine in list(_LIVE):
        engine._reset_pool()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _Count(NnfFold[tuple[bool, int]]):
    """How many alternatives `finding_branches` would give a condition (an upper bound), without building them."""

    def leaf(self, fact: str, op: str, constant: Any) -> tuple[bool, int]:
        return True, 1

    def found(self, finding: str, positive: bool) -> tuple[bool, int]:
        return False, 1

    def conj(self, parts: list[tuple[bool, int]]) -> tuple[bool, int]:
        return all(p[0] for p in parts), math.prod(p[1] for p in parts)

    def disj(self, parts: list[tuple[bool, int]]) -> tuple[bool, int]:
        return (True, 1) if all(p[0] for p in parts) else (False, sum(p[1] for p in parts))


@dataclass
class _Branch:
    """One compiled alternative of a rule: its durable-rules name, the patterns besides the observation fact, the
    observation fact's tests, how many of them one fact can match at once, what it reads and the stratum it awaits."""

    name: str
    joins: list[dict[str, Any]]
    obs: list[dict[str, Any]]
    width: int
    facts: frozenset[str]
    reads: frozenset[str]
    gate: int | None


@dataclass
class _Plan:
    """One durable-rules ruleset: its definition, the findings its rules read, the strata its negating rules await,
    and its observation groups: (group number, the facts and flags the group's rules read)."""

    definition: dict[str, Any]
    consumes: frozenset[str]
    phases: frozenset[int]
    groups: list[tuple[int, frozenset[str]]]


class DurableEngine:
    """Runs a RuleSet on durable-rules. Thread-safe: each run has a copy of the C rulesets to itself (a pool of at
    most MAX_SLOTS, made as threads need them; past that a run waits for one to be returned: with the default of one,
    runs take turns). Fork-safe: a child process gets a fresh lock and its own rulesets.

    durable-rules has two limits a large rule set meets: about 256 rules per ruleset (segfault, error 108), and 64
    alpha nodes one fact may match at once (error 303: sixty-odd rules testing one fact with different thresholds
    all true). So the compiled rules are cut into rulesets of at most MAX_DURABLE_RULES (chunks), and within a
    ruleset into observation groups of at most MAX_GROUP_WIDTH matchable tests: each group's rules match their own
    observation fact (``g``), asserted with just the facts they read. The chunks run as one: every finding a chunk
    concludes is passed to the chunks whose rules read it, and the phase fact of stratum n reaches any chunk only
    once every chunk has settled the strata below n, so negation sees the same complete lower strata as in one
    ruleset. A rule whose finding alternatives exceed MAX_RULE_BRANCHES is evaluated in Python, in its stratum."""

    name = "durable-rules"

    def __init__(self, ruleset: RuleSet) -> None:
        if _dr is None:
            raise EngineError(f"durable-rules is not available: {_IMPORT_ERROR}")
        self._sids = itertools.count()
        self._max_slots = MAX_SLOTS
        self._max_stratum = ruleset.max_stratum
        # only facts some rule reads go into the engine (fewer keys to serialise and parse per run)
        self._read = frozenset(name for lr in ruleset.rules.values() for name in facts_used(lr.condition))
        self._compiler = _Compiler()
        self._actions: dict[str, _Action] = {}
        self._python: list[tuple[str, int, Any, str | None, tuple[str, ...]]] = []
        self._plans = self._chunk(self._compile(ruleset))
        self._flags = tuple(self._compiler.flags)
        self._reset_pool()
        self._idle.append(_Slot(self._plans, self._actions))  # the first now, so a rule set that fails, fails here
        self._made = 1
        _LIVE.add(self)

    # ---- building ---------------------------------------------------------------------------------------------------
    def _compile(self, ruleset: RuleSet) -> list[list[_Branch]]:
        """Each rule's branches, in (stratum, id) order; a rule evaluated in Python has none."""
        consumed = ruleset.consumed_findings()
        compiled: list[list[_Branch]] = []
        compiler = self._compiler
        for lr in sorted(ruleset.rules.values(), key=lambda r: (r.stratum, r.id)):
            finding = lr.rule.then.finding.id if lr.rule.then.finding else None
            if _Count().fold(lr.condition)[1] > MAX_RULE_BRANCHES:
                pos, neg = findings_used(lr.condition)
                self._python.append((lr.id, lr.stratum, lr.evaluator, finding, tuple(sorted(pos | neg))))
                continue
            action = self._action(lr.id, finding, assert_back=finding in consumed)
            before = len(compiler.flags)
            alternatives = finding_branches(lr.condition, compiler.leaf, compiler.conj, compiler.disj)
            branches: list[_Branch] = []
            for k, branch in enumerate(alternatives):
                joins: list[dict[str, Any]] = []
                gate = lr.stratum if lr.stratum > 0 and branch.neg else None
                if gate is not None:
                    joins.append({"ph": {"$and": [{"t": "phase"}, {"n": gate}]}})
                facts = list(branch.facts)
                if math.prod(e.size for e in facts) > MAX_PATTERN_BRANCHES:
                    facts = [compiler.conj(facts)]  # one flag for the whole fact-only part of the branch
                for j, fid in enumerate(branch.pos):
                    joins.append({f"f{j}": {"$and": [{"t": "finding"}, {"id": fid}]}})
                for j, fid in enumerate(branch.neg):
                    joins.append({f"n{j}$not": {"$and": [{"t": "finding"}, {"id": fid}]}})
                branches.append(_Branch(f"{lr.id}#{k}", joins, [e.pattern for e in facts],
                                        math.prod(e.width for e in facts), frozenset(),
                                        frozenset(branch.pos) | frozenset(branch.neg), gate))
                self._actions[f"{lr.id}#{k}"] = action
            reads = frozenset(facts_used(lr.condition)) | {name for name, _ in compiler.flags[before:]}
            for b in branches:
                b.facts = reads
            compiled.append(branches)
        return compiled

    @staticmethod
    def _chunk(compiled: list[list[_Branch]]) -> list[_Plan]:
        """The compiled rules in chunks of at most MAX_DURABLE_RULES, a rule's branches kept together where they
        fit, and each chunk in observation groups of at most MAX_GROUP_WIDTH matchable tests."""
        chunks: list[list[_Branch]] = [[]]
        for branches in compiled:
            if len(chunks[-1]) + len(branches) > MAX_DURABLE_RULES and chunks[-1]:
                chunks.append([])
            for branch in branches:
                if len(chunks[-1]) >= MAX_DURABLE_RULES:
                    chunks.append([])
                chunks[-1].append(branch)
        plans: list[_Plan] = []
        group = 0
        for chunk in chunks:
            definition: dict[str, Any] = {
                # accepts every fact so no assert is ever "not handled"; the second pattern never matches
                "zz_sink": {"all": [{"a0": {"$ex": {"t": 1}}}, {"a1": {"t": "__never__"}}]},
                # runs an action (none: nothing to do) in every session as soon as its first observation fact
                # arrives, so delete_state is safe
                "zz_done": {"all": [{"d": {"$and": [{"t": "obs"}, {"g": group + 1}]}}]},
            }
            groups: list[tuple[int, set[str]]] = []
            width = MAX_GROUP_WIDTH + 1
            for branch in chunk:
                if width + branch.width > MAX_GROUP_WIDTH:  # a new observation group (a wide branch gets its own)
                    group += 1
                    groups.append((group, set()))
                    width = 0
                width += branch.width
                groups[-1][1].update(branch.facts)
                gated = 1 if branch.gate is not None else 0  # the phase pattern first, then the observation
                obs = {"o": {"$and": [{"t": "obs"}, {"g": group}, *branch.obs]}}
                definition[branch.name] = {"all": [*branch.joins[:gated], obs, *branch.joins[gated:]]}
            plans.append(_Plan(definition, frozenset(f for b in chunk for f in b.reads),
                               frozenset(b.gate for b in chunk if b.gate is not None),
                               [(g, frozenset(reads)) for g, reads in groups]))
        return plans

    @property
    def chunks(self) -> int:
        """How many durable-rules rulesets the rule set was split into."""
        return len(self._plans)

    @property
    def slots(self) -> int:
        """How many copies of the C rulesets this engine holds now (at most MAX_SLOTS)."""
        return self._made

    def _action(self, rule_id: str, finding: str | None, assert_back: bool) -> _Action:
        def action(run: _Run, m: dict[str, Any]) -> dict[str, Any] | None:
            try:
                if rule_id in run.result.matched:
                    return None  # a rule fires once, whichever branch or finding fact matched first
                matched = sorted(fact["id"] for alias, fact in m.items() if alias.startswith("f") and "id" in fact)
                return _conclude(run, rule_id, matched, finding, assert_back)
            except Exception as exc:  # keep it, so the run can re-raise it after the session is deleted
                run.errors.append(f"{rule_id}: {type(exc).__name__}: {exc}")
            return None

        return action

    # ---- the pool of slots -------------------------------------------------------------------------------------------
    def _reset_pool(self) -> None:
        """An empty pool (at construction, and in a forked child)."""
        self._lock = threading.Lock()
        self._returned = threading.Condition(self._lock)
        self._idle: list[_Slot] = []
        self._made = 0

    def _checkout(self) -> _Slot:
        """An idle slot; a new one while fewer than MAX_SLOTS exist; else the next one returned."""
        with self._lock:
            while not self._idle and self._made >= self._max_slots:
                self._returned.wait()
            if self._idle:
                return self._idle.pop()
            self._made += 1
        try:
            return _Slot(self._plans, self._actions)
        except BaseException:
            with self._lock:
                self._made -= 1
                self._returned.notify()
            raise

    def _checkin(self, slot: _Slot) -> None:
        if slot.pid != os.getpid():  # checked out before a fork, in the parent: not this process's
            return
        with self._lock:
            self._idle.append(slot)
            self._returned.notify()

    # ---- running ----------------------------------------------------------------------------------------------------
    @staticmethod
    def _drain(slot: _Slot, run: _Run, sid: str) -> None:
        """Pass every finding concluded so far to the chunks that read it and have not had it, to quiescence."""
        while run.queue:
            fid, by = run.queue.popleft()
            for host in slot.consumers.get(fid, ()):
                if fid not in host.delivered:
                    host.assert_fact({"t": "finding", "id": fid, "by": by, "sid": sid}, run)

    def _settle(self, slot: _Slot, run: _Run, sid: str, stratum: int) -> None:
        """Drain, then evaluate the Python-side rules up to this stratum, until neither concludes anything new."""
        while True:
            self._drain(slot, run, sid)
            fired = False
            for rule_id, rule_stratum, evaluator, finding, uses in self._python:
                if rule_stratum > stratum or rule_id in run.result.matched:
                    continue
                if evaluator(run.facts, run.result.findings, None, False) == "true":
                    _conclude(run, rule_id, [f for f in uses if f in run.result.findings], finding, True)
                    fired = True
            if not fired and not run.queue:
                return

    def run(self, facts: Mapping[str, Value]) -> EngineResult:
        values: dict[str, Any] = {}
        read = self._read
        for name, value in facts.items():
            if name in read:
                values[name] = value if isinstance(value, str) else durable_number(value)
        for flag, test in self._flags:  # the sub-conditions durable-rules could not build, evaluated here
            values[flag] = 1 if test(facts) else 0
        slot = self._checkout()
        sid = f"s{next(self._sids)}"
        run = _Run(facts)
        created: list[_Host] = []
        try:
            for host in slot.hosts:
                host.delivered = set()
                for group, reads in host.groups:
                    payload = {name: values[name] for name in reads if name in values}
                    host.assert_fact({**payload, "t": "obs", "g": group, "sid": sid}, run)
                    if not created or created[-1] is not host:
                        created.append(host)
            self._settle(slot, run, sid, 0)
            for stratum in range(1, self._max_stratum + 1):
                for host in slot.hosts:
                    if stratum in host.phases:
                        host.assert_fact({"t": "phase", "n": stratum, "sid": sid}, run)
                self._settle(slot, run, sid, stratum)
        except Exception as exc:
            raise EngineError(f"durable-rules failed: {type(exc).__name__}: {exc}") from exc
        finally:
            try:
                for host in created:  # an obs fact made the session and fired zz_done, so deleting is safe
                    host.delete_state(sid)
            finally:
                self._checkin(slot)
        if run.errors:
            raise EngineError("a rule action failed: " + "; ".join(run.errors))
        return run.result


def _conclude(run: _Run, rule_id: str, matched: list[str], finding: str | None,
              assert_back: bool) -> dict[str, Any] | None:
    """Record a rule firing; a finding new to the run, that some rule reads, is queued for the other chunks and
    returned to be asserted back into the firing one."""
    run.result.fired.append(rule_id)
    run.result.matched[rule_id] = matched
    if finding is None or finding in run.result.findings:
        return None
    run.result.findings.add(finding)
    if not assert_back:  # only findings some rule reads go back into the engine
        return None
    run.queue.append((finding, rule_id))
    return {"t": "finding", "id": finding, "by": rule_id}
