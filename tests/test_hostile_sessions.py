"""Consultation sessions under hostile conditions (issue 21): concurrent runs, Ctrl-C right after Enter, a planted
symlink. No submitted answer is lost and no write follows a symlink the user did not name."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from expert import Consultation
from expert.commands.consult import default_session_path, interrupts_deferred, save

ROOT = Path(__file__).resolve().parent.parent


def _state_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "COLUMNS": "200"}


def test_a_planted_tmp_symlink_is_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    session = tmp_path / "s.json"
    for name in (session.name + ".tmp", f".{session.name}.tmp"):
        (tmp_path / name).symlink_to(victim)
    c = Consultation()
    c.answer("workload", "training")
    save(c, session)
    assert victim.read_text() == "precious\n"
    assert Consultation.from_json(session.read_text()).answers == {"workload": "training"}
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()]


def test_default_session_paths_never_collide(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    with ThreadPoolExecutor(8) as pool:
        paths = list(pool.map(lambda _: default_session_path(), range(400)))
    assert len(set(paths)) == 400 and all(p.exists() for p in paths)


def test_concurrent_consultations_keep_their_own_answers(tmp_path: Path) -> None:
    env = _state_env(tmp_path)
    jobs = ["training", "inference", "llm-decode", "llm-prefill"]
    procs = [subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "consult"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in jobs]
    for proc, job in zip(procs, jobs, strict=True):
        assert proc.stdin is not None
        proc.stdin.write(f"{job}\nquit\n")
        proc.stdin.close()
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    files = sorted((tmp_path / "state" / "dam-expert").glob("consult-*.json"))
    assert len(files) == 4
    kinds = sorted(Consultation.from_json(f.read_text()).answers.get("workload", "?") for f in files)
    assert kinds == sorted(["training", "inference", "inference", "inference"])  # decode/prefill are inference


def test_ctrl_c_while_an_answer_is_recorded_waits_until_it_is_saved(tmp_path: Path) -> None:
    session = tmp_path / "s.json"
    c = Consultation()
    with pytest.raises(KeyboardInterrupt), interrupts_deferred():
        os.kill(os.getpid(), signal.SIGINT)  # arrives mid-recording
        c.answer("workload", "training")
        save(c, session)
    assert Consultation.from_json(session.read_text()).answers == {"workload": "training"}


def test_enter_then_ctrl_c_keeps_the_submitted_answer(tmp_path: Path) -> None:
    pexpect = pytest.importorskip("pexpect")
    env = _state_env(tmp_path)
    for attempt in range(6):
        session = tmp_path / f"s{attempt}.json"
        child = pexpect.spawn(sys.executable, [str(ROOT / "cli.py"), "consult", "--save", str(session)],
                              env=env, encoding="utf-8", timeout=60)
        try:
            child.expect("> ")
            child.sendline("training")
            child.sendintr()  # Ctrl-C in the same instant
            child.expect(pexpect.EOF)
        finally:
            child.close()
        answers = Consultation.from_json(session.read_text()).answers
        assert answers == {"workload": "training"}, f"attempt {attempt}: {answers}"


@pytest.mark.parametrize("tail", ["", "\nall\n"], ids=["endless-line", "long-line-then-more"])
def test_an_endless_stdin_line_is_refused_without_reading_it_all(tmp_path: Path, tail: str) -> None:
    """One endless line on stdin used to be read whole (2 GB) before anything was said."""
    from expert.commands.consult import MAX_ANSWER_BYTES

    env = _state_env(tmp_path)
    data = ("x" * (MAX_ANSWER_BYTES * 32) + tail).encode()
    result = subprocess.run([sys.executable, str(ROOT / "cli.py"), "consult"], input=data, capture_output=True,
                            env=env, timeout=60)
    stderr = result.stderr.decode()
    assert result.returncode == 2, stderr
    assert "Traceback" not in stderr and "standard input" in stderr and "KiB" in stderr


def _tampered(edit: Any) -> str:
    c = Consultation()
    c.answer("workload", "training")
    c.answer("gpu_util", "unknown")
    data = json.loads(c.to_json())
    edit(data["turns"])
    return json.dumps(data)


# (case id, edit of the saved turns, words the error must contain)
BAD_RESUMES = [
    ("closes-an-unknown-fact", lambda turns: turns[1]["closes"].append("no_such_fact"), ["'no_such_fact'", "askable"]),
    ("closes-a-derived-fact", lambda turns: turns[1]["closes"].append("mfu_gap"), ["askable"]),
    ("answers-and-closes", lambda turns: turns[0]["closes"].append("workload"), ["marks it unknown"]),
]


@pytest.mark.parametrize(("case", "edit", "needles"), BAD_RESUMES, ids=[b[0] for b in BAD_RESUMES])
def test_a_resume_file_closing_facts_it_cannot_is_refused(case: str, edit: Any, needles: list[str]) -> None:
    from expert.errors import ObservationError

    with pytest.raises(ObservationError) as info:
        Consultation.from_json(_tampered(edit))
    for needle in needles:
        assert needle in str(info.value), str(info.value)


def test_an_honest_resume_file_still_loads() -> None:
    c = Consultation.from_json(_tampered(lambda turns: None))
    assert c.answers.get("workload") == "training"


@pytest.mark.parametrize("delay", [0.2, 0.6, 1.5])
def test_ctrl_c_at_any_moment_of_a_diagnosis_is_a_clean_exit(tmp_path: Path, delay: float) -> None:
    """SIGINT while the CLI imports, builds the durable ruleset or diagnoses: 'interrupted', exit 130, within a
    second (the 500-value `in` build used to ignore it), or a normal finish when it was already done."""
    import time

    rules = tmp_path / "rules"
    rules.mkdir()
    values = ", ".join(str(v) for v in range(500))
    (rules / "team.yaml").write_text("schema_version: 1\nrules:\n  - id: team-in\n    title: t\n    source: s\n"
                                     f"    rationale: r\n    when: {{fact: batch_size, in: [{values}]}}\n"
                                     "    then: {finding: {id: in_hit, message: m}}\n")
    child = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "diagnose", "--set", "batch_size=8",
                              "--rules-dir", str(rules), "--engine", "durable"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=_state_env(tmp_path))
    time.sleep(delay)
    child.send_signal(signal.SIGINT)
    sent = time.monotonic()
    _, err = child.communicate(timeout=30)
    assert time.monotonic() - sent < 5
    assert "Traceback" not in err
    assert child.returncode in (0, 130), err
    if child.returncode == 130:
        assert "interrupted" in err
