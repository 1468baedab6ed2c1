"""Thresholds that name a knowledge value (`lt: {kb: scorecard.mfu.fail_below}`, issue 11): bound to the number once
when the rules load, refused by name, file, line and rule when unknown, shown with both number and name in the docs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from expert._resources import data_dir
from expert.errors import KnowledgeBaseError
from expert.kb.knowledge import KnowledgeBase
from expert.rules.docs import leaf_text
from expert.rules.evaluate import evaluate
from expert.rules.logic import bind, fact_tests, knowledge_values_at
from expert.rules.model import FactTest, KnowledgeValue, RuleFile
from expert.rules.ruleset import RuleSet


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    return KnowledgeBase.load(data_dir("knowledge_base"))


def _rules(tmp_path: Path, when: str, conditions: str = "") -> Path:
    (tmp_path / "team.yaml").write_text(
        "schema_version: 1\n" + conditions + "rules:\n  - id: team-low-mfu\n    title: t\n    source: s\n"
        f"    rationale: r\n    when: {when}\n    then: {{finding: {{id: team_low, message: m}}}}\n",
        encoding="utf-8")
    return tmp_path


def test_a_named_threshold_is_bound_to_the_scorecard_number(kb: KnowledgeBase, tmp_path: Path) -> None:
    rules = RuleSet.load([_rules(tmp_path, "{fact: mfu, lt: {kb: scorecard.mfu.fail_below}}")], kb)
    lr = rules.rules["team-low-mfu"]
    assert lr.condition.model_dump(by_alias=True, exclude_none=True) == {"fact": "mfu", "lt": 0.3}
    assert isinstance(lr.rule.when, FactTest) and lr.rule.when.lt == KnowledgeValue(kb="scorecard.mfu.fail_below")
    assert not list(knowledge_values_at(lr.condition))  # evaluation only ever sees numbers
    assert evaluate(lr.condition, {"mfu": 0.29}, set()) == "true"
    assert evaluate(lr.condition, {"mfu": 0.30}, set()) == "false"
    assert lr.evaluator({"mfu": 0.29}, set(), None, False) == "true"


def test_the_built_in_band_rules_compare_with_the_scorecard(kb: KnowledgeBase) -> None:
    rules = RuleSet.load([data_dir("rules")], kb)
    card = {m.id: m for m in kb.scorecard.metrics}
    assert rules.rules["score-mfu-fail"].condition == FactTest(fact="mfu", lt=card["mfu"].fail_below)
    assert rules.rules["compute-high-mfu"].condition == FactTest(fact="mfu", gt=card["mfu"].pass_above)
    io = card["io_overhead"]
    assert rules.rules["input-io-overhead-marginal"].condition == FactTest(fact="io_overhead", ge=io.pass_below,
                                                                           le=io.fail_above)


def test_named_conditions_are_bound_too(kb: KnowledgeBase, tmp_path: Path) -> None:
    conditions = ("conditions:\n  io_failing:\n    description: d\n"
                  "    when: {fact: io_overhead, gt: {kb: scorecard.io_overhead.fail_above}}\n")
    rules = RuleSet.load([_rules(tmp_path, "{all: [{ref: io_failing}, {fact: mfu, ge: 0.1}]}", conditions)], kb)
    tests = list(fact_tests(rules.rules["team-low-mfu"].condition))
    assert [t.ops() for t in tests] == [[("gt", 0.1)], [("ge", 0.1)]]


def test_an_unknown_name_is_refused_with_file_line_rule_and_the_names_accepted(kb: KnowledgeBase,
                                                                                tmp_path: Path) -> None:
    with pytest.raises(KnowledgeBaseError) as info:
        RuleSet.load([_rules(tmp_path, "{all: [{fact: gpu_util, lt: 0.8}, {fact: mfu, lt: {kb: scorecard.mfu.low}}]}")],
                     kb)
    text = str(info.value)
    assert f"{tmp_path / 'team.yaml'}:7: rule team-low-mfu: when.all.1.lt.kb" in text
    assert "unknown knowledge value {kb: scorecard.mfu.low}" in text
    assert "scorecard.mfu.fail_below" in text and "accepted: {kb: NAME}" in text


def test_a_name_must_look_like_one() -> None:
    with pytest.raises(ValueError, match="kb"):
        RuleFile.model_validate({"rules": [{"id": "r", "title": "t", "source": "s", "rationale": "r",
                                            "when": {"fact": "mfu", "lt": {"kb": "not a name"}},
                                            "then": {"measure": ["mfu"]}}]})
    with pytest.raises(ValueError):  # only ordered operators take a knowledge value
        FactTest.model_validate({"fact": "mfu", "eq": {"kb": "scorecard.mfu.fail_below"}})


def test_bind_shares_what_names_no_knowledge_value() -> None:
    plain = FactTest(fact="mfu", lt=0.3)
    assert bind(plain, lambda v: 1.0) is plain
    named = FactTest.model_validate({"fact": "mfu", "lt": {"kb": "scorecard.mfu.fail_below"}, "gt": 0.1})
    assert bind(named, lambda v: 0.25) == FactTest(fact="mfu", lt=0.25, gt=0.1)
    assert bind(FactTest.model_validate({"fact": "mfu", "lt": {"kb": "x.y"}}), lambda v: None) == FactTest(
        fact="mfu", known=True)  # only the linter binds an unknown name, after reporting it


def test_docs_show_the_number_and_the_name(kb: KnowledgeBase) -> None:
    named = FactTest.model_validate({"fact": "mfu", "lt": {"kb": "scorecard.mfu.fail_below"}})
    assert leaf_text(named, kb) == "`mfu` is below 30 % (`scorecard.mfu.fail_below`)"


@pytest.mark.parametrize(("old", "new", "message"), [
    ("acts_on: [h2d_copy_frac", "acts_on: [h2d_copy_share", "acts_on: unknown fact 'h2d_copy_share'"),
    ("data_term_speedup: lower_precision_bytes_ratio", "data_term_speedup: lower_bytes_ratio",
     "data_term_speedup: unknown fact 'lower_bytes_ratio'"),
    # worded for a workload its own `workloads` leaves out (quantization: for_workload training and inference)
    ("so each step moves fewer bytes.\n    for_workload:",
     "so each step moves fewer bytes.\n    workloads: [inference]\n    for_workload:",
     "for_workload words it for training, which `workloads` leaves out"),
])
def test_an_optimization_naming_an_unknown_fact_is_refused(tmp_path: Path, old: str, new: str, message: str) -> None:
    import shutil

    from expert._resources import data_dir

    kb_dir = tmp_path / "knowledge_base"
    shutil.copytree(data_dir("knowledge_base"), kb_dir)
    path = kb_dir / "optimizations.yaml"
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(KnowledgeBaseError, match=message):
        KnowledgeBase.load(kb_dir)


def test_a_dtype_naming_an_unknown_vendor_is_refused(tmp_path: Path) -> None:
    import shutil

    from expert._resources import data_dir

    kb_dir = tmp_path / "knowledge_base"
    shutil.copytree(data_dir("knowledge_base"), kb_dir)
    path = kb_dir / "units.yaml"
    text = path.read_text(encoding="utf-8")
    assert "opt_in_vendors: [nvidia]" in text
    path.write_text(text.replace("opt_in_vendors: [nvidia]", "opt_in_vendors: [nvida]", 1), encoding="utf-8")
    with pytest.raises(KnowledgeBaseError, match="opt_in_vendors: unknown vendor 'nvida'"):
        KnowledgeBase.load(kb_dir)
