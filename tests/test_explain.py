"""why / how / why-not / what-if on every bundled example and every rule-test case, plus targeted semantics."""

from __future__ import annotations

import json
import operator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import expert
from expert import Expert, Report
from expert._resources import data_dir, examples_dir
from expert.observations.file import read_observation_file
from expert.report.explain import Why
from expert.rules.testing import load_rule_tests

EXPERT = Expert(engine="pure")
KB = EXPERT.kb
CASES: list[tuple[str, dict[str, Any]]] = [
    (f"example:{p.stem}", read_observation_file(p).observations) for p in sorted(examples_dir().glob("*.yaml"))
] + [
    (f"case:{path.stem.removesuffix('.test')}:{c.name}", c.facts)
    for path, tf in load_rule_tests([data_dir("rules")]) for c in tf.cases
]
# why_not on every rule, regime, finding and catalog optimization is ~0.1 s a report: every example and every second
# rule-test case (why / how run on all of them above and below)
WHY_NOT_NAMES = [n for n, _ in CASES if n.startswith("example:")] + [n for n, _ in CASES if n.startswith("case:")][::2]


# Fixed cases for the targeted tests (the bundled examples may be retuned; these stay put).
FIXED: dict[str, dict[str, Any]] = {
    "starved": {"hardware": "h100-sxm", "dtype": "bf16", "workload": "training", "batch_size": 256, "num_workers": 0,
                "gpu_util": "45%", "host_cpu_util": "30%", "step_time_s": "300 ms", "data_wait_s": "120 ms",
                "mfu": "12%"},
    "decode": {"hardware": "h100-sxm", "dtype": "bf16", "workload": "inference", "phase": "decode", "batch_size": 1,
               "model_params": "6.7B", "tokens_per_s": 180, "gpu_util": "97%", "latency_ms": 5.6,
               "latency_target_ms": 8},
    "launch": {"hardware": "a100-sxm-80gb", "dtype": "fp16", "workload": "inference", "batch_size": 1,
               "gpu_util": "38%", "gpu_idle_gap_frac": "62%", "data_wait_s": 0, "step_time_s": "1.8 ms",
               "mean_kernel_us": 4.2, "kernels_per_step": 160, "latency_ms": 1.8, "latency_target_ms": 1.0},
    "partial": {"hardware": "l40s", "workload": "training", "gpu_util": "62%"},
}


@cache
def report(name: str) -> Report:
    return EXPERT.diagnose(dict(CASES)[name])


@cache
def example(name: str) -> Report:
    """One of the fixed cases above."""
    return EXPERT.diagnose(FIXED[name])


def conclusions(r: Report) -> list[str]:
    """Every conclusion of a report, as provenance node ids."""
    return ([f"finding:{f.id}" for f in r.findings] + [f"bottleneck:{c.regime}" for c in r.candidates]
            + [f"recommendation:{x.id}" for x in r.recommended] + [f"wasted:{w.id}" for w in r.wasted])


def assert_chain_ends_at_observations(w: Why) -> None:
    assert w.concluded and w.target is not None and w.steps, w.summary
    ids = [s.id for s in w.steps]
    assert ids[-1] == w.target
    assert len(ids) == len(set(ids))
    seen: set[str] = set()
    for step in w.steps:
        assert set(step.rests_on) <= seen, f"{step.id} rests on {step.rests_on} not before it"
        if step.kind == "observation":
            assert not step.rests_on
        else:
            assert step.rests_on, f"{w.target}: {step.id} ({step.kind}) rests on nothing"
        seen.add(step.id)
    assert w.observations, f"{w.target}: no observation in the chain"


@pytest.mark.parametrize("name", [n for n, _ in CASES])
def test_every_conclusion_why_chain_ends_at_observations(name: str) -> None:
    r = report(name)
    for target in conclusions(r):
        w = r.why(target)
        assert_chain_ends_at_observations(w)
        # rule steps show the tests that held, with the values
        for step in w.steps:
            if step.kind == "rule" and not step.id.startswith("rule:table/"):
                ev = r.evaluation(step.id.removeprefix("rule:"))
                assert ev is not None and ev.fired
                assert any(line.startswith("source: ") for line in step.lines)
        assert w.text().startswith(w.summary)


