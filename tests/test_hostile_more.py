"""More of the hostile catalogue (issues 21 and 22), cases the other tables did not reach: a `ProfilerStep#²`, a
"billion laughs" through `dam consult --answers`, 100,000-level nesting in `dam explain`, a 400-digit consultation
answer, and an unreadable (EIO) observation file. Each: exit 0 with the right reading or 2 naming the input."""

from __future__ import annotations

import errno
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "telemetry"
DAM = shutil.which("dam", path=str(Path(sys.executable).parent)) or shutil.which("dam")
cli = pytest.mark.skipif(DAM is None, reason="the dam console script is not installed (pip install -e .)")


def _dam(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert DAM is not None
    return subprocess.run([DAM, *args], capture_output=True, text=True, cwd=cwd, timeout=60, input=stdin)


@cli
def test_a_step_numbered_with_a_unicode_digit_is_not_a_step(tmp_path: Path) -> None:
    """`ProfilerStep#²`: "²".isdigit() but int("²") fails (a ValueError traceback); it is not a step number."""
    trace = tmp_path / "k.json"
    trace.write_text((FIXTURES / "kineto_two_steps.json").read_text().replace("ProfilerStep#1", "ProfilerStep#²"))
    result = _dam("ingest", str(trace), cwd=tmp_path)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert "ProfilerStep#2 (1 step)" in result.stdout


LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + chr(ord(c) - 1)] * 9)}]\n" for c in "bcdefghi")


@cli
def test_a_billion_laughs_through_consult_answers_is_refused(tmp_path: Path) -> None:
    (tmp_path / "laughs.yaml").write_text(LAUGHS)
    result = _dam("consult", "--answers", "laughs.yaml", cwd=tmp_path)
    assert result.returncode == 2 and "laughs.yaml" in result.stderr and "expands to more than" in result.stderr


@cli
def test_deep_nesting_in_dam_explain_is_refused(tmp_path: Path) -> None:
    (tmp_path / "deep.json").write_text('{"gpu_util": ' + "[" * 100_000 + "]" * 100_000 + "}")
    result = _dam("explain", "deep.json", cwd=tmp_path)
    assert result.returncode == 2 and "deep.json" in result.stderr and "nested too deeply" in result.stderr
    assert "Traceback" not in result.stderr


@cli
def test_a_400_digit_consultation_answer_is_refused_and_asked_again(tmp_path: Path) -> None:
    digits = "9" * 400
    result = _dam("consult", "--save", "s.json", cwd=tmp_path,
                  stdin=f"training\nall\nh100-sxm bf16\n{digits}\n{digits}\n")
    assert "Traceback" not in result.stderr and result.returncode in (1, 130)  # input ended, session saved
    assert "400-digit number is too large" in result.stdout


def test_an_unreadable_observation_file_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """EIO from the disk: the error names the file and the reason, as an ObservationError (exit 2 in the CLI)."""
    from expert.errors import ObservationError
    from expert.observations.file import read_observation_file

    path = tmp_path / "run.yaml"
    path.write_text("gpu_util: 0.5\n")
    real_open = open

    def failing_open(file: object, *args: object, **kwargs: object) -> object:
        if str(file) == str(path):
            raise OSError(errno.EIO, "Input/output error")
        return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", failing_open)
    monkeypatch.setattr(Path, "read_bytes", lambda self: failing_open(self))
    with pytest.raises(ObservationError) as info:
        read_observation_file(path)
    assert "run.yaml" in str(info.value) and "Input/output error" in str(info.value)
