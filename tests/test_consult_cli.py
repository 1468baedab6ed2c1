"""`dam consult` end to end: through a real pseudo-terminal (pexpect) for prompts, why, back, Ctrl-C and resume, and
without a terminal (--answers FILE, piped stdin) for the rest. The CLI is a thin loop over `expert.Consultation`, so
the scripted tests ask the library which questions will come and answer them in that order."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pexpect
import pytest

import expert
from expert._resources import examples_dir
from expert.consult.session import Consultation, answer_from
from expert.observations.file import read_observation_file

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = examples_dir() / "data_starved_training.yaml"
FACTS = dict(read_observation_file(EXAMPLE).observations)


def _dam() -> list[str]:
    """The installed console script next to the interpreter; the checkout's cli.py if that script predates consult."""
    script = shutil.which("dam", path=str(Path(sys.executable).parent))
    if script:
        probe = subprocess.run([script, "consult", "--help"], capture_output=True, text=True, timeout=60)
        if probe.returncode == 0:
            return [script]
    return [sys.executable, str(ROOT / "cli.py")]


DAM = _dam()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "COLUMNS": "200", "PYTHONIOENCODING": "utf-8"}


def dam(*args: str, env: dict[str, str], stdin: str = "", cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DAM, *args], input=stdin, capture_output=True, text=True, env=env, timeout=120, cwd=cwd)


def script_for(facts: dict[str, Any], consultation: Consultation | None = None, limit: int = 200) -> list[str]:
    """The lines a user answering from `facts` types, in the order the consultation will ask."""
    c = consultation or Consultation()
    lines = []
    for _ in range(limit):
        q = c.next_question()
        if q is None:
            break
        raw = answer_from(q, facts, c.expert)
        if isinstance(raw, dict):  # a combined question: the member values in order, as a user types them
            raw = ", ".join(str(raw.get(name, "unknown")) for name in q.facts)
        elif isinstance(raw, list):
            raw = ", ".join(raw) or "none"
        lines.append("unknown" if raw is None else str(raw))
        c.answer(q.fact, lines[-1])
    return lines


# ---- without a terminal --------------------------------------------------------------------------------------------


def test_answers_file_runs_to_the_report(tmp_path: Path, env: dict[str, str]) -> None:
    session = tmp_path / "s.json"
    # the example and a fact no question of this session asks for (a CNN's depth: only LLM rules read num_layers)
    answers = tmp_path / "answers.yaml"
    answers.write_text(EXAMPLE.read_text() + "  num_layers: 50\n")
    facts = {**FACTS, "num_layers": 50}
    result = dam("consult", "--answers", str(answers), "--save", str(session), env=env)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Q1. What kind of job is slow?" in out and "> training" in out
    assert "Which accelerator does the job run on, in which precision" in out and "> h100-sxm, bf16" in out
    assert "unknown (not in" in out
    assert "Consultation finished after" in out and "Verdict: input" in out
    saved = Consultation.from_json(session.read_text())
    assert saved.finished and saved.answers["data_wait_s"] == pytest.approx(0.12)
    # the facts no question asked for (num_layers here) are the user's evidence all the same: recorded, shown in the
    # report and never asked for again, so the report is the one `dam diagnose` gives on the same file
    assert "not asked, taken from" in out and "num_layers = 50" in out
    assert saved.answers == expert.Expert().observations(facts).values()
    consulted, diagnosed = saved.report(), expert.diagnose(facts)
    assert consulted.bottleneck == diagnosed.bottleneck
    assert [f.id for f in consulted.findings] == [f.id for f in diagnosed.findings]
    assert not {m.fact for m in consulted.missing} & set(facts)
    diagnose_out = dam("diagnose", str(answers), env=env).stdout
    start = "─ Verdict: input ─"
    assert out[out.index(start):].split("session saved to")[0] == diagnose_out[diagnose_out.index(start):]


def test_piped_answers_end_of_input_and_resume(tmp_path: Path, env: dict[str, str]) -> None:
    lines = script_for(FACTS)
    assert len(lines) > 4
    session = tmp_path / "s.json"
    first = dam("consult", "--save", str(session), stdin="\n".join([lines[0], "why", lines[1], "status",
                                                                      lines[2]]) + "\n", env=env)
    assert first.returncode == 1, first.stderr
    assert "Why ask about" in first.stdout and "Verdict so far" in first.stdout
    assert f"resume with: dam consult --resume {session}" in first.stderr
    assert Consultation.from_json(session.read_text()).questions_asked == 3
    second = dam("consult", "--resume", str(session), stdin="\n".join(lines[3:]) + "\n", env=env)
    assert second.returncode == 0, second.stderr
    assert "Q4. " in second.stdout and "Consultation finished" in second.stdout
    resumed = Consultation.from_json(session.read_text())
    assert resumed.finished and resumed.questions_asked == len(lines)


def test_invalid_answer_is_asked_again_with_the_accepted_range(env: dict[str, str], tmp_path: Path) -> None:
    result = dam("consult", "--save", str(tmp_path / "s.json"), stdin="rendering\n\ntraining\n", env=env)
    out = result.stdout
    assert "cannot read 'rendering' as workload, phase" in out and "accepted: one of training, llm-decode" in out
    assert out.count("Q1. ") == 1 and "Q2. " in out
    assert result.returncode == 1


