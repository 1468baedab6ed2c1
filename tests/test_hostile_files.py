"""Hostile observation, rule and knowledge-base files (issue 21): each is read right or refused with a message naming
the file (and the line where there is one) and what is accepted; never a traceback, never a hang, never a silently
different value. Every case runs the real CLI in a subprocess with a time limit. Extend the table."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

DAM = shutil.which("dam", path=str(Path(sys.executable).parent)) or shutil.which("dam")
pytestmark = pytest.mark.skipif(DAM is None, reason="the dam console script is not installed (pip install -e .)")

LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, n in zip("abcdefgh", "bcdefghi", strict=True))
LAUGHS += "gpu_util: *i\n"

# (file name, content, words the error must contain)
REFUSED: list[tuple[str, str | bytes, list[str]]] = [
    ("dup.yaml", "gpu_util: 0.5\nstep_time_s: 0.3\ngpu_util: 0.9\n", ["duplicate key 'gpu_util'", "dup.yaml:3"]),
    ("dup.json", '{"gpu_util": 0.5, "gpu_util": 0.9}', ["duplicate key 'gpu_util'"]),
    ("nullkey.yaml", "~: 0.5\n", ["is not a name"]),
    ("intkey.yaml", "42: 0.5\n", ["the key 42 is not a name"]),
    ("laughs.yaml", LAUGHS, ["expands to more than"]),
    ("deep.yaml", "gpu_util: " + "[" * 5000 + "]" * 5000 + "\n", ["nest"]),
    ("deep.json", '{"gpu_util": ' + "[" * 100000 + "]" * 100000 + "}", ["nested"]),
    ("digits.yaml", "batch_size: " + "9" * 400 + "\n", ["400-digit number"]),
    ("limit.yaml", "batch_size: " + "9" * 5000 + "\n", ["invalid value"]),
    ("utf16.json", '{"gpu_util": 0.5}'.encode("utf-16"), ["not UTF-8"]),
]


def _dam(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert DAM is not None
    return subprocess.run([DAM, *args], capture_output=True, text=True, cwd=cwd, timeout=60)


@pytest.mark.parametrize(("name", "content", "needles"), REFUSED, ids=[c[0] for c in REFUSED])
def test_hostile_observation_files_are_refused_clearly(tmp_path: Path, name: str, content: str | bytes,
                                                       needles: list[str]) -> None:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    result = _dam("diagnose", name, "--format", "json", cwd=tmp_path)
    assert result.returncode == 2, (result.stdout[:300], result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    assert name in result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


def test_a_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "bom.yaml").write_bytes("\ufeffgpu_util: 45%\ndata_wait_s: 120 ms\nstep_time_s: 300 ms\n".encode())
    result = _dam("diagnose", "bom.yaml", "--format", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert '"bottleneck": "input"' in result.stdout


@pytest.mark.parametrize("target", [".", "missing.yaml"])
def test_a_directory_or_a_missing_file_says_what_it_is(tmp_path: Path, target: str) -> None:
    result = _dam("diagnose", target, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert ("directory" if target == "." else "no such file") in result.stderr


def test_an_oversized_file_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with path.open("w") as fh:
        fh.write("gpu_util: 0.5\nnotes:\n")
        line = "  - " + "x" * 1000 + "\n"
        fh.write(line * (33 * 1024))  # 33 MiB
    result = _dam("diagnose", "big.yaml", cwd=tmp_path)
    assert result.returncode == 2 and "MiB" in result.stderr and "Traceback" not in result.stderr


def test_a_duplicate_key_in_a_rule_file_is_refused(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text("schema_version: 1\nrules: []\nrules: []\n")
    result = _dam("diagnose", "--set", "gpu_util=50%", "--rules-dir", str(rules), cwd=tmp_path)
    assert result.returncode == 2 and "duplicate key 'rules'" in result.stderr and "Traceback" not in result.stderr


HOSTILE_RULES = """schema_version: 1
rules:
  - id: team-hostile-text
    title: "Title <img src=x onerror=alert(1)> [/x]"
    source: "<script>alert(1)</script>"
    rationale: r
    severity: warning
    when: {fact: gpu_util, lt: 0.5}
    then: {finding: {id: hostile, message: "[/x] <script>alert(2)</script> [bold]loud[/bold]"}}
