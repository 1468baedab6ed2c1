"""Conflicting evidence (issue 12, items 4 and 9): the consistency margins against hand calculations, a table of
conflict cases and the report state each yields, the renderers and the roofline's warning, and what would make a
capped verdict firmer."""

from __future__ import annotations

from typing import Any

import pytest

import expert
from expert import Expert, Report
from expert.derive import consistency
from expert.report.render.html import to_html
from expert.report.render.markdown import postmortem
from expert.report.render.svg import roofline, roofline_svg
from expert.report.render.terminal import report_renderable

EXPERT = Expert(engine="pure")


# ---- the margins, by hand ----------------------------------------------------------------------------------------


def test_ratio_of_readings() -> None:
    assert consistency.ratio_of_readings(0.40, 0.20) == pytest.approx(2.0)
    assert consistency.ratio_of_readings(0.3, 0.3) == pytest.approx(1.0)


def test_bytes_bandwidth_util() -> None:
    # 40 GB in 20 ms on an H100 SXM (3,350 GB/s): 40e9 / 0.02 = 2e12 B/s, / 3.35e12 = 0.597
    assert consistency.bytes_bandwidth_util(40e9, 0.02, 3350.0) == pytest.approx(0.59701, rel=1e-4)


def test_busy_idle_excess() -> None:
    assert consistency.busy_idle_excess(0.99, 0.60) == pytest.approx(0.59)
    assert consistency.busy_idle_excess(0.70, 0.30) == pytest.approx(0.0)


def test_excess_and_per_node() -> None:
    assert consistency.excess(0.85, 0.60) == pytest.approx(0.25)
    assert consistency.excess(0.10, 0.40) == pytest.approx(-0.30)
    assert consistency.per_node(64, 8) == 8.0
    assert consistency.per_node(2, 4) == 0.5


def test_derived_margins_in_a_report() -> None:
    report = EXPERT.diagnose({"hardware": "h100-sxm", "dtype": "bf16", "mfu": 0.9, "flops": 1e14, "step_time_s": 0.5,
                              "bytes_moved": 4e10, "mem_bw_util": 0.2})
    # achieved 1e14 / 0.5 / 1e12 = 200 TFLOP/s, 200 / 989.4 = 0.2021 of the peak; 0.9 / 0.2021 = 4.452
    assert report.derived["mfu_to_achieved"].value == pytest.approx(0.9 / (200 / 989.4))
    # 4e10 / 0.5 / 3.35e12 = 0.02388; 0.2 / 0.02388 = 8.375
    assert report.derived["bytes_bw_util"].value == pytest.approx(0.0238806, rel=1e-5)
    assert report.derived["mem_bw_to_bytes"].value == pytest.approx(8.375)


# ---- the table: facts -> state ------------------------------------------------------------------------------------

