"""dam compare on real pairs from other projects (shared/traces, see its README): HTA's TraceDiff pair, the resnet50
num_workers 0 vs 4 pair, and the Nsight Systems before/after exports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cli
import expert
from expert.compare import Comparison

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
RESNET0 = TRACES / "kineto-resnet50" / "resnet50_num_workers_0.pt.trace.json.gz"
RESNET4 = TRACES / "kineto-resnet50" / "resnet50_num_workers_4.pt.trace.json.gz"
CONTROL = TRACES / "hta" / "trace_diff_control_control.json.gz"
TEST = TRACES / "hta" / "trace_diff_test_test.json.gz"
NSYS_BEFORE = TRACES / "nsys" / "mfu_2gpu_before.sqlite"
NSYS_AFTER = TRACES / "nsys" / "mfu_2gpu_after.sqlite"
pytestmark = pytest.mark.skipif(not (RESNET0.is_file() and CONTROL.is_file()),
                                reason=f"the shared real traces are not at {TRACES}")


def fact(c: Comparison, name: str) -> object:
    fc = c.fact(name)
    assert fc is not None, name
    return fc


@pytest.fixture(scope="module")
def resnet() -> Comparison:
    return expert.compare(RESNET0, RESNET4, fail_if=["step_time_s > +5%", "verdict changed"])


def test_resnet50_more_workers_cleared_the_data_stall(resnet: Comparison) -> None:
    c = resnet
    assert c.before.bottleneck == "input" and c.after.bottleneck != "input"
    assert "data_starved" in {f.id for f in c.findings_cleared}
    wait, step = c.fact("data_wait_s"), c.fact("step_time_s")
    assert wait is not None and step is not None
    assert wait.significant and wait.change is not None and wait.change < -0.95  # README: 40 % of the step -> 1 %
    assert step.significant and "per-step spread, 6 vs 6 steps" in step.basis  # 6 ProfilerSteps on each side
    assert c.speedup is not None and 1.2 < c.speedup < 1.3
    assert not fact(c, "kernels_per_step").significant  # the same model: 1462 vs 1478 kernels per step
    assert not fact(c, "hardware").significant


def test_resnet50_the_change_looks_like_the_input_recommendations_within_their_bound(resnet: Comparison) -> None:
    predicted = {p.id: p for p in resnet.predictions}
    workers = predicted["more_dataloader_workers"]
    assert workers.match == "consistent"  # the trace cannot say how many workers: _MultiProcessingDataLoaderIter
    assert any("_MultiProcessingDataLoaderIter" in e for e in workers.evidence)
    assert workers.predicted_max_speedup == pytest.approx(1 / (1 - 0.39), abs=0.02)  # 39 % input share
    assert workers.within_bound and workers.measured_speedup == resnet.speedup
    assert "pin_memory" not in predicted  # copies stayed pageable (pageable_copy_frac 1.0 -> 1.0)


def test_resnet50_gate(resnet: Comparison) -> None:
    assert resnet.gate.failed == [f"verdict changed: verdict input → {resnet.after.bottleneck}"]


def test_hta_trace_diff_pair_a_slower_step_on_other_hardware() -> None:
    c = expert.compare(CONTROL, TEST, fail_if=["step_time_s > +5%"])
    hardware = c.fact("hardware")
    assert hardware is not None and (hardware.before, hardware.after) == ("a100-40gb", "v100-sxm2")
    assert hardware.significant and any("different hardware" in n for n in c.notes)
    step = c.fact("step_time_s")
    assert step is not None and step.significant and step.change is not None and 0.55 < step.change < 0.65
    kernels = c.fact("kernels_per_step")
    assert kernels is not None and (kernels.before, kernels.after) == (1428, 1646)
    assert not c.gate.passed and c.gate.failed[0].startswith("step_time_s > +5%: step_time_s 0.0775 s → 0.1242 s")
    wait = c.fact("data_wait_s")
    assert wait is not None and not wait.significant  # 70 us vs 95 us per step: within the per-step spread
    assert all(p.measured_speedup is not None and p.measured_speedup < 1 for p in c.predictions)


def test_a_saved_report_side_gives_the_same_facts_as_the_trace(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "resnet0.json"
    assert cli.main(["diagnose", "--from", str(RESNET0), "--format", "json", "--output", str(report)]) == 0
    capsys.readouterr()
    assert cli.main(["compare", str(report), str(RESNET4), "--format", "json"]) == 0
    from_report = Comparison.model_validate_json(capsys.readouterr().out)
    from_trace = expert.compare(RESNET0, RESNET4)
    assert from_report.facts == from_trace.facts and from_report.predictions == from_trace.predictions
    assert json.loads(from_report.to_json())["before"]["kind"] == "report"


def test_nsys_before_after() -> None:
    from expert.ingest import FORMATS

    if not any("nsys" in f or "sqlite" in f for f in FORMATS):
        pytest.skip("expert.ingest has no Nsight Systems SQLite reader on this branch (formats: "
                    f"{', '.join(FORMATS)}); the nsys reader is being written in parallel")
    if not NSYS_BEFORE.is_file():
        pytest.skip(f"the nsys exports are not at {NSYS_BEFORE.parent}")
    c = expert.compare(NSYS_BEFORE, NSYS_AFTER)
    assert c.before.kind == c.after.kind == "trace"
    assert any(f.before is not None and f.after is not None for f in c.facts)
    assert Comparison.model_validate_json(c.to_json()) == c


def _terminal(c: Comparison, columns: int) -> list[str]:
    import io

    from expert.compare.render import print_comparison
    from expert.report.render.console import SafeConsole

    out = io.StringIO()
    print_comparison(c, SafeConsole(file=out, width=columns, color_system=None), expert.default_expert().kb)
    return out.getvalue().splitlines()


@pytest.mark.parametrize("columns", [60, 80, 140])
def test_resnet50_predictions_read_as_the_json_says(resnet: Comparison, columns: int) -> None:
    """cuda_streams_overlap (bound 1.01×, measured 1.26×: within_bound false) showed "1.26× (2354% of it)" in the
    terminal and Markdown: each prediction beyond its bound says "beyond the bound", and only the ones within show
    their share of the predicted gain."""
    from expert.compare.render import markdown

    assert resnet.predictions
    text = "\n".join(_terminal(resnet, columns))
    rows = markdown(resnet, expert.default_expert().kb).splitlines()
    section = text.split("Did the change do what the before report predicted?", 1)[1]
    for p in resnet.predictions:
        cell = section.split(p.id, 1)[1].split("\n\n")[0]  # the prediction's row, up to the next one
        later = [q.id for q in resnet.predictions if q.id != p.id and q.id in cell]
        cell = cell.split(later[0], 1)[0] if later else cell
        row = next(r for r in rows if r.startswith(f"| `{p.id}` |"))
        if p.within_bound is False:
            assert "beyond the bound" in cell and "of it" not in cell, (p.id, cell)
            assert "(beyond the bound)" in row and "of it" not in row, row
        else:
            assert "beyond the bound" not in cell and "beyond the bound" not in row


@pytest.mark.parametrize("columns", [60, 80])
def test_resnet50_numbers_stay_whole_in_a_narrow_terminal(resnet: Comparison, columns: int) -> None:
    """At 60 columns the GPU-time Δ of a kernel class showed as "-3.688e…" and the facts table lost its change
    column: every number of the facts, the kernel classes, top kernels and top operators is printed whole."""
    import re

    from expert.compare.render import _change, _num, _signed

    lines = _terminal(resnet, columns)
    assert max(len(line) for line in lines) <= columns
    text = "\n".join(lines)
    delta = resnet.breakdown_delta
    assert delta.classes and delta.top_kernels
    shown = {_change(f) for f in resnet.facts if f.significant and not f.derived and f.change is not None}
    for row in [*delta.classes, *delta.top_kernels[:10], *delta.top_ops[:10]]:
        shown |= {t for t in (_num(row.before_s), _num(row.after_s), _signed(row.delta_s)) if t != "—"}
    missing = sorted(n for n in shown if not re.search(rf"(?<![\w.+-]){re.escape(n)}(?![\w.])", text))
    assert not missing, missing
    assert not re.search(r"[\d.%×]…", text)