@pytest.mark.parametrize("name", WHY_NOT_NAMES)
def test_why_not_on_every_catalog_optimization_answers(name: str) -> None:
    r = report(name)
    recommended = {x.id for x in r.recommended}
    wasted = {w.id: w.reason for w in r.wasted}
    for opt in KB.optimizations:
        wn = r.why_not(opt)
        assert wn.summary and wn.text()
        assert wn.kind in ("optimization", "unknown")
        assert wn.concluded == (opt in recommended)
        if opt in wasted:
            assert wn.wasted_for_verdict is True and wn.wasted_reason == wasted[opt]
        elif r.bottleneck is not None and wn.kind == "optimization":
            assert wn.wasted_for_verdict is False
        for attempt in wn.attempts:
            assert not attempt.fired and attempt.blockers, f"{opt}: {attempt.rule_id} did not fire for no reason"


def _holds(op: str, value: Any, threshold: Any) -> bool:
    ops = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge, "eq": operator.eq,
           "ne": operator.ne}
    if op in ("in", "not_in"):
        return (value in threshold) == (op == "in")
    if isinstance(value, str) and op not in ("eq", "ne"):
        return False
    return bool(ops[op](value, threshold))


@pytest.mark.parametrize("name", WHY_NOT_NAMES)
def test_why_not_blockers_are_the_recorded_failing_leaves(name: str) -> None:
    r = report(name)
    for ev in r.evaluations:
        if ev.fired:
            assert r.why_not(ev.rule_id).concluded
            continue
        wn = r.why_not(ev.rule_id)
        assert not wn.concluded and len(wn.attempts) == 1
        blockers = wn.attempts[0].blockers
        assert blockers, f"{ev.rule_id} ({ev.outcome}) has no reason"
        if ev.outcome == "unknown":
            assert any(b.kind == "missing" for b in blockers), ev.rule_id
        for b in blockers:
            matches = [leaf for leaf in ev.leaves if leaf.name == b.name and leaf.comparison() == b.test]
            assert matches and all(not leaf.supports for leaf in matches), (ev.rule_id, b)
            leaf = matches[0]
            if b.kind == "failed" and leaf.op not in ("known",):  # the recorded value really fails the test
                assert leaf.value is not None
                assert _holds(leaf.op, leaf.value, leaf.threshold) == leaf.negated, (ev.rule_id, b.message)


@pytest.mark.parametrize("name", WHY_NOT_NAMES)
def test_why_not_regimes_and_findings(name: str) -> None:
    r = report(name)
    regimes = set(KB.regimes.regimes)
    for regime in regimes:
        wn = r.why_not(regime)
        assert wn.kind == "bottleneck"
        assert wn.concluded == (regime == r.bottleneck)
        if not wn.concluded:
            voters = {e.rule_id for e in r.evaluations if e.concludes.bottleneck == regime and not e.fired}
            assert {a.rule_id for a in wn.attempts} == voters
    concluded = {f.id for f in r.findings}
    for finding in {e.concludes.finding for e in r.evaluations if e.concludes.finding}:
        wn = r.why_not(finding)
        assert wn.kind == "finding" and wn.concluded == (finding in concluded)


@pytest.mark.parametrize("name", [n for n, _ in CASES])
def test_how_every_fact_ends_at_observations(name: str) -> None:
    r = report(name)
    facts = r.facts()
    for fact in facts:
        h = r.how(fact)
        assert h.value == facts[fact]
        stack = [h]
        while stack:
            node = stack.pop()
            if node.kind == "derived":
                assert node.inputs and node.formula
                assert [i.fact for i in node.inputs] == list(r.derived[node.fact].inputs)
                stack.extend(node.inputs)
            else:
                assert node.kind == "observation" and node.fact in r.observations


def test_why_the_verdict_of_a_starved_step() -> None:
    r = example("starved")
    w = r.why("verdict")
    assert w.target == "bottleneck:input" and "verdict is input" in w.summary
    rule = w.step("rule:input-io-overhead-fail")
    assert rule is not None and "io_overhead 0.4 > 0.1" in rule.lines
    assert any("seed Table 5" in line for line in rule.lines)
    assert {"data_wait_s", "step_time_s"} <= set(w.observations)
    assert w.step("derived:io_overhead") is not None
    text = w.text()
    assert "<- io_overhead = 0.4" in text and "data_wait_s / step_time_s" in text
    assert r.why("input").target == r.why("bottleneck:input").target == "bottleneck:input"


