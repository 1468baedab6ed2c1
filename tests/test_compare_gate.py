"""The --fail-if language: tokenizer, parser (errors name the column), units, and three-valued evaluation that fails
closed."""

from __future__ import annotations

from typing import Any

import pytest

import expert
from expert.compare import Comparison
from expert.compare.compute import finding_ids
from expert.compare.gate import (
    AllOf,
    AnyOf,
    FactChanged,
    FindingTest,
    Negation,
    Threshold,
    VerdictChanged,
    VerdictIs,
    evaluate,
    parse,
    parse_all,
    tokenize,
)
from expert.errors import ObservationError

EXPERT = expert.default_expert()
KB = EXPERT.kb
FINDINGS = finding_ids(EXPERT)
BEFORE = {"hardware": "h100-sxm", "dtype": "bf16", "workload": "training", "batch_size": 256, "num_workers": 0,
          "gpu_util": 0.45, "host_cpu_util": 0.30, "step_time_s": 0.30, "data_wait_s": 0.12, "flops": 3.1e12}
AFTER = {**BEFORE, "num_workers": 8, "data_wait_s": 0.005, "step_time_s": 0.24, "gpu_util": 0.56}


def p(text: str) -> Any:
    return parse(text, KB, FINDINGS).root


@pytest.mark.parametrize(("text", "expected"), [
    ("step_time_s > +5%", Threshold("step_time_s > +5%", "step_time_s", ">", "relative", 0.05)),
    ("mfu <= -10%", Threshold("mfu <= -10%", "mfu", "<=", "relative", -0.10)),
    ("step_time_s > +20ms", Threshold("step_time_s > +20ms", "step_time_s", ">", "delta", 0.02)),
    ("step_time_s > +20 ms", Threshold("step_time_s > +20 ms", "step_time_s", ">", "delta", 0.02)),
    ("step_time_s >= 0.2 s", Threshold("step_time_s >= 0.2 s", "step_time_s", ">=", "value", 0.2)),
    ("gpu_util < 50%", Threshold("gpu_util < 50%", "gpu_util", "<", "value", 0.5)),
    ("gpu_util < -5 points", Threshold("gpu_util < -5 points", "gpu_util", "<", "delta", -0.05)),
    ("gpu_util < -0.05", Threshold("gpu_util < -0.05", "gpu_util", "<", "delta", -0.05)),
    ("mean_kernel_us < 10", Threshold("mean_kernel_us < 10", "mean_kernel_us", "<", "value", 10.0)),
    ("dtype != bf16", Threshold("dtype != bf16", "dtype", "!=", "value", "bf16")),
    ("hardware = H100-SXM", Threshold("hardware = H100-SXM", "hardware", "==", "value", "h100-sxm")),
    ("speedup < 0.95", Threshold("speedup < 0.95", "speedup", "<", "value", 0.95)),
    ("verdict changed", VerdictChanged("verdict changed")),
    ("bottleneck == none", VerdictIs("bottleneck == none", "==", None)),
    ("verdict != input", VerdictIs("verdict != input", "!=", "input")),
    ("new finding", FindingTest("new finding", "new", None)),
    ("cleared finding data_starved", FindingTest("cleared finding data_starved", "cleared", "data_starved")),
    ("data_wait_s changed", FactChanged("data_wait_s changed", "data_wait_s")),
])
def test_tests_parse_to_their_nodes(text: str, expected: Any) -> None:
    node = p(text)
    if isinstance(expected, Threshold) and isinstance(expected.value, float):
        assert isinstance(node, Threshold)
        assert (node.quantity, node.op, node.mode) == (expected.quantity, expected.op, expected.mode)
        assert node.value == pytest.approx(expected.value)
    else:
        assert node == expected


def test_precedence_not_over_and_over_or_and_parentheses() -> None:
    node = p("verdict changed or new finding and not step_time_s > +5%")
    assert isinstance(node, AnyOf) and isinstance(node.items[1], AllOf)
    assert isinstance(node.items[1].items[1], Negation)
    grouped = p("(verdict changed or new finding) and step_time_s changed")
    assert isinstance(grouped, AllOf) and isinstance(grouped.items[0], AnyOf)
    assert grouped.items[0].text == "verdict changed or new finding"


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty condition"),
    ("step_time_s >", "column 14: expected a number, a percentage or a signed change such as +5%, got the end"),
    ("step_time_s +5%", "column 13: expected a comparison"),
    ("step_time > +5%", "unknown fact 'step_time'; did you mean step_time_s"),
    ("step_time_s > +5% extra", "column 19: expected 'and', 'or' or the end of the condition, got 'extra'"),
    ("(verdict changed", "expected ')'"),
    ("verdict > input", "a verdict is compared with == or !="),
    ("verdict == fast",
     "a regime (capacity, communication, compute, coordination, host, input, latency, memory) or none"),
    ("new finding data_strved", "no rule concludes finding 'data_strved'; did you mean data_starved?"),
    ("new thing", "expected 'finding'"),
    ("speedup < +5%", "a plain number (speedup is a ratio"),
    ("step_time_s > +5 parsecs", "unknown unit 'parsecs'"),
    ("step_time_s > 5%", "a percentage is only accepted for fractions"),
    ("step_time_s > +5 points", "points are for signed changes of fractions"),
    ("dtype > bf16", "== or != and a value"),
    ("dtype == fp64", "'fp64' is not one of"),
    ("__import__('os').system('true')", "column 12: unexpected character \"'\""),
    ("step_time_s > +5%; true", "unexpected character ';'"),
    ("and verdict changed", "expected a fact name"),
])
def test_bad_conditions_name_the_column_and_what_is_accepted(text: str, message: str) -> None:
    with pytest.raises(ObservationError) as err:
        parse(text, KB, FINDINGS)
    assert message in str(err.value)
    assert err.value.problems[0].where == f"--fail-if {text!r}"


