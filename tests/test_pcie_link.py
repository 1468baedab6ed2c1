"""nvidia-smi's PCIe link fields: the share of the bandwidth the GPU and its slot support that the link runs at while
the GPU is busy (pcie_link_frac), and the rule that reads it (rules/health.yaml health-pcie-link-degraded)."""

from __future__ import annotations

from pathlib import Path

import pytest

import cli
import expert
from expert.ingest import ingest_result

# GPU 0 drops to Gen1 while idle (power saving, not a fault) and runs Gen4 x16 when busy; GPU 1 trained to x8 and, in
# one busy sample, also to Gen3 between bursts: its best busy reading is Gen4 x8, half the link
LINKS = """\
timestamp, index, name, utilization.gpu [%], pcie.link.gen.current, pcie.link.gen.max, pcie.link.width.current, \
pcie.link.width.max
2026/12/06 10:00:00.000, 0, NVIDIA A100-SXM4-80GB, 0 %, 1, 4, 16, 16
2026/12/06 10:00:00.000, 1, NVIDIA A100-SXM4-80GB, 0 %, 1, 4, 8, 16
2026/12/06 10:00:00.500, 0, NVIDIA A100-SXM4-80GB, 95 %, 4, 4, 16, 16
2026/12/06 10:00:00.500, 1, NVIDIA A100-SXM4-80GB, 93 %, 3, 4, 8, 16
2026/12/06 10:00:01.000, 0, NVIDIA A100-SXM4-80GB, 97 %, 4, 4, 16, 16
2026/12/06 10:00:01.000, 1, NVIDIA A100-SXM4-80GB, 96 %, 4, 4, 8, 16
"""

# the newer field names: gpucurrent against the lower of gpumax and hostmax (a Gen5 GPU in a Gen4 slot runs Gen4)
HOST_LIMITED = """\
index, utilization.gpu, pcie.link.gen.gpucurrent, pcie.link.gen.gpumax, pcie.link.gen.hostmax
0, 90, 4, 5, 4
0, 91, 4, 5, 4
"""


def test_the_link_share_is_read_from_busy_samples_and_the_worst_gpu(tmp_path: Path) -> None:
    (tmp_path / "links.csv").write_text(LINKS)
    result = ingest_result(tmp_path / "links.csv")
    assert result.observations.values()["pcie_link_frac"] == pytest.approx(0.5)
    detail = result.observations.facts["pcie_link_frac"].detail
    assert "GPU 1" in str(detail["method"]) and "busy" in str(detail["method"])
    gpu0 = ingest_result(tmp_path / "links.csv", gpus=[0]).observations.values()
    assert gpu0["pcie_link_frac"] == pytest.approx(1.0)  # the idle Gen1 reading is power saving, not a fault


def test_a_gen5_gpu_in_a_gen4_slot_runs_at_what_the_slot_allows(tmp_path: Path) -> None:
    (tmp_path / "host.csv").write_text(HOST_LIMITED)
    values = ingest_result(tmp_path / "host.csv").observations.values()
    assert values["pcie_link_frac"] == pytest.approx(1.0)


def test_a_generation_below_the_capable_one_under_load(tmp_path: Path) -> None:
    text = "index, utilization.gpu, pcie.link.gen.current, pcie.link.gen.max\n0, 99, 3, 5\n"
    (tmp_path / "gen.csv").write_text(text)
    values = ingest_result(tmp_path / "gen.csv").observations.values()
    assert values["pcie_link_frac"] == pytest.approx(0.985 / 3.938)  # Gen3 of Gen5: a quarter


@pytest.mark.parametrize(("text", "why"), [
    ("index, utilization.gpu\n0, 90\n", "the query has no PCIe link columns"),
    ("index, pcie.link.gen.current, pcie.link.gen.max\n0, 1, 4\n", "no utilization.gpu column"),
    ("index, utilization.gpu, pcie.link.gen.current, pcie.link.gen.max\n0, 0, 1, 4\n0, 0, 1, 4\n",
     "no busy sample"),
    ("index, utilization.gpu, pcie.link.gen.current, pcie.link.width.max\n0, 80, 4, 16\n",
     "no busy sample gives both"),
], ids=["no-link-columns", "no-utilization", "idle-only", "no-complete-pair"])
def test_why_no_link_share_is_given(tmp_path: Path, text: str, why: str) -> None:
    (tmp_path / "smi.csv").write_text(text)
    result = ingest_result(tmp_path / "smi.csv")
    assert "pcie_link_frac" not in result.observations.values()
    assert why in result.not_derived["pcie_link_frac"]


@pytest.mark.parametrize("row", ["0, 90, 7, 4", "0, 90, 4, x"], ids=["no-such-generation", "not-a-number"])
def test_a_bad_link_cell_exits_2_naming_the_line(tmp_path: Path, row: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(f"index, utilization.gpu, pcie.link.gen.current, pcie.link.gen.max\n{row}\n")
    assert cli.main(["ingest", str(path)]) == 2
    err = capsys.readouterr().err
    assert "bad.csv:2:" in err and "pcie.link.gen" in err and "Traceback" not in err


def test_a_degraded_link_is_named_and_its_fix_bounded_by_the_copies() -> None:
    """Copies take 20 % of the step at half speed: restoring the link saves at most half of them, 1/(1 - 0.2 + 0.1)."""
    report = expert.default_expert().diagnose({"workload": "training", "gpu_util": 0.7, "pcie_link_frac": 0.5,
                                               "h2d_copy_frac": 0.2, "step_time_s": 0.4})
    assert "pcie_link_degraded" in {f.id for f in report.findings}
    fix = next(r for r in report.recommended if r.id == "fix_pcie_link")
    assert fix.expected_gain is not None and fix.expected_gain.max_speedup == pytest.approx(1 / 0.9, abs=1e-3)
    healthy = expert.default_expert().diagnose({"workload": "training", "gpu_util": 0.7, "pcie_link_frac": 1.0})
    assert "pcie_link_degraded" not in {f.id for f in healthy.findings}