def test_why_a_recommendation_shows_its_expected_gain() -> None:
    r = example("starved")
    w = r.why("double_buffering")
    assert w.kind == "recommendation" and w.concluded
    line = next(x for x in w.steps[-1].lines if x.startswith("expected gain"))
    assert "at most 1.67x" in line and "Amdahl" in line


def test_why_of_something_not_concluded_or_unknown() -> None:
    r = example("starved")
    w = r.why("compute")
    assert not w.concluded and "why_not" in w.summary
    w = r.why("no_such_thing_at_all")
    assert not w.concluded and "nothing in this report" in w.summary
    assert "did you mean data_starved" in r.why("data_starvd").summary
    assert not example("partial").why("verdict").concluded


def test_why_not_an_optimization_outside_the_workload_or_already_applied_says_so() -> None:
    decode = {"hardware": "a10g", "dtype": "fp16", "phase": "decode", "model_params": 1.55e9, "batch_size": 1,
              "tokens_per_s": 60}
    r = EXPERT.diagnose({**decode, "workload": "inference"})
    assert r.bottleneck == "memory"
    # the memory table rules DDP's search out, but a service is never offered it nor told it is wasted
    assert "ddp_static_graph" not in {w.id for w in r.wasted}
    wn = r.why_not("ddp_static_graph")
    assert not wn.concluded and wn.wasted_for_verdict is False
    assert wn.summary.startswith("ddp_static_graph does not apply to an inference service")
    # with the workload unknown it applies, and the table's waste stands
    wn = EXPERT.diagnose(decode).why_not("ddp_static_graph")
    assert wn.wasted_for_verdict is True and "memory-bound" in wn.summary
    starved = {"workload": "training", "hardware": "a100", "dtype": "bf16", "gpu_util": 0.3, "data_wait_s": 0.5,
               "step_time_s": 1.0}
    assert "pin_memory" in {x.id for x in EXPERT.diagnose(starved).recommended}
    wn = EXPERT.diagnose({**starved, "applied_optimizations": "pin_memory"}).why_not("pin_memory")
    assert not wn.concluded and wn.summary.startswith("pin_memory is already applied (applied_optimizations, from")


def test_why_not_compute_on_a_starved_step_names_the_failed_thresholds() -> None:
    r = example("starved")
    wn = r.why_not("compute")
    assert not wn.concluded and wn.kind == "bottleneck"
    mfu = next(a for a in wn.attempts if a.rule_id == "compute-high-mfu")
    assert [b.message for b in mfu.blockers] == ["mfu 0.12 > 0.5 fails (observed mfu = 0.12)"]
    machine = next(a for a in wn.attempts if a.rule_id == "compute-machine-bound")
    finding = machine.blockers[0]
    assert finding.kind == "finding" and finding.name == "high_gpu_util" and finding.because is not None
    assert "gpu_util 0.45 > 0.95 fails" in finding.because.text()


def test_why_not_reports_every_branch_of_an_any_and_only_the_first_failed_all() -> None:
    base = {"hardware": "h100-sxm", "dtype": "bf16", "arithmetic_intensity": 1000}
    r = EXPERT.diagnose({**base, "gpu_util": 0.5, "sm_active": 0.5, "mem_bw_util": 0.3})
    blockers = r.why_not("compute-above-ridge-busy").attempts[0].blockers
    # every alternative of the any failed: gpu_util and sm_active below 0.8, tensor_active not measured
    assert {b.name for b in blockers} == {"gpu_util", "sm_active", "tensor_active"}
    r = EXPERT.diagnose({**base, "gpu_util": 0.9, "mem_bw_util": 0.8})
    blockers = r.why_not("compute-above-ridge-busy").attempts[0].blockers
    assert {b.name for b in blockers} == {"mem_bw_util"}  # the busy branch holds (gpu_util), sm_active is moot
    assert any("to be unknown, but it was measured (0.8)" in b.message for b in blockers)


def test_why_not_missing_fact_says_what_to_measure() -> None:
    r = example("starved")
    attempt = r.why_not("memory-bandwidth-saturated").attempts[0]
    missing = attempt.blockers[0]
    assert missing.kind == "missing" and missing.name == "mem_bw_util" and "mem_bw_util" in missing.ask
    assert attempt.outcome == "unknown"


