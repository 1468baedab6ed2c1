"""Properties of the verdict (issue 12): the evidence of exactly one regime, with nothing conflicting, yields that
regime; conflicting pairs never yield a "confirmed" verdict (physically impossible ones none at all); and an
optimization is never both recommended and ruled out."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from expert import Expert, Report

EXPERT = Expert(engine="pure")
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GPUS = st.sampled_from(["h100-sxm", "a100-sxm-80gb", "l4"])


def _frac(lo: float, hi: float) -> st.SearchStrategy[float]:
    return st.floats(lo, hi, allow_nan=False).map(lambda x: round(x, 4))


@st.composite
def _input(draw: st.DrawFn) -> dict[str, Any]:
    step = draw(_frac(0.05, 2.0))
    return {"gpu_util": draw(_frac(0.05, 0.6)), "step_time_s": step,
            "data_wait_s": round(step * draw(_frac(0.4, 0.9)), 6)}


@st.composite
def _coordination(draw: st.DrawFn) -> dict[str, Any]:
    step = draw(_frac(0.05, 2.0))
    return {"num_gpus": draw(st.integers(2, 1024)), "step_time_s": step,
            "sync_wait_s": round(step * draw(_frac(0.4, 0.9)), 6)}


# the evidence of one regime each (seed Table 3, screening signals, Table 6), with nothing of any other
ONE_REGIME: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "input": _input(),
    "memory": st.fixed_dictionaries({"hardware": GPUS, "dtype": st.just("bf16"), "mem_bw_util": _frac(0.8, 1.0)}),
    # MFU up to 75 %: above it no published training run reaches, and sanity-mfu-above-published-runs disputes it
    "compute": st.fixed_dictionaries({"hardware": GPUS, "dtype": st.just("bf16"), "mfu": _frac(0.55, 0.75)}),
    "latency": st.fixed_dictionaries({"launch_overhead_frac": _frac(0.2, 0.9)}),
    "host": st.fixed_dictionaries({"host_compute_frac": _frac(0.3, 0.9)}),
    "communication": st.fixed_dictionaries({"num_gpus": st.integers(2, 1024), "comm_frac": _frac(0.4, 0.9)}),
    "coordination": _coordination(),
}


@st.composite
def _above_peak(draw: st.DrawFn) -> dict[str, Any]:
    return {"hardware": "h100-sxm", "dtype": "bf16", "achieved_tflops": draw(st.floats(1100, 5000).map(round))}


@st.composite
def _tensor_above_sm(draw: st.DrawFn) -> dict[str, Any]:
    tensor = draw(_frac(0.3, 1.0))
    return {"tensor_active": tensor, "sm_active": round(max(0.0, tensor - draw(_frac(0.1, 0.3))), 4)}


@st.composite
def _gpus_below_nodes(draw: st.DrawFn) -> dict[str, Any]:
    nodes = draw(st.integers(2, 512))
    return {"num_nodes": nodes, "num_gpus": draw(st.integers(1, nodes - 1))}


@st.composite
def _mfu_vs_achieved(draw: st.DrawFn) -> dict[str, Any]:
    share = draw(_frac(0.05, 0.25))  # achieved / peak; the MFU stays at 75 % or under (one dispute at a time)
    return {"hardware": "h100-sxm", "dtype": "bf16", "achieved_tflops": round(share * 989.4, 3),
            "mfu": round(share * draw(_frac(2.0, 3.0)), 4)}


@st.composite
def _dram_vs_bytes(draw: st.DrawFn) -> dict[str, Any]:
    implied = draw(_frac(0.1, 0.35))  # bytes_moved / step_time_s / 3,350 GB/s
    step = draw(_frac(0.01, 1.0))
    return {"hardware": "h100-sxm", "step_time_s": step, "bytes_moved": implied * step * 3.35e12,
            "mem_bw_util": round(implied * draw(_frac(2.5, 2.8)), 4)}


@st.composite
def _busy_vs_idle(draw: st.DrawFn) -> dict[str, Any]:
    return {"gpu_util": draw(_frac(0.9, 1.0)), "gpu_idle_gap_frac": draw(_frac(0.45, 1.0))}


@st.composite
def _wait_vs_idle(draw: st.DrawFn) -> dict[str, Any]:
    wait = draw(_frac(0.45, 0.9))
    return {"step_time_s": 1.0, "data_wait_s": wait, "gpu_idle_gap_frac": round(wait - draw(_frac(0.25, 0.45)), 4)}


# conflicting pairs: physically impossible ones withhold the verdict, disagreeing readings cap it
IMPOSSIBLE = [_above_peak(), _tensor_above_sm(), _gpus_below_nodes()]
DISAGREEING = [_mfu_vs_achieved(), _dram_vs_bytes(), _busy_vs_idle(), _wait_vs_idle()]


def _combine(evidence: dict[str, Any], pair: dict[str, Any]) -> dict[str, Any]:
    """The regime's evidence with the conflicting pair; where both give a step time, the evidence's seconds are
    rescaled to the pair's step so its shares (data wait / step...) stay what they were and stay possible."""
    if "step_time_s" in evidence and "step_time_s" in pair:
        scale = pair["step_time_s"] / evidence["step_time_s"]
        evidence = {k: (round(v * scale, 9) if k.endswith("_s") else v) for k, v in evidence.items()}
    return {**evidence, **pair}