H100 = {"hardware": "h100-sxm", "dtype": "bf16"}
CASES: list[tuple[str, dict[str, Any], str, str | None, str | None]] = [
    # (name, facts, state, conflict finding, strongest candidate strength)
    ("1200 TFLOP/s on an H100", {**H100, "achieved_tflops": 1200, "mfu": 1.0}, "conflicting evidence",
     "implausible_flops", "suspect"),
    ("FLOPs per step in the wrong unit", {**H100, "flops": 3.1e15, "step_time_s": 0.3, "bytes_moved": 1e10},
     "conflicting evidence", "implausible_flops", "suspect"),
    ("bytes per step above the peak bandwidth", {**H100, "bytes_moved": 4e11, "step_time_s": 0.02,
                                                 "mem_bw_util": 0.95}, "conflicting evidence",
     "implausible_bandwidth", "suspect"),
    ("tensor pipes busier than the SMs", {**H100, "tensor_active": 0.85, "sm_active": 0.5}, "conflicting evidence",
     "conflict_tensor_sm", "suspect"),
    ("2 GPUs on 4 nodes", {"num_gpus": 2, "num_nodes": 4, "comm_frac": 0.6}, "conflicting evidence",
     "conflict_gpus_nodes", "suspect"),
    # a disagreement caps at likely; a regime none of whose votes stands without the disputed facts is withheld
    ("MFU 70 % at 200 TFLOP/s", {**H100, "mfu": 0.7, "flops": 1e14, "step_time_s": 0.5}, "conflicting evidence",
     "conflict_mfu_achieved", "suspect"),
    ("DRAM 90 % but the bytes imply 30 %", {**H100, "mem_bw_util": 0.9, "bytes_moved": 2e10, "step_time_s": 0.02},
     "conflicting evidence", "conflict_dram_bytes", "suspect"),
    # the data wait is evidence of its own, outside the disputed pair: the input verdict stands, capped
    ("utilization 99 % with 60 % idle gaps", {"gpu_util": 0.99, "gpu_idle_gap_frac": 0.6, "step_time_s": 0.1,
                                              "data_wait_s": 0.05}, "verdict", "conflict_busy_idle", "likely"),
    ("data wait 60 %, GPU idle 10 %", {"gpu_util": 0.5, "step_time_s": 1.0, "data_wait_s": 0.6,
                                       "gpu_idle_gap_frac": 0.1}, "conflicting evidence", "conflict_wait_idle",
     "suspect"),
    # utilization bounds what the time-averaged readings beside it can show (no trace: nothing else to go by)
    ("data wait 40 %, GPU busy 99 %", {"gpu_util": 0.99, "data_wait_s": 0.12, "step_time_s": 0.3},
     "conflicting evidence", "conflict_wait_util", "suspect"),
    ("MFU 60 % at 40 % utilization", {**H100, "gpu_util": 0.4, "mfu": 0.6}, "conflicting evidence",
     "conflict_mfu_util", "suspect"),
    ("DRAM 90 % at 45 % utilization", {**H100, "gpu_util": 0.45, "mem_bw_util": 0.9}, "conflicting evidence",
     "conflict_dram_util", "suspect"),
    ("MFU agrees with achieved", {**H100, "mfu": 0.6, "flops": 3e14, "step_time_s": 0.5}, "verdict", None, "likely"),
    ("tensor below SM", {**H100, "tensor_active": 0.85, "sm_active": 0.9}, "verdict", None, "likely"),
    ("nothing measured", {"workload": "training"}, "insufficient evidence", None, None),
]


