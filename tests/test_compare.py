"""expert.compare: significance rules, findings, predictions against their Amdahl bound, mixable sides, the GPU-time
breakdown delta, and the lossless JSON round trip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import expert
from expert.compare import Comparison
from expert.compare.catalog import CompareCatalog, check, load_catalog
from expert.compare.compute import d2
from expert.errors import KnowledgeBaseError, ObservationError

FIXTURES = Path(__file__).parent / "fixtures" / "telemetry"
TRACE = FIXTURES / "kineto_two_steps.json"
KB = expert.default_expert().kb

BEFORE = {"hardware": "h100-sxm", "dtype": "bf16", "workload": "training", "batch_size": 256, "num_workers": 0,
          "gpu_util": 0.45, "host_cpu_util": 0.30, "step_time_s": 0.30, "data_wait_s": 0.12, "flops": 3.1e12}


def measured(value: float, lo: float, hi: float, samples: int = 6, source: str = "kineto:run.json") -> dict[str, Any]:
    """An observation as `dam ingest` records it: the mean, with per-step min/max and the step count."""
    return {"value": value, "source": source, "detail": {"samples": samples, "min": lo, "max": hi}}


def change(c: Comparison, name: str) -> Any:
    fc = c.fact(name)
    assert fc is not None, name
    return fc


# ---- significance ---------------------------------------------------------------------------------------------


def test_d2_matches_the_published_table() -> None:
    # ASTM / Montgomery's control-chart constants
    for n, expected in ((2, 1.128), (3, 1.693), (5, 2.326), (6, 2.534), (10, 3.078), (25, 3.931)):
        assert d2(n) == pytest.approx(expected, abs=1e-3)
    with pytest.raises(ValueError):
        d2(1)


def test_a_small_change_with_tight_steps_is_beyond_noise_and_a_large_one_with_loose_steps_is_not() -> None:
    tight = expert.compare({**BEFORE, "step_time_s": measured(0.300, 0.299, 0.301)},
                           {**BEFORE, "step_time_s": measured(0.309, 0.308, 0.310)})
    fc = change(tight, "step_time_s")
    assert fc.change == pytest.approx(0.03) and fc.significant
    assert "per-step spread, 6 vs 6 steps" in fc.basis
    loose = expert.compare({**BEFORE, "step_time_s": measured(0.30, 0.10, 0.50)},
                           {**BEFORE, "step_time_s": measured(0.336, 0.12, 0.55)})
    fc = change(loose, "step_time_s")
    assert fc.change == pytest.approx(0.12) and not fc.significant
    # z standard errors of the difference of the means, sigma from the range
    se = ((0.40 / d2(6)) ** 2 / 6 + (0.43 / d2(6)) ** 2 / 6) ** 0.5
    assert f"{0.036 / se:.1f} standard errors" in fc.basis


def test_without_spread_the_relative_threshold_decides() -> None:
    small = expert.compare(BEFORE, {**BEFORE, "step_time_s": 0.309})
    assert not change(small, "step_time_s").significant
    assert change(small, "step_time_s").basis.startswith("no spread known")
    large = expert.compare(BEFORE, {**BEFORE, "step_time_s": 0.336})
    assert change(large, "step_time_s").significant
    # one side with spread is not enough for the spread rule
    one_sided = expert.compare({**BEFORE, "step_time_s": measured(0.300, 0.299, 0.301)},
                               {**BEFORE, "step_time_s": 0.309})
    assert not change(one_sided, "step_time_s").significant


def test_spread_is_used_only_where_the_format_records_per_sample_values() -> None:
    # mean_kernel_us' min/max are the shortest and longest kernel, not a spread of the mean
    before = {**BEFORE, "mean_kernel_us": measured(50.0, 2.0, 12000.0)}
    after = {**BEFORE, "mean_kernel_us": measured(60.0, 2.0, 12000.0)}
    fc = change(expert.compare(before, after), "mean_kernel_us")
    assert fc.significant and fc.basis.startswith("no spread known")
    # telemetry samples: every fact of the format
    smi = expert.compare({**BEFORE, "gpu_util": measured(0.45, 0.44, 0.46, 60, "nvidia-smi:a.csv")},
                         {**BEFORE, "gpu_util": measured(0.47, 0.46, 0.48, 60, "nvidia-smi:b.csv")})
    assert change(smi, "gpu_util").significant
    assert "per-sample spread, 60 vs 60 samples" in change(smi, "gpu_util").basis


def test_settings_count_on_any_difference_and_fractions_need_a_point() -> None:
    c = expert.compare(BEFORE, {**BEFORE, "batch_size": 264, "hardware": "h200-sxm", "gpu_util": 0.455})
    assert change(c, "batch_size").significant  # +3 %: a setting
    assert change(c, "hardware").significant and change(c, "hardware").change is None
    assert not change(c, "gpu_util").significant  # +1.1 %, 0.5 points
    assert change(c, "dtype").significant is False


def test_a_derived_quantity_moves_only_when_one_of_its_inputs_does() -> None:
    before = {**BEFORE, "step_time_s": measured(0.300, 0.29, 0.31), "data_wait_s": measured(0.0010, 0.0, 0.004)}
    after = {**BEFORE, "step_time_s": measured(0.301, 0.29, 0.31), "data_wait_s": measured(0.0015, 0.0, 0.005)}
    c = expert.compare(before, after)
    assert not change(c, "data_wait_s").significant
    term = change(c, "t_input_s")  # the iron-law input term, derived from data_wait_s
    assert term.derived and term.change == pytest.approx(0.5)  # +50 %, but only noise moved it
    assert not term.significant and term.basis == "derived: its inputs (data_wait_s) did not move beyond noise"


def test_facts_known_on_one_side_only_are_listed_but_not_significant() -> None:
    c = expert.compare(BEFORE, {k: v for k, v in BEFORE.items() if k != "num_workers"})
    fc = change(c, "num_workers")
    assert (fc.before, fc.after, fc.significant, fc.basis) == (0, None, False, "not known after")
    assert [f.significant for f in c.facts] == sorted((f.significant for f in c.facts), reverse=True)


# ---- verdicts, findings, predictions ------------------------------------------------------------------------------


def test_verdict_findings_and_step_time() -> None:
    after = {**BEFORE, "num_workers": 8, "data_wait_s": 0.005, "step_time_s": 0.24, "gpu_util": 0.56}
    c = expert.compare(BEFORE, after)
    assert c.before.bottleneck == "input" and c.after.bottleneck != "input" and c.verdict_changed
    assert c.before.step_time_s == 0.30 and c.after.step_time_s == 0.24 and c.speedup == pytest.approx(1.25)
    assert c.before.axes[0].axis == "data"
    assert "data_starved" in {f.id for f in c.findings_cleared}
    report_b, report_a = expert.diagnose(BEFORE), expert.diagnose(after)
    assert {f.id for f in c.findings_new} == {f.id for f in report_a.findings} - {f.id for f in report_b.findings}
    assert c.before.mfu == pytest.approx(report_b.derived["mfu"].value)


def test_the_change_is_matched_to_the_recommendation_and_its_amdahl_bound() -> None:
    after = {**BEFORE, "num_workers": 8, "data_wait_s": 0.005, "step_time_s": 0.24, "gpu_util": 0.56}
    c = expert.compare(BEFORE, after)
    report = expert.diagnose(BEFORE)
    bounds = {r.id: r.expected_gain.max_speedup for r in report.recommended if r.expected_gain}
    first = c.predictions[0]
    assert (first.id, first.match) == ("more_dataloader_workers", "matches")
    assert first.evidence[0] == "num_workers 0 → 8"
    assert first.predicted_max_speedup == bounds["more_dataloader_workers"] == pytest.approx(1 / (1 - 0.4), abs=0.01)
    assert first.measured_speedup == pytest.approx(1.25) and first.within_bound
    assert first.realised == pytest.approx(0.25 / (first.predicted_max_speedup - 1))
    assert f"predicted ≤ {bounds['more_dataloader_workers']:.2f}×; measured 1.25×" in first.text
    # double buffering changes no fact of its own: consistent with the change, not a match
    # (prefetching was not recommended: with num_workers=0 PyTorch refuses prefetch_factor)
    buffering = next(p for p in c.predictions if p.id == "double_buffering")
    assert buffering.match == "consistent" and "data_wait_s -96%" in buffering.evidence[0]
    assert "prefetching" not in {p.id for p in c.predictions}


def test_a_marker_that_did_not_move_rules_the_optimization_out() -> None:
    after = {**BEFORE, "data_wait_s": 0.005, "step_time_s": 0.24, "gpu_util": 0.56}  # num_workers still 0
    ids = {p.id: p.match for p in expert.compare(BEFORE, after).predictions}
    assert "more_dataloader_workers" not in ids and ids["double_buffering"] == "consistent"


def test_no_prediction_when_nothing_a_recommendation_moves_changed() -> None:
    c = expert.compare(BEFORE, {**BEFORE, "gpu_util": 0.46})
    assert c.predictions == [] and c.speedup == 1.0
    assert any("did not move beyond its noise" in n for n in c.notes)


def test_a_speed_up_beyond_the_bound_is_flagged() -> None:
    after = {**BEFORE, "num_workers": 8, "data_wait_s": 0.001, "step_time_s": 0.12}
    first = expert.compare(BEFORE, after).predictions[0]
    assert first.measured_speedup == pytest.approx(2.5) and first.within_bound is False
    assert "beyond the bound" in first.text


# ---- sides: reports, observation files, traces, mixed ---------------------------------------------------------------


def test_lossless_json_round_trip() -> None:
    after = {**BEFORE, "num_workers": 8, "data_wait_s": 0.005, "step_time_s": 0.24}
    c = expert.compare(BEFORE, after, fail_if=["step_time_s > +5%", "verdict changed"])
    again = Comparison.model_validate_json(c.to_json())
    assert again == c and again.to_json() == c.to_json()
    assert not c.gate.passed
    assert c.gate.failed == [f"verdict changed: verdict input → {c.after.bottleneck or 'none'}"]
    assert c.gate.conditions == ["step_time_s > +5%", "verdict changed"]


def test_a_saved_report_an_observation_file_and_a_trace_mix(tmp_path: Path) -> None:
    report = tmp_path / "before.json"
    report.write_text(expert.diagnose(BEFORE).to_json(), encoding="utf-8")
    obs = tmp_path / "after.yaml"
    obs.write_text(yaml.safe_dump({"observations": {**BEFORE, "num_workers": 8, "data_wait_s": 0.005,
                                                    "step_time_s": 0.24}}), encoding="utf-8")
    c = expert.compare(report, obs)
    assert (c.before.kind, c.before.source, c.after.kind) == ("report", "before.json", "observations")
    assert c == expert.compare(BEFORE, {**BEFORE, "num_workers": 8, "data_wait_s": 0.005, "step_time_s": 0.24}
                               ).model_copy(update={"before": c.before, "after": c.after})
    # the JSON export (node-link + report) is a report too
    from expert.report.render import export

    exported = tmp_path / "export.json"
    exported.write_text(export(expert.diagnose(BEFORE), "json"), encoding="utf-8")
    assert expert.compare(exported, obs).before.kind == "report"
    # a trace plus an observation file that adds what the trace cannot know
    extra = tmp_path / "extra.yaml"
    extra.write_text(yaml.safe_dump({"batch_size": 512}), encoding="utf-8")
    mixed = expert.compare(TRACE, [TRACE, extra])
    assert mixed.before.kind == mixed.after.kind == "trace"
    assert mixed.after.source == "kineto_two_steps.json, extra.yaml"
    assert change(mixed, "batch_size").before is None and change(mixed, "batch_size").after == 512
    assert change(mixed, "step_time_s").basis.startswith("per-step spread, 2 vs 2 steps")
    assert not change(mixed, "step_time_s").significant  # the same trace on both sides


def test_reports_and_observations_objects_are_sides() -> None:
    report = expert.diagnose(BEFORE)
    c = expert.compare(report, expert.Observations(BEFORE))
    assert c.before.kind == "report" and c.after.kind == "observations"
    assert not any(f.significant for f in c.facts) and c.speedup == 1.0


def test_bad_sides_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ObservationError, match=r"before: .*nope\.json: no such file"):
        expert.compare(tmp_path / "nope.json", BEFORE)
    report = tmp_path / "r.json"
    report.write_text(expert.diagnose(BEFORE).to_json(), encoding="utf-8")
    with pytest.raises(ObservationError, match="a saved report is a whole side"):
        expert.compare(BEFORE, [report, TRACE])
    with pytest.raises(ObservationError, match="no files given"):
        expert.compare([], BEFORE)
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema_version": 1, "evaluations": [', encoding="utf-8")
    with pytest.raises(ObservationError, match="invalid JSON"):
        expert.compare(broken, BEFORE)
    with pytest.raises(ObservationError, match="gpu_utilization"):
        expert.compare({"gpu_utilization": 0.5}, BEFORE)


def test_the_facade_stays_a_function_after_the_package_loads() -> None:
    import expert.compare.compute  # loading the subpackage must not replace the function expert.compare

    assert callable(expert.compare) and expert.compare.__module__ == "expert.compare"


# ---- breakdown_delta (the time_breakdown of issue 14, read defensively) -----------------------------------------


def breakdown(window_s: float, classes: dict[str, float], kernels: dict[str, tuple[float, int]]) -> dict[str, Any]:
    total = sum(classes.values())
    return {"source": "trace.json", "gpu_time_s": total,
            "classes": [{"class": k, "gpu_time_s": v, "share": v / total} for k, v in classes.items()],
            "top_kernels": [{"name": k, "gpu_time_s": t, "share": t / total, "count": n}
                            for k, (t, n) in kernels.items()],
            "top_ops": [{"name": "aten::add_", "gpu_time_s": classes.get("elementwise", 0.0), "share": 0.1,
                         "count": 10}],
            "window": {"start_us": 1000.0, "end_us": 1000.0 + window_s * 1e6, "reason": "ProfilerStep#1-#2"}}


def write_report(path: Path, observations: dict[str, Any], time_breakdown: Any) -> Path:
    data = json.loads(expert.diagnose(observations).to_json())
    data["time_breakdown"] = time_breakdown
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_breakdown_delta_per_step_from_report_json(tmp_path: Path) -> None:
    before = write_report(tmp_path / "a.json", BEFORE, breakdown(
        0.60, {"gemm": 0.20, "elementwise": 0.10, "memcpy": 0.02},
        {"sm90_xmma_gemm": (0.15, 100), "vectorized_elementwise": (0.08, 400)}))
    after_obs = {**BEFORE, "step_time_s": 0.24, "data_wait_s": 0.005, "num_workers": 8}
    after = write_report(tmp_path / "b.json", after_obs, breakdown(
        0.48, {"gemm": 0.20, "elementwise": 0.04, "triton": 0.03},
        {"sm90_xmma_gemm": (0.15, 80), "triton_fused_add_mul": (0.03, 80)}))
    c = expert.compare(before, after)
    delta = c.breakdown_delta
    assert delta.basis == "per step" and delta.notes == []
    rows = {r.class_: r for r in delta.classes}
    # GPU seconds per step = window GPU time x step time / window length (0.5 on both sides here)
    assert rows["gemm"].before_s == pytest.approx(0.10) and rows["gemm"].after_s == pytest.approx(0.10)
    assert rows["elementwise"].delta_s == pytest.approx(0.02 - 0.05)
    assert rows["triton"].before_s == 0.0 and rows["triton"].after_s == pytest.approx(0.015)
    assert rows["memcpy"].after_s == 0.0 and rows["memcpy"].after_share == 0.0
    assert delta.classes[0].class_ == "elementwise"  # the largest change first
    kernels = {k.name: k for k in delta.top_kernels}
    assert kernels["sm90_xmma_gemm"].delta_s == pytest.approx(0.0)
    assert (kernels["sm90_xmma_gemm"].before_count, kernels["sm90_xmma_gemm"].after_count) == (100, 80)
    # not among the other side's top kernels: unknown there, not zero
    assert kernels["vectorized_elementwise"].after_s is None and kernels["vectorized_elementwise"].delta_s is None
    assert kernels["triton_fused_add_mul"].before_s is None
    assert delta.top_ops[0].name == "aten::add_"
    text = c.to_json()
    assert '"class": "gemm"' in text and Comparison.model_validate_json(text) == c


def test_breakdown_delta_without_steps_is_window_totals(tmp_path: Path) -> None:
    no_step = {k: v for k, v in BEFORE.items() if k not in ("step_time_s", "data_wait_s")}
    a = write_report(tmp_path / "a.json", no_step, breakdown(0.6, {"gemm": 0.2}, {}))
    b = write_report(tmp_path / "b.json", no_step, breakdown(0.6, {"gemm": 0.3}, {}))
    delta = expert.compare(a, b).breakdown_delta
    assert delta.basis == "window total" and delta.classes[0].delta_s == pytest.approx(0.1)
    assert "window totals" in delta.notes[0]


def test_breakdown_delta_is_empty_with_a_note_when_a_side_has_none(tmp_path: Path) -> None:
    a = write_report(tmp_path / "a.json", BEFORE, breakdown(0.6, {"gemm": 0.2}, {}))
    delta = expert.compare(a, BEFORE).breakdown_delta
    assert delta.classes == [] and delta.top_kernels == [] and "no time_breakdown after" in delta.notes[0]
    assert "no time_breakdown before or after" in expert.compare(BEFORE, BEFORE).breakdown_delta.notes[0]


def test_a_malformed_breakdown_in_a_saved_report_is_a_clear_error(tmp_path: Path) -> None:
    a = write_report(tmp_path / "a.json", BEFORE, {"classes": "gemm", "top_kernels": [{"gpu_time_s": 1}, 7],
                                                   "window": {"start_us": "x"}})
    b = write_report(tmp_path / "b.json", BEFORE, {"classes": [{"class": "gemm", "gpu_time_s": "fast"}]})
    with pytest.raises(expert.ObservationError, match="time_breakdown"):
        expert.compare(a, b)


def test_breakdown_from_an_observation_file_and_a_json_export(tmp_path: Path) -> None:
    obs = tmp_path / "ingested.json"  # what `dam ingest --as json` writes once it carries time_breakdown
    obs.write_text(json.dumps({"description": "x", "observations": BEFORE,
                               "time_breakdown": breakdown(0.6, {"gemm": 0.2}, {})}), encoding="utf-8")
    from expert.report.render import export

    exported = json.loads(export(expert.diagnose(BEFORE), "json"))
    exported["report"]["time_breakdown"] = breakdown(0.6, {"gemm": 0.4}, {})
    path = tmp_path / "export.json"
    path.write_text(json.dumps(exported), encoding="utf-8")
    delta = expert.compare(obs, path).breakdown_delta
    assert delta.classes[0].delta_s == pytest.approx(0.1)  # (0.4 - 0.2) x 0.3 s / 0.6 s


# ---- the data behind it ---------------------------------------------------------------------------------------------


def test_every_optimization_has_a_signature_of_known_facts() -> None:
    catalog = load_catalog(KB)
    assert set(catalog.by_optimization) == set(KB.optimizations)


def test_a_catalog_naming_unknown_things_does_not_load() -> None:
    data = yaml.safe_load((Path(expert.__file__).parent.parent / "knowledge_base" / "compare.yaml").read_text())
    data["signatures"][0]["markers"] = [{"fact": "num_wrokers", "moves": "up"}]
    data["signatures"][1]["optimization"] = "warp_drive"
    data["significance"]["settings"].append("batch")
    with pytest.raises(KnowledgeBaseError) as err:
        check(CompareCatalog.model_validate(data), KB, "compare.yaml")
    text = str(err.value)
    assert "num_wrokers" in text and "warp_drive" in text and "'batch'" in text


def test_breakdown_from_a_trace() -> None:
    # the ingest carries the trace's time breakdown (issue 14): the same trace on both sides moves no class
    delta = expert.compare(TRACE, [TRACE, FIXTURES / "dcgmi_dmon.txt"]).breakdown_delta
    assert delta.basis == "per step" and delta.classes
    assert all(r.delta_s == pytest.approx(0.0) for r in delta.classes)
