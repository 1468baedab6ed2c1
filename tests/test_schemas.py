"""JSON Schemas: current with the models (schemas/*.json), valid, and accepting the real files they describe."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from conftest import SHARED  # ../shared (or $DAM_SHARED)

import expert
from expert._resources import data_dir
from expert.rules.ruleset import rule_file_paths
from expert.schemas import SCHEMAS, file_name, render, schema_for

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "schemas"
KB = expert.default_expert().kb
KB_FILES = {"facts", "hardware", "optimizations", "tools", "scorecard", "regimes", "units", "interconnects", "kernels"}


@functools.cache
def validator(name: str) -> jsonschema.protocols.Validator:
    schema = schema_for(name, KB)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def errors(name: str, data: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in validator(name).iter_errors(data)]


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_committed_schema_is_current(name: str) -> None:
    path = COMMITTED / file_name(name)
    assert path.is_file() and path.read_text(encoding="utf-8") == render(schema_for(name, KB)), (
        f"{path} is stale or missing: run `dam schema --all --output-dir schemas/`")


@pytest.mark.parametrize("path", rule_file_paths(data_dir("rules")), ids=lambda p: p.name)
def test_rule_files_validate(path: Path) -> None:
    assert errors("rules", load(path)) == []


@pytest.mark.parametrize("path", sorted((data_dir("rules") / "tests").glob("*.test.yaml")), ids=lambda p: p.name)
def test_rule_test_files_validate(path: Path) -> None:
    assert errors("rule-tests", load(path)) == []


def test_waivers_validate() -> None:
    assert errors("lint-waivers", load(data_dir("rules") / "lint_waivers.yaml")) == []


@pytest.mark.parametrize("name", sorted(KB_FILES & set(SCHEMAS)))
def test_knowledge_base_files_validate(name: str) -> None:
    assert errors(name, load(data_dir("knowledge_base") / f"{name}.yaml")) == []


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_examples_validate_as_observation_files(path: Path) -> None:
    assert errors("observations", load(path)) == []


def test_flat_observations_validate_and_unknown_facts_do_not() -> None:
    assert errors("observations", {"gpu_util": "62%", "hardware": "h100-sxm"}) == []
    assert errors("observations", {"gpu_utilization": 0.62})
    assert errors("observations", {"observations": {"io_overhead": 0.2}})  # derived: cannot be given


TELEMETRY = ROOT / "tests" / "fixtures" / "telemetry"
REAL_TRACES = SHARED / "traces"


@pytest.mark.parametrize("form", ["yaml", "json"])
def test_ingest_written_files_validate_as_observation_files(form: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """`dam ingest --as yaml|json` writes each fact as {value, source, detail} (and time_breakdown): the schema of the
    file `dam diagnose FILE` reads accepts it, and `dam diagnose` reads it."""
    from expert import commands as cli

    out = tmp_path / f"run.{form}"
    inputs = [str(TELEMETRY / "kineto_two_steps.json"), str(TELEMETRY / "dcgmi_dmon.txt")]
    assert cli.main(["ingest", *inputs, "--as", form, "--output", str(out)]) == 0
    data = json.loads(out.read_text(encoding="utf-8")) if form == "json" else load(out)  # YAML 1.1 reads 5e-05 as text
    assert data["observations"]["gpu_util"]["source"] == "kineto:kineto_two_steps.json"
    assert errors("observations", data) == []
    assert cli.main(["diagnose", str(out), "--format", "json"]) == 0
    capsys.readouterr()


@pytest.mark.skipif(not REAL_TRACES.is_dir(), reason="the real traces are in ../shared/traces")
@pytest.mark.parametrize("trace", ["kineto-resnet50/resnet50_num_workers_4.pt.trace.json.gz",
                                   "nsys/mfu_2gpu_before.sqlite"])
def test_real_ingested_traces_validate(trace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from expert import commands as cli

    out = tmp_path / "real.yaml"
    assert cli.main(["ingest", str(REAL_TRACES / trace), "--as", "yaml", "--output", str(out)]) == 0
    capsys.readouterr()
    assert errors("observations", load(out)) == []


def test_observations_schema_takes_the_aliases_of_a_choice() -> None:
    check = validator("observations")
    check.validate({"dtype": "torch.bfloat16", "attention_implementation": "flash_attention_2"})
    assert list(check.iter_errors({"dtype": "amp"}))  # no alias: refused, as the library refuses it


def test_observations_schema_takes_a_choice_in_any_case_as_the_library_does() -> None:
    check = validator("observations")
    given = {"interconnect": "RoCE", "dtype": "BF16", "workload": "Training", "phase": "Prompt Processing",
             "activation_recompute": "Selective"}
    check.validate(given)
    from expert.observations.normalise import normalise

    normalised = normalise(expert.default_expert().kb, given)
    assert {name: o.value for name, o in normalised.facts.items()} == {
        "interconnect": "ethernet", "dtype": "bf16", "workload": "training", "phase": "prefill",
        "activation_recompute": "yes"}
    assert list(check.iter_errors({"interconnect": "RoCE2"}))
    assert list(check.iter_errors({"dtype": "bf16 "}))  # the pattern is whole words: no padding


def test_observation_entries_are_value_source_detail() -> None:
    entry = {"value": "62%", "source": "nvidia-smi", "detail": {"samples": 6, "method": "mean"}}
    assert errors("observations", {"observations": {"gpu_util": entry}}) == []
    assert errors("observations", {"gpu_util": {"value": 0.62}}) == []
    assert errors("observations", {"observations": {"gpu_util": {"source": "x"}}})  # no value
    assert errors("observations", {"observations": {"gpu_util": {"value": 0.62, "sorce": "x"}}})  # a typo
    assert errors("observations", {"observations": {"gpu_util": {"value": True}}})  # not a number
    # a bare YAML yes/no is read as a boolean, which a yes/no fact takes
    assert errors("observations", load_text("uses_cuda_graphs: yes\noptimizer_offload: no\n")) == []
    assert errors("observations", {"dtype": True})  # not a yes/no fact


def load_text(text: str) -> Any:
    return yaml.safe_load(text)


def test_report_validates() -> None:
    report = expert.diagnose(load(ROOT / "examples" / "data_starved_training.yaml")["observations"])
    assert errors("report", json.loads(report.to_json())) == []


def test_rule_schema_knows_the_vocabulary() -> None:
    rule = {"id": "r", "title": "t", "source": "s", "rationale": "r", "when": {"fact": "gpu_util", "lt": 0.8},
            "then": {"recommend": [{"id": "prefetching", "why": "w"}]}}
    assert errors("rules", {"rules": [rule]}) == []
    assert errors("rules", {"rules": [{**rule, "when": {"fact": "gpu_utilization", "lt": 0.8}}]})
    assert errors("rules", {"rules": [{**rule, "when": {"fact": "gpu_util"}}]})  # a fact needs an operator
    assert errors("rules", {"rules": [{**rule, "then": {"recommend": [{"id": "magic", "why": "w"}]}}]})
    assert errors("rules", {"rules": [{**rule, "when": {"fact": "gpu_util", "lt": 0.8, "all": []}}]})


def test_schema_command(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from expert import commands as cli  # the parser and `main` behind cli.py
    assert cli.main(["schema", "rules"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "dam-expert rules"
    assert cli.main(["schema", "--list"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(SCHEMAS)
    assert cli.main(["schema", "--all", "--output-dir", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(file_name(n) for n in SCHEMAS)
    capsys.readouterr()
    assert cli.main(["schema", "--all", "--output-dir", str(tmp_path), "--check"]) == 0
    (tmp_path / file_name("report")).write_text("{}", encoding="utf-8")
    assert cli.main(["schema", "--all", "--output-dir", str(tmp_path), "--check"]) == 1
    assert "report.schema.json" in capsys.readouterr().err
    assert cli.main(["schema", "nonsense"]) == 2
    assert "unknown schema 'nonsense'" in capsys.readouterr().err
