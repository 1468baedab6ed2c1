"""Input-pipeline invariants the rules must hold in every regime (rules/input.yaml).

* With num_workers = 0 prefetching is never recommended: torch.utils.data.DataLoader raises ValueError for
  prefetch_factor ("prefetch_factor option could only be specified in multiprocessing") and for
  persistent_workers=True without worker processes (input-prefetch-needs-workers).
* With (almost) every host-to-device copy already from pinned memory (pageable_copy_frac below 1 %), pinned memory
  is never recommended again: it is already in use (input-copies-already-pinned). Unmeasured, it stays recommended.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import rich_observations

from expert import Expert, Report
from expert.ingest import ingest_result

DURABLE = Expert(engine="durable")
PURE = Expert(engine="pure")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
# examples/data_starved_training.yaml
STARVED: dict[str, Any] = {"hardware": "h100-sxm", "dtype": "bf16", "workload": "training", "batch_size": 256,
                           "num_workers": 0, "gpu_util": "45%", "host_cpu_util": "30%", "step_time_s": "300 ms",
                           "data_wait_s": "120 ms", "flops": 3.1e12}
PINNED_COPIES: dict[str, Any] = {"hardware": "a100-40gb", "h2d_copy_frac": "11%", "pageable_copy_frac": "0%",
                                 "step_time_s": "77 ms", "gpu_util": "84%"}


def _recommended(report: Report) -> set[str]:
    return {r.id for r in report.recommended}


def _wasted(report: Report) -> dict[str, str]:
    return {w.id: w.reason for w in report.wasted}


# ---- prefetching needs loader workers --------------------------------------------------------------------------

@pytest.mark.parametrize("engine", [DURABLE, PURE], ids=["durable", "pure"])
def test_marginal_wait_and_saturated_cpu_without_workers_never_prefetch(engine: Expert) -> None:
    """The QA case: a marginal data wait with the host CPU pegged once voted input through input-host-cpu-saturated,
    whose regime table lists prefetching as effective, while the old waste was gated on data_starved (> 10 %). The
    wait (10 ms of 300, the GPU idle 55 %) now leaves host and launch overhead open beside input (no verdict), and
    prefetching stays out of reach either way."""
    report = engine.diagnose({**STARVED, "data_wait_s": "10 ms", "host_cpu_util": "95%"})
    assert report.bottleneck is None
    assert {"host_cpu_not_input"} <= {f.id for f in report.findings}
    assert "prefetching" not in _recommended(report)
    wasted = _wasted(report)
    assert "num_workers=0" in wasted["prefetching"] and "ValueError" in wasted["prefetching"]
    # more workers are ruled out too (the cores are saturated): the prefetching reason must not ask for them
    assert "more_dataloader_workers" in wasted and "add workers" not in wasted["prefetching"]


@pytest.mark.parametrize("facts", [
    {**STARVED},  # data-starved, idle cores: more workers recommended, prefetching not
    {**STARVED, "host_cpu_util": "95%"},  # data-starved, saturated cores
    {**STARVED, "data_wait_s": "10 ms"},  # marginal wait
    {"hardware": "h100-sxm", "dtype": "bf16", "num_workers": 0, "gpu_util": "97%", "sm_active": "95%"},  # compute
], ids=["starved", "starved-saturated", "marginal", "busy-gpu"])
def test_no_workers_never_prefetch_whatever_the_verdict(facts: dict[str, Any]) -> None:
    report = DURABLE.diagnose(facts)
    assert "prefetching" not in _recommended(report)
    assert "prefetching" in _wasted(report)


@pytest.mark.parametrize("facts", [
    {**STARVED, "num_workers": 4},
    {**STARVED, "num_workers": 8, "data_wait_s": "60 ms", "host_cpu_util": "95%"},
], ids=["starved", "starved-saturated"])
def test_input_bound_with_workers_already_prefetch(facts: dict[str, Any]) -> None:
    """Loader workers already load ahead (prefetch_factor batches each): a steady wait is the loader's rate, which a
    deeper queue or a second buffer does not raise; the reason names the workers and the wait."""
    report = DURABLE.diagnose(facts)
    assert report.bottleneck == "input"
    wasted = _wasted(report)
    assert "prefetching" not in _recommended(report) and "double_buffering" not in _recommended(report)
    assert f"{facts['num_workers']} loader workers already load ahead" in wasted["prefetching"]
    assert "double_buffering" in wasted


@pytest.mark.parametrize("facts", [
    {key: value for key, value in STARVED.items() if key != "num_workers"},  # unknown: loading may be serial
    {**STARVED, "num_workers": 4, "step_time_cv": 0.6, "trace_steps": 20},  # bursty steps: a deeper queue absorbs them
], ids=["workers-unknown", "bursty-steps"])
def test_input_bound_still_prefetch_where_loading_may_not_overlap(facts: dict[str, Any]) -> None:
    report = DURABLE.diagnose(facts)
    assert report.bottleneck == "input"
    assert "prefetching" in _recommended(report) and "prefetching" not in _wasted(report)


@st.composite
def _single_process_loader(draw: st.DrawFn) -> dict[str, Any]:
    """Any observations, with num_workers = 0 and often an input-looking step (a data wait, a starved or busy GPU,
    idle or pegged host cores), so the input verdict and its regime table come up."""
    obs = draw(rich_observations())
    obs["num_workers"] = 0
    if draw(st.booleans()):
        obs["data_wait_s"] = obs["step_time_s"] * draw(st.sampled_from([0.005, 0.02, 0.05, 0.1, 0.2, 0.4, 0.6]))
        obs["gpu_util"] = draw(st.sampled_from([0.3, 0.45, 0.6, 0.79, 0.9]))
        obs["host_cpu_util"] = draw(st.sampled_from([0.2, 0.3, 0.6, 0.91, 0.95, 1.0]))
    return obs


@SETTINGS
@given(_single_process_loader())
def test_property_no_workers_never_prefetch(obs: dict[str, Any]) -> None:
    report = DURABLE.diagnose(obs)
    assert "prefetching" not in _recommended(report), (report.bottleneck, sorted(_recommended(report)))


# ---- pinned memory already in use ------------------------------------------------------------------------------

@pytest.mark.parametrize("engine", [DURABLE, PURE], ids=["durable", "pure"])
def test_copies_already_pinned_are_not_pinned_again(engine: Expert) -> None:
    report = engine.diagnose(PINNED_COPIES)
    assert "pin_memory" not in _recommended(report)
    assert _wasted(report)["pin_memory"].startswith("already in use")
    assert "cuda_streams_overlap" in _recommended(report)  # the copies still take 11 % of the step


@pytest.mark.parametrize(("facts", "pinned"), [
    ({**PINNED_COPIES, "pageable_copy_frac": "0.5%"}, True),
    ({**STARVED, "num_workers": 4, "h2d_copy_frac": "6%", "pageable_copy_frac": "0%"}, True),  # input table
    ({**PINNED_COPIES, "pageable_copy_frac": "1%"}, False),
    ({**PINNED_COPIES, "pageable_copy_frac": "80%"}, False),
    ({key: value for key, value in PINNED_COPIES.items() if key != "pageable_copy_frac"}, False),
    ({**STARVED, "num_workers": 4}, False),  # input table, pageable share unknown
], ids=["half-percent", "starved-pinned", "one-percent", "mostly-pageable", "unknown", "starved-unknown"])
def test_pin_memory_follows_the_pageable_share(facts: dict[str, Any], pinned: bool) -> None:
    report = DURABLE.diagnose(facts)
    assert ("pin_memory" in _recommended(report)) is not pinned
    assert ("pin_memory" in _wasted(report)) is pinned


@st.composite
def _pinned_copies(draw: st.DrawFn) -> dict[str, Any]:
    obs = draw(rich_observations())
    obs["pageable_copy_frac"] = draw(st.one_of(st.just(0.0), st.floats(0.0, 0.0099)))
    if draw(st.booleans()):
        obs["h2d_copy_frac"] = draw(st.sampled_from([0.02, 0.11, 0.3]))
    if draw(st.booleans()):
        obs["data_wait_s"] = obs["step_time_s"] * draw(st.sampled_from([0.02, 0.2, 0.4]))
        obs["gpu_util"] = draw(st.sampled_from([0.45, 0.84]))
    return obs


@SETTINGS
@given(_pinned_copies())
def test_property_pinned_copies_never_pin_again(obs: dict[str, Any]) -> None:
    report = DURABLE.diagnose(obs)
    assert "pin_memory" not in _recommended(report), (report.bottleneck, sorted(_recommended(report)))


def test_real_trace_with_pinned_copies_does_not_recommend_pinning() -> None:
    trace = TRACES / "hta" / "trace_diff_control_control.json.gz"
    if not trace.is_file():
        pytest.skip(f"the shared real traces are not at {TRACES}")
    result = ingest_result(trace)
    assert result.observations.values()["pageable_copy_frac"] == 0.0  # every HtoD copy is Pinned -> Device
    report = DURABLE.diagnose(result.observations)
    assert "pin_memory" not in _recommended(report) and "pin_memory" in _wasted(report)
