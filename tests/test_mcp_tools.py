"""The `dam mcp` tools in-process: schemas that accept what the tools return, path confinement, the conditional
`compare` tool, and internal errors as one line (tests/test_mcp.py drives the real server over stdio)."""

from __future__ import annotations

import dataclasses
import json
import sys
import types
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel

import expert
from expert._resources import examples_dir
from expert.errors import ObservationError
from expert.mcp import AllowedPaths, Toolbox, create
from expert.observations.file import read_observation_file
from expert.report.model import Report

ROOT = Path(__file__).resolve().parents[1]
TELEMETRY = ROOT / "tests" / "fixtures" / "telemetry"
EXAMPLES = sorted(p.stem for p in examples_dir().glob("*.yaml"))


def example(name: str) -> dict[str, Any]:
    return dict(read_observation_file(examples_dir() / f"{name}.yaml").observations)


@pytest.fixture(scope="module")
def toolbox() -> Toolbox:
    return create([TELEMETRY])[0]


def validate(schema: dict[str, Any], data: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:160]}"
            for e in jsonschema.Draft202012Validator(schema).iter_errors(data)]


def test_every_schema_is_valid_json_schema(toolbox: Toolbox) -> None:
    for spec in toolbox.tools.values():
        jsonschema.Draft202012Validator.check_schema(spec.input_schema)
        assert spec.input_schema["type"] == "object" and spec.input_schema["additionalProperties"] is False
        assert spec.output_schema is not None and spec.output_schema["type"] == "object", spec.name
        jsonschema.Draft202012Validator.check_schema(spec.output_schema)


@pytest.mark.parametrize("name", EXAMPLES)
def test_schemas_accept_what_the_tools_take_and_give(toolbox: Toolbox, name: str) -> None:
    observations = example(name)
    arguments = {"observations": observations}
    assert validate(toolbox.tools["diagnose"].input_schema, arguments) == []
    result = toolbox.call("diagnose", arguments)
    assert validate(toolbox.tools["diagnose"].output_schema or {}, result.structured) == []
    assert result.structured == json.loads(expert.diagnose(observations).to_json())
    # a report (whole or the summary copy of the text) and its observations go back into explain
    summary = json.loads(result.texts[1])
    for explain_args in ({"report": result.structured, "why_not": "compute"}, {"report": summary, "how": "mfu"},
                         {"observations": result.structured["observations"], "what_if": {"gpu_util": "99%"}}):
        assert validate(toolbox.tools["explain"].input_schema, explain_args) == []
        explained = toolbox.call("explain", explain_args)
        assert validate(toolbox.tools["explain"].output_schema or {}, explained.structured) == []


def test_the_schemas_refuse_what_the_tools_refuse(toolbox: Toolbox) -> None:
    schema = toolbox.tools["diagnose"].input_schema
    assert validate(schema, {"observations": {"gpu_utl": 0.5}})  # an unknown fact
    assert validate(schema, {"observations": {"io_overhead": 0.5}})  # a derived fact
    assert validate(schema, {"observations": {"workload": "baking"}})
    assert validate(schema, {"observations": {}, "extra": 1})
    assert validate(toolbox.tools["answer"].input_schema, {"session": {}, "fact": "io_overhead", "value": 1})
    for bad in ({"gpu_utl": 0.5}, {"io_overhead": 0.5}, {"workload": "baking"}):
        with pytest.raises(ObservationError):
            toolbox.call("diagnose", {"observations": bad})


def test_ingest_output_feeds_diagnose(toolbox: Toolbox) -> None:
    ingested = toolbox.call("ingest", {"paths": [str(TELEMETRY / "dcgmi_dmon.txt")]})
    assert validate(toolbox.tools["ingest"].output_schema or {}, ingested.structured) == []
    arguments = {"observations": {**ingested.structured["observations"], "hardware": "h100-sxm"}}
    assert validate(toolbox.tools["diagnose"].input_schema, arguments) == []
    report = toolbox.call("diagnose", arguments).structured
    assert report["observations"]["gpu_util"]["source"].startswith("dcgmi:")


def test_a_whole_consultation_validates(toolbox: Toolbox) -> None:
    step = toolbox.call("next_question", {"known": {"workload": "training", "hardware": "h100-sxm"}})
    schema = toolbox.tools["answer"].output_schema or {}
    assert validate(schema, step.structured) == []
    assert step.structured["session"]["turns"][0]["reason"] == "volunteered by the user"
    for _ in range(40):  # every question answered "unknown": 31 questions today, then the report
        question = step.structured["question"]
        if question is None:
            break
        arguments = {"session": json.dumps(step.structured["session"]), "fact": question["fact"], "value": "unknown"}
        assert validate(toolbox.tools["answer"].input_schema, arguments) == []
        step = toolbox.call("answer", arguments)
        assert validate(schema, step.structured) == []
    assert step.structured["question"] is None and step.structured["report"] is not None
    assert step.structured["status"]["finished"] and step.structured["status"]["stop_reason"]


# ---- paths ----------------------------------------------------------------------------------------------------------


