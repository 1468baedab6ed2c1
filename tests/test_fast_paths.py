"""The warm diagnosis's shortcuts (issue 20) give exactly what the general paths give: the derivation memo an Expert
keeps for the hardware/dtype-only derivations, the walk's precomputed plan, and the observation records built without
pydantic's generic `model_construct`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from expert import Expert
from expert.derive.derivation import Derivation, Result
from expert.derive.formulas import DerivedValue
from expert.derive.graph import GRAPH, STATIC_FACTS, DerivationGraph, DeriveMemo, derive
from expert.observations.file import read_observation_file
from expert.observations.normalise import Observation, Observations, normalise

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def expert() -> Expert:
    return Expert(engine="pure")


def _cases() -> list[dict[str, Any]]:
    bundled = [dict(read_observation_file(p).observations) for p in sorted((ROOT / "examples").glob("*.yaml"))]
    mixed = [{"hardware": hw, "dtype": dt, "workload": "training", "flops": 1e14, "bytes_moved": 2e10,
              "step_time_s": 0.2, "data_wait_s": 0.05, "gpu_util": 0.5}
             for hw in ("h100-sxm", "a100-sxm-80gb", "l40s", "mi300x") for dt in ("bf16", "fp16", "fp32")]
    return bundled + mixed


def test_memoised_derivations_read_only_hardware_and_dtype(expert: Expert) -> None:
    kept = GRAPH.memoised(expert.kb)
    assert {d.output for d in kept} >= {"peak_tflops", "peak_bandwidth", "ridge_point"}
    static = set(STATIC_FACTS) | {d.output for d in kept}
    for d in kept:
        assert GRAPH.reads(d, expert.kb) <= static, d.output
    # a derivation reading a measured fact is never kept
    assert "mfu" not in {d.output for d in kept}


def test_memo_gives_the_same_records_as_a_fresh_walk(expert: Expert) -> None:
    memo = DeriveMemo()
    for _ in range(2):  # the second round reads every kept result back
        for raw in _cases():
            values = normalise(expert.kb, raw).values()
            assert derive(values, expert.kb, memo=memo) == derive(values, expert.kb)
            assert GRAPH.values(values, expert.kb, memo=memo) == GRAPH.values(values, expert.kb)
    assert len(memo) > 0


def test_memo_records_do_not_share_their_constants(expert: Expert) -> None:
    memo = DeriveMemo()
    values = normalise(expert.kb, {"hardware": "h100-sxm", "dtype": "bf16"}).values()
    first = derive(values, expert.kb, memo=memo)["lower_precision_peak_ratio"]
    first.constants["scribbled"] = 1
    second = derive(values, expert.kb, memo=memo)["lower_precision_peak_ratio"]
    assert "scribbled" not in second.constants


def test_memo_follows_its_knowledge_base(expert: Expert) -> None:
    memo = DeriveMemo()
    values = normalise(expert.kb, {"hardware": "h100-sxm", "dtype": "bf16"}).values()
    derive(values, expert.kb, memo=memo)
    assert len(memo) > 0
    other = Expert(engine="pure").kb  # another knowledge base object: the memo starts over
    assert memo.entries(other) == {}


def test_memo_keys_on_every_value_read() -> None:
    calls: list[object] = []

    def peak(f: Any, kb: Any) -> Result:
        calls.append(f["hardware"])
        return Result(float(len(str(f["hardware"]))))

    graph = DerivationGraph([Derivation("peak_tflops", ("hardware", "dtype"), "len", "test", peak)])
    kb = Expert(engine="pure").kb
    memo = DeriveMemo()
    assert graph.derive({"hardware": "a", "dtype": "bf16"}, kb, memo=memo)["peak_tflops"].value == 1.0
    assert graph.derive({"hardware": "abc", "dtype": "bf16"}, kb, memo=memo)["peak_tflops"].value == 3.0
    assert graph.derive({"hardware": "a", "dtype": "fp16"}, kb, memo=memo)["peak_tflops"].value == 1.0
    assert graph.derive({"hardware": "a", "dtype": "bf16"}, kb, memo=memo)["peak_tflops"].value == 1.0
    assert calls == ["a", "abc", "a"]  # the last one was read back


def test_records_match_the_derivations_own_recorded_inputs(expert: Expert) -> None:
    by_output = {d.output: d for d in GRAPH.derivations}
    for raw in _cases():
        values = normalise(expert.kb, raw).values()
        facts = GRAPH.values(values, expert.kb)
        for name, record in derive(values, expert.kb).items():
            assert isinstance(record, DerivedValue)
            spec = expert.kb.facts.get(name)
            assert record.unit == (spec.unit if spec else None)
            producer = next(d for d in GRAPH.producers(name) if d.formula == record.formula)
            assert record.inputs == producer.recorded_inputs(facts), name
            assert name in by_output


@pytest.mark.parametrize("raw", [
    {"gpu_util": 0.5, "hardware": "h100", "dtype": "bf16"},
    {"gpu_util": {"value": "50%", "source": "dcgm", "detail": {"metric": "DCGM_FI", "flag": True}}},
    {"facts": {"gpu_util": {"value": 0.5}, "dtype": Observation(value="bf16", source="trace")}},
    {"gpu_util": Observation(value=0.25, source="nvml", detail={"n": 3})},
])
def test_observations_are_built_as_model_construct_builds_them(expert: Expert, raw: dict[str, Any]) -> None:
    got = normalise(expert.kb, raw)
    assert type(got) is Observations
    reference = Observations.model_construct(
        facts={name: Observation.model_construct(value=o.value, source=o.source, detail=dict(o.detail))
               for name, o in got.facts.items()}, ranks=list(got.ranks))
    assert got.__getstate__() == reference.__getstate__()
    for name, obs in got.facts.items():
        assert type(obs) is Observation
        assert obs.__getstate__() == reference.facts[name].__getstate__()
    assert got.model_dump_json() == reference.model_dump_json()
    assert got == Observations.model_validate_json(got.model_dump_json())


def test_mapping_shapes_read_as_before(expert: Expert) -> None:
    flat = normalise(expert.kb, {"gpu_util": 0.5, "dtype": {"value": "bf16", "source": "trace"}})
    nested = normalise(expert.kb, {"facts": {"gpu_util": {"value": 0.5}, "dtype": {"value": "bf16",
                                                                                   "source": "trace"}}})
    assert flat == nested
    assert flat.facts["dtype"].source == "trace"
    assert flat.facts["gpu_util"].source == "user"
    # a mapping without "value" is a value itself (and not a valid number)
    with pytest.raises(Exception, match="gpu_util"):
        normalise(expert.kb, {"gpu_util": {"source": "x"}})


def test_revalue_gives_what_the_whole_walk_gives(expert: Expert) -> None:
    """A walk of only the derivations the changed facts reach (`revalue`, the consultation's what-ifs) ends with the
    facts the whole walk ends with, for a fact given another value, added or left out, one or two at a time; and it
    names every fact whose value changed."""
    checked = 0
    for case in _cases():
        observed = normalise(expert.kb, case).values()
        base = GRAPH.values(observed, expert.kb)
        names = sorted(observed)
        trials: list[dict[str, Any]] = [{n: None} for n in names]
        trials += [{n: observed[n] * 2} for n in names if isinstance(observed[n], (int, float))]
        trials += [{"step_time_s": 0.5, "data_wait_s": None}, {"gpu_util": 0.1, "flops": 3e15}]
        for overrides in trials:
            changed = {k: v for k, v in observed.items() if k not in overrides}
            changed.update({k: v for k, v in overrides.items() if v is not None})
            got, reached = GRAPH.revalue(base, changed, frozenset(overrides), expert.kb)
            want = GRAPH.values(changed, expert.kb)
            assert got == want, overrides
            assert {k for k in got.keys() | base.keys() if got.get(k) != base.get(k)} <= reached, overrides
            checked += 1
    assert checked > 100
