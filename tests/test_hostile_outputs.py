"""Hostile rules and outputs (issues 21, 22): thresholds that are not numbers, format widths that allocate gigabytes,
outputs that cannot be written, and terminal control sequences in user text.

Every case runs the real CLI in a subprocess with a time limit: exit 2 with a message naming the input and what is
accepted, or exit 0 with the right output; never a traceback. Extend the tables.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "telemetry"
DAM = shutil.which("dam", path=str(Path(sys.executable).parent)) or shutil.which("dam")
pytestmark = pytest.mark.skipif(DAM is None, reason="the dam console script is not installed (pip install -e .)")


def _dam(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert DAM is not None
    return subprocess.run([DAM, *args], capture_output=True, text=True, cwd=cwd, timeout=60, input=stdin)


def _rule(when: str, message: str = "m", title: str = "t") -> str:
    return f"""schema_version: 1
rules:
  - id: team-hostile
    title: "{title}"
    source: s
    rationale: r
    severity: warning
    when: {when}
    then: {{finding: {{id: hostile, message: "{message}"}}}}
"""


# (rule file text, words the load error must contain)
BAD_RULES = [
    (_rule("{fact: gpu_util, lt: .nan}"), ["team-hostile", "when.fact.lt", "NaN and infinity"]),
    (_rule("{fact: gpu_util, lt: .inf}"), ["team-hostile", "when.fact.lt", "NaN and infinity"]),
    (_rule("{fact: gpu_util, ge: -.inf}"), ["team-hostile", "when.fact.ge", "NaN and infinity"]),
    (_rule("{fact: gpu_util, in: [0.1, .nan]}"), ["team-hostile", "when.fact.in.1", "NaN and infinity"]),
    (_rule("{fact: batch_size, gt: " + "9" * 400 + "}"), ["team-hostile", "400-digit number", "64-bit float"]),
    (_rule("{fact: batch_size, in: [1, -" + "9" * 400 + "]}"), ["team-hostile", "400-digit number"]),
    (_rule("{fact: gpu_util, lt: 0.5}", "x {gpu_util:200000000} y"), ["{gpu_util:200000000}", "over 200"]),
    (_rule("{fact: gpu_util, lt: 0.5}", "x {gpu_util:.99999f} y"), ["{gpu_util:.99999f}", "over 200"]),
    (_rule("{fact: gpu_util, lt: 0.5}", "x {gpu_util:>{gpu_util}} y"), ["another placeholder"]),
    (_rule("{fact: gpu_util, lt: 0.5}", r"msg \e[2J"), ["message", "U+001B"]),
    (_rule("{fact: gpu_util, lt: 0.5}", title=r"t \e]0;owned\a"), ["title", "U+001B"]),
]


@pytest.mark.parametrize("engine", ["durable", "pure"])
@pytest.mark.parametrize(("text", "needles"), BAD_RULES, ids=[n[0] for _, n in BAD_RULES])
def test_bad_rule_values_are_load_errors_naming_file_and_rule(tmp_path: Path, engine: str, text: str,
                                                              needles: list[str]) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "team.yaml").write_text(text)
    if engine == "durable":
        pytest.importorskip("durable")
    result = _dam("diagnose", "--set", "gpu_util=40%", "--rules-dir", str(rules), "--engine", engine, cwd=tmp_path)
    assert result.returncode == 2, (result.stdout[-300:], result.stderr)
    assert "Traceback" not in result.stderr
    assert "team.yaml" in result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


@pytest.mark.parametrize(("text", "needles"), BAD_RULES, ids=[n[0] for _, n in BAD_RULES])
def test_lint_reports_bad_rule_values_at_their_line(tmp_path: Path, text: str, needles: list[str]) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "team.yaml").write_text(text)
    result = _dam("rules", "lint", str(rules), cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stdout + result.stderr
    assert "DAM002" in result.stdout and "team.yaml:" in result.stdout
    assert needles[-1] in result.stdout, result.stdout


def test_a_reasonable_format_spec_still_renders(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "team.yaml").write_text(_rule("{fact: gpu_util, lt: 0.5}", "util {gpu_util:>8.1%} low"))
    result = _dam("diagnose", "--set", "gpu_util=40%", "--rules-dir", str(rules), "--format", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "util    40.0% low" in result.stdout


# (kind of unwritable output, words the error must contain)
TARGETS = [("missing-folder", ["does not exist"]), ("directory", ["is a directory"]),
           ("full-disk", ["No space left"])]
COMMANDS = [
    ("ingest", ["ingest", str(FIXTURES / "nvidia_smi_query.csv"), "--as", "json", "--output"], ".json"),
    ("ingest-yaml", ["ingest", str(FIXTURES / "nvidia_smi_query.csv"), "--as", "yaml", "--output"], ".yaml"),
    ("ingest-rich", ["ingest", str(FIXTURES / "nvidia_smi_query.csv"), "--as", "rich", "--output"], ".txt"),
    ("diagnose", ["diagnose", "--example", "healthy_training", "--format", "json", "--output"], ".json"),
    ("export-markdown", ["diagnose", "--example", "healthy_training", "--export", "markdown", "--output"], ".md"),
    ("export-graphml", ["diagnose", "--example", "healthy_training", "--export", "graphml", "--output"], ".graphml"),
    ("schema", ["schema", "report", "--output"], ".json"),
    ("plot", ["plot", "roofline", "--example", "healthy_training", "--output"], ".svg"),
]


def _target(tmp_path: Path, kind: str, suffix: str) -> str:
    if kind == "missing-folder":
        return f"missing/out{suffix}"
    if kind == "directory":
        (tmp_path / f"out{suffix}").mkdir()
        return f"out{suffix}"
    full = Path("/dev/full")
    if not full.exists():
        pytest.skip("no /dev/full on this system")
    link = tmp_path / f"full{suffix}"  # the output's name carries the suffix; writes land on /dev/full
    link.symlink_to(full)
    return link.name


@pytest.mark.parametrize(("kind", "needles"), TARGETS, ids=[t for t, _ in TARGETS])
@pytest.mark.parametrize(("name", "args", "suffix"), COMMANDS, ids=[c for c, _, _ in COMMANDS])
def test_an_output_that_cannot_be_written_is_exit_2(tmp_path: Path, name: str, args: list[str], suffix: str,
                                                    kind: str, needles: list[str]) -> None:
    target = _target(tmp_path, kind, suffix)
    result = _dam(*args, target, cwd=tmp_path)
    assert result.returncode == 2, (result.stdout[-300:], result.stderr)
    assert "Traceback" not in result.stderr
    assert "cannot write the output" in result.stderr or "cannot draw" in result.stderr, result.stderr
    assert "invalid observations" not in result.stderr
    assert target in result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


@pytest.mark.parametrize(("name", "fmt"), [("run.json", '"observations"'), ("run.yaml", "observations:"),
                                           ("run.txt", "Observations")])
def test_ingest_output_without_as_follows_the_file_name(tmp_path: Path, name: str, fmt: str) -> None:
    """`dam ingest x --output run.json` used to print the table and write nothing (exit 0)."""
    result = _dam("ingest", str(FIXTURES / "nvidia_smi_query.csv"), "--output", name, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert fmt in (tmp_path / name).read_text()


def test_the_terminal_console_prints_no_emoji_for_colon_codes() -> None:
    """`:name:` in text printed as a string (a kernel or namespace name like `c10::cd::copy`) stays as written."""
    import io

    from expert.report.render.console import SafeConsole

    out = io.StringIO()
    SafeConsole(file=out, width=80).print("c10::cd::copy :fire:")
    assert out.getvalue() == "c10::cd::copy :fire:\n"


ANSI = ["\x1b[2J", "\x1b]0;owned\x07", "\x1b[31m", "\x9b31m"]


@pytest.mark.parametrize("seq", ANSI, ids=[repr(s) for s in ANSI])
def test_control_sequences_in_a_description_never_reach_the_terminal(tmp_path: Path, seq: str) -> None:
    import json

    data = {"description": f"job {seq}evil", "observations": {"gpu_util": "45%", "data_wait_s": "120 ms",
                                                            "step_time_s": "300 ms"}}
    (tmp_path / "obs.json").write_text(json.dumps(data))
    for extra in ([], ["--output", "report.txt"]):
        result = _dam("diagnose", "obs.json", *extra, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        shown = (tmp_path / "report.txt").read_text() if extra[:1] == ["--output"] else result.stdout
        assert "evil" in shown
        assert seq not in shown and seq[0] not in shown.replace("\x1b[", "")  # rich's own styling is CSI only
        assert "\\x" in shown


@pytest.mark.parametrize("seq", ANSI, ids=[repr(s) for s in ANSI])
def test_control_sequences_in_a_device_name_never_reach_the_terminal(tmp_path: Path, seq: str) -> None:
    text = (FIXTURES / "nvidia_smi_query.csv").read_text().replace("NVIDIA H100 80GB HBM3", f"H100{seq}x", 1)
    (tmp_path / "smi.csv").write_text(text)
    result = _dam("ingest", "smi.csv", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert seq not in result.stdout and "\\x" in result.stdout


def test_control_sequences_in_an_error_are_escaped(tmp_path: Path) -> None:
    result = _dam("diagnose", "--set", "description_is_not_a_fact\x1b[2J=1", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "\x1b" not in result.stderr


@pytest.mark.parametrize("depth", [150, 300])
def test_deeply_nested_rule_locations_stay_short(tmp_path: Path, depth: int) -> None:
    """Rule locations nested past ~255 levels printed over 1,000 characters (issue 22)."""
    when = "{fact: gpu_util, lt: .nan}"
    for _ in range(depth):
        when = "{not: " + when + "}"
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "team.yaml").write_text(_rule(when))
    for args in (["diagnose", "--set", "gpu_util=50%", "--rules-dir", "rules"], ["rules", "lint", "rules"]):
        result = _dam(*args, cwd=tmp_path)
        out = result.stdout + result.stderr
        assert result.returncode == 2 and "Traceback" not in out and "team.yaml" in out
        assert max(len(line) for line in out.splitlines()) < 300, out[:2000]
