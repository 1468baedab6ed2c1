"""What the commands say about an input they cannot read: a --hardware-file that is a pipe or a folder, and "-"
(standard input) where an observation file or a report is expected; and a count written as model sizes are ("7b")."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from expert.commands import main

GPU = """\
hardware:
  - id: lab-x1
    name: Lab accelerator X1
    vendor: lab
    peak_tflops: {bf16: 400}
    sparse_headline: false
    memory_gb: 64
    memory_type: HBM3
    memory_bandwidth_gbs: 2000
    source: https://example.org/lab-x1
"""


def dam(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
@pytest.mark.parametrize("command", [("diagnose", "--set", "gpu_util=50%"), ("hardware", "list"),
                                     ("ingest", str(Path(__file__).parent / "fixtures" / "telemetry" /
                                                    "dcgmi_dmon.txt"))])
def test_a_hardware_file_that_is_a_pipe_is_named_as_one(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                        command: tuple[str, ...]) -> None:
    """--hardware-file <(cat hw.yaml) is a FIFO: said as `diagnose FILE` and `ingest` say it, not "no such file"."""
    fifo = tmp_path / "hw.yaml"
    os.mkfifo(fifo)  # never opened: the check looks at what the path is, so nothing blocks
    code, out, err = dam(capsys, *command, "--hardware-file", str(fifo))
    assert code == 2 and out == ""
    assert f"{fifo}: cannot read: a FIFO (named pipe)" in err and "no such file" not in err
    assert "save the entries to a file" in err


def test_a_hardware_file_that_is_a_folder_or_missing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = dam(capsys, "diagnose", "--set", "gpu_util=50%", "--hardware-file", str(tmp_path))
    assert code == 2 and f"{tmp_path}: cannot read: a directory" in err
    code, _, err = dam(capsys, "diagnose", "--set", "gpu_util=50%", "--hardware-file", str(tmp_path / "no.yaml"))
    assert code == 2 and "no.yaml: no such file" in err
    good = tmp_path / "hw.yaml"
    good.write_text(GPU, encoding="utf-8")
    code, out, err = dam(capsys, "diagnose", "--set", "hardware=lab-x1", "--set", "gpu_util=50%",
                         "--hardware-file", str(good), "--format", "json")
    assert code == 0, err
    assert json.loads(out)["observations"]["hardware"]["value"] == "lab-x1"


@pytest.mark.parametrize(("command", "needle"), [
    ("diagnose", "reading observations from standard input is not supported"),
    ("explain", "reading a report from standard input is not supported"),
])
def test_standard_input_for_a_file_is_refused_clearly(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch, command: str,
                                                      needle: str) -> None:
    monkeypatch.chdir(tmp_path)  # no file called "-" here either way
    code, out, err = dam(capsys, command, "-")
    assert code == 2 and out == ""
    assert needle in err and "no such file" not in err and "Traceback" not in err


def test_diagnose_from_standard_input_still_reads_a_trace(capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    telemetry = Path(__file__).parent / "fixtures" / "telemetry" / "dcgmi_dmon.txt"
    with telemetry.open(encoding="utf-8") as stream:
        monkeypatch.setattr(sys, "stdin", stream)
        code, out, err = dam(capsys, "diagnose", "--from", "-", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["observations"]["gpu_util"]["source"].startswith("dcgmi:")  # what the hint offers


def test_a_model_size_in_lowercase(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = dam(capsys, "diagnose", "--set", "model_params=7b", "--set", "hardware=h100-sxm",
                         "--format", "json")
    assert code == 0, err
    assert json.loads(out)["observations"]["model_params"]["value"] == 7e9
