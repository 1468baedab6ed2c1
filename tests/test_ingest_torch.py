"""Real traces recorded here with PyTorch's profiler on the CPU (tests/gen_traces/make_traces.py), then diagnosed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import expert
from expert.ingest import ingest_result

pytest.importorskip("torch", reason="torch is not installed (pip install -e .[traces])")

SCRIPT = Path(__file__).parent / "gen_traces" / "make_traces.py"


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("torch_traces")
    subprocess.run([sys.executable, str(SCRIPT), str(out), "--steps", "4"], check=True, capture_output=True,
                   timeout=120)
    return out


def test_a_slow_dataset_is_diagnosed_input_bound(traces: Path) -> None:
    result = ingest_result(traces / "slow_loader.json")
    values = result.observations.values()
    assert values["num_workers"] == 0
    assert values["workload"] == "training"
    assert values["data_wait_s"] / values["step_time_s"] > 0.5
    assert result.files[0].stats["window"] == "ProfilerStep#2–#5 (4 steps)"
    assert result.not_derived["gpu_util"].startswith("CPU-only trace")
    assert expert.diagnose(result.observations).bottleneck == "input"


def test_a_fast_dataset_is_not_input_bound(traces: Path) -> None:
    result = ingest_result(traces / "fast_loader.json")
    values = result.observations.values()
    assert values["data_wait_s"] / values["step_time_s"] < 0.10
    assert expert.diagnose(result.observations).bottleneck != "input"