"""


def test_rule_text_is_text_in_every_format(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "team.yaml").write_text(HOSTILE_RULES)
    base = ("diagnose", "--set", "gpu_util=40%", "--rules-dir", str(rules))
    terminal = _dam(*base, cwd=tmp_path)
    assert terminal.returncode == 0, terminal.stderr  # "[/x]" used to crash the terminal view (MarkupError)
    assert "[/x]" in terminal.stdout and "[bold]loud[/bold]" in terminal.stdout
    markdown = _dam(*base, "--format", "markdown", cwd=tmp_path)
    assert markdown.returncode == 0, markdown.stderr
    prose = re.sub(r"(?ms)^(`{3,})[^\n]*\n.*?^\1$", "", markdown.stdout)  # code blocks show text as is
    assert "<script>" not in prose and "<img" not in prose
    assert "&lt;script>alert(2)" in prose
    html = _dam(*base, "--export", "html", cwd=tmp_path)
    assert html.returncode == 0, html.stderr
    assert "<script>alert" not in html.stdout and "<img src=x" not in html.stdout


# (the after side, the text `dam compare` must print as is): a team rule's title on a new finding, a text fact's value
BEFORE = "gpu_util: 80%\nstep_time_s: 300 ms\ntop_op: aten::mm\n"
COMPARED = [
    (BEFORE.replace("80%", "40%"), "Title <img src=x onerror=alert(1)> [/x]"),
    (BEFORE.replace("aten::mm", '"[/x] [red]"'), "[/x] [red]"),
]


@pytest.mark.parametrize(("after", "shown"), COMPARED, ids=["finding title", "text fact"])
def test_rule_and_fact_text_is_text_in_compare(tmp_path: Path, after: str, shown: str) -> None:
    """`dam compare` prints a new finding's title and a text fact's values as text: "[/x]" used to end the terminal
    view in a rich MarkupError traceback."""
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "team.yaml").write_text(HOSTILE_RULES)
    (tmp_path / "before.yaml").write_text(BEFORE)
    (tmp_path / "after.yaml").write_text(after)
    result = _dam("compare", "before.yaml", "after.yaml", "--rules-dir", str(rules), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and shown in result.stdout


NAMED_CONDITION_RULES = """schema_version: 1
conditions:
  "low[/x] [red]":
    description: the GPU or its SMs are idle half the time
    when:
      any:
        - {fact: gpu_util, lt: 0.5}
        - {fact: sm_active, lt: 0.5}
rules:
  - id: team-low
    title: t
    source: s
    rationale: r
    severity: warning
    when: {ref: "low[/x] [red]"}
    then: {finding: {id: team_low, message: m}}
