"""`derive_deferred` (what a diagnosis derives with) gives the facts and records `derive` gives: the records built
on first read, equal to the eager ones, in the same order, with the memo or without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from golden_cases import golden_facts

import expert
from expert.derive.graph import GRAPH, DerivedRecords, DeriveMemo, derive
from expert.errors import ObservationError

ROOT = Path(__file__).resolve().parents[1]


def _cases() -> list[dict[str, Any]]:
    return golden_facts()


@pytest.mark.parametrize("memo", [False, True])
def test_deferred_records_are_the_records_derive_builds(memo: bool) -> None:
    exp = expert.Expert(engine="pure")
    kept = DeriveMemo() if memo else None
    checked = 0
    for raw in _cases():
        try:
            observed = exp.observations(raw).values()
            eager = derive(observed, exp.kb, memo=kept)
        except ObservationError:
            continue
        for _ in range(2):  # the second time from the memo, where there is one
            facts, records = GRAPH.derive_deferred(observed, exp.kb, memo=kept)
            assert isinstance(records, DerivedRecords)
            assert list(records) == list(eager) and len(records) == len(eager)
            assert all(name in records for name in eager) and "no-such-fact" not in records
            assert facts == {**observed, **{name: d.value for name, d in eager.items()}}
            assert list(facts) == [*observed, *eager]
            assert dict(records.items()) == eager
            for name in list(eager)[:1]:  # built once, then kept
                assert records[name] is records[name]
            checked += len(eager)
    assert checked > 1000


def test_deferred_derivation_refuses_what_derive_refuses() -> None:
    exp = expert.Expert(engine="pure")
    observed = exp.observations({"data_wait_s": 0.5, "step_time_s": 0.1}).values()
    with pytest.raises(ObservationError):
        derive(observed, exp.kb)
    with pytest.raises(ObservationError):
        GRAPH.derive_deferred(observed, exp.kb)


def test_no_derivation_reads_a_fact_the_walk_derives_after_it() -> None:
    """`GRAPH.revalue` walks again only the steps a changed fact reaches, which holds only while no step reads a fact
    derived later in the walk; else every what-if of a consultation walks everything (a derivation of
    gpu_idle_gap_frac placed after the scorecard's wait_share_of_idle made each new state's what-ifs 2.6x slower)."""
    kb = expert.Expert().kb
    bound = GRAPH._bound(kb)
    last = {step[0]: i for i, step in enumerate(bound.plan)}
    late = [(step[0], name) for i, step in enumerate(bound.plan) for name in bound.reads[id(step[7])]
            if last.get(name, -1) > i]
    assert late == []
    assert GRAPH._reach(bound, frozenset({"gpu_util"})) is not None
