"""Hypothesis strategies that generate valid observation sets from the fact vocabulary (knowledge_base/facts.yaml)."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

import expert
from expert.kb.knowledge import FactSpec
from expert.rules.model import AllOf, AnyOf, FactTest, FindingRef, NotOf

KB = expert.default_expert().kb
OBSERVABLE = [f for f in KB.facts.values() if f.askable]


def _value(spec: FactSpec) -> st.SearchStrategy[Any]:
    if spec.type == "hardware":
        return st.sampled_from(sorted(KB.hardware))
    if spec.type == "enum":
        return st.sampled_from(spec.choices or [])
    if spec.type == "text":  # names a trace parser reports, quoted in messages
        return st.sampled_from(["aten::add_ and aten::mul", "aten::mm", "preprocess", spec.example or "x"])
    if spec.type == "optimizations":  # ids of the optimization catalog, as a list or comma-separated
        ids = st.lists(st.sampled_from(sorted(KB.optimizations)), min_size=1, max_size=4, unique=True)
        return st.one_of(ids, ids.map(", ".join))
    if spec.type == "fraction":
        # thresholds sit on round numbers, so include them and their neighbourhoods
        edges = st.sampled_from([0.0, 0.01, 0.05, 0.1, 0.15, 0.5, 0.7, 0.8, 0.9, 0.95, 1.0])
        return st.one_of(st.floats(0.0, 1.0, allow_nan=False), edges)
    low = spec.min if spec.min is not None else 0.0
    high = spec.max if spec.max is not None else 1e12
    if spec.type == "integer":
        small = st.integers(int(max(low, 0)), int(min(high, 4096)))
        return st.one_of(small, st.integers(int(max(low, 0)), int(high)), st.just(int(max(low, 1))))
    # numbers: log-uniform over the range so tiny and huge magnitudes both appear
    lo = max(low, 1e-9) if spec.exclusive_min or low <= 0 else low
    hi = high
    log_lo, log_hi = math.log10(lo), math.log10(hi)
    return st.floats(log_lo, log_hi, allow_nan=False).map(lambda e: float(f"{10 ** e:.6g}"))


_LAYOUT = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")


@st.composite
def observations(draw: st.DrawFn, max_facts: int | None = None) -> dict[str, Any]:
    """A dict of fact -> value that passes validation (cross-fact constraints respected)."""
    size = max_facts or len(OBSERVABLE)
    chosen = draw(st.lists(st.sampled_from(OBSERVABLE), unique_by=lambda f: f.name, max_size=size))
    obs: dict[str, Any] = {spec.name: draw(_value(spec)) for spec in chosen}
    if "data_wait_s" in obs and "step_time_s" in obs and obs["data_wait_s"] > obs["step_time_s"]:
        obs["data_wait_s"] = obs["step_time_s"] * draw(st.floats(0.0, 1.0))
    if "active_params" in obs and "model_params" in obs and obs["active_params"] > obs["model_params"]:
        obs["active_params"], obs["model_params"] = obs["model_params"], obs["active_params"]
    if "num_gpus" in obs:  # n = p·t·d: the parallel sizes given multiply to at most num_gpus
        for name in ("data_parallel_size", "pipeline_parallel_size", "tensor_parallel_size"):
            if math.prod(obs[n] for n in _LAYOUT if n in obs) > obs["num_gpus"]:
                obs.pop(name, None)
    applied = obs.get("applied_optimizations")
    for opt_id in applied.split(", ") if isinstance(applied, str) else applied or []:  # what they imply holds
        for name, value in KB.optimizations[opt_id].implies.items():
            if name in obs:
                obs[name] = value
    return obs


@st.composite
def rich_observations(draw: st.DrawFn) -> dict[str, Any]:
    """Observations that always include hardware, dtype and a step time, so derivations and verdicts occur often."""
    obs = draw(observations())
    obs.setdefault("hardware", draw(st.sampled_from(sorted(KB.hardware))))
    obs.setdefault("dtype", draw(st.sampled_from(["bf16", "fp16", "fp32", "fp8"])))
    obs.setdefault("step_time_s", draw(st.floats(1e-4, 10.0)))
    if "data_wait_s" in obs and obs["data_wait_s"] > obs["step_time_s"]:
        obs["data_wait_s"] = obs["step_time_s"] / 2
    return obs


# ---- rule conditions -----------------------------------------------------------------------------------------

CONDITION_FACTS = ("gpu_util", "mfu", "hardware")
CONDITION_VALUES = st.one_of(st.none(), st.sampled_from([0.0, 0.25, 0.5, 0.8, 1, "h100-sxm", "l40s"]))


def _leaf() -> st.SearchStrategy[Any]:
    number = st.sampled_from([0.25, 0.5, 0.8])
    ops = st.fixed_dictionaries({}, optional={"lt": number, "ge": number, "eq": st.sampled_from([0.5, "l40s"]),
                                              "ne": st.sampled_from([1, "h100-sxm"]),
                                              "in": st.just(["h100-sxm", 0.5]), "known": st.booleans()})
    tests = st.builds(lambda fact, kw: FactTest(fact=fact, **kw), st.sampled_from(CONDITION_FACTS),
                      ops.filter(lambda kw: bool(kw)))
    return st.one_of(tests, st.builds(FindingRef, finding=st.sampled_from(["x", "y"])))


def conditions() -> st.SearchStrategy[Any]:
    """Condition trees (all, any, not) over fact tests of CONDITION_FACTS and the findings x and y."""
    return st.recursive(_leaf(), lambda inner: st.one_of(
        st.builds(lambda parts: AllOf(all=parts), st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda parts: AnyOf(any=parts), st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda part: NotOf(**{"not": part}), inner)), max_leaves=8)
