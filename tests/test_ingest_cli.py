"""`dam ingest` output formats and `dam diagnose --from`."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import yaml

import cli

FIXTURES = Path(__file__).parent / "fixtures" / "telemetry"
TRACE = str(FIXTURES / "kineto_two_steps.json")
DCGM = str(FIXTURES / "dcgmi_dmon.txt")


def test_rich_table_shows_facts_provenance_and_gaps(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ingest", str(FIXTURES / "dcgmi_dmon_mig.txt")]) == 0
    out = capsys.readouterr().out
    assert "sm_active" in out and "40.0%" in out and "1002 SMACT" in out
    assert "Not derived" in out and "hardware" in out


def test_yaml_output_round_trips_into_diagnose(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run.yaml"
    assert cli.main(["ingest", TRACE, DCGM, "--as", "yaml", "--output", str(out)]) == 0
    data = yaml.safe_load(out.read_text())
    obs = data["observations"]
    assert obs["gpu_util"]["source"] == "kineto:kineto_two_steps.json"
    assert obs["sm_active"]["detail"]["samples"] == 6
    assert out.read_text().startswith("# Written by `dam ingest`")
    assert cli.main(["diagnose", str(out), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["observations"]["gpu_util"]["source"] == "kineto:kineto_two_steps.json"


def test_json_output_lists_underivable_facts_as_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ingest", DCGM, "--as", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["observations"]["hardware"]["value"] == "unknown"
    assert "device name" in data["observations"]["hardware"]["detail"]["reason"]
    path = tmp_path / "dcgm.json"
    path.write_text(json.dumps(data))
    assert cli.main(["diagnose", str(path), "--format", "json"]) == 0  # "unknown" reads back as not observed


def test_diagnose_from_files_merges_and_set_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["diagnose", "--from", TRACE, DCGM, "--set", "step_time_s=2ms", "--format", "json"]) == 0
    captured = capsys.readouterr()
    facts = json.loads(captured.out)["observations"]
    assert facts["step_time_s"]["value"] == pytest.approx(0.002)
    assert facts["step_time_s"]["source"] == "user"
    assert facts["sm_active"]["source"] == "dcgmi:dcgmi_dmon.txt"
    assert facts["data_wait_s"]["detail"]["window"] == "ProfilerStep#1–#2 (2 steps)"
    assert cli.main(["diagnose", "--from", TRACE, "--steps", "2", "--format", "json"]) == 0
    facts = json.loads(capsys.readouterr().out)["observations"]
    assert facts["step_time_s"]["value"] == pytest.approx(0.0011)


def test_the_not_derived_warning_leaves_out_facts_the_user_gives(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """dcgmi dmon names no device: `hardware` is not derived, unless --set, a FILE or --example gives it (they
    override what the traces give), and the warning says only what is still missing."""
    assert cli.main(["diagnose", "--from", DCGM, "--format", "json"]) == 0
    err = capsys.readouterr().err
    assert "not derived from dcgmi_dmon.txt: hbm_used_frac, clock_slowdown_frac, hardware (dam" in err
    assert cli.main(["diagnose", "--from", DCGM, "--set", "hardware=h100-sxm", "--format", "json"]) == 0
    assert "not derived from dcgmi_dmon.txt: hbm_used_frac, clock_slowdown_frac (dam" in capsys.readouterr().err
    given = tmp_path / "obs.yaml"
    given.write_text("hardware: h100-sxm\n")
    assert cli.main(["diagnose", str(given), "--from", DCGM, "--set", "hbm_used_frac=40%", "--set",
                     "clock_slowdown_frac=0", "--format", "json"]) == 0
    assert "not derived" not in capsys.readouterr().err
    trace = cli.main(["diagnose", "--from", TRACE, "--set", "hardware=h100-sxm", "--format", "json"])
    err = capsys.readouterr().err
    assert trace == 0 and "not derived from kineto_two_steps.json: " in err  # what is still missing is still said
    assert "hardware" not in err.split("not derived from kineto_two_steps.json: ")[1].split(" (dam ingest")[0]


def test_diagnose_from_a_malformed_file_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    bad = str(FIXTURES / "malformed" / "dcgmi_truncated.txt")
    assert cli.main(["diagnose", "--from", bad]) == 2
    err = capsys.readouterr().err
    assert "dcgmi_truncated.txt:4" in err and "Traceback" not in err


def test_help_documents_input_and_output_formats(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["ingest", "--help"])
    out = capsys.readouterr().out
    assert "--format" in out and "--as" in out and "names the INPUT format" in out


def test_a_long_value_leaves_room_for_where_each_fact_came_from_at_80_columns() -> None:
    """Operator names (idle_host_ops) once took the value column to ~45 characters, squeezing `← from` to a few
    characters a line at 80 columns: it must stay wide enough to read."""
    from rich.console import Console

    from expert.ingest import ingest_result
    from expert.report.render.ingest import print_ingest

    result = ingest_result(TRACE)
    result.observations.facts["idle_host_ops"] = result.observations.facts["gpu_util"].model_copy(
        update={"value": "aten::copy_, aten::resize_ and aten::empty"})
    console = Console(width=80, record=True, force_terminal=False)
    print_ingest(result, console)
    lines = console.export_text().splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    assert any("length of the analysed" in line for line in lines)  # how a fact was found reads as words
    assert any("aten::copy_," in line for line in lines)  # the long value wraps, whole words kept


def test_the_one_source_and_window_are_said_once_and_a_merge_says_each_facts_own() -> None:
    from rich.console import Console

    from expert.ingest import ingest_result
    from expert.report.render.ingest import print_ingest

    def shown(*files: str) -> str:
        console = Console(width=200, record=True, force_terminal=False)
        print_ingest(ingest_result(list(files)), console)
        return console.export_text()

    one = shown(TRACE)
    assert one.startswith("Observations · from kineto:kineto_two_steps.json · window ProfilerStep#1–#2 (2 steps)")
    lines = one.splitlines()
    table = "\n".join(itertools.takewhile(str.strip, lines[2:]))  # the header and the rows, to the next blank line
    assert "gpu_util" in table and "kineto:" not in table and "ProfilerStep#1–#2" not in table
    merged = shown(TRACE, DCGM)
    assert merged.splitlines()[0].strip() == "Observations"
    rows = {line.split()[0]: line for line in merged.splitlines() if line.strip()}
    assert "kineto:kineto_two_steps.json" in rows["gpu_util"] and "dcgmi_dmon.txt" in rows["sm_active"]


@pytest.mark.parametrize(("args", "message"), [
    (["--samples", "1:5"], "--samples 1:5: applies to telemetry logs"),
    (["--columns", "utilization.gpu"], "--columns utilization.gpu: applies to nvidia-smi --query-gpu CSV logs"),
    (["--step-range", "step"], "--step-range step: applies to Nsight Systems exports"),
])
def test_an_option_no_input_takes_is_an_error(args: list[str], message: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ingest", TRACE, *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "kineto_two_steps.json (PyTorch profiler / Kineto trace)" in err
    assert cli.main(["diagnose", "--from", TRACE, *args]) == 2
    assert message in capsys.readouterr().err


def test_options_that_apply_to_some_inputs_are_notes_on_the_others(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ingest", DCGM, "--steps", "1:2"]) == 2  # a telemetry log alone has no steps
    assert "--steps 1:2: applies to profiler traces" in capsys.readouterr().err
    nccl = str(FIXTURES / "nccl_tests_all_reduce_h100.txt")
    assert cli.main(["ingest", nccl, "--window", "1:2"]) == 2
    assert "--window 1:2: applies to traces and timestamped telemetry logs" in capsys.readouterr().err
    assert cli.main(["ingest", TRACE, DCGM, "--samples", "1:2", "--steps", "1:2"]) == 0  # each takes one of them
    from expert.ingest import ingest_result

    notes = " ".join(ingest_result([TRACE, DCGM], samples="1:2", steps="1:2").notes)
    assert "kineto_two_steps.json: --samples applies to telemetry logs" in notes
    assert "dcgmi_dmon.txt: --steps applies to profiler traces" in notes


@pytest.mark.parametrize(("args", "message"), [
    (["--steps=-1:3"], "--steps -1:3: step numbers are 0 or more"),
    (["--steps=:-2"], "--steps :-2: step numbers are 0 or more"),
    (["--samples", "0:3"], "--samples 0:3: sample numbers are 1 or more"),
])
def test_step_and_sample_numbers_below_the_first_are_rejected(args: list[str], message: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ingest", TRACE if "--steps" in args[0] else DCGM, *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "invalid range" in err


def test_the_python_api_checks_ranges_and_options_alike() -> None:
    from expert.errors import ObservationError
    from expert.ingest import ingest_result

    with pytest.raises(ObservationError, match="step numbers are 0 or more"):
        ingest_result(TRACE, steps=(-1, 3))
    with pytest.raises(ObservationError, match="--samples 1:5: applies to telemetry logs"):
        ingest_result(TRACE, samples=(1, 5))
