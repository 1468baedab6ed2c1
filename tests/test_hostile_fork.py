"""Fork after threads (issue 22): two threads diagnose on one durable Expert while the process forks (the default
multiprocessing start method on Linux); the child must diagnose, not deadlock on a lock copied while held."""

from __future__ import annotations

import multiprocessing
import sys
import threading
from typing import Any

import pytest

import expert

pytestmark = pytest.mark.skipif(sys.platform == "win32" or "fork" not in multiprocessing.get_all_start_methods(),
                                reason="needs fork")
FACTS = {"gpu_util": "45%", "data_wait_s": "120 ms", "step_time_s": "300 ms", "hardware": "h100-sxm"}


def _child(e: expert.Expert, queue: Any) -> None:
    queue.put(e.diagnose(FACTS).bottleneck)


@pytest.mark.parametrize("engine", ["durable", "pure"])
def test_a_child_forked_while_threads_diagnose_can_diagnose(engine: str) -> None:
    if engine == "durable":
        pytest.importorskip("durable")
    e = expert.Expert(engine=engine)  # type: ignore[arg-type]
    expected = e.diagnose(FACTS).bottleneck
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            e.diagnose(FACTS)

    threads = [threading.Thread(target=busy, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    ctx = multiprocessing.get_context("fork")
    try:
        for _ in range(5):
            queue = ctx.Queue()
            child = ctx.Process(target=_child, args=(e, queue))
            child.start()
            child.join(timeout=30)
            if child.is_alive():
                child.kill()
                child.join()
                pytest.fail("the forked child deadlocked")
            assert child.exitcode == 0
            assert queue.get(timeout=5) == expected
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_dropped_durable_experts_free_their_rulesets() -> None:
    """Creating and dropping durable Experts grew RSS by about 784 kB each, never freed (issue 21)."""
    import gc

    pytest.importorskip("durable")
    from expert.engine.durable import DurableEngine

    ruleset = expert.Expert(engine="pure").ruleset

    def rss_mb() -> float:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * 4096 / 2**20

    for _ in range(10):
        DurableEngine(ruleset).run({"gpu_util": 0.4})
    gc.collect()
    before = rss_mb()
    for _ in range(100):
        DurableEngine(ruleset).run({"gpu_util": 0.4})
    gc.collect()
    assert rss_mb() - before < 30, f"{rss_mb() - before:.0f} MB kept by 100 dropped engines (was about 80)"
