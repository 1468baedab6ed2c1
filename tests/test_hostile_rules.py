"""The rule engine at scale (issue 21): a team adding rules never hits durable-rules' limits. A long `in` list is
one set test, a sub-condition durable-rules would expand past its bound is evaluated as a flag, and a rule set too
large for one durable-rules ruleset is split over several (tests/test_durable_scale.py goes to 1,000 rules). Both
engines give the same findings. Every build runs in a subprocess with a time limit: the durable build used to hang
uninterruptibly. Extend the table."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("durable")
DAM = shutil.which("dam", path=str(Path(sys.executable).parent)) or shutil.which("dam")
pytestmark = pytest.mark.skipif(DAM is None, reason="the dam console script is not installed (pip install -e .)")


def _rule(rule_id: str, when: str, finding: str) -> str:
    return (f"  - id: {rule_id}\n    title: t\n    source: s\n    rationale: r\n    when: {when}\n"
            f"    then: {{finding: {{id: {finding}, message: m}}}}\n")


def _file(*rules: str) -> str:
    return "schema_version: 1\nrules:\n" + "".join(rules)


VALUES = ", ".join(str(v) for v in range(0, 1000, 2))  # 500 even batch sizes
ANYS = "{all: [" + ", ".join(f"{{any: [{{fact: gpu_util, lt: 0.{i % 9 + 1}}}, {{fact: mfu, gt: 0.{i % 9}}}]}}"
                              for i in range(22)) + "]}"
SEVENTEEN = ", ".join(str(v) for v in range(17))  # one past MAX_IN_VALUES
# (case id, rule file, facts as --set pairs, team findings expected)
CASES = [
    ("in-500-member", _file(_rule("team-in", f"{{fact: batch_size, in: [{VALUES}]}}", "in_hit")),
     ["batch_size=8"], ["in_hit"]),
    ("in-500-not-member", _file(_rule("team-in", f"{{fact: batch_size, in: [{VALUES}]}}", "in_hit")),
     ["batch_size=7"], []),
    ("in-500-unknown", _file(_rule("team-in", f"{{fact: batch_size, in: [{VALUES}]}}", "in_hit")),
     ["gpu_util=50%"], []),
    ("not-in-500", _file(_rule("team-nin", f"{{fact: batch_size, not_in: [{VALUES}]}}", "nin_hit")),
     ["batch_size=7"], ["nin_hit"]),
    ("not-in-unknown", _file(_rule("team-nin", f"{{fact: batch_size, not_in: [{VALUES}]}}", "nin_hit")),
     ["gpu_util=50%"], []),
    ("not-in-17", _file(_rule("team-dt", f"{{fact: num_workers, not_in: [{SEVENTEEN}]}}", "odd_workers")),
     ["num_workers=3"], []),
    ("not-in-17-fires", _file(_rule("team-dt", f"{{fact: num_workers, not_in: [{SEVENTEEN}]}}", "odd_workers")),
     ["num_workers=40"], ["odd_workers"]),
    ("any-22-times", _file(_rule("team-dnf", ANYS, "dnf_hit")), ["gpu_util=5%", "mfu=0.95"], ["dnf_hit"]),
    ("any-22-times-silent", _file(_rule("team-dnf", ANYS, "dnf_hit")), ["gpu_util=95%", "mfu=0.01"], []),
    ("not-of-a-long-in", _file(_rule("team-nn", f"{{not: {{fact: batch_size, in: [{VALUES}]}}}}", "nn_hit")),
     ["batch_size=9"], ["nn_hit"]),
    ("chained-on-a-flag", _file(_rule("team-in", f"{{fact: batch_size, in: [{VALUES}]}}", "in_hit"),
                                _rule("team-next", "{all: [{finding: in_hit}, {fact: gpu_util, lt: 0.5}]}", "next")),
     ["batch_size=8", "gpu_util=40%"], ["in_hit", "next"]),
    ("300-rules", _file(*(_rule(f"team-r{i}", f"{{fact: gpu_util, lt: {0.001 * (i + 1):.3f}}}", f"r{i}")
                          for i in range(300))), ["gpu_util=0.05%"], ["r0", "r1", "r299"]),
]


def _findings(tmp_path: Path, engine: str, sets: list[str]) -> tuple[int, set[str], str]:
    assert DAM is not None
    args = [a for s in sets for a in ("--set", s)]
    result = subprocess.run([DAM, "diagnose", *args, "--rules-dir", "rules", "--engine", engine, "--format", "json"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert "Traceback" not in result.stderr
    found = {f["id"] for f in json.loads(result.stdout)["findings"]} if result.returncode == 0 else set()
    return result.returncode, found, result.stderr


@pytest.mark.parametrize(("case", "text", "sets", "expected"), CASES, ids=[c[0] for c in CASES])
def test_large_rules_agree_on_both_engines_and_never_hang(tmp_path: Path, case: str, text: str, sets: list[str],
                                                          expected: list[str]) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "team.yaml").write_text(text)
    rc_pure, pure, err = _findings(tmp_path, "pure", sets)
    assert rc_pure == 0, err
    rc_auto, auto, err = _findings(tmp_path, "auto", sets)
    assert rc_auto == 0, err
    assert auto == pure
    team_ids = {"in_hit", "nin_hit", "odd_workers", "dnf_hit", "nn_hit", "next", *(f"r{i}" for i in range(300))}
    assert set(expected) <= pure
    if case != "300-rules":
        assert pure & team_ids == set(expected)
    rc_durable, durable, err = _findings(tmp_path, "durable", sets)
    assert rc_durable == 0, err  # 300 rules: split over several durable-rules rulesets, no longer refused
    assert durable == pure
    assert "pure-Python engine" not in _findings(tmp_path, "auto", sets)[2]
