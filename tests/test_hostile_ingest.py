"""Hostile telemetry (issue 22): digits that are not ASCII digits, absurd numbers, markup in device names.

Each case takes a real fixture, makes one hostile edit, and checks the outcome through the CLI: exit 2 with a message
naming the file and the line (never a traceback), or exit 0 with the value read right. Extend the table.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "telemetry"
DAM = shutil.which("dam", path=str(Path(sys.executable).parent)) or shutil.which("dam")

pytestmark = pytest.mark.skipif(DAM is None, reason="the dam console script is not installed (pip install -e .)")


def _dam(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert DAM is not None
    return subprocess.run([DAM, *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def _edited(tmp_path: Path, fixture: str, old: str, new: str) -> Path:
    text = (FIXTURES / fixture).read_text()
    assert old in text, f"{old!r} not in {fixture}"
    target = tmp_path / fixture
    target.write_text(text.replace(old, new, 1))
    return target


# (fixture, text replaced once, replacement, words the error must contain)
REFUSED = [
    ("nvidia_smi_query.csv", ".412, 0, NVIDIA", ".412, ², NVIDIA", ["index", "'²'", ".csv:2:"]),
    ("nvidia_smi_query.csv", ".412, 0, NVIDIA", ".412, １, NVIDIA", ["index", ".csv:2:"]),  # full-width one
    ("nvidia_smi_query.csv", "99 %, 52 %", "9_9 %, 52 %", ["utilization.gpu", ".csv:2:"]),
    ("nvidia_smi_dmon.txt", "    0    402", "    ²    402", ["column gpu", "'²'"]),
    ("nvidia_smi_dmon.txt", "402     61     70     95", "402     61     70     ٩٥", ["column sm"]),  # Arabic-Indic
    ("dcgmi_dmon.txt", "GPU 0     98", "GPU ²     98", ["entity", "GPU ²"]),
    ("dcgmi_dmon.txt", "0.812", "1e999", ["SMACT", "not a number"]),
    ("dcgm_exporter.prom", 'DCGM_FI_DEV_GPU_UTIL{gpu="0"', 'DCGM_FI_DEV_GPU_UTIL{gpu="²"', ["label gpu", "'²'"]),
    # found by tests/test_fuzz_inputs.py: a Unicode digit in a size was a ValueError traceback, an overflowing busbw
    # "NaN and infinity are not measurements" without the file
    ("nccl_tests_all_reduce_h100.txt", "    16777216   ", "    ²6777216   ", ["column size", "'²6777216'", ":20:"]),
    ("nccl_tests_all_reduce_h100.txt", "471.45", "1e309", ["column busbw", "'1e309'", "not a finite number"]),
]


@pytest.mark.parametrize(("fixture", "old", "new", "needles"), REFUSED, ids=[f"{c[0]}:{c[2]!r}" for c in REFUSED])
def test_hostile_values_are_clear_errors(tmp_path: Path, fixture: str, old: str, new: str,
                                         needles: list[str]) -> None:
    path = _edited(tmp_path, fixture, old, new)
    result = _dam("ingest", str(path), cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert path.name in result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


def test_a_garbled_nccl_average_is_left_out_not_a_traceback(tmp_path: Path) -> None:
    """The `# Avg bus bandwidth` line is a summary the expert does not need: "3..0" there used to be a ValueError."""
    path = _edited(tmp_path, "nccl_tests_all_reduce_h100.txt", "bandwidth    : 307.4969", "bandwidth    : 3..0")
    result = _dam("ingest", str(path), "--as", "json", cwd=tmp_path)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert json.loads(result.stdout)["observations"]["nccl_bus_bandwidth"]["value"] == pytest.approx(472.32)


def test_a_400_digit_prometheus_timestamp_is_a_clear_error(tmp_path: Path) -> None:
    text = (FIXTURES / "dcgm_exporter.prom").read_text()
    lines = text.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith("DCGM_FI_DEV_GPU_UTIL{"))
    lines[i] = lines[i] + " " + "9" * 400
    path = tmp_path / "stamp.prom"
    path.write_text("\n".join(lines) + "\n")
    result = _dam("ingest", str(path), cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "timestamp" in result.stderr and "milliseconds" in result.stderr


@pytest.mark.parametrize("name", ["[/x]", "[bold red]H100[/]", "\x1b[31mH100"])
def test_device_names_with_markup_are_printed_as_text(tmp_path: Path, name: str) -> None:
    path = _edited(tmp_path, "nvidia_smi_query.csv", "NVIDIA H100 80GB HBM3", name)
    result = _dam("ingest", str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr + result.stdout


MARKUP_NAME = "k[/b] [red]x ::cd:: :fire:"  # rich markup closing no tag, a colour tag, emoji codes


def test_kernel_and_file_names_with_markup_are_printed_as_text(tmp_path: Path) -> None:
    """Kernel names and trace file names reach the terminal report's tables as text: "[/b]" in a kernel name used to
    crash `dam diagnose --from` (MarkupError traceback), and ":cd:" between two colons is not an emoji."""
    data = json.loads((FIXTURES / "kineto_two_steps.json").read_text())
    for event in data["traceEvents"]:
        if event.get("cat") == "kernel":
            event["name"] = MARKUP_NAME
    path = tmp_path / "t[bold]y.json"
    path.write_text(json.dumps(data))
    result = subprocess.run([DAM or "dam", "diagnose", "--from", path.name], capture_output=True, text=True,
                            cwd=tmp_path, timeout=60, env={**os.environ, "COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert MARKUP_NAME in result.stdout and "t[bold]y.json" in result.stdout + result.stderr
    assert "\N{OPTICAL DISC}" not in result.stdout and "\N{FIRE}" not in result.stdout


def test_class_names_of_a_saved_time_breakdown_are_printed_as_text(tmp_path: Path) -> None:
    """An observation file carries the time breakdown `dam ingest --as json` wrote, its kernel class names the file's
    text: "[/x]" in one used to end `dam diagnose FILE` and `dam compare` in a rich MarkupError traceback."""
    written = _dam("ingest", str(FIXTURES / "kineto_two_steps.json"), "--as", "json", cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    for name, scale in (("before.json", 1), ("after.json", 2)):
        data = json.loads(written.stdout)
        breakdown = data["time_breakdown"]
        for entry in [*breakdown["classes"], *breakdown["top_kernels"]]:
            if entry["class"] == "gemm":
                entry["class"] = "ge[/x] [red]mm"
                entry["gpu_time_s"] *= scale
        (tmp_path / name).write_text(json.dumps(data))
    env = {**os.environ, "COLUMNS": "200"}
    for args in (["diagnose", "before.json"], ["compare", "before.json", "after.json"]):
        result = subprocess.run([DAM or "dam", *args], capture_output=True, text=True, cwd=tmp_path, timeout=60,
                                env=env)
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr and "ge[/x] [red]mm" in result.stdout


@pytest.mark.parametrize("folder", ["sweep[lr=1e-3]", "a[/x]"])
def test_a_job_folder_with_markup_is_text_in_the_progress_bar(tmp_path: Path, folder: str,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The progress bar of a multi-GPU job's rank traces names the job by their folder, and its description column
    is rich markup: "[lr=1e-3]" was read as a style and vanished, "[/x]" ("a[" holding "x]") was a MarkupError
    traceback. The bar shows for large inputs on a terminal only: both forced here."""
    import cli
    from expert.commands import ingest as ingest_command

    (tmp_path / folder).mkdir(parents=True)
    for rank in (0, 1):
        shutil.copy(FIXTURES / "kineto_two_steps.json", tmp_path / folder / f"rank{rank}.json")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setattr(ingest_command, "_PROGRESS_MIN_BYTES", 0)
    assert cli.main(["ingest", folder, "--workers", "1"]) == 0
    assert f"ranks in {folder}" in capsys.readouterr().err