def test_why_not_optimizations() -> None:
    r = example("starved")
    wn = r.why_not("more_peak_flops")
    assert wn.wasted_for_verdict and "data-starved" in (wn.wasted_reason or "")
    wn = r.why_not("quantization")
    assert not wn.concluded and wn.wasted_for_verdict is False
    assert any("memory regime table" in n for n in wn.notes)
    assert r.why_not("double_buffering").concluded
    wn = r.why_not("prefetching")  # num_workers=0: PyTorch refuses prefetch_factor without workers
    assert not wn.concluded and "num_workers=0" in wn.summary
    wn = r.why_not("warp_drive")
    assert wn.kind == "unknown" and "no rule or regime table" in wn.summary


def test_how_a_derived_fact_names_its_hardware_figures() -> None:
    r = example("decode")
    h = r.how("ridge_point")
    assert h.kind == "derived" and h.formula == "R_peak / BW"
    peak = next(i for i in h.inputs if i.fact == "peak_tflops")
    assert peak.constants["source"] and any("peak" in k for k in peak.constants)
    assert [i.fact for i in peak.inputs] == ["hardware", "dtype"]
    assert "figures from:" in h.text()
    unknown = r.how("io_overhead")
    assert unknown.kind == "unknown" and any("data_wait_s" in alt for alt in unknown.alternatives)


def test_what_if_nothing_changes_nothing() -> None:
    for name in ("starved", "partial", "decode"):
        r = example(name)
        w = r.what_if({}, EXPERT)
        assert not w.changed and not w.verdict_changed
        assert w.after is not None and w.after.to_json() == r.to_json()


def test_what_if_changes() -> None:
    r = example("starved")
    w = r.what_if({"data_wait_s": "10 ms"}, EXPERT)
    assert w.changes[0].after == pytest.approx(0.01)
    assert w.verdict_before == "input" and w.verdict_after is None and w.verdict_changed
    assert "data_starved" in w.findings_removed and "double_buffering" in w.recommended_removed
    row = next(s for s in w.scorecard if s.id == "io_overhead")
    assert (row.band_before, row.band_after) == ("fail", "marginal")
    assert "verdict: input -> undecided" in w.text()
    w = r.what_if({"host_cpu_util": "unknown"}, EXPERT)  # "unknown" removes a fact
    assert (w.changes[0].before, w.changes[0].after) == (0.3, None)
    assert w.after is not None and "host_cpu_util" not in w.after.observations and not w.verdict_changed


def test_what_if_a_derived_fact_is_realised_through_an_input() -> None:
    r = example("starved")
    w = r.what_if({"io_overhead": 0.05}, EXPERT)
    change = w.changes[0]
    assert change.fact == "data_wait_s" and change.after == pytest.approx(0.015)
    assert change.via and "io_overhead" in change.via
    assert w.after is not None and w.after.derived["io_overhead"].value == pytest.approx(0.05)
    with pytest.raises(expert.ObservationError, match="ridge_point"):
        r.what_if({"ridge_point": 100}, EXPERT)  # hardware figures only: no numeric observed input


def test_counterfactuals_of_a_starved_step() -> None:
    r = example("starved")
    cfs = r.counterfactuals(EXPERT)
    wait = next(c for c in cfs.items if c.fact == "data_wait_s")
    assert wait.before == 0.12 and float(wait.after) < 0.03 and wait.verdict_after is None
    assert "input-io-overhead-fail stops firing" in wait.crosses and wait.via
    for cf in cfs.items:
        assert r.what_if(cf.changes, EXPERT).verdict_after == cf.verdict_after != r.bottleneck
    decode = example("decode").counterfactuals(EXPERT)
    batches = [c for c in decode.items if c.fact == "batch_size"]
    assert any(c.verdict_after == "compute" and isinstance(c.after, int) and c.after > 1 for c in batches)


def test_saved_report_explains_itself(tmp_path: Path) -> None:
    r = example("launch")
    path = tmp_path / "report.json"
    path.write_text(r.to_json())
    again = Report.model_validate_json(path.read_text())
    for target in conclusions(r):
        assert again.why(target) == r.why(target)
    for ident in [*KB.optimizations, *KB.regimes.regimes, *(e.rule_id for e in r.evaluations)]:
        assert again.why_not(ident) == r.why_not(ident)


def test_report_without_condition_trees_still_answers_why_not() -> None:
    r = example("starved")
    data = json.loads(r.to_json())
    for ev in data["evaluations"]:
        ev.pop("when", None)
    old = Report.model_validate(data)
    for ev in old.evaluations:
        if not ev.fired:
            assert old.why_not(ev.rule_id).attempts[0].blockers, ev.rule_id
