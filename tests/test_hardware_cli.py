"""`--hardware-file` on dam diagnose, consult, hardware and ingest, and `dam hardware list|show` for the catalog."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from expert import Expert, Report

ROOT = Path(__file__).resolve().parent.parent
DAM = [sys.executable, str(ROOT / "cli.py")]  # the checkout's own commands

GPU_FILE = """\
# my lab's accelerator, in the schema of knowledge_base/hardware.yaml
hardware:
  - id: lab-x1
    name: Lab accelerator X1
    vendor: lab
    peak_tflops: {bf16: 400, fp32: 50}
    sparse_headline: false
    memory_gb: 64
    memory_type: HBM3
    memory_bandwidth_gbs: 2000
    source: https://example.org/lab-x1
    aliases: ["LAB Accel X1"]
"""


def dam(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "PYTHONIOENCODING": "utf-8", "XDG_STATE_HOME": str(cwd or ROOT)}
    return subprocess.run([*DAM, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


@pytest.fixture
def gpu_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_gpu.yaml"
    path.write_text(GPU_FILE)
    return path


def test_diagnose_with_a_hardware_file(gpu_file: Path) -> None:
    result = dam("diagnose", "--hardware-file", str(gpu_file), "--set", "hardware=LAB Accel X1", "--set", "dtype=bf16",
                 "--set", "flops=2e14", "--set", "step_time_s=1", "--format", "json")
    assert result.returncode == 0, result.stderr
    report = Report.model_validate_json(result.stdout)
    assert report.observations["hardware"].value == "lab-x1"
    assert report.derived["mfu"].value == pytest.approx(200 / 400)
    without = dam("diagnose", "--set", "hardware=lab-x1")
    assert without.returncode == 2 and "unknown hardware 'lab-x1'" in without.stderr


def test_hardware_list_and_show_with_a_hardware_file(gpu_file: Path) -> None:
    listing = dam("hardware", "list", "--hardware-file", str(gpu_file))
    assert listing.returncode == 0 and "lab-x1" in listing.stdout and "h100-sxm" in listing.stdout
    shown = dam("hardware", "show", "lab accel x1", "--hardware-file", str(gpu_file))
    assert shown.returncode == 0 and "https://example.org/lab-x1" in shown.stdout and "400 TFLOP/s" in shown.stdout


def test_ingest_maps_a_device_name_through_the_hardware_file(gpu_file: Path, tmp_path: Path) -> None:
    log = tmp_path / "smi.csv"
    log.write_text("timestamp, index, name, utilization.gpu [%]\n2024/03/05 13:48:11.412, 0, LAB Accel X1, 60 %\n"
                   "2024/03/05 13:48:12.412, 0, LAB Accel X1, 64 %\n")
    result = dam("ingest", str(log), "--hardware-file", str(gpu_file), "--as", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["observations"]["hardware"]["value"] == "lab-x1"
    plain = dam("ingest", str(log), "--as", "json")
    assert json.loads(plain.stdout)["observations"]["hardware"]["value"] == "unknown"


def test_consult_answers_with_a_hardware_file(gpu_file: Path, tmp_path: Path) -> None:
    answers = tmp_path / "run.yaml"
    answers.write_text("workload: training\nhardware: lab-x1\ndtype: bf16\nflops: 2e14\nstep_time_s: 1\n"
                       "available_tools: none\n")
    result = dam("consult", "--answers", str(answers), "--hardware-file", str(gpu_file), "--save",
                 str(tmp_path / "s.json"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Verdict" in result.stdout
    refused = dam("consult", "--answers", str(answers), "--save", str(tmp_path / "t.json"), cwd=tmp_path)
    assert refused.returncode == 2 and "lab-x1" in refused.stderr


@pytest.mark.parametrize(("text", "needles"), [
    (GPU_FILE.replace("    vendor: lab\n", ""), ["my_gpu.yaml", "hardware.0 (lab-x1).vendor", "Field required"]),
    (GPU_FILE.replace("id: lab-x1", "id: h100-sxm"), ["h100-sxm", "already used by the catalog"]),
    (GPU_FILE.replace("{bf16: 400, fp32: 50}", "{fp4: 800}"), ["lab-x1", "unknown dtype 'fp4'", "fp32, tf32"]),
    (GPU_FILE.replace('["LAB Accel X1"]', '["Tesla T4"]'), ["lab-x1", "also names t4"]),
    ("hardware:\n  - id: [oops\n", ["my_gpu.yaml:", "invalid YAML"]),
])
def test_a_bad_hardware_file_exits_2_naming_file_entry_and_field(tmp_path: Path, text: str,
                                                                 needles: list[str]) -> None:
    path = tmp_path / "my_gpu.yaml"
    path.write_text(text)
    result = dam("diagnose", "--hardware-file", str(path), "--set", "gpu_util=50%")
    assert result.returncode == 2, result
    assert "Traceback" not in result.stdout + result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


def test_a_missing_hardware_file_exits_2(tmp_path: Path) -> None:
    result = dam("hardware", "list", "--hardware-file", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2 and "no such file" in result.stderr and "Traceback" not in result.stderr


def test_hardware_list_shows_every_entry_and_show_works_for_each() -> None:
    listing = dam("hardware", "list")
    assert listing.returncode == 0
    kb = Expert(engine="pure").kb
    for hw_id in kb.part_ids():
        assert hw_id in listing.stdout
    slices = dam("hardware", "list", "--mig")  # each MIG slice as its part and profile
    assert slices.returncode == 0
    for hw in kb.hardware.values():
        if hw.mig_of is not None:
            assert f"{hw.mig_of} " in slices.stdout and hw.name.rsplit(" MIG ", 1)[1] in slices.stdout
    mig = dam("hardware", "show", "NVIDIA A100-SXM4-40GB MIG 1g.5gb")  # as torch.cuda.get_device_name prints it
    assert mig.returncode == 0 and "a100-40gb-mig-1g-5gb" in mig.stdout and "MIG slice of" in mig.stdout
    shown = dam("hardware", "show", "h100")
    assert shown.returncode == 0 and "h100 -> h100-sxm" in shown.stdout and "h100-sxm: NVIDIA H100 SXM5" in shown.stdout
    v100 = dam("hardware", "show", "v100-sxm2")
    assert "dense bf16 peak" in v100.stdout and "no such format on this part" in v100.stdout


def test_a_hardware_file_with_markup_is_printed_as_text(tmp_path: Path) -> None:
    """A --hardware-file's names, links, memory type and notes are the user's text: "[/x]" is printed, never read as
    rich markup (it used to end `dam hardware show`, and with it in the memory type `dam hardware list`, in a
    MarkupError traceback)."""
    path = tmp_path / "markup_gpu.yaml"
    path.write_text(GPU_FILE.replace("name: Lab accelerator X1", "name: Lab [bold]X1[/bold]")
                    .replace("memory_type: HBM3", "memory_type: \"HBM[/x]\"")
                    .replace("    aliases:", "    notes: \"measured [/x] on our rack\"\n    aliases:"))
    shown = dam("hardware", "show", "lab-x1", "--hardware-file", str(path))
    assert shown.returncode == 0, shown.stderr
    assert "measured [/x] on our rack" in shown.stdout and "Lab [bold]X1[/bold]" in shown.stdout
    assert "64 GB, HBM[/x]" in shown.stdout
    listing = dam("hardware", "list", "--hardware-file", str(path))
    assert listing.returncode == 0, listing.stderr
    assert "Lab [bold]X1[/bold]" in listing.stdout and "64 HBM[/x]" in listing.stdout