def test_done_shows_the_report_and_quit_leaves_a_resumable_file(tmp_path: Path, env: dict[str, str]) -> None:
    done = dam("consult", "--save", str(tmp_path / "a.json"), stdin="training\ndone\n", env=env)
    assert done.returncode == 0, done.stderr
    assert "stopped by the user" in done.stdout and "Verdict: undecided" in done.stdout
    quit_ = dam("consult", "--save", str(tmp_path / "b.json"), stdin="training\nquit\n", env=env)
    assert quit_.returncode == 0 and "resume with: dam consult --resume" in quit_.stdout
    assert Consultation.from_json((tmp_path / "b.json").read_text()).answers == {"workload": "training"}


def test_default_session_file_lives_in_the_state_directory(env: dict[str, str]) -> None:
    result = dam("consult", stdin="training\n", env=env)
    files = list((Path(env["XDG_STATE_HOME"]) / "dam-expert").glob("consult-*.json"))
    assert len(files) == 1 and str(files[0]) in result.stderr
    assert Consultation.from_json(files[0].read_text()).answers == {"workload": "training"}


@pytest.mark.parametrize("fmt", ["markdown", "json"])
def test_export_carries_the_transcript(tmp_path: Path, env: dict[str, str], fmt: str) -> None:
    target = tmp_path / f"out.{fmt}"
    result = dam("consult", "--answers", str(EXAMPLE), "--save", str(tmp_path / "s.json"), "--export", fmt,
                 "--output", str(target), env=env)
    assert result.returncode == 0, result.stderr
    text = target.read_text()
    if fmt == "markdown":
        assert "Consultation transcript" in text and "why asked:" in text and "data_wait_s" in text
    else:
        data = json.loads(text)
        turns = data["consultation"]["turns"]
        assert turns and all(t["reason"] for t in turns)
        from expert.report.render import load

        assert load(target).bottleneck == "input"


@pytest.mark.parametrize(("args", "files", "needles"), [
    (["--resume", "missing.json"], {}, ["missing.json", "no such file"]),
    (["--output", "x.md"], {}, ["--output", "needs --export"]),
    (["--answers", "bad.yaml"], {"bad.yaml": "gpu_util: 150\n"}, ["gpu_util", "above 1"]),
    (["--answers", "bad.yaml"], {"bad.yaml": "gpu_utl: 0.5\n"}, ["gpu_utl", "did you mean gpu_util"]),
    (["--resume", "other.json"], {"other.json": '{"observations": {}}'}, ["other.json", "cannot read the saved"]),
    (["--answers", "bad.yaml"], {"bad.yaml": "job: rendering\n"}, ["bad.yaml: job", "cannot read 'rendering'",
                                                               "accepted: one of training, llm-decode"]),
])
def test_bad_input_is_one_clear_message_and_exit_2(tmp_path: Path, env: dict[str, str], args: list[str],
                                                    files: dict[str, str], needles: list[str]) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    result = dam("consult", *args, env=env, cwd=tmp_path)
    assert result.returncode == 2, result.stdout
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in result.stderr


# ---- through a pseudo-terminal -------------------------------------------------------------------------------------


def spawn(args: list[str], env: dict[str, str]) -> pexpect.spawn:
    return pexpect.spawn(DAM[0], [*DAM[1:], *args], env=env, encoding="utf-8", timeout=60, dimensions=(60, 220))


def test_terminal_prompts_why_back_ctrl_c_and_resume(tmp_path: Path, env: dict[str, str]) -> None:
    session = tmp_path / "s.json"
    child = spawn(["consult", "--save", str(session)], env)
    try:
        child.expect(r"Q1\. What kind of job is slow\?")
        child.expect("llm-decode +LLM inference, generating tokens")
        child.expect("> ")
        child.sendline("why")
        child.expect("Why ask about job")
        child.expect("> ")
        child.sendline("rendering")
        child.expect("cannot read 'rendering'")
        child.expect("accepted: one of training, llm-decode")
        child.sendline("training")
        child.expect(r"Q2\. Which of these can you run")
        child.sendline("back")
        child.expect("took back: job = training")
        child.expect(r"Q1\. What kind of job")
        child.sendline("training")
        child.expect(r"Q2\. ")
        child.sendline("all")
        child.expect(r"Q3\. Which accelerator does the job run on, in which precision")
        child.sendline("h1000 bf16")
        child.expect("unknown hardware")
        child.sendline("NVIDIA H100 80GB HBM3, bf16")
        child.expect(r"Q4\. ")
        child.expect("> ")
        child.sendintr()
        child.expect("interrupted")
        child.expect(f"resume with: dam consult --resume {session}")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 130
    saved = Consultation.from_json(session.read_text())
    assert saved.answers == {"workload": "training", "hardware": "h100-sxm", "dtype": "bf16"}
    assert [t.undone for t in saved.transcript] == [True, False, False, False]

    child = spawn(["consult", "--resume", str(session)], env)
    try:
        child.expect("resuming")
        child.expect(r"Q4\. ")
        child.sendline("status")
        child.expect("Known: workload = training, hardware = h100-sxm, dtype = bf16")
        child.sendline("250 ms")  # a duration, or (when Q4 asks a count) re-asked: then a count
        kept: float = 0.25
        if child.expect([r"Q5\. ", "accepted: an integer"]) == 1:
            child.sendline("64")
            kept = 64
            child.expect(r"Q5\. ")
        child.sendline("done")
        child.expect("stopped by the user")
        child.expect("Verdict")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
    assert kept in Consultation.from_json(session.read_text()).answers.values()


