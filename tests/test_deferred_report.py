"""The report's deferred parts (every section past the verdict, its state and the axes: built on first use) are the
parts an eager build makes: the same JSON bytes, the same values however they are reached (attribute, serialisation,
copy, pickle, equality), no reference cycles; and the pure engine's rule outcomes are the outcomes a trace finds."""

from __future__ import annotations

import copy
import gc
import pickle
from typing import Any

import pytest
from pydantic import BaseModel

import expert
from expert.diagnosis import provenance
from expert.report.model import Deferred, Report
from expert.rules.testing import load_rule_tests

FACTS = {"hardware": "h100-sxm", "dtype": "bf16", "gpu_util": 0.45, "data_wait_s": 0.12, "step_time_s": 0.3,
         "mfu": 0.2, "host_cpu_util": 0.9, "applied_optimizations": "more_dataloader_workers"}


@pytest.fixture(scope="module")
def experts() -> dict[str, expert.Expert]:
    return {"durable": expert.Expert(engine="durable"), "pure": expert.Expert(engine="pure")}


class _Outer(BaseModel):
    """A model holding a report, as compare's sides and the MCP results do."""

    report: Report


def _cases() -> list[dict[str, Any]]:
    from expert._resources import data_dir

    out = [dict(FACTS)]
    for _, tf in load_rule_tests([data_dir("rules")]):
        out += [dict(c.facts) for c in tf.cases[:2]]
    return out


DEFERRED = ("derived", "candidates", "findings", "conflicts", "evidence_limits", "recommended", "wasted", "applied",
            "next_measurements", "missing", "scorecard", "iron_law", "evaluations", "graph", "cluster")


def _eager(report: Report) -> Report:
    """The same report with its deferred parts resolved before anything reads it."""
    return report.model_copy(update={name: getattr(report, name) for name in DEFERRED})


def test_a_fresh_report_defers_its_sections_most_callers_never_read(experts: dict[str, expert.Expert]) -> None:
    report = experts["pure"].diagnose(FACTS)
    assert all(type(report.__dict__[name]) is Deferred for name in DEFERRED)
    assert report.graph.nodes and report.evaluations  # resolved on access, and kept
    assert type(report.__dict__["graph"]) is not Deferred
    # the graph needed the measurements, which needed the missing facts: the report's own lists, resolved once
    assert report.next_measurements is report.next_measurements and report.missing


@pytest.mark.parametrize("first", DEFERRED)
def test_the_sections_come_out_the_same_whichever_is_read_first(experts: dict[str, expert.Expert],
                                                                 first: str) -> None:
    ex = experts["durable"]
    want = _eager(ex.diagnose(FACTS)).to_json()
    report = ex.diagnose(FACTS)
    getattr(report, first)
    assert report.to_json() == want


@pytest.mark.parametrize("engine", ["durable", "pure"])
def test_deferred_parts_serialise_to_the_bytes_of_resolved_ones(experts: dict[str, expert.Expert],
                                                                engine: str) -> None:
    ex = experts[engine]
    for facts in _cases():
        lazy, resolved = ex.diagnose(facts), _eager(ex.diagnose(facts))
        assert lazy.to_json() == resolved.to_json()
        assert ex.diagnose(facts).model_dump() == resolved.model_dump()
        assert Report.model_validate_json(lazy.to_json()).to_json() == resolved.to_json()


def test_every_way_of_reading_a_report_resolves_its_parts(experts: dict[str, expert.Expert]) -> None:
    ex = experts["pure"]
    want = _eager(ex.diagnose(FACTS))
    assert ex.diagnose(FACTS) == want and want == ex.diagnose(FACTS)
    assert pickle.loads(pickle.dumps(ex.diagnose(FACTS))).to_json() == want.to_json()
    assert copy.deepcopy(ex.diagnose(FACTS)).to_json() == want.to_json()
    assert ex.diagnose(FACTS).model_copy().to_json() == want.to_json()
    assert dict(ex.diagnose(FACTS))["graph"] == want.graph
    assert repr(ex.diagnose(FACTS)) == repr(want)
    nested = _Outer(report=ex.diagnose(FACTS))
    assert '"graph":' in nested.model_dump_json() and nested.model_dump()["report"] == want.model_dump()
    # a nested include/exclude reaches into a deferred part as into any other
    trimmed = ex.diagnose(FACTS).model_dump(exclude={"graph": {"edges"}, "evaluations": {"__all__": {"leaves"}}})
    assert "edges" not in trimmed["graph"] and "leaves" not in trimmed["evaluations"][0]
    assert trimmed["graph"]["nodes"] == want.model_dump()["graph"]["nodes"]
    assert "graph" not in ex.diagnose(FACTS).model_dump(exclude={"graph"})


def test_a_part_set_by_hand_replaces_the_deferred_one(experts: dict[str, expert.Expert]) -> None:
    report = experts["pure"].diagnose(FACTS)
    report.evaluations = []
    assert report.evaluations == [] and '"evaluations": []' in report.to_json()


@pytest.mark.parametrize("engine", ["durable", "pure"])
def test_diagnoses_leave_no_cyclic_garbage(experts: dict[str, expert.Expert], engine: str) -> None:
    ex = experts[engine]
    cases = _cases()[:20]
    for facts in cases:  # warm every cache first
        ex.diagnose(facts).to_json()
    gc.collect()
    gc.disable()
    try:
        for i in range(200):
            report = ex.diagnose(cases[i % len(cases)])
            if i % 2:
                report.to_json()  # resolving the deferred parts makes no cycle either
        found = gc.collect()
    finally:
        gc.enable()
    assert found <= 200, f"{found} objects in reference cycles after 200 diagnoses"


def test_pure_engine_outcomes_are_the_outcomes_of_a_trace(experts: dict[str, expert.Expert]) -> None:
    ex = experts["pure"]
    for facts in _cases():
        obs = ex.observations(facts)
        from expert.derive.graph import derive

        derived = derive(obs.values(), ex.kb)
        values = {**obs.values(), **{n: d.value for n, d in derived.items()}}
        result = ex.engine.run(values)
        assert result.outcomes is not None
        traced = {lr.id: lr.evaluator(values, result.findings, [], False) for lr in ex.ruleset.by_id}
        assert set(result.outcomes) == set(traced) - set(result.fired)
        assert all(traced[rule_id] == outcome for rule_id, outcome in result.outcomes.items())
        assert all(traced[rule_id] == "true" for rule_id in result.fired)


def test_the_graph_needs_no_report() -> None:
    """The deferred state holds what the parts are built from, never the report (that would be a cycle)."""
    report = expert.Expert(engine="pure").diagnose(FACTS)
    deferred = report.__dict__["graph"]
    assert isinstance(deferred._state, provenance.Basis)
    assert not any(isinstance(v, Report) for v in vars(deferred._state).values())


def test_a_diagnosis_builds_the_instance_model_construct_would(experts: dict[str, expert.Expert]) -> None:
    """build_report writes the Report's state directly (fields in declaration order, defaults, the set fields):
    exactly what Report.model_construct makes of the same values."""
    for facts in _cases()[:10]:
        report = experts["durable"].diagnose(facts)
        given = {name: report.__dict__[name] for name in report.model_fields_set}
        same = Report.model_construct(**given)
        assert list(report.__dict__) == list(same.__dict__) == list(Report.model_fields)
        assert report.__dict__ == same.__dict__
        assert report.model_fields_set == same.model_fields_set
        assert report.__pydantic_extra__ == same.__pydantic_extra__ and report.__pydantic_private__ is None
