"""Ctrl-C ends any command within a second (issue 22): exit 130 and one line, `interrupted`, never a traceback —
also while the `dam` script is still importing the library (rich, pydantic, the rules) and while a large rule set
is compiled for durable-rules. SIGINT is sent at delays from 0.02 s to 1 s after start to the same console script
pip writes (`from expert.commands import main`). A signal that lands before the script's first line (Python's own
start-up, the script's `import re`) is Python's: then no frame of this project may be in the traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DELAYS = [0.02, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0]

SCRIPT = f"""#!{sys.executable}
import re
import sys
from expert.commands import main
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit(main())
"""


@pytest.fixture(scope="module")
def dam(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bin") / "dam"
    path.write_text(SCRIPT)
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def big_rules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sys.path.insert(0, str(Path(__file__).parent))
    from test_durable_scale import generate

    directory = tmp_path_factory.mktemp("rules")
    (directory / "gen.yaml").write_text(generate(1000))
    return directory


def _interrupt(command: list[str], delay: float) -> tuple[int, str, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    time.sleep(delay)
    sent = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"{command[1:]} ignored SIGINT at {delay} s")
    return proc.returncode, err, time.perf_counter() - sent


COMMANDS = {
    "diagnose": ["diagnose", "--example", "data_starved_training"],
    "ingest": ["ingest", "tests/fixtures/telemetry/kineto_two_steps.json"],
    "rules-lint": ["rules", "lint"],
}


def _check(rc: int, err: str, elapsed: float, what: str) -> None:
    assert elapsed < 1.5, f"{what}: took {elapsed:.2f} s to stop"
    if rc == 0:
        return  # it finished before the signal came
    if rc == 130:
        assert err.endswith("interrupted\n") and "Traceback" not in err, f"{what}: {err[-800:]}"
        return
    # only Python's own start-up, before the script's first line, may end otherwise (killed by SIGINT)
    assert rc in (-signal.SIGINT, 1), f"{what}: exit {rc}: {err[-800:]}"
    assert str(REPO / "expert") not in err and "expert/" not in err, f"{what}: traceback from the project: {err}"


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("delay", DELAYS)
def test_ctrl_c_exits_130_with_one_line(dam: Path, command: str, delay: float) -> None:
    rc, err, elapsed = _interrupt([str(dam), *COMMANDS[command]], delay)
    _check(rc, err, elapsed, f"{command} at {delay} s")


@pytest.mark.parametrize("delay", [0.1, 0.3, 0.6, 1.0])
def test_ctrl_c_during_a_large_durable_build(dam: Path, big_rules: Path, delay: float) -> None:
    rc, err, elapsed = _interrupt([str(dam), "diagnose", "--rules-dir", str(big_rules), "--engine", "durable",
                                   "--set", "gpu_util=5%", "--set", "mfu=0.4", "--format", "json"], delay)
    _check(rc, err, elapsed, f"durable build at {delay} s")


def test_a_library_user_keeps_keyboard_interrupt() -> None:
    """Importing expert from another program leaves SIGINT to Python (KeyboardInterrupt), whatever it imports."""
    code = ("import signal, expert, expert.commands; "
            "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler; print('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.stdout.strip() == "ok", result.stderr


def _interrupt_group(command: list[str], delay: float) -> tuple[int, str, float, bool]:
    """Like a terminal's Ctrl-C: SIGINT to the whole process group (the command and its worker processes)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env,
                            start_new_session=True)
    time.sleep(delay)
    sent = time.perf_counter()
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{command[1:]} ignored SIGINT at {delay} s")
    elapsed = time.perf_counter() - sent
    deadline = time.monotonic() + 3
    while True:  # the workers (and the fork server) end with the command
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return proc.returncode, err, elapsed, True
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.returncode, err, elapsed, False
        time.sleep(0.05)


@pytest.mark.parametrize("delay", [0.3, 0.8, 1.3, 2.0, 3.0])
def test_ctrl_c_while_rank_workers_start_and_read(dam: Path, gloo_job: Path, delay: float) -> None:
    """The terminal's SIGINT reaches the workers too: while they start (importing the readers) or read, none of them
    prints a traceback, the command exits 130 with one line, and no worker outlives it."""
    rc, err, elapsed, ended = _interrupt_group([str(dam), "ingest", str(gloo_job), "--workers", "2"], delay)
    _check(rc, err, elapsed, f"rank ingest at {delay} s")
    assert "Traceback" not in err, err[-1500:]
    assert ended, "a worker process outlived the command"


FINALIZER = """import os, signal, sys, time
class _CtrlCAsPythonExits:
    def __del__(self):  # runs as the interpreter finalizes, after the command has finished
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        sys.stderr.write("still alive\\n")
sys.modules["_ctrl_c_as_python_exits"] = _CtrlCAsPythonExits()  # dropped as Python clears its modules
"""