def _check_wasted(report: Report) -> None:
    recommended = {r.id for r in report.recommended}
    assert not recommended & {w.id for w in report.wasted}, "an optimization is both recommended and wasted"


@SETTINGS
@given(st.sampled_from(sorted(ONE_REGIME)).flatmap(lambda r: st.tuples(st.just(r), ONE_REGIME[r])))
def test_one_regimes_evidence_yields_that_regime(case: tuple[str, dict[str, Any]]) -> None:
    regime, facts = case
    report = EXPERT.diagnose(facts)
    assert not report.conflicts, (facts, [c.finding for c in report.conflicts])
    assert report.bottleneck == regime, (facts, report.bottleneck, [(c.regime, c.strength) for c in report.candidates])
    assert report.state == "verdict"
    _check_wasted(report)


@SETTINGS
@given(st.one_of(*ONE_REGIME.values()), st.one_of(*DISAGREEING, *IMPOSSIBLE))
@example({"gpu_util": 0.3, "step_time_s": 2.0, "data_wait_s": 1.0},  # a wait the pair's shorter step would exceed
         {"hardware": "h100-sxm", "step_time_s": 0.5, "bytes_moved": 0.2 * 0.5 * 3.35e12, "mem_bw_util": 0.52})
def test_conflicting_pairs_never_yield_a_confirmed_verdict(evidence: dict[str, Any], pair: dict[str, Any]) -> None:
    report = EXPERT.diagnose(_combine(evidence, pair))
    assert report.conflicts, pair
    assert all(c.strength != "confirmed" for c in report.candidates), [(c.regime, c.strength)
                                                                      for c in report.candidates]
    _check_wasted(report)


@SETTINGS
@given(st.one_of(*ONE_REGIME.values()), st.one_of(*IMPOSSIBLE))
def test_impossible_pairs_withhold_the_verdict(evidence: dict[str, Any], pair: dict[str, Any]) -> None:
    report = EXPERT.diagnose(_combine(evidence, pair))
    assert report.bottleneck is None
    assert report.state == "conflicting evidence"
    assert any(c.effect == "withheld" and c.facts for c in report.conflicts)
    _check_wasted(report)


def _fired_without_plainly(rs: Any, fired: list[str], facts: dict[str, Any], doubtful: frozenset[str]) -> set[str]:
    """`decide._fired_without` as its docstring defines it: every fired rule evaluated again, to a fixpoint."""
    known = {k: v for k, v in facts.items() if k not in doubtful}
    standing: set[str] = set()
    findings: set[str] = set()
    changed = True
    while changed:
        changed = False
        for rule_id in fired:
            lr = rs.rules[rule_id]
            if rule_id not in standing and lr.evaluator(known, findings, None, False) == "true":
                standing.add(rule_id)
                if lr.rule.then.finding is not None:
                    findings.add(lr.rule.then.finding.id)
                changed = True
    return standing


@SETTINGS
@given(st.one_of(*ONE_REGIME.values()), st.one_of(*DISAGREEING, *IMPOSSIBLE))
def test_the_votes_standing_without_a_conflicts_facts_are_those_a_plain_fixpoint_finds(
        evidence: dict[str, Any], pair: dict[str, Any]) -> None:
    from expert.derive.graph import GRAPH
    from expert.diagnosis.decide import _conclusions, _fired_without
    from expert.observations.normalise import normalise

    rs = EXPERT.ruleset
    facts, _ = GRAPH.derive_deferred(normalise(EXPERT.kb, _combine(evidence, pair)).values(), EXPERT.kb)
    fired = sorted(EXPERT.engine.run(facts).matched, key=_conclusions(rs).position.__getitem__)
    for cap in EXPERT.kb.regimes.evidence_caps:
        for doubtful in (frozenset(cap.conflict), frozenset(list(cap.conflict)[:1])):
            assert _fired_without(rs, fired, facts, doubtful) == _fired_without_plainly(rs, fired, facts, doubtful)