"""


def test_a_named_condition_is_text_in_rule_tests(tmp_path: Path) -> None:
    """A named condition's name is a rule file's key, never checked: `dam rules test` prints it (its coverage row,
    its untested branch) as text. "[/x]" in it used to end the command in a rich MarkupError traceback."""
    rules = tmp_path / "rules"
    (rules / "tests").mkdir(parents=True)
    (rules / "team.yaml").write_text(NAMED_CONDITION_RULES)
    (rules / "tests" / "team.test.yaml").write_text(
        "schema_version: 1\nrule_file: team.yaml\ncases:\n  - name: fires\n    rule: team-low\n"
        "    facts: {gpu_util: 40%}\n    expect: {fired: [team-low]}\n")
    result = _dam("rules", "test", "--rules-dir", str(rules), cwd=tmp_path)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr
    assert "untested branch low[/x] [red]: when.any[1]" in result.stdout
    assert "low[/x] [red]" in result.stdout.split("Named conditions used by these rules", 1)[1]


def test_an_example_name_is_never_a_path(tmp_path: Path) -> None:
    for name in ("/etc/passwd", "../examples/healthy_training", "healthy_training/../../x"):
        result = _dam("diagnose", "--example", name, cwd=tmp_path)
        assert result.returncode == 2 and "no such bundled example" in result.stderr
        assert "root:" not in result.stdout


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _loop(path: Path) -> None:
    (path.parent / "other").symlink_to(path.name)
    path.symlink_to("other")


def _dangling(path: Path) -> None:
    path.symlink_to("nowhere.yaml")


def _gzip_of_nothing(path: Path) -> None:
    path.write_bytes(gzip.compress(b""))


def _utf16(path: Path) -> None:
    path.write_bytes('{"traceEvents": []}'.encode("utf-16"))


def _utf16_le_no_bom(path: Path) -> None:
    path.write_bytes("timestamp, index, name\n".encode("utf-16-le"))


# (input name, how it is made, commands to run with {} for its name, words the error must contain, words it must not)
MISLEADING: list[tuple[str, Any, list[str], list[str], list[str]]] = [
    ("fifo.yaml", _fifo, ["diagnose"], ["a FIFO"], ["no such file"]),
    ("fifo.json", _fifo, ["ingest"], ["a FIFO", "standard input"], ["no such file"]),
    ("loop.yaml", _loop, ["diagnose"], ["symlink loop"], ["no such file"]),
    ("loop.json", _loop, ["ingest"], ["symlink loop"], ["no such file"]),
    ("dangling.yaml", _dangling, ["diagnose"], ["broken symlink", "nowhere.yaml"], []),
    ("empty.json.gz", _gzip_of_nothing, ["ingest"], ["holds no data when decompressed"], ["the file is empty"]),
    ("utf16.json", _utf16, ["ingest"], ["UTF-16", "iconv"], ["binary data"]),
    ("utf16le.csv", _utf16_le_no_bom, ["ingest"], ["UTF-16"], ["binary data"]),
    ("utf16obs.json", _utf16, ["diagnose"], ["UTF-16", "iconv"], []),
]


@pytest.mark.parametrize(("name", "make", "command", "needles", "absent"), MISLEADING, ids=[m[0] for m in MISLEADING])
def test_inputs_that_are_not_files_say_what_they_are(tmp_path: Path, name: str, make: Any, command: list[str],
                                                     needles: list[str], absent: list[str]) -> None:
    make(tmp_path / name)
    result = _dam(*command, name, cwd=tmp_path)
    assert result.returncode == 2, result.stdout[-300:] + result.stderr
    assert "Traceback" not in result.stderr and name in result.stderr
    assert "invalid observations" not in result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr
    for word in absent:
        assert word not in result.stderr, result.stderr


# (--set given, words the error must contain, words it must not)
NUMBERS = [
    ("step_time_s=1e309", ["'1e309'", "too large", "1.8e308"], ["NaN"]),
    ("step_time_s=-1e309", ["too large"], ["NaN"]),
    ("batch_size=" + "9" * 400, ["400-digit number", "too large"], ["NaN"]),
    ("gpu_util=0,5", ["decimals with a point"], ["did you mean", "5%"]),
    ("step_time_s=0,5", ["decimals with a point"], ["did you mean"]),
]


@pytest.mark.parametrize(("given", "needles", "absent"), NUMBERS, ids=[n[0][:24] for n in NUMBERS])
def test_numbers_out_of_range_say_why(tmp_path: Path, given: str, needles: list[str], absent: list[str]) -> None:
    result = _dam("diagnose", "--set", given, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr
    for word in absent:
        assert word not in result.stderr, result.stderr


def test_standard_input_given_twice_says_so(tmp_path: Path) -> None:
    assert DAM is not None
    result = subprocess.run([DAM, "ingest", "-", "-"], input="", capture_output=True, text=True, cwd=tmp_path,
                            timeout=60)
    assert result.returncode == 2 and "given 2 times" in result.stderr and "empty" not in result.stderr


def test_a_rules_dir_that_is_a_file_says_so(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text("schema_version: 1\nrules: []\n")
    result = _dam("diagnose", "--set", "gpu_util=50%", "--rules-dir", "rules.yaml", cwd=tmp_path)
    assert result.returncode == 2 and "a file, not a rules directory" in result.stderr
    assert "does not exist" not in result.stderr


def test_option_errors_are_not_titled_invalid_observations(tmp_path: Path) -> None:
    result = _dam("consult", "--export", "markdown", cwd=tmp_path)
    assert result.returncode == 2 and "invalid option" in result.stderr
    assert "invalid observations" not in result.stderr
