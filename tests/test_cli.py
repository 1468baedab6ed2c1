"""The `dam` command, run through the installed console script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from expert import Report

DAM = shutil.which("dam", path=str(Path(sys.executable).parent)) or shutil.which("dam")
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
EXPECTED = {
    "data_starved_training": "input",
    "llm_decode_batch1": "memory",
    "large_gemm": "compute",
    "launch_bound_tiny_model": "latency",
    "healthy_training": "compute",
    "partial_evidence": None,
}

pytestmark = pytest.mark.skipif(DAM is None, reason="the dam console script is not installed (pip install -e .)")


def dam(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    assert DAM is not None
    return subprocess.run([DAM, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def assert_clean_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr + result.stdout
    for needle in needles:
        assert needle in result.stderr, result.stderr


@pytest.mark.parametrize(("name", "verdict"), sorted(EXPECTED.items(), key=lambda kv: kv[0]))
def test_bundled_examples(name: str, verdict: str | None, tmp_path: Path) -> None:
    result = dam("diagnose", "--example", name, "--format", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert Report.model_validate_json(result.stdout).bottleneck == verdict


def test_at_least_six_examples_are_listed() -> None:
    result = dam("examples")
    assert result.returncode == 0
    assert set(EXPECTED) <= {line.split()[0] for line in result.stdout.splitlines() if line.strip()}


def test_file_and_set_with_units_and_override(tmp_path: Path) -> None:
    result = dam("diagnose", str(EXAMPLES / "data_starved_training.yaml"), "--set", "data_wait_s=1 ms",
                 "--format", "json")
    assert result.returncode == 0, result.stderr
    report = Report.model_validate_json(result.stdout)
    assert report.observations["data_wait_s"].value == pytest.approx(0.001)
    assert report.bottleneck != "input"


def test_set_only() -> None:
    result = dam("diagnose", "--set", "hardware=NVIDIA H100 80GB HBM3", "--set", "dtype=bf16", "--set", "gpu_util=45%",
                 "--set", "data_wait_s=120ms", "--set", "step_time_s=300 ms", "--format", "json")
    assert result.returncode == 0, result.stderr
    report = Report.model_validate_json(result.stdout)
    assert report.bottleneck == "input"
    assert report.observations["hardware"].value == "h100-sxm"


def test_rich_view_shows_every_section() -> None:
    result = dam("diagnose", "--example", "data_starved_training")
    assert result.returncode == 0, result.stderr
    for section in ("Verdict: input", "Iron law", "Findings", "Recommended vs wasted", "scorecard",
                    "Next measurements"):
        assert section in result.stdout, section


def test_markdown_and_output_file(tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    result = dam("diagnose", "--example", "llm_decode_batch1", "--format", "markdown", "--output", str(out))
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert text.startswith("# D·A·M diagnosis") and "Memory-bandwidth-bound" in text


def test_json_output_round_trips(tmp_path: Path) -> None:
    result = dam("diagnose", "--example", "healthy_training", "--format", "json")
    report = Report.model_validate_json(result.stdout)
    assert json.loads(report.to_json()) == json.loads(result.stdout)


def test_pure_engine_option() -> None:
    result = dam("diagnose", "--example", "large_gemm", "--format", "json", "--engine", "pure")
    assert Report.model_validate_json(result.stdout).engine == "pure"


@pytest.mark.parametrize(("sets", "needles"), [
    (["gpu_utl=0.5"], ["gpu_utl", "unknown fact", "did you mean gpu_util"]),
    (["gpu_util=1.7"], ["gpu_util", "above 1", "[0, 1]"]),
    (["step_time_s=-3"], ["step_time_s", "out of range"]),
    (["hardware=h1000"], ["hardware", "unknown hardware", "dam hardware list"]),
    (["gpu_util"], ["--set gpu_util", "NAME=VALUE"]),
    (["dtype=fp64"], ["dtype", "fp32, tf32, bf16"]),
])
def test_bad_values_exit_2_with_the_field_and_accepted_range(sets: list[str], needles: list[str]) -> None:
    args = ["diagnose"]
    for item in sets:
        args += ["--set", item]
    assert_clean_error(dam(*args), *needles)


@pytest.mark.parametrize(("name", "content", "needles"), [
    ("bad.yaml", "gpu_util: [0.5\nhardware: h100-sxm\n", ["bad.yaml:", "invalid YAML"]),
    ("bad.json", '{"gpu_util": 0.5,,}', ["bad.json:1", "invalid JSON"]),
    ("empty.yaml", "", ["empty.yaml", "empty"]),
    ("list.yaml", "- 1\n- 2\n", ["list.yaml", "mapping"]),
    ("extra.yaml", "observations: {gpu_util: 0.5}\nnotes: x\n", ["extra.yaml", "unexpected top-level keys"]),
])
def test_malformed_files_exit_2(tmp_path: Path, name: str, content: str, needles: list[str]) -> None:
    path = tmp_path / name
    path.write_text(content)
    assert_clean_error(dam("diagnose", str(path)), *needles)


def test_binary_and_missing_files_exit_2(tmp_path: Path) -> None:
    binary = tmp_path / "trace.json"
    binary.write_bytes(b"\x1f\x8b\x08\x00\xff\xfe\x00garbage")
    assert_clean_error(dam("diagnose", str(binary)), "trace.json")
    assert_clean_error(dam("diagnose", str(tmp_path / "nope.yaml")), "nope.yaml", "no such file")
    assert_clean_error(dam("diagnose", "--example", "nope"), "no such bundled example", "data_starved_training")


def test_nothing_to_diagnose_exits_2() -> None:
    result = dam("diagnose")
    assert result.returncode == 2 and "nothing to diagnose" in result.stderr


def test_hardware_list_and_show() -> None:
    listing = dam("hardware", "list")
    assert listing.returncode == 0 and "h100-sxm" in listing.stdout and "gaudi3" in listing.stdout
    shown = dam("hardware", "show", "Tesla V100-SXM2-32GB")
    assert shown.returncode == 0 and "v100-sxm2" in shown.stdout and "nvidia.com" in shown.stdout
    assert_clean_error(dam("hardware", "show", "h10"), "not in the catalog", "did you mean")


def test_help_teaches() -> None:
    top = dam("--help")
    assert top.returncode == 0 and "D·A·M" in top.stdout and "diagnose" in top.stdout
    sub = dam("diagnose", "--help")
    assert sub.returncode == 0 and "examples:" in sub.stdout and "62%" in sub.stdout


def test_extra_rules_dir(tmp_path: Path) -> None:
    (tmp_path / "team.yaml").write_text("""