def test_answers_file_may_answer_a_combined_question(tmp_path: Path, env: dict[str, str]) -> None:
    answers = tmp_path / "run.yaml"
    answers.write_text("job: llm-decode\nroof: H100 SXM bf16\nbatch_size: 1\navailable_tools: none\n")
    session = tmp_path / "s.json"
    result = dam("consult", "--answers", str(answers), "--save", str(session), env=env)
    assert result.returncode == 0, result.stderr
    assert "> llm-decode" in result.stdout and "> H100 SXM bf16" in result.stdout
    saved = Consultation.from_json(session.read_text())
    assert saved.answers == {"workload": "inference", "phase": "decode", "hardware": "h100-sxm", "dtype": "bf16",
                             "batch_size": 1}
    assert saved.report().bottleneck == "memory"


TELEMETRY = ROOT / "tests" / "fixtures" / "telemetry"


def test_from_a_trace_asks_only_what_it_leaves_open(tmp_path: Path, env: dict[str, str]) -> None:
    files = [str(TELEMETRY / "kineto_two_steps.json"), str(TELEMETRY / "dcgmi_dmon.txt")]
    answers = tmp_path / "run.yaml"
    answers.write_text("dtype: bf16\n")
    session = tmp_path / "s.json"
    result = dam("consult", "--from", *files, "--answers", str(answers), "--save", str(session), env=env)
    assert result.returncode == 0, result.stderr
    assert "gpu_util = 53.8%" in result.stdout and "sm_active = 80.8%" in result.stdout
    saved = Consultation.from_json(session.read_text())
    given = [t for t in saved.transcript if not t.asked]
    assert {t.fact for t in given} >= {"gpu_util", "step_time_s", "workload", "hardware", "sm_active"}
    assert all(t.reason.startswith("from kineto:") or t.reason.startswith("from dcgm") for t in given)
    assert not {t.fact for t in saved.transcript if t.asked} & {t.fact for t in given}
    diagnosed = dam("diagnose", "--from", *files, "--set", "dtype=bf16", "--format", "json", env=env)
    assert diagnosed.returncode == 0, diagnosed.stderr
    full = json.loads(diagnosed.stdout)
    report = saved.report()
    assert report.bottleneck == full["bottleneck"]
    assert {r.id for r in report.recommended} == {r["id"] for r in full["recommended"]}


def test_from_cannot_resume(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "s.json").write_text(Consultation().to_json())
    result = dam("consult", "--from", str(TELEMETRY / "dcgmi_dmon.txt"), "--resume", str(tmp_path / "s.json"), env=env)
    assert result.returncode == 2 and "cannot be combined with --resume" in result.stderr
    assert "Traceback" not in result.stderr


# ---- the tools question --------------------------------------------------------------------------------------------


def test_answers_file_may_name_the_available_tools(tmp_path: Path, env: dict[str, str]) -> None:
    answers = tmp_path / "run.yaml"
    answers.write_text("hardware: h100-sxm\ndtype: bf16\nworkload: training\n"
                       "available_tools: [nvidia_smi, framework_profiler]\n")
    session = tmp_path / "s.json"
    result = dam("consult", "--answers", str(answers), "--save", str(session), env=env)
    assert result.returncode == 0, result.stderr
    assert "Which of these can you run or look up?" in result.stdout
    assert "> nvidia_smi, framework_profiler" in result.stdout
    saved = Consultation.from_json(session.read_text())
    turn = next(t for t in saved.transcript if t.fact == "available_tools")
    assert turn.closes and "gpu_util" not in turn.closes and "step_time_s" not in turn.closes


def test_piped_tools_answer_is_asked_again_when_a_tool_is_unknown(tmp_path: Path, env: dict[str, str]) -> None:
    result = dam("consult", "--save", str(tmp_path / "s.json"),
                 stdin="training\nwhy\nvtune\nnvidia-SMI, DCGM\nstatus\n", env=env)
    out = result.stdout
    assert "Q2. Which of these can you run or look up?" in out
    assert "Why ask about available_tools" in out and "skips the measurements you cannot make" in out
    assert "unknown tool 'vtune'" in out and "accepted: tool ids or names" in out
    assert out.count("Q2. ") == 1 and "Q3. " in out
    assert "Tools available: " in out
    saved = Consultation.from_json((tmp_path / "s.json").read_text())
    assert saved.status().available_tools is not None and result.returncode == 1