def test_every_bad_condition_is_reported_at_once() -> None:
    with pytest.raises(ObservationError) as err:
        parse_all(["step_time > 1", "verdict changed", "mfu <"], KB, FINDINGS)
    assert len(err.value.problems) == 2


def test_tokens_keep_signs_percentages_units_and_hyphenated_ids() -> None:
    kinds = [(t.kind, t.text) for t in tokenize("hardware==a100-40gb or x>=-1.5e-3% or y<.5GB/s")]
    assert kinds == [("name", "hardware"), ("op", "=="), ("name", "a100-40gb"), ("name", "or"), ("name", "x"),
                     ("op", ">="), ("number", "-1.5e-3%"), ("name", "or"), ("name", "y"), ("op", "<"),
                     ("number", ".5"), ("name", "GB/s"), ("end", "")]


# ---- evaluation ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def faster() -> Comparison:
    return expert.compare(BEFORE, AFTER)


def gate(c: Comparison, *texts: str) -> tuple[bool, list[str]]:
    result = evaluate(parse_all(list(texts), KB, FINDINGS), c, KB)
    return result.passed, result.failed


def test_thresholds_on_relative_and_absolute_changes_and_after_values(faster: Comparison) -> None:
    assert gate(faster, "step_time_s > +5%") == (True, [])
    assert gate(faster, "step_time_s < -5%") == (False, ["step_time_s < -5%: step_time_s 0.3 s → 0.24 s (-20.0%)"])
    assert not gate(faster, "step_time_s < -50ms")[0]  # -60 ms
    assert gate(faster, "step_time_s < -70ms")[0]
    assert not gate(faster, "step_time_s < 250ms")[0]
    assert gate(faster, "gpu_util > +20 points")[0] and not gate(faster, "gpu_util > +10 points")[0]
    assert not gate(faster, "speedup > 1.2")[0] and gate(faster, "speedup < 1.2")[0]
    assert gate(faster, "dtype != bf16")[0] and not gate(faster, "dtype == bf16")[0]


def test_verdict_findings_and_changed(faster: Comparison) -> None:
    passed, failed = gate(faster, "verdict changed")
    assert not passed and failed == [f"verdict changed: verdict input → {faster.after.bottleneck or 'none'}"]
    assert not gate(faster, "verdict != input")[0] and gate(faster, "verdict == input")[0]
    assert not gate(faster, "cleared finding data_starved")[0]
    assert gate(faster, "new finding data_starved")[0]
    passed, failed = gate(faster, "data_wait_s changed")
    assert not passed and "no spread known" in failed[0]
    assert gate(faster, "hardware changed")[0]


def test_three_valued_logic_fails_closed() -> None:
    # without flops after, mfu is not known after
    c = expert.compare(BEFORE, {k: v for k, v in AFTER.items() if k != "flops"})
    assert c.fact("mfu") is not None and c.fact("mfu").after is None  # type: ignore[union-attr]
    passed, failed = gate(c, "mfu < -5%")
    assert not passed and failed == ["mfu < -5%: cannot be evaluated (mfu is not known after)"]
    assert gate(c, "mfu < -5% or verdict changed")[1] == [
        f"mfu < -5% or verdict changed: verdict input → {c.after.bottleneck or 'none'}"]  # true wins over unknown
    assert "cannot be evaluated" in gate(c, "mfu < -5% or step_time_s > +5%")[1][0]
    assert gate(c, "mfu < -5% and step_time_s > +5%") == (True, [])  # false wins over unknown
    assert "cannot be evaluated" in gate(c, "not mfu < -5%")[1][0]
    assert "not known before or after" in gate(c, "tokens_per_s > +1%")[1][0]


def test_a_relative_change_from_zero_cannot_be_evaluated() -> None:
    c = expert.compare({**BEFORE, "data_wait_s": 0.0}, AFTER)
    assert "the before value is 0" in gate(c, "data_wait_s > +5%")[1][0]
    assert gate(c, "data_wait_s < +10ms")[0] is False  # +5 ms: the absolute change still works


def test_negation_explains_itself(faster: Comparison) -> None:
    passed, failed = gate(faster, "not step_time_s > +5%")
    assert not passed and failed == ["not step_time_s > +5%: not (step_time_s 0.3 s → 0.24 s (-20.0%))"]


def test_the_gate_in_the_comparison() -> None:
    c = expert.compare(BEFORE, AFTER, fail_if=["step_time_s > +5%", "new finding"])
    assert c.gate.conditions == ["step_time_s > +5%", "new finding"]
    assert c.gate.passed is (not c.findings_new)
    with pytest.raises(ObservationError, match="invalid --fail-if"):
        expert.compare("no/such/file.json", AFTER, fail_if=["step_time_s >> 5"])  # checked before reading files
