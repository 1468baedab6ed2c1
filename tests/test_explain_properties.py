"""Properties over generated observation sets: counterfactuals really flip the verdict, what_if({}) changes nothing,
why-chains end at observations, and the JSON export gives back the same explanations."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, reject, settings
from strategies import observations, rich_observations

from expert import Expert, ExpertError, Report
from expert.report.render import export
from expert.report.render.graph import load_json

EXPERT = Expert(engine="pure")
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def diagnose(obs: dict[str, Any]) -> Report:
    try:
        return EXPERT.diagnose(obs)
    except ExpertError:  # a cross-fact check the strategy does not model
        reject()


@SETTINGS
@given(rich_observations())
def test_each_counterfactual_flips_the_verdict_when_applied(obs: dict[str, Any]) -> None:
    report = diagnose(obs)
    found = report.counterfactuals(EXPERT)
    assert found.verdict == report.bottleneck and found.tried >= len(found.items)
    for cf in found.items:
        assert cf.verdict_before == report.bottleneck != cf.verdict_after
        after = report.what_if(cf.changes, EXPERT)
        assert after.verdict_after == cf.verdict_after, cf.text()
        assert after.verdict_changed


@SETTINGS
@given(observations())
def test_what_if_nothing_changes_nothing(obs: dict[str, Any]) -> None:
    report = diagnose(obs)
    result = report.what_if({}, EXPERT)
    assert not result.changed and result.changes == []
    assert result.after is not None and result.after.to_json() == report.to_json()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rich_observations())
def test_why_chains_end_at_observations_and_survive_the_json_export(obs: dict[str, Any]) -> None:
    report = diagnose(obs)
    again = load_json(export(report, "json"))
    targets = ([f"finding:{f.id}" for f in report.findings] + [f"bottleneck:{c.regime}" for c in report.candidates]
               + [f"recommendation:{r.id}" for r in report.recommended] + [f"wasted:{w.id}" for w in report.wasted])
    for target in targets:
        why = report.why(target)
        assert why.concluded and why.steps[-1].id == target and why.observations
        assert all(s.rests_on or s.kind == "observation" for s in why.steps)
        assert again.why(target) == why
    for ident in [*EXPERT.kb.regimes.regimes, *EXPERT.kb.optimizations]:
        assert again.why_not(ident) == report.why_not(ident)
