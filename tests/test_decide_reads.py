"""`decide.facts_read` is what `decide` reads: on every golden case, the facts `decide` looks up are among
`facts_read` and, only while a conflict cap's finding holds, the facts the fired rules test. The consultation
memoises decisions on these facts, so a lookup added to `decide` without adding it there would go stale silently."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from golden_cases import golden_facts

from expert import Expert
from expert.derive.graph import GRAPH
from expert.diagnosis.decide import _conclusions, decide, facts_read
from expert.observations.normalise import normalise

EXPERT = Expert(engine="pure")


class _Recording(Mapping[str, Any]):
    """The facts, noting every name looked up (by get, [] or in) and refusing to be listed whole."""

    def __init__(self, facts: Mapping[str, Any]) -> None:
        self._facts = facts
        self.read: set[str] = set()

    def __getitem__(self, name: str) -> Any:
        self.read.add(name)
        return self._facts[name]

    def __contains__(self, name: object) -> bool:
        self.read.add(str(name))
        return name in self._facts

    def get(self, name: str, default: Any = None) -> Any:
        self.read.add(name)
        return self._facts.get(name, default)

    def __iter__(self) -> Iterator[str]:
        self.read.update(self._facts)  # reading them all: every fact counts as read
        return iter(self._facts)

    def __len__(self) -> int:
        return len(self._facts)


CASES = golden_facts()


@pytest.mark.parametrize("index", range(0, len(CASES), max(1, len(CASES) // 300)))
def test_decide_reads_only_facts_read_and_under_a_conflict_the_fired_rules_facts(index: int) -> None:
    try:
        obs = normalise(EXPERT.kb, CASES[index])
    except Exception:
        pytest.skip("a golden case of invalid input (its report is an error)")
    facts, _ = GRAPH.derive_deferred(obs.values(), EXPERT.kb)
    result = EXPERT.engine.run(facts)
    recording = _Recording(facts)
    decision = decide(EXPERT.ruleset, result.matched, result.findings, recording)
    allowed = set(facts_read(EXPERT.ruleset))
    if any(cap.conflict and cap.finding in decision.caps for cap in EXPERT.kb.regimes.evidence_caps):
        reads = _conclusions(EXPERT.ruleset).reads
        for rule_id in decision.fired:
            allowed |= reads[rule_id][0]
    assert recording.read <= allowed, sorted(recording.read - allowed)
