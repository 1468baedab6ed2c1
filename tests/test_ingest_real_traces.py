"""Real Kineto traces from other projects (shared/traces, see its README): the resnet50 pair and every other file."""

from __future__ import annotations

from pathlib import Path

import pytest

import expert
from expert.ingest import ingest_result, kineto
from expert.ingest._source import Source

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
ALL = sorted(TRACES.glob("*/*.json.gz")) if TRACES.is_dir() else []
pytestmark = pytest.mark.skipif(not ALL, reason=f"the shared real traces are not at {TRACES}")


def _resnet(workers: int) -> Path:
    return TRACES / "kineto-resnet50" / f"resnet50_num_workers_{workers}.pt.trace.json.gz"


def test_resnet50_with_a_single_process_dataloader_is_input_bound() -> None:
    result = ingest_result(_resnet(0))
    values = result.observations.values()
    share = values["data_wait_s"] / values["step_time_s"]
    assert 0.35 <= share <= 0.45  # the README: DataLoader ≈ 40 % of the step
    assert values["num_workers"] == 0
    assert values["hardware"] == "v100-sxm2"
    assert values["kernels_per_step"] == 1462
    assert values["pageable_copy_frac"] == 1.0
    report = expert.diagnose(result.observations)
    assert report.bottleneck == "input"
    assert result.observations.facts["gpu_util"].detail["window"] == "ProfilerStep#5–#10 (6 steps)"


def test_resnet50_with_four_workers_is_not_input_bound() -> None:
    result = ingest_result(_resnet(4))
    values = result.observations.values()
    assert values["data_wait_s"] / values["step_time_s"] < 0.02  # the README: ≈ 1 %
    assert "_MultiProcessingDataLoaderIter" in result.not_derived["num_workers"]
    assert expert.diagnose(result.observations).bottleneck != "input"


@pytest.mark.parametrize("path", ALL, ids=[p.name for p in ALL])
def test_every_real_trace_ingests_with_an_honest_account(path: Path) -> None:
    result = ingest_result(path)
    file = result.files[0]
    assert file.format == "kineto"
    assert set(file.measured) | set(file.not_derived) == set(kineto.FACTS)  # each fact: a value or a reason
    assert all(reason and reason != "not derived from this trace" for reason in result.not_derived.values())
    expert.diagnose(result.observations)  # the observations are valid input


def test_no_steps_rocm_and_counter_only_traces_say_what_is_missing() -> None:
    alexnet = ingest_result(TRACES / "hta" / "critical_path_alexnet_trace.json.gz")
    assert "ProfilerStep" in alexnet.not_derived["step_time_s"]
    assert "whole trace" in str(alexnet.observations.facts["gpu_util"].detail["window"])
    cupti = ingest_result(TRACES / "hta" / "cupti_profiler_trace.json.gz")
    assert "GPU activity was not recorded" in cupti.not_derived["gpu_util"]
    mi250 = ingest_result(TRACES / "hta" / "amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert "AMD Radeon Graphics" in mi250.not_derived["hardware"]
    assert any("ROCm" in n for n in mi250.notes)
    mi300 = ingest_result(TRACES / "tracelens" / "mi300_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    assert mi300.observations.values()["hardware"] == "mi300x"


def test_both_readers_agree_on_a_real_trace() -> None:
    path = TRACES / "tracelens" / "h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    kb = expert.default_expert().kb
    fast = kineto.parse(Source(path), kb)
    slow = kineto.parse(Source(path), kb, engine="ijson")
    assert fast.stats["reader"] != slow.stats["reader"]
    assert {k: m.value for k, m in fast.measured.items()} == {k: m.value for k, m in slow.measured.items()}
