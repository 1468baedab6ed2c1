"""`dam compare`: output formats, the names tools bind to, exit codes 0/1/2, and errors without tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import cli
import expert
from expert.compare import Comparison

FIXTURES = Path(__file__).parent / "fixtures" / "telemetry"
TRACE = str(FIXTURES / "kineto_two_steps.json")
DCGM = str(FIXTURES / "dcgmi_dmon.txt")
BEFORE = {"hardware": "h100-sxm", "dtype": "bf16", "workload": "training", "batch_size": 256, "num_workers": 0,
          "gpu_util": "45%", "host_cpu_util": "30%", "step_time_s": "300 ms", "data_wait_s": "120 ms", "flops": 3.1e12}
AFTER = {**BEFORE, "num_workers": 8, "data_wait_s": "5 ms", "step_time_s": "240 ms", "gpu_util": "56%"}


@pytest.fixture()
def pair(tmp_path: Path) -> tuple[str, str]:
    a, b = tmp_path / "before.yaml", tmp_path / "after.yaml"
    a.write_text(yaml.safe_dump({"observations": BEFORE}), encoding="utf-8")
    b.write_text(yaml.safe_dump({"observations": AFTER}), encoding="utf-8")
    return str(a), str(b)


def test_json_carries_the_binding_names(pair: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["compare", *pair, "--format", "json"]) == 0
    out = capsys.readouterr().out
    data = json.loads(out)
    for key in ("before", "after", "facts", "findings_new", "findings_cleared", "breakdown_delta", "gate"):
        assert key in data
    for side in ("before", "after"):
        assert {"bottleneck", "axes", "step_time_s"} <= set(data[side])
    assert data["before"]["bottleneck"] == "input" and data["before"]["step_time_s"] == 0.3
    assert all({"name", "before", "after", "change", "significant"} <= set(f) for f in data["facts"])
    assert set(data["gate"]) >= {"passed", "failed"} and data["gate"] == {"passed": True, "failed": [],
                                                                         "conditions": []}
    assert Comparison.model_validate_json(out).to_json() + "\n" == out  # lossless


def test_a_held_condition_exits_1_with_the_reason(pair: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["compare", *pair, "--format", "json", "--fail-if", "step_time_s > +5%",
                     "--fail-if", "verdict changed"])
    captured = capsys.readouterr()
    assert code == 1
    gate = json.loads(captured.out)["gate"]
    assert gate["passed"] is False and len(gate["failed"]) == 1 and gate["failed"][0].startswith("verdict changed")
    assert "dam compare: gate failed: verdict changed: verdict input →" in captured.err
    assert cli.main(["compare", *pair, "--fail-if", "step_time_s > +5%"]) == 0
    assert "regression gate" in capsys.readouterr().out


def test_markdown_for_a_pull_request(pair: tuple[str, str], tmp_path: Path) -> None:
    out = tmp_path / "comment.md"
    assert cli.main(["compare", *pair, "--format", "markdown", "--output", str(out),
                     "--fail-if", "step_time_s < -5%"]) == 1
    text = out.read_text(encoding="utf-8")
    assert text.startswith("### dam compare: before → after")
    assert "**Gate: failed**" in text and "step time 300 ms → 240 ms: 1.25× faster (beyond its noise); MFU" in text
    assert "| `more_dataloader_workers` | **matches** | ≤ 1.67× | 1.25× (37% of it) |" in text
    assert "<details>" in text


def test_rich_terminal_by_default(pair: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["compare", *pair]) == 0
    out = capsys.readouterr().out
    assert "dam compare: before → after" in out and "1.25× faster" in out
    assert "more_dataloader_workers (matches)" in out and "data_starved" in out


@pytest.mark.parametrize("columns", [60, 80, 130])
def test_fact_names_and_changes_stay_whole_at_any_width(columns: int, pair: tuple[str, str], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """At 80 columns the fact names were cut (`gpu_idle_gap_…`) and a text value (operator names) pushed the change
    column off the table: names and changes are never cut, a text value wraps, and below 110 columns how a fact
    was judged goes under its name."""
    before, after = (yaml.safe_load(Path(p).read_text()) for p in pair)
    before["observations"]["idle_host_ops"] = "aten::copy_, aten::resize_ and aten::empty"
    after["observations"]["idle_host_ops"] = "aten::cudnn_convolution_backward and aten::add_"
    before["observations"]["unattributed_idle_frac"], after["observations"]["unattributed_idle_frac"] = 0.005, 0.027
    for path, data in zip(pair, (before, after), strict=True):
        Path(path).write_text(yaml.safe_dump(data), encoding="utf-8")
    monkeypatch.setenv("COLUMNS", str(columns))
    assert cli.main(["compare", *pair]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= columns
    words = {word for line in lines for word in line.split()}
    assert {"unattributed_idle_frac", "idle_host_ops", "data_wait_s", "-95.8%", "+440.0%", "changed"} <= words
    assert any(line.lstrip().startswith("per-step") or "per-step" in line for line in lines) or any(
        "no spread known" in line for line in lines)  # how each fact was judged, beside it or under it
    assert ("fact (how judged)" in " ".join(lines)) == (columns < 110)


def test_sets_of_files_per_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    extra = tmp_path / "extra.yaml"
    extra.write_text("batch_size: 512\n", encoding="utf-8")
    assert cli.main(["compare", "--before", TRACE, DCGM, "--after", TRACE, DCGM, str(extra), "--format",
                     "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["before"]["source"] == "kineto_two_steps.json, dcgmi_dmon.txt"
    assert data["before"]["kind"] == "trace"
    names = {f["name"]: f for f in data["facts"]}
    assert names["sm_active"]["before"] == names["sm_active"]["after"]  # from the DCGM log
    assert names["batch_size"]["after"] == 512 and names["batch_size"]["before"] is None


def test_a_saved_report_against_a_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report.json"
    assert cli.main(["diagnose", "--from", TRACE, "--format", "json", "--output", str(report)]) == 0
    capsys.readouterr()
    assert cli.main(["compare", str(report), TRACE, "--format", "json", "--fail-if", "step_time_s changed"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["before"]["kind"] == "report" and data["after"]["kind"] == "trace"
    assert not any(f["significant"] for f in data["facts"])  # the same run, read two ways
    step = next(f for f in data["facts"] if f["name"] == "step_time_s")
    assert step["basis"].startswith("per-step spread, 2 vs 2 steps")  # the report kept the provenance detail


@pytest.mark.parametrize(("argv", "needles"), [
    (["compare", "a.yaml"], ["after: missing"]),
    (["compare"], ["before: missing"]),
    (["compare", "nope.yaml", "nope2.yaml"], ["before: nope.yaml: no such file"]),
    (["compare", "x", "y", "--fail-if", "step_time_s >> 5"], ["invalid --fail-if condition", "column 14"]),
    (["compare", "x", "y", "--fail-if", "gpu_utilisation < 50%"], ["unknown fact 'gpu_utilisation'"]),
    (["compare", "x", "--before", "y", "z"], ["before: given twice, as A and with --before"]),
    (["compare", TRACE, TRACE, "--steps", "9:12"], ["no ProfilerStep spans in the selected range"]),
])
def test_bad_input_exits_2_with_a_clear_message(argv: list[str], needles: list[str], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.yaml").write_text("gpu_util: 50%\n", encoding="utf-8")
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("dam compare: ") and "Traceback" not in err
    for needle in needles:
        assert needle in err, err


def test_help_teaches_the_condition_language(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["compare", "--help"])
    out = capsys.readouterr().out
    for needle in ("step_time_s > +5%", "relative change", "verdict changed", "new finding", "fails closed",
                   "exit codes: 0 compared", "knowledge_base/compare.yaml"):
        assert needle in " ".join(out.split()), needle


def test_the_library_and_the_command_agree(pair: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["compare", *pair, "--format", "json"]) == 0
    assert Comparison.model_validate_json(capsys.readouterr().out) == expert.compare(*pair)


def test_kernel_names_with_markup_are_printed_as_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The "Top kernels" table prints a trace's kernel names as text: "[/b]" used to end `dam compare` in a rich
    MarkupError."""
    data = json.loads(Path(TRACE).read_text())
    for event in data["traceEvents"]:
        if event.get("cat") == "kernel":
            event["name"] = "k[/b] [red]x"
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps(data))
    for event in data["traceEvents"]:
        if event.get("cat") == "kernel":
            event["dur"] = event["dur"] * 2
    after.write_text(json.dumps(data))
    assert cli.main(["compare", str(before), str(after)]) == 0
    out = capsys.readouterr().out
    assert "Top kernels" in out and "k[/b] [red]x" in out


