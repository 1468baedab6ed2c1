"""`dam rules lint|test|docs|list` given something that is not what they take (issue 22's misleading messages): a
file that is not a rule file, a directory without rules, a FIFO, a device, a symlink loop, a missing path. Each
says what it got and what is accepted, and exits 2 — never "clean: 0 rule files", never an empty table."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DAM = shutil.which("dam", path=str(Path(sys.executable).parent)) or shutil.which("dam")
pytestmark = pytest.mark.skipif(DAM is None, reason="the dam console script is not installed (pip install -e .)")


@pytest.fixture
def place(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("hello\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "loop").symlink_to("loop")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "team").mkdir()
    (tmp_path / "team" / "rules.yml").write_text("schema_version: 1\nrules: []\n")
    return tmp_path


# (command, path, words the message must hold)
CASES = [
    (["rules", "lint"], "notes.txt", ["a .txt file, not a rule file", "*.yaml"]),
    (["rules", "lint"], "team/rules.yml", ["a .yml file, not a rule file"]),
    (["rules", "lint"], "empty", ["a directory without rule files", "*.yaml"]),
    (["rules", "lint"], "fifo", ["a FIFO", "not a rule file"]),
    (["rules", "lint"], "loop", ["a symlink loop"]),
    (["rules", "lint"], "/dev/zero", ["a character device"]),
    (["rules", "lint"], "missing", ["no such file or directory"]),
    (["rules", "test"], "notes.txt", ["not a rule test file", ".test.yaml"]),
    (["rules", "test"], "empty", ["a directory without rule tests"]),
    (["rules", "test"], "fifo", ["a FIFO"]),
    (["rules", "test"], "missing", ["no such file or directory"]),
    (["rules", "test", "--rules-dir"], "empty", ["--rules-dir", "a directory without rule files"]),
    (["rules", "docs", "--rules-dir"], "empty", ["a directory without rule files"]),
    (["rules", "list", "--rules-dir"], "empty", ["a directory without rule files"]),
    (["rules", "docs", "--rules-dir"], "notes.txt", ["a file, not a rules directory"]),
    (["rules", "test", "--rules-dir"], "missing", ["rules directory does not exist"]),
]


@pytest.mark.parametrize(("command", "path", "words"), CASES, ids=[f"{' '.join(c[0][1:])}-{c[1]}" for c in CASES])
def test_wrong_kind_of_path_is_named_and_refused(place: Path, command: list[str], path: str, words: list[str]) -> None:
    assert DAM is not None
    result = subprocess.run([DAM, *command, path], capture_output=True, text=True, cwd=place, timeout=60)
    assert result.returncode == 2, result.stdout[-500:] + result.stderr[-500:]
    assert "Traceback" not in result.stderr and "clean" not in result.stdout
    for word in words:
        assert word in result.stderr, result.stderr
    assert path in result.stderr


def test_a_yaml_file_that_is_not_a_rule_file_is_an_error(place: Path) -> None:
    assert DAM is not None
    (place / "config.yaml").write_text("a: 1\n")
    result = subprocess.run([DAM, "rules", "lint", "--no-tests", "config.yaml"], capture_output=True, text=True,
                            cwd=place, timeout=60)
    assert result.returncode == 2 and "config.yaml:1" in result.stdout and "clean" not in result.stdout
