"""nvidia-smi's clock event (throttle) reasons: the share of busy samples a thermal or hardware slowdown held the
clocks down (clock_slowdown_frac), from the bitmask or the per-reason columns, old and new spellings."""

from __future__ import annotations

from pathlib import Path

import pytest

import cli
import expert
from expert.errors import ObservationError
from expert.ingest import ingest_result

# SW power cap (0x4) is the normal limit at full load; 0x40 is HW thermal slowdown, 0x48 also HW slowdown; the last
# sample is idle (0 %), whose reasons say nothing about the job
BITMASK = """\
timestamp, index, name, utilization.gpu [%], clocks_throttle_reasons.active
2026/12/01 10:00:00.000, 0, NVIDIA H100 80GB HBM3, 98 %, 0x0000000000000004
2026/12/01 10:00:00.000, 1, NVIDIA H100 80GB HBM3, 97 %, 0x0000000000000000
2026/12/01 10:00:00.500, 0, NVIDIA H100 80GB HBM3, 97 %, 0x0000000000000040
2026/12/01 10:00:00.500, 1, NVIDIA H100 80GB HBM3, 99 %, 0x0000000000000004
2026/12/01 10:00:01.000, 0, NVIDIA H100 80GB HBM3, 99 %, 0x0000000000000048
2026/12/01 10:00:01.000, 1, NVIDIA H100 80GB HBM3, 0 %, 0x0000000000000081
"""

# the current spelling (clocks_event_reasons), per-reason columns, nounits
PER_REASON = """\
index, utilization.gpu, clocks_event_reasons.sw_power_cap, clocks_event_reasons.hw_slowdown, \
clocks_event_reasons.sw_thermal_slowdown
0, 90, Active, Not Active, Not Active
0, 91, Active, Not Active, Active
0, 92, Not Active, [N/A], Not Active
0, 93, Not Active, Not Active, Not Active
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_bitmask_counts_only_slowdowns_in_busy_samples(tmp_path: Path) -> None:
    result = ingest_result(_write(tmp_path, "mask.csv", BITMASK))
    fact = result.observations.facts["clock_slowdown_frac"]
    assert fact.value == pytest.approx(2 / 5)  # 0x40 and 0x48 of the 5 busy samples; the power cap is not one
    assert fact.detail["samples"] == 5
    assert "clocks_throttle_reasons" not in str(result.files[0].stats.get("ignored_columns", ""))
    one = ingest_result(_write(tmp_path, "mask1.csv", BITMASK), gpus=[1])
    assert one.observations.values()["clock_slowdown_frac"] == 0.0  # GPU 1's only slowdown bit was while idle
    # without a utilization column, the idle reason (0x1) is what leaves a sample out
    no_util = "index, clocks_throttle_reasons.active\n0, 0x41\n0, 0x40\n0, 0x4\n"
    assert ingest_result(_write(tmp_path, "no_util.csv", no_util)).observations.values()[
        "clock_slowdown_frac"] == pytest.approx(1 / 2)


def test_the_per_reason_columns_in_the_current_spelling(tmp_path: Path) -> None:
    result = ingest_result(_write(tmp_path, "reasons.csv", PER_REASON))
    assert result.observations.values()["clock_slowdown_frac"] == pytest.approx(1 / 4)


def test_without_the_reasons_it_says_which_column_to_add(tmp_path: Path) -> None:
    result = ingest_result(_write(tmp_path, "util.csv", "index, utilization.gpu [%]\n0, 50 %\n"))
    assert "clocks_throttle_reasons.active" in result.not_derived["clock_slowdown_frac"]


def test_a_reason_that_is_not_active_or_not_is_an_error_with_its_line(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    bad = _write(tmp_path, "bad.csv", "index, utilization.gpu, clocks_throttle_reasons.hw_slowdown\n0, 50, Maybe\n")
    with pytest.raises(ObservationError, match=r"bad.csv:2: .*'Maybe' is neither Active nor Not Active"):
        ingest_result(bad)
    mask = _write(tmp_path, "mask.csv", "index, utilization.gpu, clocks_throttle_reasons.active\n0, 50, 0xZZ\n")
    assert cli.main(["ingest", str(mask)]) == 2
    err = capsys.readouterr().err
    assert "not a bitmask" in err and "Traceback" not in err


def test_the_diagnosis_names_the_slowdown_from_the_log(tmp_path: Path) -> None:
    observations = ingest_result(_write(tmp_path, "mask.csv", BITMASK)).observations.values()
    report = expert.default_expert().diagnose({**observations, "workload": "training"})
    assert "clock_slowdown" in {f.id for f in report.findings}
    assert report.recommended[0].id == "fix_clock_slowdown"


# dcgm-exporter: field 112 under its old and its current name; GPU 2 is idle (bit 0x1), so it is not counted
EXPORTER = """\
DCGM_FI_DEV_GPU_UTIL{gpu="0",modelName="NVIDIA H100 80GB HBM3"} 97
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="0",modelName="NVIDIA H100 80GB HBM3"} 4
DCGM_FI_DEV_CLOCKS_EVENT_REASONS{gpu="1",modelName="NVIDIA H100 80GB HBM3"} 72
DCGM_FI_DEV_CLOCKS_EVENT_REASONS{gpu="2",modelName="NVIDIA H100 80GB HBM3"} 1
"""


def test_dcgm_exporter_clock_event_reasons(tmp_path: Path) -> None:
    result = ingest_result(_write(tmp_path, "dcgm.prom", EXPORTER))
    fact = result.observations.facts["clock_slowdown_frac"]
    assert fact.value == pytest.approx(1 / 2)  # 0x48 slowed GPU 1; GPU 0 ran at its power cap (0x4)
    assert fact.detail["field_id"] == 112 and "power cap" in str(fact.detail["note"])
    idle = ingest_result(_write(tmp_path, "idle.prom", EXPORTER), gpus=[2])
    assert "idle" in idle.not_derived["clock_slowdown_frac"]
    bad = _write(tmp_path, "bad.prom", 'DCGM_FI_DEV_CLOCKS_EVENT_REASONS{gpu="0"} 2.5\n')
    with pytest.raises(ObservationError, match=r"bad.prom:1: .*2.5 is not a bitmask"):
        ingest_result(bad)


@pytest.mark.parametrize(("facts", "share"), [
    ({"gpu_util": 0.8}, 0.35 * 0.8),  # busy samples are gpu_util of the time: the slowed work is that share of it
    ({}, 0.35),  # utilization not given: every sample taken as busy, the upper bound
])
def test_fixing_a_slowdown_gives_back_at_most_the_slowed_share(facts: dict[str, float], share: float) -> None:
    # a busy GPU (share_compute near 1) used to be promised the whole compute term: "up to 100x"
    report = expert.default_expert().diagnose({"workload": "training", "hardware": "h100-sxm", "dtype": "bf16",
                                               "clock_slowdown_frac": 0.35, "step_time_s": 1.4, "mfu": 0.28,
                                               **facts})
    gain = next(r for r in report.recommended if r.id == "fix_clock_slowdown").expected_gain
    assert gain is not None
    assert gain.term_share == pytest.approx(share, abs=1e-4)
    assert gain.max_speedup == pytest.approx(1 / (1 - share), abs=1e-3)
    assert "clock_slowdown_step_frac" in gain.assumptions
