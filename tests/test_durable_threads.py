"""Threads on one durable-rules Expert (issue 20): each run checks a copy of the C rulesets out of the engine's pool
(one copy by default: durable-rules never releases the GIL, so more only add contention; the tests that need several
raise MAX_SLOTS); the pool must never hand one copy to two runs at once, stay bounded, free its rulesets with the
Expert, and give every thread exactly the report a serial run gives."""

from __future__ import annotations

import gc
import hashlib
import multiprocessing
import sys
import threading
import weakref
from pathlib import Path
from typing import Any

import pytest
from golden_cases import golden_facts

from expert import Expert
from expert.engine import durable
from expert.engine.durable import DurableEngine

pytestmark = pytest.mark.skipif(not durable.available()[0], reason=f"durable-rules: {durable.available()[1]}")
ROOT = Path(__file__).resolve().parents[1]


def _cases() -> list[dict[str, Any]]:
    """Every third golden case: the bundled examples and cases of every rule-test file, enough runs for them to
    overlap in the pool, without the test growing with each rule-test case added."""
    return golden_facts()[::3]


def _in_threads(n: int, work: Any) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def run(k: int) -> None:
        try:
            barrier.wait()
            work(k)
        except BaseException as exc:  # pragma: no cover - reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_eight_threads_on_different_cases_get_the_serial_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    """8 threads, each its own share of the cases, several rounds; a short switch interval makes the GIL hand over
    inside runs, so that runs overlap and the pool grows (room for four copies)."""
    monkeypatch.setattr(durable, "MAX_SLOTS", 4)
    cases = _cases()
    assert len(cases) > 100
    exp = Expert(engine="durable")
    serial = [exp.diagnose(facts).to_json() for facts in cases]
    in_use: set[int] = set()
    shared: list[int] = []
    checkout, checkin = DurableEngine._checkout, DurableEngine._checkin

    def tracked_checkout(self: DurableEngine) -> Any:
        slot = checkout(self)
        if id(slot) in in_use:
            shared.append(id(slot))
        in_use.add(id(slot))
        return slot

    def tracked_checkin(self: DurableEngine, slot: Any) -> None:
        in_use.discard(id(slot))
        checkin(self, slot)

    monkeypatch.setattr(DurableEngine, "_checkout", tracked_checkout)
    monkeypatch.setattr(DurableEngine, "_checkin", tracked_checkin)
    results: dict[int, str] = {}
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        errors = _in_threads(8, lambda k: results.update(
            {i: exp.diagnose(cases[i]).to_json() for _ in range(2) for i in range(k, len(cases), 8)}))
    finally:
        sys.setswitchinterval(previous)
    assert not errors, errors
    assert not shared, "a slot was handed to two runs at once"
    assert [results[i] for i in range(len(cases))] == serial
    assert isinstance(exp.engine, DurableEngine)
    assert 1 < exp.engine.slots <= durable.MAX_SLOTS, exp.engine.slots


def test_a_full_pool_makes_runs_wait_not_share() -> None:
    """With room for one copy (the default), eight threads take turns on it and still get the serial results."""
    exp = Expert(engine="durable")
    inputs = [{"hardware": "h100-sxm", "gpu_util": (i % 10) / 10, "data_wait_s": 0.01 * (i % 5),
               "step_time_s": 0.1} for i in range(40)]
    serial = [exp.diagnose(obs).to_json() for obs in inputs]
    results: dict[int, str] = {}
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        errors = _in_threads(8, lambda k: results.update(
            {i: exp.diagnose(inputs[i]).to_json() for i in range(k, len(inputs), 8)}))
    finally:
        sys.setswitchinterval(previous)
    assert not errors, errors
    assert [results[i] for i in range(len(inputs))] == serial
    assert isinstance(exp.engine, DurableEngine) and exp.engine.slots == 1


def _overlapping_runs(engine: DurableEngine, threads: int) -> None:
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        _in_threads(threads, lambda k: [engine.run({"gpu_util": 0.1 * (i % 9), "mem_bw_util": 0.5})
                                        for i in range(40)])
    finally:
        sys.setswitchinterval(previous)


def test_a_dropped_engine_frees_every_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    freed: list[int] = []
    free = durable._Host.free

    def counting_free(self: Any) -> None:
        if self._handle is not None:
            freed.append(1)
        free(self)

    monkeypatch.setattr(durable._Host, "free", counting_free)
    monkeypatch.setattr(durable, "MAX_SLOTS", 4)
    engine = DurableEngine(Expert(engine="pure").ruleset)
    _overlapping_runs(engine, 6)
    made = engine.slots * engine.chunks
    assert engine.slots > 1
    ref = weakref.ref(engine)
    del engine
    gc.collect()
    assert ref() is None
    assert len(freed) == made


def _child(e: Expert, facts: dict[str, Any], queue: Any) -> None:
    queue.put(hashlib.sha256(e.diagnose(facts).to_json().encode()).hexdigest())  # small: a pipe holds 64 kB


@pytest.mark.skipif(sys.platform == "win32" or "fork" not in multiprocessing.get_all_start_methods(),
                    reason="needs fork")
def test_a_forked_child_builds_its_own_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child forked from a process whose engine holds several slots gets an empty pool and diagnoses alike."""
    monkeypatch.setattr(durable, "MAX_SLOTS", 4)
    exp = Expert(engine="durable")
    facts = {"gpu_util": "45%", "data_wait_s": "120 ms", "step_time_s": "300 ms", "hardware": "h100-sxm"}
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        _in_threads(4, lambda k: [exp.diagnose(facts) for _ in range(20)])
    finally:
        sys.setswitchinterval(previous)
    expected = hashlib.sha256(exp.diagnose(facts).to_json().encode()).hexdigest()
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(exp, facts, queue))
    child.start()
    child.join(timeout=60)
    if child.is_alive():  # pragma: no cover - a deadlock
        child.kill()
        child.join()
        pytest.fail("the forked child deadlocked")
    assert child.exitcode == 0
    assert queue.get(timeout=5) == expected