schema_version: 1
rules:
  - id: team-tiny-batch
    title: Our fleet runs batches below 8 on purpose
    source: team runbook
    rationale: small batches here mean a misconfigured launcher
    severity: warning
    when: {fact: batch_size, lt: 8}
    then: {finding: {id: team_small_batch, message: "batch {batch_size} is below the fleet minimum"}}
""")
    result = dam("diagnose", "--set", "batch_size=4", "--rules-dir", str(tmp_path), "--format", "json")
    assert result.returncode == 0, result.stderr
    assert "team_small_batch" in {f.id for f in Report.model_validate_json(result.stdout).findings}


def test_a_broken_rules_dir_is_a_clean_error(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("""
schema_version: 1
rules:
  - {id: broken, title: t, source: s, rationale: r, when: {fact: gpu_util, lt: 0.5}, then: {}}
""")
    assert_clean_error(dam("diagnose", "--set", "gpu_util=0.3", "--rules-dir", str(tmp_path)), "broken.yaml",
                       "broken", "then")


def test_rich_output_to_a_file_is_plain_text(tmp_path: Path) -> None:
    target = tmp_path / "report.txt"
    result = dam("diagnose", "--example", "data_starved_training", "--output", str(target), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text = target.read_text()
    assert "Verdict: input" in text and "\x1b[" not in text


@pytest.mark.parametrize(("where", "needle"), [("missing/r.txt", "does not exist"), (".", "is a directory")])
def test_an_output_that_cannot_be_written_is_a_clear_error(tmp_path: Path, where: str, needle: str) -> None:
    for fmt in ("rich", "json", "markdown"):
        result = dam("diagnose", "--example", "data_starved_training", "--format", fmt, "--output", where,
                     cwd=tmp_path)
        assert_clean_error(result, "cannot write the output", needle)
