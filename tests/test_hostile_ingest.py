"""Hostile telemetry (issue 22): digits that are not ASCII digits, absurd numbers, markup in device names.

Each case takes a real fixture, makes one hostile edit, and checks the outcome through the CLI: exit 2 with a message
naming the file and the line (never a traceback), or exit 0 with the value read right. Extend the table.
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
