"""The guided consultation as a library: question choice, answers, undo, why, status, saving, and the measured
property of issue 4 (answering only the questions asked reaches the verdict and recommendations of the full facts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from strategies import observations

import expert
from expert._resources import data_dir, examples_dir
from expert.consult.rule_index import index
from expert.consult.session import AVAILABLE_TOOLS, Consultation, play
from expert.consult.session import answer_from as scripted_answer
from expert.errors import ObservationError
from expert.observations.file import read_observation_file
from expert.rules.testing import load_rule_tests

EXPERT = expert.default_expert()
KB = EXPERT.kb
ASKABLE = [name for name, spec in KB.facts.items() if spec.askable]
EXAMPLES = {p.stem: dict(read_observation_file(p).observations) for p in sorted(examples_dir().glob("*.yaml"))}
RULE_CASES = {f"{path.stem.removesuffix('.test')}::{case.name}": dict(case.facts)
              for path, tf in load_rule_tests([data_dir("rules")]) for case in tf.cases}
CASES = {**{f"example::{k}": v for k, v in EXAMPLES.items()}, **RULE_CASES}


def outcome(report: expert.Report) -> tuple[str | None, set[str]]:
    return report.bottleneck, {r.id for r in report.recommended}


def summary(report: expert.Report) -> dict[str, Any]:
    """What "the same report" means for the consultation: verdict, findings, recommended, wasted, scorecard."""
    return {
        "bottleneck": report.bottleneck,
        "candidates": [(c.regime, c.strength, c.score) for c in report.candidates],
        "findings": [f.id for f in report.findings],
        "recommended": [r.id for r in report.recommended],
        "wasted": [w.id for w in report.wasted],
        "scorecard": [(row.id, row.value, row.band) for row in report.scorecard],
    }


def answer_from(c: Consultation, facts: dict[str, Any]) -> None:
    """Answer the current question from `facts` ("unknown" for a fact they lack)."""
    q = c.next_question()
    assert q is not None
    raw = scripted_answer(q, facts, EXPERT)
    if raw is None:
        c.unknown(q.fact)
    else:
        c.answer(q.fact, raw)


# ---- the measured property -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("facts", list(CASES.values()), ids=list(CASES))
def test_questions_asked_reach_the_full_diagnosis(facts: dict[str, Any]) -> None:
    full = EXPERT.diagnose(facts)
    c = play(facts)
    assert c.next_question() is None and c.finished
    assert outcome(c.report()) == outcome(full), c.to_json()
    assert c.questions_asked < len(ASKABLE), "a consultation that asks everything chose nothing"
    asked = [name for t in c.transcript for name in (KB.questions[t.fact].facts if t.fact in KB.questions
                                                     else [t.fact])]
    assert len(asked) == len(set(asked)), f"a fact was asked twice: {asked}"


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(observations())
def test_random_cases_reach_the_full_diagnosis(facts: dict[str, Any]) -> None:
    try:
        full = EXPERT.diagnose(facts)
    except ObservationError:
        assume(False)
        raise
    assert outcome(play(facts).report()) == outcome(full)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(observations(max_facts=10), st.randoms(use_true_random=False), st.data())
def test_any_order_of_answers_gives_the_report_of_the_same_facts(facts: dict[str, Any], rng: Any,
                                                                 data: st.DataObject) -> None:
    try:
        expected = EXPERT.diagnose(facts)
    except ObservationError:
        assume(False)
        raise
    c = Consultation()
    order = list(facts)
    rng.shuffle(order)
    noise = [name for name in ASKABLE if name not in facts]
    for name in order:
        if noise and data.draw(st.booleans(), label="detour"):  # an unknown, or a value taken back, on the way
            extra = data.draw(st.sampled_from(noise), label="other fact")
            c.unknown(extra)
            if data.draw(st.booleans(), label="take it back"):
                c.undo()
        c.answer(name, facts[name])
    unknown_later = [n for n in c.unknowns if n not in facts]
    assert set(c.answers) == set(facts)
    assert all(n not in facts for n in unknown_later)
    assert summary(c.report()) == summary(expected)


# ---- asking --------------------------------------------------------------------------------------------------------


def test_first_question_is_the_kind_of_job_in_plain_words() -> None:
    q = Consultation().next_question()
    assert q is not None
    job = KB.questions["job"]
    assert q.fact == "job" and q.kind == "combined" and q.facts == ["workload", "phase"] and q.number == 1
    assert all(KB.facts[name].ask_first for name in q.facts)
    assert q.text == job.question and q.example == job.example
    assert q.choices == ["training", "llm-decode", "llm-prefill", "inference"]
    assert set(q.choice_help) == set(q.choices)
    # the why names both members and why each matters (the wording follows the rules that read them)
    assert q.why.startswith("a cheap context question") and "workload" in q.why and "phase" in q.why
    assert q.example is not None and q.example in q.prompt() and "one of training, llm-decode" in q.prompt()


def test_training_drops_phase_and_the_tools_question_comes_next() -> None:
    c = Consultation()
    turn = c.answer("job", "training")
    assert turn.value == "training" and turn.sets == {"workload": "training"} and turn.closes == ["phase"]
    assert c.answers == {"workload": "training"} and c.unknowns == ["phase"]
    q = c.next_question()
    assert q is not None and q.fact == AVAILABLE_TOOLS  # tools.yaml: it waits only for the kind of job
    c.answer(AVAILABLE_TOOLS, "all")
    q = c.next_question()
    assert q is not None and q.fact == "roof" and q.facts == ["hardware", "dtype", "num_gpus"]
    seen = []
    while (q := c.next_question()) is not None:
        seen.append(q.fact)
        c.unknown(q.fact)
    assert "phase" not in seen and "job" not in seen


@pytest.mark.parametrize(("raw", "expected", "shown"), [
    ("llm-decode", {"workload": "inference", "phase": "decode"}, "llm-decode"),
    ("LLM decode", {"workload": "inference", "phase": "decode"}, "llm-decode"),
    ("inference prefill", {"workload": "inference", "phase": "prefill"}, "llm-prefill"),
    ({"phase": "decode"}, {"phase": "decode"}, "workload unknown, decode"),
    ("decode", {"phase": "decode"}, "workload unknown, decode"),
    ("inference", {"workload": "inference"}, "inference"),
])
def test_the_job_question_accepts_choices_values_and_mappings(raw: Any, expected: dict[str, str], shown: str) -> None:
    c = Consultation()
    turn = c.answer("job", raw)
    assert c.answers == expected and turn.value == shown
    assert set(c.unknowns) == {"workload", "phase"} - set(expected)


@pytest.mark.parametrize(("raw", "expected"), [
    ("h100-sxm bf16", {"hardware": "h100-sxm", "dtype": "bf16"}),
    ("H100 SXM bf16", {"hardware": "h100-sxm", "dtype": "bf16"}),
    ("NVIDIA H100 80GB HBM3, fp8", {"hardware": "h100-sxm", "dtype": "fp8"}),
    ("a100-sxm-80gb", {"hardware": "a100-sxm-80gb"}),
    ("bf16", {"dtype": "bf16"}),
    ("h100-sxm, unknown", {"hardware": "h100-sxm"}),
    (["h100-sxm", "fp16"], {"hardware": "h100-sxm", "dtype": "fp16"}),
    ("h100 bf16 8", {"hardware": "h100-sxm", "dtype": "bf16", "num_gpus": 8}),
    ("h100-sxm, bf16, 64", {"hardware": "h100-sxm", "dtype": "bf16", "num_gpus": 64}),
])
def test_the_roof_question_reads_the_accelerator_and_precision(raw: Any, expected: dict[str, Any]) -> None:
    c = Consultation()
    c.answer("roof", raw)
    assert c.answers == expected
    assert set(c.unknowns) == {"hardware", "dtype", "num_gpus"} - set(expected)


@pytest.mark.parametrize(("question", "raw", "expected", "shown"), [
    ("host_copies", "15%", {"h2d_copy_frac": 0.15}, "15%, pageable_copy_frac unknown"),  # values fill from the first
    ("host_copies", "15%, 100%", {"h2d_copy_frac": 0.15, "pageable_copy_frac": 1.0}, "15%, 100%"),
    ("host_copies", "unknown, 100%", {"pageable_copy_frac": 1.0}, "h2d_copy_frac unknown, 100%"),
    ("host_copies", "0.2 0.9", {"h2d_copy_frac": 0.2, "pageable_copy_frac": 0.9}, "20%, 90%"),
    ("model_size", "47B, 13B", {"model_params": 47e9, "active_params": 13e9},
     "4.7e+10 params, 1.3e+10 params, weight_bits unknown"),
    ("model_size", "7B 7B", {"model_params": 7e9, "active_params": 7e9},
     "7e+09 params, 7e+09 params, weight_bits unknown"),
    ("model_size", "7B, 7B, 4", {"model_params": 7e9, "active_params": 7e9, "weight_bits": 4},
     "7e+09 params, 7e+09 params, 4"),
])
def test_values_in_order_fill_the_members_from_the_first(question: str, raw: str, expected: dict[str, float],
                                                         shown: str) -> None:
    c = Consultation()
    turn = c.answer(question, raw)
    assert c.answers == pytest.approx(expected) and turn.value == shown
    assert set(c.unknowns) == set(KB.questions[question].facts) - set(expected)


def test_a_combined_question_gives_way_to_its_open_member() -> None:
    c = Consultation(known={"workload": "inference"})  # phase alone is left: asked with its own question
    q = c.next_question()
    assert q is not None and q.fact == "phase" and q.kind == "enum"
    c = Consultation(known={"workload": "training", "hardware": "h100-sxm"}, ask_tools=False)
    while (q := c.next_question()) is not None:
        assert q.fact != "roof"
        if q.fact == "dtype":
            assert q.text == KB.facts["dtype"].question
            break
        c.unknown(q.fact)
    else:
        pytest.fail("dtype was never asked")


def test_combined_answers_survive_saving_undo_and_why() -> None:
    c = Consultation()
    c.answer("job", "llm-decode")
    c.answer("roof", "h100-sxm")
    why = c.why("roof")
    assert why.fact == "roof" and why.rules and "dtype" in c.unknowns
    assert "Why ask about roof?" in why.text()
    restored = Consultation.from_json(c.to_json())
    assert restored.answers == c.answers and restored.unknowns == c.unknowns
    assert restored.transcript[0].sets == {"workload": "inference", "phase": "decode"}
    undone = restored.undo()
    assert undone is not None and undone.fact == "roof"
    assert "hardware" not in restored.answers and "dtype" not in restored.unknowns
    bad = json.loads(c.to_json())
    bad["turns"][1]["sets"] = {"hardware": "h1000"}
    with pytest.raises(ObservationError, match="unknown hardware"):
        Consultation.from_json(json.dumps(bad))
    bad["turns"][1]["sets"] = {"gpu_util": 0.5}
    with pytest.raises(ObservationError, match="'gpu_util' is not asked by this question"):
        Consultation.from_json(json.dumps(bad))


def test_inference_asks_phase() -> None:
    c = Consultation(known={"hardware": "h100-sxm", "dtype": "bf16", "workload": "inference"})
    q = c.next_question()
    assert q is not None and q.fact == "phase"
    assert q.choices == ["prefill", "decode"]


@pytest.mark.parametrize(("fact", "raw", "value"), [
    ("gpu_util", "62%", 0.62), ("gpu_util", "0.62", 0.62), ("achieved_bandwidth", "3.35 TB/s", 3350.0),
    ("step_time_s", "12 ms", 0.012), ("model_params", "7B", 7e9), ("hardware", "NVIDIA H100 80GB HBM3", "h100-sxm"),
])
def test_answers_accept_units_and_percentages(fact: str, raw: str, value: Any) -> None:
    c = Consultation()
    turn = c.answer(fact, raw)
    assert turn.raw == raw
    assert c.answers[fact] == pytest.approx(value) if isinstance(value, float) else c.answers[fact] == value


@pytest.mark.parametrize("word", ["unknown", "skip", "Unknown ", "n/a"])
@pytest.mark.parametrize("known", [{}, {"workload": "inference"}], ids=["combined", "one fact"])
def test_unknown_words_record_unknown(word: str, known: dict[str, str]) -> None:
    c = Consultation(known=known)
    q = c.next_question()
    assert q is not None
    turn = c.answer(q.fact, word)
    facts = q.facts or [q.fact]
    assert turn.value is None and set(facts) <= set(c.unknowns) and not set(facts) & set(c.answers)
    assert turn.asked and turn.reason == q.why
    nxt = c.next_question()
    assert nxt is not None and nxt.fact != q.fact


@pytest.mark.parametrize(("fact", "raw", "needles"), [
    ("gpu_util", "162", ["above 1", "62%"]),
    ("gpu_util", "fast", ["not a number", "fraction in [0, 1]"]),
    ("step_time_s", "12 parsecs", ["unknown unit"]),
    ("batch_size", "0", ["out of range", "integer in [1"]),
    ("dtype", "fp64", ["not one of", "bf16"]),
    ("hardware", "h1000", ["unknown hardware"]),
    # combined questions
    ("job", "rendering", ["cannot read 'rendering' as workload, phase", "accepted: one of training, llm-decode"]),
    ("job", {"workload": "training", "dtype": "bf16"}, ["dtype is not asked by this question"]),
    ("roof", "h1000 bf16", ["hardware: unknown hardware 'h1000 bf16'",
                            "accepted: the values of hardware, dtype, num_gpus"]),
    ("roof", "h100-sxm, bf16, 8, fp8", ["4 values for 3 facts"]),
    ("roof", {"dtype": "fp64"}, ["dtype", "not one of"]),
    ("job", 3, ["expected text or a mapping"]),
])
def test_invalid_answers_name_the_accepted_range(fact: str, raw: Any, needles: list[str]) -> None:
    c = Consultation()
    with pytest.raises(ObservationError) as info:
        c.answer(fact, raw)
    text = str(info.value)
    assert fact in text
    for needle in needles:
        assert needle in text
    assert c.transcript == []


def test_answers_take_the_spellings_frameworks_print() -> None:
    c = Consultation()
    assert c.answer("job", "serving").sets == {"workload": "inference"}  # read as the "inference" choice
    assert c.answer("dtype", "torch.bfloat16").value == "bf16"


def test_derived_and_unknown_facts_are_refused() -> None:
    c = Consultation()
    with pytest.raises(ObservationError, match=r"derived.*worked out from data_wait_s and step_time_s"):
        c.answer("io_overhead", 0.2)
    with pytest.raises(ObservationError, match="did you mean gpu_util"):
        c.answer("gpu_utl", 0.2)


def test_contradicting_answers_are_refused() -> None:
    c = Consultation(known={"step_time_s": "100 ms"})
    with pytest.raises(ObservationError, match="cannot exceed"):
        c.answer("data_wait_s", "200 ms")
    assert "data_wait_s" not in c.answers


@pytest.mark.parametrize(("first", "then"), [
    (("activation_recompute", "no"), ("applied_optimizations", "activation_checkpointing")),
    (("applied_optimizations", "activation_checkpointing, pin_memory"), ("activation_recompute", "no")),
])
def test_an_answer_against_what_an_applied_optimization_implies_is_refused(first: tuple[str, str],
                                                                           then: tuple[str, str]) -> None:
    c = Consultation()
    c.answer(*first)
    with pytest.raises(ObservationError, match="contradicts applied_optimizations"):
        c.answer(*then)
    assert then[0] not in c.answers
    c.report()  # the session stays one that can be diagnosed


def test_no_tool_closes_every_fact_its_tool_measures() -> None:
    c = Consultation()
    turn = c.unknown("pageable_copy_frac", whole_group=True)
    tool = index(EXPERT).tool_of["pageable_copy_frac"]
    group = {n for n in ASKABLE if index(EXPERT).tool_of.get(n) == tool}
    assert set(turn.closes) == group and len(group) > 1
    assert group <= set(c.unknowns)
    c.undo()
    assert not set(c.unknowns) & group


# ---- undo, stop, status, why ---------------------------------------------------------------------------------------


def test_undo_takes_back_the_last_answer_and_asks_again() -> None:
    c = Consultation()
    first = c.next_question()
    assert first is not None
    c.answer(first.fact, "training")
    second = c.next_question()
    assert second is not None and second.fact != first.fact
    undone = c.undo()
    assert undone is not None and undone.fact == first.fact and undone.undone
    assert c.answers == {} and c.questions_asked == 0
    again = c.next_question()
    assert again is not None and again.fact == first.fact and again.number == 1
    assert [t.undone for t in c.transcript] == [True]
    assert c.undo() is None


def test_status_and_stop_reason() -> None:
    facts = EXAMPLES["data_starved_training"]
    c = Consultation()
    while c.status().verdict is None:
        answer_from(c, facts)
    status = c.status()
    assert status.verdict == "input" and status.hypotheses[0].startswith("Input-bound")
    assert status.answered["data_wait_s"] == "0.12 s"
    assert "Verdict so far: Input-bound" in status.text()
    assert not status.finished and status.stop_reason is None
    while c.next_question() is not None:
        answer_from(c, facts)
    assert c.finished and c.status().finished
    assert c.stop_reason is not None and "can change the verdict (Input-bound" in c.stop_reason


def test_stop_by_the_user_and_resume_by_answering() -> None:
    c = Consultation()
    c.stop()
    assert c.next_question() is None and c.stop_reason is not None and "stopped by the user" in c.stop_reason
    c.answer("gpu_util", "45%")
    assert c.next_question() is not None


def test_why_explains_in_the_mycin_manner() -> None:
    c = Consultation(known={"hardware": "h100-sxm", "dtype": "bf16", "workload": "training",
                            "step_time_s": "300 ms"})
    why = c.why("data_wait_s")
    assert any(r.rule_id == "input-io-overhead-fail" for r in why.rules)
    assert any("io_overhead = data_wait_s / step_time_s" in v for v in why.via)
    assert why.known["step_time_s"] == "0.3 s"
    assert any(e.verdict_after == "input" for e in why.effects)
    text = why.text()
    needles = ("Why ask about data_wait_s", "input-io-overhead-fail", "What each answer would mean", "Known so far")
    for needle in needles:
        assert needle in text
    current = c.next_question()
    assert current is not None and c.why().fact == current.fact


def test_questions_carry_the_tool_that_measures_them() -> None:
    c = Consultation(known={"hardware": "h100-sxm", "dtype": "bf16", "workload": "training"}, ask_tools=False)
    for _ in range(12):
        q = c.next_question()
        assert q is not None
        if q.fact in KB.questions:  # a combined question: its members carry the tools
            c.unknown(q.fact)
            continue
        spec = KB.facts[q.fact]
        if spec.measure:
            m = KB.tools.measurements[spec.measure]
            assert q.measure == f"{KB.tools.tools[m.tool].name}: {m.how}"
        c.unknown(q.fact)


def test_a_finished_session_explains_a_fact_it_did_not_need() -> None:
    c = play(EXAMPLES["healthy_training"])
    skipped = next(n for n in ASKABLE if n not in c.answers and n not in c.unknowns)
    assert "No answer to it can change" in c.why(skipped).goal


# ---- saving --------------------------------------------------------------------------------------------------------


def test_json_round_trip_continues_the_session() -> None:
    facts = EXAMPLES["healthy_training"]
    c = Consultation()
    for _ in range(5):
        answer_from(c, facts)
    assert any(t.sets for t in c.transcript)  # a combined question was answered
    c.answer("gpu_util", "97%")  # volunteered
    c.undo()
    c.answer("gpu_util", "0.97")
    data = json.loads(c.to_json())
    assert data["kind"] == "dam-consultation" and data["questions_asked"] == c.questions_asked
    restored = Consultation.from_json(c.to_json())
    assert restored.answers == c.answers and restored.unknowns == c.unknowns
    assert [t.model_dump() for t in restored.transcript] == [t.model_dump() for t in c.transcript]
    q1, q2 = c.next_question(), restored.next_question()
    assert q1 is not None and q2 is not None and q1.fact == q2.fact
    volunteered = [t for t in restored.transcript if t.fact == "gpu_util"]
    assert [t.asked for t in volunteered] == [False, False] and volunteered[0].undone


def test_saved_stop_is_kept() -> None:
    c = Consultation(known={"gpu_util": "45%"})
    c.stop()
    assert Consultation.from_json(c.to_json()).next_question() is None


@pytest.mark.parametrize(("edit", "needles"), [
    (lambda d: d.update(kind="something-else"), ["kind"]),
    (lambda d: d["turns"][0].update(value=7.0), ["turn 1", "gpu_util", "above 1"]),
    (lambda d: d["turns"][0].update(fact="io_overhead"), ["turn 1", "io_overhead", "not an askable fact"]),
])
def test_broken_session_files_are_refused_clearly(edit: Any, needles: list[str]) -> None:
    c = Consultation(known={"gpu_util": "45%"})
    data = json.loads(c.to_json())
    edit(data)
    with pytest.raises(ObservationError) as info:
        Consultation.from_json(json.dumps(data), where="s.json")
    for needle in ["s.json", *needles]:
        assert needle in str(info.value)


def test_not_json_is_refused() -> None:
    with pytest.raises(ObservationError, match="cannot read the saved consultation"):
        Consultation.from_json("{not json", where="s.json")


# ---- the tools question --------------------------------------------------------------------------------------------

CONTEXT = {"hardware": "h100-sxm", "dtype": "bf16", "workload": "training"}


def tools_question(c: Consultation) -> Any:
    q = c.next_question()
    assert q is not None and q.fact == AVAILABLE_TOOLS, q
    return q


def test_tools_question_follows_the_context_and_offers_the_tools_of_open_questions() -> None:
    c = Consultation(known=CONTEXT)
    q = tools_question(c)
    ix = index(EXPERT)
    assert q.kind == "tools" and q.number == 1 and q.choices and len(q.group_facts) >= 2
    assert set(q.choices) <= set(KB.tools.tools)
    for tool in q.choices:
        assert any(ix.tool_of.get(f) == tool for f in q.group_facts)
        assert KB.tools.tools[tool].name in q.choice_help[tool]
    assert "skips the measurements you cannot make" in q.why
    assert "all" in q.prompt() and "none" in q.prompt() and q.choices[0] in q.accepted
    assert Consultation(known=CONTEXT, ask_tools=False).next_question().fact != AVAILABLE_TOOLS  # type: ignore[union-attr]


def test_tools_answer_closes_the_questions_of_the_tools_not_chosen() -> None:
    c = Consultation(known=CONTEXT)
    q = tools_question(c)
    ix = index(EXPERT)
    keep = q.choices[0]
    turn = c.answer(AVAILABLE_TOOLS, [KB.tools.tools[keep].name.upper()])  # names, any case
    assert turn.value == keep and turn.asked and turn.reason == q.why and c.questions_asked == 1
    closed = set(turn.closes)
    assert closed == {f for f in ASKABLE if f not in CONTEXT and ix.tool_of.get(f) in set(q.choices) - {keep}}
    assert closed <= set(c.unknowns) and not closed & set(CONTEXT)
    assert not any(ix.tool_of.get(f) == keep for f in closed)
    assert all(KB.facts[f].measure for f in closed)  # context facts without a tool stay open
    assert c.status().available_tools == [keep] and "Tools available: " + keep in c.status().text()
    while (nxt := c.next_question()) is not None:
        assert nxt.fact not in closed and nxt.fact != AVAILABLE_TOOLS
        c.unknown(nxt.fact)


@pytest.mark.parametrize(("raw", "closes_all", "closes_none"), [
    ("none", True, False), ("no-tool", True, False), ([], True, False), ("ALL", False, True), (["all"], False, True),
    ("unknown", False, True),
])
def test_tools_answer_words(raw: Any, closes_all: bool, closes_none: bool) -> None:
    c = Consultation(known=CONTEXT)
    q = tools_question(c)
    turn = c.answer(AVAILABLE_TOOLS, raw)
    if closes_all:
        assert set(q.group_facts) <= set(turn.closes) and turn.value == "none"
    if closes_none:
        assert turn.closes == [] and c.unknowns == []


def test_tools_answer_accepts_a_comma_string_of_ids_and_names() -> None:
    c = Consultation(known=CONTEXT)
    q = tools_question(c)
    a, b = q.choices[:2]
    turn = c.answer(AVAILABLE_TOOLS, f" {a.upper()} ;{KB.tools.tools[b].name}, {a}")
    assert turn.value == f"{a}, {b}"
    assert c.status().available_tools == [a, b]


def test_unknown_and_no_tool_at_the_tools_question() -> None:
    c = Consultation(known=CONTEXT)
    q = tools_question(c)
    assert c.unknown(AVAILABLE_TOOLS).closes == []
    c.undo()
    assert set(q.group_facts) <= set(c.unknown(AVAILABLE_TOOLS, whole_group=True).closes)


def test_invalid_tool_names_the_accepted_list_and_changes_nothing() -> None:
    c = Consultation(known=CONTEXT)
    q = tools_question(c)
    before = c.transcript
    with pytest.raises(ObservationError) as info:
        c.answer(AVAILABLE_TOOLS, f"{q.choices[0]}, vtune")
    text = str(info.value)
    assert "vtune" in text and AVAILABLE_TOOLS in text and all(t in text for t in q.choices)
    assert c.transcript == before
    assert tools_question(c).choices == q.choices  # asked again


def test_undo_of_the_tools_answer_reopens_its_questions_and_asks_it_again() -> None:
    c = Consultation(known=CONTEXT)
    q = tools_question(c)
    c.answer(AVAILABLE_TOOLS, "none")
    assert set(q.group_facts) <= set(c.unknowns)
    undone = c.undo()
    assert undone is not None and undone.fact == AVAILABLE_TOOLS and undone.undone
    assert c.unknowns == [] and c.status().available_tools is None
    assert tools_question(c).number == 1


def test_why_at_the_tools_question() -> None:
    c = Consultation(known=CONTEXT)
    q = tools_question(c)
    why = c.why()
    assert why.fact == AVAILABLE_TOOLS and "skips the measurements you cannot make" in why.goal
    text = why.text()
    assert all(tool in text for tool in q.choices) and q.group_facts[0] in text
    assert c.why(AVAILABLE_TOOLS).fact == AVAILABLE_TOOLS


def test_tools_answer_survives_save_and_resume() -> None:
    c = Consultation(known=CONTEXT)
    q = tools_question(c)
    c.answer(AVAILABLE_TOOLS, q.choices[:1])
    restored = Consultation.from_json(c.to_json())
    assert restored.unknowns == c.unknowns and restored.answers == c.answers
    assert restored.status().available_tools == q.choices[:1]
    assert [t.model_dump() for t in restored.transcript] == [t.model_dump() for t in c.transcript]
    nxt = c.next_question()
    again = restored.next_question()
    assert nxt is not None and again is not None and nxt.fact == again.fact != AVAILABLE_TOOLS
    data = json.loads(c.to_json())
    data["turns"][-1]["value"] = "vtune"
    with pytest.raises(ObservationError, match="unknown tool 'vtune'"):
        Consultation.from_json(json.dumps(data), where="s.json")


def test_play_answers_the_tools_question_from_the_facts_or_the_answers() -> None:
    facts = EXAMPLES["data_starved_training"]
    c = play(facts)
    turn = next(t for t in c.transcript if t.fact == AVAILABLE_TOOLS)
    ix = index(EXPERT)
    chosen = [] if turn.value == "none" else str(turn.value).split(", ")
    assert set(chosen) <= {ix.tool_of.get(f) for f in facts}
    assert not set(turn.closes) & set(facts)
    scripted = play({**facts, AVAILABLE_TOOLS: "none"})
    closed = next(t for t in scripted.transcript if t.fact == AVAILABLE_TOOLS).closes
    assert closed and set(closed) <= set(scripted.unknowns)


# ---- value gating of the context questions and wording from the knowledge base -----------------------------------


def test_context_questions_without_value_are_not_asked() -> None:
    # a cluster case with everything but the context facts: hardware and precision can no longer change the answer
    # (lower precision is already applied: otherwise whether the part has fp8 decides whether it is recommended;
    # tensor cores too: otherwise the part's CUDA-core peak tells whether the MFU proves them in use)
    # (and the model size not known: with it, the GPU's memory could tell whether the model states fit, issue 13)
    # (nor the FLOPs and bytes per step: with them, the part's peaks would check the MFU and DRAM readings, and a
    # disagreement withholds a verdict resting on the disputed reading)
    # (nor the vocabulary: with it, the precision tells whether the output layer's rows are a multiple of 16 bytes)
    # (nor a prompt's length: with it, the part's ridge point tells whether an LLM prefill is memory- or compute-bound)
    facts = {k: v for k, v in EXAMPLES["well_scaled_cluster"].items()
             if k not in ("hardware", "dtype", "batch_size", "phase", "workload")}
    facts["applied_optimizations"] = "lower_precision, tensor_cores"
    c = Consultation(known=facts)
    for name in ("model_params", "flops", "bytes_moved", "achieved_tflops", "achieved_bandwidth", "vocab_size",
                 "prompt_tokens"):
        c.unknown(name)
    _, plan = c._analysis()
    assert not plan.scores.get("hardware") and not plan.scores.get("dtype")
    asked = []
    while (q := c.next_question()) is not None:
        asked.append(q.fact)
        if q.fact == "workload":  # asked only because an answer to it can take the value away from phase
            assert "phase" in q.why
        c.unknown(q.fact)
    assert "hardware" not in asked and "dtype" not in asked
    if "phase" in asked:
        assert "workload" in asked and asked.index("workload") < asked.index("phase")


def test_tools_question_wording_comes_from_the_knowledge_base(tmp_path: Any) -> None:
    import shutil

    target = tmp_path / "knowledge_base"
    shutil.copytree(data_dir("knowledge_base"), target)
    path = target / "tools.yaml"
    text = path.read_text()
    assert "consultation:" in text
    edited = text.replace("question: Which of these can you run or look up?", "question: Which tools do you have?", 1)
    edited = edited.replace("it skips the measurements", "it saves {questions} questions among {tools} tools; it", 1)
    path.write_text(edited)
    c = Consultation(expert.Expert(knowledge_base=target), known=CONTEXT)
    q = tools_question(c)
    assert q.text == "Which tools do you have?" and q.why.startswith(f"it saves {len(q.group_facts)} questions")
    assert c.why(AVAILABLE_TOOLS).question == "Which tools do you have?"
    # an older copy without the section still loads, with the default wording
    path.write_text(text[:text.index("\n# Wording of `dam consult`")] + "\n")
    old = Consultation(expert.Expert(knowledge_base=target), known=CONTEXT)
    assert tools_question(old).text == KB.tools.consultation.available_tools.question
    # a template naming an unknown placeholder is refused when the knowledge base loads
    path.write_text(text.replace("{tools} tools", "{tool} tools", 1))
    with pytest.raises(expert.KnowledgeBaseError, match="tool"):
        expert.Expert(knowledge_base=target)


@pytest.mark.parametrize(("question", "needle"), [
    ("{id: gpu_util, facts: [workload, phase], question: q, example: x}", "already a fact or question name"),
    ("{id: q2, facts: [workload, io_overhead], question: q, example: x}", "'io_overhead' is not an askable fact"),
    ("{id: q2, facts: [workload, hardware], question: q, example: x}", "'workload' is already asked by question 'job'"),
    ("{id: q2, facts: [num_gpus, num_nodes], question: q, example: x, choices: [{answer: one, help: h, sets: "
     "{num_gpus: '1'}}]}", "choices may set only enum and hardware facts"),
    ("{id: q2, facts: [batch_size, interconnect], question: q, example: x, choices: [{answer: a, help: h, sets: "
     "{interconnect: nvlink5}}]}", "interconnect = 'nvlink5' is not one of"),
    ("{id: q2, facts: [batch_size, interconnect], question: q, example: x, choices: [{answer: a, help: h, sets: "
     "{dtype: bf16}}]}", "sets 'dtype', not one of"),
])
def test_combined_questions_are_checked_when_the_knowledge_base_loads(tmp_path: Any, question: str,
                                                                      needle: str) -> None:
    import shutil

    from expert import KnowledgeBaseError
    from expert.kb.knowledge import KnowledgeBase

    target = tmp_path / "kb"
    shutil.copytree(data_dir("knowledge_base"), target)
    facts = target / "facts.yaml"
    facts.write_text(facts.read_text() + f"  - {question}\n")
    with pytest.raises(KnowledgeBaseError) as info:
        KnowledgeBase.load(target)
    assert needle in str(info.value) and "facts.yaml: questions." in str(info.value)


def test_the_docstring_example_runs() -> None:
    import doctest

    import expert.consult.session

    assert doctest.testmod(expert.consult.session).failed == 0


def test_a_combined_question_of_one_tool_keeps_its_measurement_and_no_tool() -> None:
    c = Consultation(known={"workload": "inference", "gpu_idle_gap_frac": "30%", "step_time_s": "10 ms",
                            "data_wait_s": "0"}, ask_tools=False)
    while (q := c.next_question()) is not None and q.fact != "host_copies":
        c.unknown(q.fact)
    assert q is not None and q.measure is not None and "nsys" in q.measure
    assert q.group == "Nsight Systems" and q.group_facts and "h2d_copy_frac" not in q.group_facts
    turn = c.unknown("host_copies", whole_group=True)
    assert {"h2d_copy_frac", "pageable_copy_frac", *q.group_facts} <= set(turn.closes) <= set(c.unknowns)
    assert turn.raw == "no-tool" and "(h2d_copy_frac, pageable_copy_frac, " in turn.text()


def _member_values(name: str) -> st.SearchStrategy[Any]:
    spec = KB.facts[name]
    if spec.type == "enum":
        return st.sampled_from(spec.choices or [])
    if spec.type == "hardware":
        return st.sampled_from(sorted(KB.hardware))
    if spec.type == "fraction":
        return st.floats(0, 1)
    if spec.type == "integer":
        return st.integers(int(spec.min or 0), int(spec.max or 10**12))
    return st.floats(spec.min or 1, spec.max or 1e15)


@settings(max_examples=200, deadline=None, database=None)
@given(st.sampled_from(sorted(KB.questions)), st.data())
def test_combined_answers_read_back_what_they_say(question_id: str, data: st.DataObject) -> None:
    from expert.consult.session import combined

    question = KB.questions[question_id]
    values = {name: data.draw(st.one_of(st.none(), _member_values(name)), label=name) for name in question.facts}
    typed = ", ".join("unknown" if v is None else repr(v) if isinstance(v, float) else str(v) for v in values.values())
    assert combined.parse(question, typed, KB) == values
    assert combined.parse(question, {k: v for k, v in values.items() if v is not None}, KB) == values


def test_the_tools_question_waits_only_for_known_facts(kb_copy: Path) -> None:
    from expert import KnowledgeBaseError
    from expert.kb.knowledge import KnowledgeBase

    tools = kb_copy / "tools.yaml"
    tools.write_text(tools.read_text().replace("after: [workload, phase]", "after: [workload, fase]"))
    with pytest.raises(KnowledgeBaseError, match=r"consultation\.available_tools\.after.*unknown fact 'fase'"):
        KnowledgeBase.load(kb_copy)


# ---- the optimizations already applied: asked last, only while something is recommended --------------------------

APPLIED_CASE = {"workload": "training", "flops": 1.0, "comm_frac": 1.0, "phase": "prefill", "hardware": "a10",
                "applied_optimizations": ["async_grad_sync"]}  # found by test_random_cases_reach_the_full_diagnosis


def test_an_optimization_already_applied_is_asked_for_last_and_not_recommended() -> None:
    """No rule tests applied_optimizations, so no probe reached it and the consultation recommended what the job
    already used (async_grad_sync here). It is asked once nothing else can change the answer."""
    full = EXPERT.diagnose(APPLIED_CASE)
    assert "async_grad_sync" not in {r.id for r in full.recommended}
    c = play(APPLIED_CASE)
    assert outcome(c.report()) == outcome(full)
    last = c.transcript[-1]
    assert last.fact == "applied_optimizations" and last.value == "async_grad_sync"
    assert "about to be recommended" in last.reason and "async_grad_sync" in last.reason


def test_the_applied_question_offers_the_recommendations_and_takes_none() -> None:
    facts = {k: v for k, v in APPLIED_CASE.items() if k != "applied_optimizations"}
    c = Consultation(EXPERT)
    q = c.next_question()
    while q is not None and q.fact != "applied_optimizations":
        raw = scripted_answer(q, facts, EXPERT)
        c.unknown(q.fact) if raw is None else c.answer(q.fact, raw)
        q = c.next_question()
    assert q is not None and q.kind == "optimizations"
    recommended = sorted(r.id for r in c.report().recommended)
    assert q.choices == recommended and "recommended now: " + ", ".join(recommended) in q.prompt()
    c.answer(q.fact, "none")
    assert c.next_question() is None
    assert sorted(r.id for r in c.report().recommended) == recommended  # none applied: all stand
    assert c.report().applied == []


def test_nothing_recommended_means_no_applied_question() -> None:
    c = play({"workload": "training"})  # every other question unknown: nothing to recommend
    assert c.report().recommended == [] and c.finished
    assert "applied_optimizations" not in [t.fact for t in c.transcript]