@pytest.mark.parametrize(("facts", "state", "conflict", "strength"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_conflict_cases(facts: dict[str, Any], state: str, conflict: str | None, strength: str | None) -> None:
    report = EXPERT.diagnose(facts)
    assert report.state == state
    assert [c.finding for c in report.conflicts] == ([conflict] if conflict else [])
    assert (report.candidates[0].strength if report.candidates else None) == strength
    assert all(c.strength != "confirmed" for c in report.candidates) or not conflict
    if state == "conflicting evidence":
        assert report.bottleneck is None
        assert any(c.effect == "withheld" for c in report.conflicts), "the conflict says it withheld the verdict"
    for c in report.conflicts:
        assert c.facts, "a conflict names the values that disagree"
        assert c.firmer
        assert set(c.facts) <= set(report.facts())
    again = Report.model_validate_json(report.to_json())
    assert again.state == report.state and again.conflicts == report.conflicts


# ---- what the user sees ------------------------------------------------------------------------------------------


def _impossible() -> Report:
    return EXPERT.diagnose({**H100, "achieved_tflops": 1200, "mfu": 1.0})


def test_renderers_say_conflicting_evidence() -> None:
    from rich.console import Console

    report = _impossible()
    console = Console(record=True, width=120)
    console.print(report_renderable(report))
    text = console.export_text()
    assert "CONFLICTING EVIDENCE" in text and "Verdict: withheld (conflicting evidence)" in text
    assert "achieved_tflops = 1200" in text
    markdown = postmortem(report)
    assert "**Conflicting evidence**: the inputs cannot all be right" in markdown
    assert "`achieved_tflops` = 1200" in markdown and "**Undecided**" not in markdown
    html = to_html(report)
    assert 'class="verdict conflicting"' in html and 'data-finding="implausible_flops"' in html


def test_a_capped_verdict_says_it_is_capped() -> None:
    # the data wait is evidence outside the disputed pair (utilization against the idle gaps): input, capped
    report = EXPERT.diagnose({"gpu_util": 0.99, "gpu_idle_gap_frac": 0.6, "step_time_s": 0.1, "data_wait_s": 0.05})
    assert report.bottleneck == "input" and report.candidates[0].strength == "likely"
    markdown = postmortem(report)
    assert "(strength capped at likely)" in markdown
    assert report.conflicts[0].effect == "capped"


def test_a_verdict_resting_on_the_disputed_reading_is_withheld() -> None:
    # compute rests on the MFU alone, and the MFU is what the achieved FLOP/s disputes
    report = EXPERT.diagnose({**H100, "mfu": 0.7, "flops": 1e14, "step_time_s": 0.5})
    assert report.bottleneck is None and report.state == "conflicting evidence"
    assert [(c.regime, c.strength) for c in report.candidates] == [("compute", "suspect")]
    assert "(verdict withheld)" in postmortem(report)
    assert [m.fact for m in report.conflicts[0].remeasure] == ["flops", "step_time_s"]
    # with SM activity beside it the compute vote no longer rests on the MFU: capped, not withheld
    report = EXPERT.diagnose({**H100, "mfu": 0.7, "flops": 1e14, "step_time_s": 0.5, "gpu_util": 0.98,
                              "sm_active": 0.9, "mem_bw_util": 0.3})
    assert report.bottleneck == "compute" and report.candidates[0].strength == "likely"
    assert report.conflicts[0].effect == "capped"


def test_roofline_point_above_its_roof_carries_a_warning() -> None:
    report = EXPERT.diagnose({**H100, "flops": 3.1e15, "step_time_s": 0.3, "bytes_moved": 1e10})
    rf = roofline(report)
    assert rf is not None and rf.above_roof() is not None
    svg = roofline_svg(report)
    assert svg is not None and 'class="warning"' in svg and "above the roof" in svg
    plausible = EXPERT.diagnose({**H100, "flops": 3.1e12, "step_time_s": 0.3, "bytes_moved": 1e10})
    svg = roofline_svg(plausible)
    assert svg is not None and 'class="warning"' not in svg


# ---- item 9: strength follows evidence ---------------------------------------------------------------------------


def test_thin_trace_caps_and_says_what_would_make_it_firmer() -> None:
    facts = {"launch_overhead_frac": 0.4, "trace_kernels": 40, "trace_steps": 1, "trace_window_s": 0.02}
    report = EXPERT.diagnose(facts)
    assert report.bottleneck == "latency" and report.candidates[0].strength == "likely"
    assert [c.finding for c in report.evidence_limits] == ["thin_trace"]
    assert "schedule(wait=1, warmup=1, active=3)" in report.evidence_limits[0].firmer
    assert "**Thin evidence** (strength capped at likely)" in postmortem(report)
    few = EXPERT.diagnose({**facts, "trace_kernels": 5})
    assert few.bottleneck is None and few.state == "insufficient evidence"
    assert {c.finding for c in few.evidence_limits} == {"thin_trace", "few_kernels"}
    assert any(c.effect == "withheld" for c in few.evidence_limits)
    assert EXPERT.diagnose({**facts, "trace_kernels": 5000, "trace_steps": 3}).candidates[0].strength == "confirmed"


def test_a_cap_does_not_reorder_the_candidates() -> None:
    """resnet50 with a single-process DataLoader (shared/traces) and a GPU utilization of 99 % that contradicts its
    43 % idle gaps: the cap brings the measured input wait (confirmed on its own) and the compute votes (likely, one
    of them on the disputed utilization) to the same ceiling; the one whose own evidence was stronger still leads
    (it used to be compute, by the compute share derived from the disputed utilization)."""
    facts = {"hardware": "v100-sxm2", "dtype": "fp32", "gpu_util": 0.99, "gpu_idle_gap_frac": 0.43,
             "data_wait_s": 0.069, "step_time_s": 0.178, "flops": 7.84e11, "bytes_moved": 2.75e10}
    report = expert.diagnose(facts)
    assert [c.finding for c in report.conflicts] == ["conflict_busy_idle"]
    assert [(c.regime, c.strength) for c in report.candidates] == [("input", "likely"), ("compute", "likely")]
    assert report.bottleneck == "input"
    undisputed = expert.diagnose({k: v for k, v in facts.items() if k != "gpu_util"})
    assert undisputed.bottleneck == "input" and undisputed.candidates[0].strength == "confirmed"