def test_a_speed_up_beyond_the_bound_reads_the_same_in_every_format(pair: tuple[str, str],
                                                                    capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """JSON said within_bound false ("beyond the bound") while the terminal and Markdown said "(225% of it)"."""
    after = yaml.safe_load(Path(pair[1]).read_text())
    after["observations"].update({"data_wait_s": "1 ms", "step_time_s": "120 ms"})  # 2.5×, bound 1.67×
    Path(pair[1]).write_text(yaml.safe_dump(after), encoding="utf-8")
    assert cli.main(["compare", *pair, "--format", "json"]) == 0
    workers = next(p for p in json.loads(capsys.readouterr().out)["predictions"]
                   if p["id"] == "more_dataloader_workers")
    assert workers["within_bound"] is False and "beyond the bound" in workers["text"]
    assert cli.main(["compare", *pair, "--format", "markdown"]) == 0
    assert "| `more_dataloader_workers` | **matches** | ≤ 1.67× | 2.50× (beyond the bound) |" in capsys.readouterr().out
    monkeypatch.setenv("COLUMNS", "140")
    assert cli.main(["compare", *pair]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "more_dataloader_workers" in line)
    assert row.rstrip().endswith("≤ 1.67×   2.50× (beyond the bound)") and "of it" not in row


def test_rich_output_goes_to_the_file_as_plain_text(pair: tuple[str, str], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """`--output` with the default rich format printed to stdout and wrote no file; it writes plain text (no colour
    codes), as `dam diagnose --output` does."""
    out = tmp_path / "cmp.txt"
    assert cli.main(["compare", *pair, "--output", str(out), "--fail-if", "verdict changed"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "dam compare: gate failed: verdict changed" in captured.err
    text = out.read_text(encoding="utf-8")
    assert "dam compare: before → after" in text and "more_dataloader_workers (matches)" in text
    assert "✗ verdict changed: verdict input →" in text
    assert "\x1b" not in text and max(len(line) for line in text.splitlines()) <= 100
    diagnosed = tmp_path / "diagnosis.txt"
    assert cli.main(["diagnose", pair[0], "--output", str(diagnosed)]) == 0
    assert capsys.readouterr().out == "" and "\x1b" not in diagnosed.read_text(encoding="utf-8")


def test_the_gate_shows_every_condition_with_its_outcome(pair: tuple[str, str], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """With three conditions and two failing, only the two ✗ lines appeared: the passing one is shown with ✓."""
    conditions = ["--fail-if", "step_time_s > +5%", "--fail-if", "verdict changed", "--fail-if", "speedup < 2"]
    monkeypatch.setenv("COLUMNS", "120")
    assert cli.main(["compare", *pair, *conditions]) == 1
    lines = [line.strip(" │") for line in capsys.readouterr().out.splitlines()]
    gate = lines[lines.index("failed (2 of 3 conditions)"):][:4]
    assert gate[1] == "✓ step_time_s > +5%: does not hold"
    assert gate[2].startswith("✗ verdict changed: verdict input →") and gate[3] == "✗ speedup < 2: speedup 1.25×"
    comment = tmp_path / "comment.md"
    assert cli.main(["compare", *pair, *conditions, "--format", "markdown", "--output", str(comment)]) == 1
    text = comment.read_text(encoding="utf-8")
    assert "**Gate: failed** (2 of 3 conditions)\n\n- ✅ `step_time_s > +5%`: does not hold\n" in text
    assert "- ❌ `verdict changed`: verdict input →" in text and "- ❌ `speedup < 2`: speedup 1.25×\n" in text