def test_allowed_paths_resolve_symlinks_and_dotdot(tmp_path: Path) -> None:
    inside, outside = tmp_path / "in", tmp_path / "out"
    inside.mkdir()
    outside.mkdir()
    (outside / "f.txt").write_text("x")
    (inside / "g.txt").write_text("y")
    (inside / "escape").symlink_to(outside)
    (inside / "loop").symlink_to(inside / "loop")
    allowed = AllowedPaths([inside], base=inside)
    assert allowed.resolve("g.txt", "paths[0]") == (inside / "g.txt").resolve()
    # symlinks resolve before `..`, as the kernel opens the path: escape/.. is tmp_path, not `inside`
    assert allowed.resolve("escape/../in/g.txt", "paths[0]") == (inside / "g.txt").resolve()
    for raw in ("../out/f.txt", str(outside / "f.txt"), "escape/f.txt", "escape/../out/f.txt", "/etc/hostname"):
        with pytest.raises(ObservationError, match="outside the allowed directories"):
            allowed.resolve(raw, "paths[0]")
    for raw, message in (("-", "standard input"), ("", "expected a file path"), ("nope.txt", "no such file"),
                         (".", "not a regular file"), ("a\x00b", "NUL")):
        with pytest.raises(ObservationError, match=message):
            allowed.resolve(raw, "paths[0]")
    with pytest.raises(ObservationError, match=r"--allow .*: not a directory"):
        AllowedPaths([tmp_path / "missing"])
    assert AllowedPaths([], base=inside).roots == [inside.resolve()]  # default: the working directory


# ---- compare, only where the library has it ------------------------------------------------------------------------


class FakeComparison(BaseModel):
    """Stands in for the Comparison another module provides."""

    before: str | None
    after: str | None
    sides: list[str]

    def text(self) -> str:
        return f"{self.before} -> {self.after}"


def fake_compare(a: Any, b: Any) -> FakeComparison:
    def name(side: Any) -> str:
        return "report" if isinstance(side, Report) else type(side).__name__

    return FakeComparison(before=getattr(a, "bottleneck", None), after=getattr(b, "bottleneck", None),
                          sides=[name(a), name(b)])


def test_compare_is_a_tool_only_where_expert_compare_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(expert, "compare", raising=False)
    monkeypatch.setitem(sys.modules, "expert.compare", None)  # as if no module expert/compare existed
    absent = create([TELEMETRY])[0]
    assert "compare" not in absent.tools
    with pytest.raises(ObservationError, match="no such tool"):
        absent.call("compare", {"a": {}, "b": {}})

    monkeypatch.setattr(expert, "compare", fake_compare, raising=False)
    present = create([TELEMETRY])[0]
    assert "compare" in present.tools
    spec = present.tools["compare"]
    assert spec.output_schema is not None and set(spec.output_schema["properties"]) == {"before", "after", "sides"}
    before = present.call("diagnose", {"observations": example("data_starved_training")}).structured
    arguments = {"a": {"report": before}, "b": {"observations": example("large_gemm")}}
    assert validate(spec.input_schema, arguments) == []
    result = present.call("compare", arguments)
    assert result.structured == {"before": "input", "after": "compute", "sides": ["report", "report"]}
    assert result.texts[0] == "input -> compute"
    files = present.call("compare", {"a": {"paths": [str(TELEMETRY / "dcgmi_dmon.txt")]}, "b": {"report": before}})
    assert files.structured["sides"] == ["list", "report"]
    with pytest.raises(ObservationError, match="give exactly one of paths, observations, report"):
        present.call("compare", {"a": {"paths": ["x"], "report": before}, "b": {"report": before}})
    with pytest.raises(ObservationError, match="outside the allowed directories"):
        present.call("compare", {"a": {"paths": ["/etc/hostname"]}, "b": {"report": before}})

    module = types.ModuleType("expert.compare")
    module.compare = fake_compare  # type: ignore[attr-defined]
    monkeypatch.setattr(expert, "compare", module, raising=False)
    assert "compare" in create([TELEMETRY])[0].tools  # a module holding the function counts too


# ---- errors through the protocol, in-process -------------------------------------------------------------------


def test_internal_errors_are_one_line_tool_errors(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client

    from expert.mcp import build_server

    box, resources = create([TELEMETRY])

    def broken(arguments: Any, progress: Any) -> Any:
        raise ZeroDivisionError("float division by zero")

    box.tools["hardware"] = dataclasses.replace(box.tools["hardware"], run=broken)
    server = build_server(box, resources)

    async def main() -> tuple[Any, Any]:
        with anyio.fail_after(60):
            async with Client(server) as client:
                return (await client.call_tool("hardware", {"id": "h100-sxm"}),
                        await client.call_tool("diagnose", {"observations": {"gpu_util": 2}}))

    crashed, bad = anyio.run(main)
    assert crashed.is_error and bad.is_error
    text = crashed.content[0].text
    assert text.startswith("hardware: internal error (ZeroDivisionError: float division by zero)")
    assert "\n" not in text and "Traceback" not in text
    assert "Traceback" not in capsys.readouterr().err
    assert bad.content[0].text.startswith("diagnose: some observations are not valid:\n  - gpu_util: 2 is above 1")
