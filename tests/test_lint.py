"""The linter on the shipped rules, its condition analysis, its bookkeeping, and broken rules directories."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import expert
from expert import commands as CLI  # the parser and `main` behind cli.py
from expert._resources import data_dir
from expert.errors import KnowledgeBaseError, Problem
from expert.kb.knowledge import KnowledgeBase
from expert.rules.lint import (
    LINTS,
    LINTS_BY_ID,
    BoxAlgebra,
    Span,
    _load_problems,
    _TooComplex,
    condition_text,
    lint_page,
    lint_paths,
    load_positioned,
)
from expert.rules.model import AllOf, AnyOf, FactTest, FindingRef, NotOf
from expert.rules.testing import load_rule_tests, run_suite

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "lint"
ERROR_FIXTURES = sorted(d for d in FIXTURES.iterdir() if d.is_dir() and d.name.startswith("dam0"))


def dam(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = CLI.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---- the shipped rules -------------------------------------------------------------------------------------------


def test_shipped_rules_lint_clean() -> None:
    result = lint_paths()
    assert result.tests_run
    assert result.diagnostics == [], "\n".join(str(d) for d in result.diagnostics)
    assert result.exit_code == 0


def test_shipped_waivers_each_suppress_a_finding() -> None:
    result = lint_paths()
    waived = {(d.subject, d.lint) for d in result.waived}
    assert ("input-single-process-loader", "DAM106") in waived
    assert all(d.waived for d in result.waived)


def test_shipped_rules_have_full_rule_test_coverage() -> None:
    pure = expert.Expert(engine="pure")
    suite = run_suite(pure, load_rule_tests([data_dir("rules")]))
    coverage = suite.coverage()
    assert not suite.failures, [f"{r.case}: {r.error or r.false_negatives + r.false_positives}" for r in suite.failures]
    assert coverage.rules == len(pure.ruleset.rules)
    assert coverage.complete, (coverage.describe(), suite.uncovered_branches(),
                               sorted(t.rule for t in suite.rules.values() if not t.covered))


# ---- lints: identity and docs -------------------------------------------------------------------------------------


def test_lints_have_unique_ids_names_and_docs() -> None:
    assert len(LINTS_BY_ID) == len(LINTS)
    assert len({lint.name for lint in LINTS}) == len(LINTS)
    for lint in LINTS:
        assert lint.severity == ("error" if lint.id.startswith("DAM0") else "warning"), lint.id
        assert lint.summary.endswith(".") and len(lint.docs.strip()) > 80, lint.id
        assert lint.page().startswith(f"## {lint.id} {lint.name} ({lint.severity})")


def test_lint_page_of_unknown_lint_suggests() -> None:
    assert "unsatisfiable" in lint_page("dam102")
    with pytest.raises(KnowledgeBaseError, match="DAM102"):
        lint_page("DAM1O2")


# ---- condition analysis ------------------------------------------------------------------------------------------


def test_span_intersections() -> None:
    assert Span(hi=0.5).meet(Span(lo=0.8)).empty()
    assert not Span(hi=0.8, hi_open=False).meet(Span(lo=0.8, lo_open=False)).empty()  # x <= 0.8 and x >= 0.8
    assert Span(hi=0.8).meet(Span(lo=0.8, lo_open=False)).empty()  # x < 0.8 and x >= 0.8
    assert Span(known=False).meet(Span(lo=0.2, lo_open=False, known=True)).empty()
    assert Span(only=frozenset({"fp32"})).meet(Span(never=frozenset({"fp32"}))).empty()
    assert Span(never=frozenset({"bf16"})).empty(frozenset({"bf16"}))  # the enum's only value is excluded
    assert not Span(never=frozenset({"bf16"})).empty(frozenset({"bf16", "fp16"}))
    assert Span(lo=1, lo_open=False, hi=1, hi_open=False, never=frozenset({1})).empty()


def test_boxes_push_negation_inwards_with_kleene_semantics() -> None:
    algebra = BoxAlgebra({}, {})
    x_low = FactTest(fact="gpu_util", lt=0.5)
    # not(x < 0.5) needs x known and >= 0.5: it contradicts x < 0.3 but not "x unknown"-free tests
    assert not algebra.boxes(AllOf(all=[NotOf(not_=x_low), FactTest(fact="gpu_util", lt=0.3)]))
    assert not algebra.boxes(AllOf(all=[NotOf(not_=x_low), FactTest(fact="gpu_util", known=False)]))
    # not(any(a, b)) is all(not a, not b)
    either = AnyOf(any=[x_low, FactTest(fact="sm_active", gt=0.8)])
    boxes = algebra.boxes(AllOf(all=[NotOf(not_=either), FactTest(fact="sm_active", ge=0.9)]))
    assert boxes == []
    assert len(algebra.boxes(NotOf(not_=AllOf(all=[x_low, FactTest(fact="sm_active", gt=0.8)])))) == 2
    # a finding and its absence
    assert not algebra.boxes(AllOf(all=[FindingRef(finding="f"), NotOf(not_=FindingRef(finding="f"))]))


def test_boxes_expand_findings_into_their_producers() -> None:
    producers = {"low": [FactTest(fact="gpu_util", lt=0.8)], "loop": [FindingRef(finding="loop")]}
    algebra = BoxAlgebra({}, {}, producers)
    assert not algebra.boxes(AllOf(all=[FindingRef(finding="low"), FactTest(fact="gpu_util", gt=0.95)]))
    assert algebra.boxes(AllOf(all=[FindingRef(finding="low"), FactTest(fact="gpu_util", gt=0.5)]))
    assert algebra.boxes(FindingRef(finding="loop")) == []  # least fixpoint: a finding cannot bootstrap itself


def test_boxes_give_up_on_exponential_conditions() -> None:
    wide = AnyOf(any=[FactTest(fact="gpu_util", gt=i / 100) for i in range(80)])
    with pytest.raises(_TooComplex):
        BoxAlgebra({}, {}).boxes(AllOf(all=[wide, wide, wide]))


def test_condition_text() -> None:
    node = AllOf(all=[FactTest(fact="gpu_util", lt=0.8), NotOf(not_=FindingRef(finding="f")),
                      FactTest(fact="dtype", **{"in": ["fp32", "tf32"]})])
    assert condition_text(node) == "all(gpu_util < 0.8, not(finding f), dtype in [fp32, tf32])"


# ---- positions, load problems, precedence --------------------------------------------------------------------------


def test_positions_are_key_lines(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("schema_version: 1\nrules:\n  - id: a\n    when:\n      all:\n        - {fact: x, lt: 1}\n",
                    encoding="utf-8")
    data, lines, duplicates = load_positioned(path)
    assert data["rules"][0]["id"] == "a" and not duplicates
    assert lines[("rules", 0)] == 3 and lines[("rules", 0, "when")] == 4
    assert lines[("rules", 0, "when", "all")] == 5 and lines[("rules", 0, "when", "all", 0, "lt")] == 6


def test_loader_problems_become_located_errors(tmp_path: Path) -> None:
    from expert.rules.lint import LintContext, SourceFile, _load_file

    rules = FIXTURES / "clean" / "rules.yaml"
    errors: list = []
    source = _load_file(rules, "rules", __import__("expert.rules.model", fromlist=["RuleFile"]).RuleFile, True, errors)
    ctx = LintContext(KnowledgeBase.load(data_dir("knowledge_base")), data_dir("knowledge_base"), [rules.parent],
                      [source], [], [], errors)
    [diag] = _load_problems(ctx, [Problem(f"{rules}: rule fx-compute: when", "something only the loader knows")])
    line = next(i for i, text in enumerate(rules.read_text().splitlines(), 1) if text.endswith("id: fx-compute"))
    assert (diag.lint, diag.severity, diag.subject, diag.line) == ("DAM012", "error", "fx-compute", line)
    assert isinstance(source, SourceFile)


def test_confirmed_votes_conflict_only_when_precedence_is_incomplete() -> None:
    kb = KnowledgeBase.load(data_dir("knowledge_base"))
    assert lint_paths([FIXTURES / "clean"], builtin=False, knowledge_base=kb, run_tests=False).diagnostics == []
    kb.regimes = kb.regimes.model_copy(update={"precedence": [r for r in kb.regimes.precedence if r != "memory"]})
    result = lint_paths([FIXTURES / "clean"], builtin=False, knowledge_base=kb, run_tests=False)
    messages = [d.message for d in result.diagnostics if d.lint == "DAM106"]
    assert messages and all("memory is not in `precedence`" in m for m in messages), messages


def test_missing_path_is_an_error() -> None:
    with pytest.raises(KnowledgeBaseError, match="no such file"):
        lint_paths([FIXTURES / "no_such_dir"])


# ---- the command line --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fixture", "code"), [("clean", 0), ("dam101_threshold_out_of_range", 1),
                                                ("dam004_unknown_fact", 2)])
def test_lint_exit_codes(capsys: pytest.CaptureFixture[str], fixture: str, code: int) -> None:
    rc, out, _ = dam(capsys, "rules", "lint", "--isolated", str(FIXTURES / fixture))
    assert rc == code
    assert ("clean" in out) == (code == 0)


def test_lint_json_lists_errors_first(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = dam(capsys, "rules", "lint", "--isolated", "--no-tests", "--format", "json",
                     str(FIXTURES / "dam005_invalid_value"), str(FIXTURES / "dam101_threshold_out_of_range"))
    data = json.loads(out)
    severities = [d["severity"] for d in data["diagnostics"]]
    assert rc == 2 and severities == sorted(severities)  # "error" < "warning"
    assert {d["lint"] for d in data["diagnostics"]} == {"DAM005", "DAM101"}
    assert all(d["line"] for d in data["diagnostics"])


def test_lint_team_rules_with_builtin_context(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = dam(capsys, "rules", "lint", str(FIXTURES / "team_rules"))
    assert rc == 0, out
    rc, out, _ = dam(capsys, "rules", "lint", "--isolated", str(FIXTURES / "team_rules"))
    assert rc == 2 and "DAM008" in out  # data_starved is a built-in finding


def test_lint_explain_and_list(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = dam(capsys, "rules", "lint", "--explain", "DAM106")
    assert rc == 0 and out.startswith("## DAM106 conflicting-conclusions (warning)")
    rc, out, _ = dam(capsys, "rules", "lint", "--list")
    assert rc == 0 and len(out.splitlines()) == len(LINTS)
    rc, _, err = dam(capsys, "rules", "lint", "--explain", "DAM999")
    assert rc == 2 and "no such lint" in err
    # an unknown lint id is not a knowledge base that cannot be loaded: say so, suggest and list the ids
    assert "unknown lint id" in err and "cannot be loaded" not in err
    assert "did you mean DAM109" in err and all(lint.id in err for lint in LINTS)
    rc, out, _ = dam(capsys, "rules", "lint", "--explain", "dam106")
    assert rc == 0 and out.startswith("## DAM106 ")


@pytest.mark.parametrize("broken", ERROR_FIXTURES, ids=[d.name for d in ERROR_FIXTURES])
def test_diagnose_with_a_broken_rules_dir_fails_cleanly(capsys: pytest.CaptureFixture[str], broken: Path) -> None:
    rc, out, err = dam(capsys, "diagnose", "--rules-dir", str(broken), "--set", "gpu_util=50%")
    assert rc == 2 and out == ""
    assert err.startswith("dam diagnose: ") and "Traceback" not in err
    assert f"{broken}/" in err  # names the file
    first = err.splitlines()[1]
    if "invalid YAML" not in first:
        assert "rule " in err or "table " in err or "conditions." in err  # names the entry
        assert any(field in err for field in ("when", "then", "severity", "rationale", "table"))


def test_broken_rules_dir_end_to_end_has_no_traceback() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "cli.py"), "diagnose", "--rules-dir",
                           str(FIXTURES / "dam004_unknown_fact"), "--set", "gpu_util=50%"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "dam004_unknown_fact/rules.yaml: rule fx-unknown-fact: when: unknown fact 'gpu_utilization'" in proc.stderr