@pytest.mark.parametrize("entry", ["dam", "cli.py"])
def test_a_ctrl_c_as_python_exits_keeps_the_commands_exit_code(dam: Path, tmp_path: Path, entry: str) -> None:
    """Python gives SIGINT its default action back as it finalizes: a Ctrl-C there used to kill a finished command
    (return code -2, no message; seen in CI as test_hostile_sessions' 0.6 s Ctrl-C). The exit code is the command's."""
    (tmp_path / "sitecustomize.py").write_text(FINALIZER)
    command = [str(dam)] if entry == "dam" else [sys.executable, str(REPO / "cli.py")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    result = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stderr.endswith("still alive\n") and "Traceback" not in result.stderr, result.stderr


def test_a_ctrl_c_that_pydantic_wraps_is_still_an_interrupt(monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """pydantic-core's serializer turns a KeyboardInterrupt raised in a Python callback into a
    PydanticSerializationError (seen: `dam diagnose --format json` Ctrl-C'd while writing the report, 7 of 40 times a
    traceback). The command still ends as interrupted: one line, exit 130."""
    from pydantic import BaseModel, field_serializer

    from expert import commands
    from expert._interrupt import CommandWatch

    class Slow(BaseModel):
        x: int = 1

        @field_serializer("x")
        def _ctrl_c(self, value: int) -> int:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)  # the handler runs here, inside pydantic-core's call
            return value

    with CommandWatch() as watch, pytest.raises(Exception, match="KeyboardInterrupt") as wrapped:
        Slow().model_dump_json()
    assert type(wrapped.value).__name__ == "PydanticSerializationError" and watch.seen
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handed back

    def command(argv: object) -> int:
        Slow().model_dump_json()
        return 0

    monkeypatch.setattr(commands, "_command", command)
    assert commands.main(["--version"]) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_an_error_without_a_ctrl_c_is_not_called_an_interrupt(monkeypatch: pytest.MonkeyPatch) -> None:
    from expert import commands

    def command(argv: object) -> int:
        raise RuntimeError("a bug")

    monkeypatch.setattr(commands, "_command", command)
    with pytest.raises(RuntimeError, match="a bug"):
        commands.main(["--version"])


def test_the_watch_takes_over_from_the_start_up_guard_in_one_step() -> None:
    """In the `dam` script the start-up guard answers a Ctrl-C until the command's CommandWatch replaces it, with no
    moment under Python's own handler in between (fresh-clone CI: a 0.05 s Ctrl-C landed in `main()` after the guard
    was lifted and before the watch was on, and gave a traceback through the package); leaving, the watch puts the
    guard back."""
    import expert
    from expert._interrupt import CommandWatch

    before = signal.signal(signal.SIGINT, expert._startup_sigint)
    try:
        with CommandWatch() as watch:
            assert signal.getsignal(signal.SIGINT) == watch._handle
        assert signal.getsignal(signal.SIGINT) is expert._startup_sigint
    finally:
        signal.signal(signal.SIGINT, before)


def test_main_leaves_the_guard_up_until_the_watch_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """`main()` itself never hands SIGINT to Python's handler: what `_command` sees is the watch's handler, taken
    over from the guard."""
    import expert
    from expert import commands

    seen: list[object] = []

    def command(argv: object) -> int:
        seen.append(signal.getsignal(signal.SIGINT))
        return 0

    monkeypatch.setattr(commands, "_command", command)
    before = signal.signal(signal.SIGINT, expert._startup_sigint)
    try:
        assert commands.main(["--version"]) == 0
        assert signal.getsignal(signal.SIGINT) is expert._startup_sigint
    finally:
        signal.signal(signal.SIGINT, before)
    assert len(seen) == 1 and getattr(seen[0], "__name__", None) == "_handle"


LEAK = """import multiprocessing, os, sys
from expert import _interrupt, commands
_interrupt.is_dam_script = lambda: True  # as in the `dam` script

def _leak(argv):  # what a Ctrl-C while the workers start can leave: a semaphore the tracker must unlink
    kept = multiprocessing.get_context("forkserver").Queue()  # alive: its finalizer would unlink it
    sys.stderr.flush()
    os._exit(130)

commands._main = _leak
commands.main()
"""


def test_the_resource_trackers_leak_warning_is_not_shown_after_the_command() -> None:
    """After a Ctrl-C that ends the command while workers start, multiprocessing's resource tracker unlinked the
    semaphore left behind and printed "There appear to be 1 leaked semaphore objects" under the command's line."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    plain = subprocess.run([sys.executable, "-c", LEAK.replace("commands.main()", "_leak([])")],
                           capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
    assert "leaked semaphore" in plain.stderr  # the warning this test is about (outside the script's main)
    script = subprocess.run([sys.executable, "-c", LEAK], capture_output=True, text=True, timeout=60, cwd=REPO,
                            env=env)
    assert script.returncode == 130 and "resource_tracker" not in script.stderr, script.stderr


def test_a_ctrl_c_that_comes_back_as_a_rust_panic_is_still_an_interrupt(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A Ctrl-C 0.2 s into `dam diagnose` interrupted pydantic-core's own `import datetime` while the command imported
    pydantic lazily; pyo3 turned that into a PanicException, a BaseException that `except Exception` let through as
    a traceback (seen once in CI). After a Ctrl-C it ends as interrupted; without one it is raised as it is."""
    from expert import commands

    class Panic(BaseException):  # what pyo3_runtime.PanicException derives from
        pass

    def command(argv: object) -> int:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler raises KeyboardInterrupt here ...
        except KeyboardInterrupt:
            raise Panic("failed to import `datetime` C API") from None  # ... which the extension reports as this
        return 0

    monkeypatch.setattr(commands, "_command", command)
    assert commands.main(["--version"]) == 130
    assert capsys.readouterr().err == "interrupted\n"

    def panics(argv: object) -> int:
        raise Panic("no Ctrl-C: a real failure")

    monkeypatch.setattr(commands, "_command", panics)
    with pytest.raises(Panic):
        commands.main(["--version"])

    def exits(argv: object) -> int:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        except KeyboardInterrupt:
            raise SystemExit(2) from None
        return 0

    monkeypatch.setattr(commands, "_command", exits)
    with pytest.raises(SystemExit):
        commands.main(["--version"])