def _kernels(edit: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    return lambda e: edit(e) if e.get("cat") == "kernel" else None


def _timed(edit: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    return lambda e: edit(e) if "ts" in e else None


def _big_correlation(e: dict[str, Any]) -> None:
    if "correlation" in (e.get("args") or {}):
        e["args"]["correlation"] += 2**70


# (case id, edit of each event of the two-step Kineto fixture, words the error must contain)
HOSTILE_TRACES: list[tuple[str, Callable[[dict[str, Any]], Any], list[str]]] = [
    ("kernel-ts-1e30", _kernels(lambda e: e.update(ts=1e30)), ["1e+30", "microseconds"]),
    ("all-ts-1e30", _timed(lambda e: e.update(ts=e["ts"] + 1e30)), ["2**53", "microseconds"]),
    ("ts-2**70", _timed(lambda e: e.update(ts=2**70)), ["2**53"]),
    ("kernel-ts-minus-1e30", _kernels(lambda e: e.update(ts=-1e30)), ["-1e+30"]),
    ("kernel-ts-max-float", _kernels(lambda e: e.update(ts=1.7e308)), ["1.7e+308"]),
    ("kernel-dur-1e30", _kernels(lambda e: e.update(dur=1e30)), ["1e+30"]),
    ("zero-durations", _timed(lambda e: e.update(dur=0)), ["zero length"]),
    ("one-instant", _timed(lambda e: e.update(ts=5000, dur=0)), ["zero length"]),
    ("correlation-2**70", _big_correlation, ["64 bits"]),
    ("device-2**70", _kernels(lambda e: e["args"].update(device=2**70)), ["64 bits"]),
]


@pytest.mark.parametrize(("case", "edit", "needles"), HOSTILE_TRACES, ids=[c[0] for c in HOSTILE_TRACES])
def test_hostile_trace_events_are_clear_errors(tmp_path: Path, case: str, edit: Callable[[dict[str, Any]], Any],
                                               needles: list[str]) -> None:
    data = json.loads((FIXTURES / "kineto_two_steps.json").read_text())
    for event in data["traceEvents"]:
        edit(event)
    path = tmp_path / f"{case}.json"
    path.write_text(json.dumps(data))
    result = _dam("ingest", str(path), cwd=tmp_path)
    assert result.returncode == 2, result.stdout[-500:] + result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert path.name in result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


def test_events_at_one_instant_with_their_durations_are_read(tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "kineto_two_steps.json").read_text())
    for e in data["traceEvents"]:
        if "ts" in e:
            e["ts"] = 5000
    (tmp_path / "instant.json").write_text(json.dumps(data))
    result = _dam("ingest", "instant.json", "--as", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["observations"]["trace_steps"]["value"] == 1
