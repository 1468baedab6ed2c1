"""`dam rules list|show|test|docs` (lint is in test_lint.py), including a team's extra rules directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from expert import commands as CLI  # the parser and `main` behind cli.py

ROOT = Path(__file__).resolve().parents[1]
TEAM = Path(__file__).parent / "fixtures" / "lint" / "team_rules"
SCREENING_TESTS = ROOT / "rules" / "tests" / "screening.test.yaml"


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")


def dam(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = CLI.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_json_has_every_rule_with_its_test_count(capsys: pytest.CaptureFixture[str]) -> None:
    import expert

    rc, out, _ = dam(capsys, "rules", "list", "--format", "json")
    rows = {row["id"]: row for row in json.loads(out)}
    assert rc == 0 and set(rows) == set(expert.Expert(engine="pure").ruleset.rules)
    assert rows["screen-low-gpu-util"]["tests"] == 2 and rows["screen-low-gpu-util"]["file"] == "screening.yaml"
    assert all(row["source"] and row["title"] for row in rows.values())


def test_list_table(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = dam(capsys, "rules", "list")
    assert rc == 0 and "input-io-overhead-fail" in out and "critical" in out


@pytest.mark.parametrize("columns", [80, 120, 160])
def test_list_table_keeps_every_id_whole_at_any_width(columns: int, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import expert

    monkeypatch.setenv("COLUMNS", str(columns))
    rc, out, _ = dam(capsys, "rules", "list")
    lines = out.splitlines()
    assert rc == 0 and max(len(line) for line in lines) <= columns
    words = {word for line in lines for word in line.split()}
    ruleset = expert.Expert(engine="pure").ruleset
    assert set(ruleset.rules) <= words  # each id on one line, never folded
    assert ("seed Table 5" in out) == (columns >= 140)  # sources where there is room, else where to find them
    assert ("dam rules show ID" in out) == (columns < 140)
    assert "Scaling efficiency below 80 %" in out  # the title, beside its id or under it


def test_show_prints_everything_about_a_rule(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = dam(capsys, "rules", "show", "compute-machine-bound")
    assert rc == 0
    for text in ("What it detects", "Why it matters", "When it fires", "What it concludes", "machine_bound",
                 "Read by", "compute-tensor-cores-idle", "Example that fires it", "Source", "screening signal 2",
                 "Test cases", "large-gemm-busy-sms-free-bandwidth", "Facts it reads", "sm_active",
                 "Findings it reads", "high_gpu_util"):
        assert text in out, text


def test_show_unknown_rule_suggests(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = dam(capsys, "rules", "show", "screen-low-gpu-utl")
    assert rc == 2 and out == ""
    assert "no such rule" in err and "screen-low-gpu-util" in err


def test_test_on_one_file_tallies_its_rules(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = dam(capsys, "rules", "test", str(SCREENING_TESTS), "--engine", "pure")
    assert rc == 0
    assert "screen-utilization-not-decisive" in out and "input-io-overhead-fail" not in out
    assert "35 cases: 35 passed, 0 failed, 0 todo" in out
    # the named conditions llm_decode and decode_bytes_complete have branches this file alone does not exercise
    assert "coverage: 11/11 rules with a firing and a silent case (100 %); 20/23 `any` branches" in out


def test_test_with_a_team_rules_dir(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = dam(capsys, "rules", "test", str(TEAM / "tests"), "--rules-dir", str(TEAM), "--format", "json")
    data = json.loads(out)
    assert rc == 0 and data["failures"] == 0
    assert list(data["rules"]) == ["team-starved-many-workers"]
    assert data["coverage"] == {"rules": 1, "rules_covered": 1, "branches": 0, "branches_covered": 0}


def test_team_rules_without_rules_dir_are_reported_not_loaded(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = dam(capsys, "rules", "test", str(TEAM / "tests"))
    assert rc == 1
    assert "which is not loaded" in out and "--rules-dir" in out


def test_test_reports_every_false_negative_and_positive(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    team = tmp_path / "team"
    shutil.copytree(TEAM, team)
    path = team / "tests" / "team.test.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["cases"].append({"name": "wrong-on-both-sides", "rule": "team-starved-many-workers",
                          "facts": {"step_time_s": "300 ms", "data_wait_s": "120 ms", "num_workers": 32},
                          "expect": {"fired": ["screen-low-gpu-util"], "bottleneck": "memory"},
                          "absent": {"fired": ["team-starved-many-workers"], "recommended": ["faster_input_format"]}})
    data["cases"].append({"name": "known-gap", "rule": "team-starved-many-workers", "todo": "not modelled yet",
                          "facts": {"num_workers": 32}, "expect": {"fired": ["team-starved-many-workers"]}})
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    rc, out, _ = dam(capsys, "rules", "test", str(path), "--rules-dir", str(team), "--engine", "pure")
    assert rc == 1
    assert "FAIL team.test.yaml::wrong-on-both-sides (team-starved-many-workers)" in out
    assert "false negative: fired: screen-low-gpu-util expected, not concluded" in out
    assert "false negative: bottleneck: expected memory, got input" in out
    assert "false positive: fired: team-starved-many-workers concluded, expected absent" in out
    assert "false positive: recommended: faster_input_format concluded, expected absent" in out
    assert "4 cases: 2 passed, 1 failed, 1 todo" in out


def test_diagnose_uses_a_team_rules_dir(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = dam(capsys, "diagnose", "--rules-dir", str(TEAM), "--set", "step_time_s=300ms",
                     "--set", "data_wait_s=120ms", "--set", "num_workers=16", "--format", "json")
    report = json.loads(out)
    assert rc == 0
    assert "team_many_workers_starved" in {f["id"] for f in report["findings"]}


def test_docs_write_and_check(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "rules.md"
    rc, out, _ = dam(capsys, "rules", "docs", "--output", str(target))
    assert "wrote" in out
    assert rc == 0 and target.is_file()
    text = target.read_text(encoding="utf-8")
    assert "### `screen-low-gpu-util`" in text and "## Lint reference" in text and "### DAM102" in text
    assert "$ dam diagnose --set gpu_util=55%" in text  # the firing example of screen-low-gpu-util
    assert dam(capsys, "rules", "docs", "--output", str(target), "--check")[0] == 0
    target.write_text(text.replace("Batch size 1", "Batch size one"), encoding="utf-8")
    rc, _, err = dam(capsys, "rules", "docs", "--output", str(target), "--check")
    assert rc == 1 and "stale" in err
    # the command it suggests regenerates the file that was checked, with the options it was made with
    assert f"regenerate it with `dam rules docs --output {target}`" in err and "docs/rules.md" not in err


def test_docs_check_names_the_rules_dirs_it_was_given(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "team rules.md"
    assert dam(capsys, "rules", "docs", "--output", str(target), "--rules-dir", str(TEAM))[0] == 0
    assert dam(capsys, "rules", "docs", "--output", str(target), "--rules-dir", str(TEAM), "--check")[0] == 0
    target.write_text(target.read_text(encoding="utf-8") + "x\n", encoding="utf-8")
    rc, _, err = dam(capsys, "rules", "docs", "--output", str(target), "--rules-dir", str(TEAM), "--check")
    assert rc == 1
    assert f"`dam rules docs --output '{target}' --rules-dir {TEAM}`" in err


def test_committed_rule_docs_are_current(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = dam(capsys, "rules", "docs", "--output", str(ROOT / "docs" / "rules.md"), "--check")
    assert rc == 0, f"{err} (run: dam rules docs --output docs/rules.md)"
