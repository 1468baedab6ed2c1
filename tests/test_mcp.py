"""`dam mcp` end to end: the SDK's own client drives a real `dam mcp` subprocess over stdio.

Each test starts the server from this checkout (`python cli.py mcp`, PYTHONPATH set to the repo), talks to it
through `mcp.Client` (which also validates every structured result against the tool's output schema), and compares
what comes back with the library called in-process. Every conversation runs under a deadline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install -e '.[mcp]')")

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent

import expert
from expert._resources import examples_dir
from expert.consult.session import Consultation, answer_from
from expert.mcp import compare_function
from expert.observations.file import read_observation_file

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = ROOT.parent / "shared" / "traces" / "kineto-resnet50"
RESNET = SHARED_TRACES / "resnet50_num_workers_0.pt.trace.json.gz"
TELEMETRY = ROOT / "tests" / "fixtures" / "telemetry"
DEADLINE_S = 120
BASE_TOOLS = {"diagnose", "ingest", "diagnose_files", "explain", "next_question", "answer", "hardware"}


def example(name: str) -> dict[str, Any]:
    return dict(read_observation_file(examples_dir() / f"{name}.yaml").observations)


def text_of(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


def server(allow: list[Path], cwd: Path, errlog: Any) -> Any:
    """The transport that starts `dam mcp` from this checkout."""
    args = [str(ROOT / "cli.py"), "mcp"]
    for directory in allow:
        args += ["--allow", str(directory)]
    env = {"PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8"}
    if "XDG_CACHE_HOME" in os.environ:  # the suite's rule cache (conftest), not ~/.cache: the SDK passes HOME on
        env["XDG_CACHE_HOME"] = os.environ["XDG_CACHE_HOME"]
    return stdio_client(StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(cwd)),
                        errlog=errlog)


@asynccontextmanager
async def connect(tmp_path: Path, allow: list[Path] | None = None, cwd: Path | None = None,
                  mode: str = "auto") -> AsyncIterator[Client]:
    log = (tmp_path / "server-stderr.txt").open("w", encoding="utf-8")
    try:
        async with Client(server(allow or [], cwd or ROOT, log), read_timeout_seconds=DEADLINE_S,
                          mode=mode) as client:
            yield client
    finally:
        log.close()


def converse(tmp_path: Path, body: Callable[[Client], Awaitable[None]], allow: list[Path] | None = None,
             cwd: Path | None = None, mode: str = "auto") -> str:
    """Run one conversation with a fresh server under the deadline; returns what the server wrote on stderr.
    mode "auto" speaks the current protocol; "legacy" the initialize handshake of clients before 2026-07-28."""

    async def main() -> None:
        with anyio.fail_after(DEADLINE_S):
            async with connect(tmp_path, allow, cwd, mode) as client:
                await body(client)

    anyio.run(main)
    stderr = (tmp_path / "server-stderr.txt").read_text(encoding="utf-8")
    assert "Traceback" not in stderr, stderr
    return stderr


def assert_tool_error(result: CallToolResult, *needles: str) -> str:
    text = text_of(result)
    assert result.is_error, text
    assert "Traceback" not in text and 'File "' not in text, text
    for needle in needles:
        assert needle in text, (needle, text)
    return text


# ---- discovery ------------------------------------------------------------------------------------------------------


def test_lists_tools_with_schemas_and_resources(tmp_path: Path) -> None:
    async def body(client: Client) -> None:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        expected = BASE_TOOLS | ({"compare"} if compare_function() is not None else set())
        assert set(tools) == expected
        for tool in tools.values():
            assert tool.input_schema["type"] == "object", tool.name
            assert tool.description and len(tool.description) > 80, tool.name
            assert tool.annotations is not None and tool.annotations.read_only_hint
        assert tools["diagnose"].input_schema["required"] == ["observations"]
        facts = tools["diagnose"].input_schema["properties"]["observations"]["properties"]
        assert "gpu_util" in facts and "fraction" in facts["gpu_util"]["description"]
        assert "io_overhead" not in facts  # derived facts cannot be given
        assert {"bottleneck", "recommended", "wasted"} <= set(tools["diagnose"].output_schema["properties"])
        assert set(tools["explain"].input_schema["properties"]) >= {"report", "why", "why_not", "how", "what_if"}
        assert set(tools["answer"].input_schema["required"]) == {"session", "fact", "value"}

        resources = {str(r.uri): r for r in (await client.list_resources()).resources}
        assert {"dam://facts", "dam://hardware", "dam://rules", "dam://guide"} <= set(resources)
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert templates == {"dam://rules/{rule_id}", "dam://schemas/{name}"}

        vocabulary = json.loads((await client.read_resource("dam://facts")).contents[0].text)
        assert {f["name"] for f in vocabulary["facts"]} == set(expert.default_expert().kb.facts)
        catalog = json.loads((await client.read_resource("dam://hardware")).contents[0].text)
        assert "h100-sxm" in {h["id"] for h in catalog["hardware"]}
        rules = (await client.read_resource("dam://rules")).contents[0].text
        assert rules.startswith("# Rule reference")
        rule_id = next(iter(expert.default_expert().ruleset.rules))
        page = (await client.read_resource(f"dam://rules/{rule_id}")).contents[0].text
        assert page.startswith(f"# `{rule_id}`") and "**Source.**" in page
        schema = json.loads((await client.read_resource("dam://schemas/report")).contents[0].text)
        assert schema["title"] == "dam-expert report"
        guide = (await client.read_resource("dam://guide")).contents[0].text
        assert "wasted" in guide and "insufficient evidence" in guide
        with pytest.raises(MCPError, match="no such rule"):
            await client.read_resource("dam://rules/no-such-rule")

    converse(tmp_path, body)


# ---- diagnosis ------------------------------------------------------------------------------------------------------


def test_diagnose_an_example_returns_the_report(tmp_path: Path) -> None:
    observations = example("data_starved_training")
    expected = json.loads(expert.diagnose(observations).to_json())
    undecided = example("partial_evidence")

    async def body(client: Client) -> None:
        result = await client.call_tool("diagnose", {"observations": observations})
        assert not result.is_error, text_of(result)
        assert result.structured_content == expected  # the whole report, as `dam diagnose --format json` writes it
        assert result.structured_content["bottleneck"] == "input"
        head = result.content[0].text
        assert head.startswith("Verdict: input (Input-bound (data-starved); confirmed")
        wasted = next(line for line in head.splitlines() if line.startswith("Wasted effort for this bottleneck: "))
        assert "; lower_precision (data-starved" in wasted
        summary = json.loads(result.content[1].text)
        assert "evaluations" not in summary and summary["wasted"] == expected["wasted"]

        full = await client.call_tool("diagnose", {"observations": observations, "detail": "full"})
        assert json.loads(full.content[1].text) == expected

        none = await client.call_tool("diagnose", {"observations": undecided})
        assert none.structured_content["bottleneck"] is None
        assert none.content[0].text.startswith("No verdict: the evidence is insufficient")

    converse(tmp_path, body)


def test_bad_input_comes_back_as_the_cli_message(tmp_path: Path) -> None:
    bad = {"gpu_util": 1.7, "gpu_utl": 0.5, "step_time_s": "3 parsecs"}
    with pytest.raises(expert.ObservationError) as raised:
        expert.diagnose(bad)
    cli = subprocess.run([sys.executable, str(ROOT / "cli.py"), "diagnose", "--set", "gpu_util=1.7",
                          "--set", "gpu_utl=0.5", "--set", "step_time_s=3 parsecs"],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert cli.returncode == 2

    async def body(client: Client) -> None:
        result = await client.call_tool("diagnose", {"observations": bad})
        text = assert_tool_error(result, "gpu_util: 1.7 is above 1", "did you mean 1.7%?",
                                 "accepted: a fraction in [0, 1]", "gpu_utl: unknown fact (did you mean gpu_util")
        assert text == f"diagnose: {raised.value}"
        # the same words as the command line, which also names where each fact came from (--set)
        assert cli.stderr.strip().replace("  - --set: ", "  - ") == f"dam diagnose: {raised.value}"

        assert_tool_error(await client.call_tool("diagnose", {"obs": {}}),
                          "obs: unknown argument", "observations: missing (required)")
        assert_tool_error(await client.call_tool("diagnose", {"observations": "gpu_util=0.5"}),
                          "observations: Input should be a valid dictionary")
        assert_tool_error(await client.call_tool("diagnose", {"observations": {}}), "nothing to diagnose")
        assert_tool_error(await client.call_tool("hardware", {"id": "h1000"}),
                          "hardware h1000: not in the catalog (did you mean ", "h100-sxm")
        assert_tool_error(await client.call_tool("explain", {"observations": {"gpu_util": 0.5}, "why": "verdict",
                                                             "how": "mfu"}), "ask one question per call")
        assert_tool_error(await client.call_tool("no_such_tool", {}), "no such tool")
        assert_tool_error(await client.call_tool("ingest", {"paths": ["-"]}), "standard input is the MCP channel")
        assert_tool_error(await client.call_tool("ingest", {"paths": [str(TELEMETRY / "nvidia_smi_noheader.csv")],
                                                            "steps": "x:y"}), "--steps x:y: expected START:END")
        # the server is still serving after all of that
        assert not (await client.call_tool("hardware", {"id": "h100-sxm"})).is_error

    converse(tmp_path, body)


def test_paths_outside_the_allowed_directories_are_refused(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    source = TELEMETRY / "dcgmi_dmon.txt"
    inside = allowed / "dcgmi_dmon.txt"
    inside.write_bytes(source.read_bytes())
    secret = tmp_path / "secret.txt"
    secret.write_bytes(source.read_bytes())
    (allowed / "link.txt").symlink_to(secret)
    (allowed / "sub").mkdir()
    expected = expert.ingest_result(str(source)).observations.values()

    async def body(client: Client) -> None:
        for raw in (str(secret), "../secret.txt", "sub/../../secret.txt", "link.txt", str(allowed / "link.txt")):
            text = assert_tool_error(await client.call_tool("ingest", {"paths": [raw]}),
                                     "outside the allowed directories", str(allowed.resolve()))
            assert str(secret.resolve()) in text  # the resolved path is named
        assert_tool_error(await client.call_tool("diagnose_files", {"paths": ["../secret.txt"], "facts": {}}),
                          "outside the allowed directories")
        assert_tool_error(await client.call_tool("ingest", {"paths": ["missing.txt"]}), "missing.txt: no such file")
        for raw in ("dcgmi_dmon.txt", "sub/../dcgmi_dmon.txt", str(inside)):
            seen: list[tuple[float, float | None]] = []

            async def on_progress(done: float, total: float | None, message: str | None,
                                  seen: list[tuple[float, float | None]] = seen) -> None:
                seen.append((done, total))

            result = await client.call_tool("ingest", {"paths": [raw]}, progress_callback=on_progress)
            assert not result.is_error, text_of(result)
            values = {k: v["value"] for k, v in result.structured_content["observations"].items()}
            assert values == expected
            assert seen and all(total == inside.stat().st_size and done <= total for done, total in seen)

    converse(tmp_path, body, allow=[allowed], cwd=allowed)


@pytest.mark.skipif(not RESNET.is_file(), reason=f"the shared resnet50 trace is not at {RESNET}")
def test_ingest_and_diagnose_a_shared_trace(tmp_path: Path) -> None:
    ingested = expert.ingest_result(str(RESNET.resolve()))  # the server reads the resolved path
    raw = {k: v for k, v in ingested.to_observation_file()["observations"].items() if v["value"] != "unknown"}
    facts = {"dtype": "fp32", "batch_size": 32}
    expected = json.loads(expert.diagnose({**raw, **facts}).to_json())

    async def body(client: Client) -> None:
        result = await client.call_tool("ingest", {"paths": [str(RESNET)]})
        assert not result.is_error, text_of(result)
        data = result.structured_content
        assert {k: v["value"] for k, v in data["observations"].items()} == ingested.observations.values()
        assert data["observations"]["num_workers"]["value"] == 0
        assert data["not_derived"] == ingested.not_derived and data["files"][0]["format"] == "kineto"
        # the ingested observations go straight into diagnose
        direct = await client.call_tool("diagnose", {"observations": {**data["observations"], **facts}})
        both = await client.call_tool("diagnose_files", {"paths": [str(RESNET)], "facts": facts})
        assert not both.is_error, text_of(both)
        # diagnose_files also carries the trace's time breakdown (as `dam diagnose --from` does); the rest is equal
        assert both.structured_content is not None and both.structured_content["time_breakdown"] is not None
        assert {**both.structured_content, "time_breakdown": None} == expected == direct.structured_content
        named = "Not derived from resnet50_num_workers_0.pt.trace.json.gz: " in both.content[0].text
        assert named == bool(ingested.not_derived)  # what the trace could not give is said, when anything

    converse(tmp_path, body, allow=[SHARED_TRACES])


def test_clients_of_the_handshake_era_get_the_same_tools(tmp_path: Path) -> None:
    observations = example("llm_decode_batch1")
    expected = json.loads(expert.diagnose(observations).to_json())

    async def body(client: Client) -> None:
        assert {t.name for t in (await client.list_tools()).tools} >= BASE_TOOLS
        result = await client.call_tool("diagnose", {"observations": observations})
        assert result.structured_content == expected and result.structured_content["bottleneck"] == "memory"
        assert_tool_error(await client.call_tool("diagnose", {"observations": {"dtype": "fp7"}}),
                          "dtype: 'fp7' is not one of")
        assert "fraction" in (await client.read_resource("dam://facts")).contents[0].text

    converse(tmp_path, body, mode="legacy")


# ---- explanations and consultation ----------------------------------------------------------------------------------


def test_explain_answers_as_dam_explain(tmp_path: Path) -> None:
    observations = example("data_starved_training")
    report = expert.diagnose(observations)

    async def body(client: Client) -> None:
        why_not = await client.call_tool("explain", {"observations": observations, "why_not": "compute"})
        assert not why_not.is_error, text_of(why_not)
        assert why_not.structured_content["text"] == report.why_not("compute").text()
        assert why_not.structured_content["why_not"]["attempts"]
        full = (await client.call_tool("diagnose", {"observations": observations})).structured_content
        why = await client.call_tool("explain", {"report": full})
        assert why.structured_content["kind"] == "why" and why.structured_content["subject"] == "verdict"
        assert why.structured_content["text"] == report.why("verdict").text()
        assert not why.structured_content["rediagnosed"]
        summary = json.loads((await client.call_tool("diagnose", {"observations": observations})).content[1].text)
        what_if = await client.call_tool("explain", {"report": summary, "what_if": {"data_wait_s": "10 ms"}})
        assert what_if.structured_content["rediagnosed"]
        assert what_if.structured_content["what_if"]["verdict_after"] is None
        assert what_if.structured_content["text"] == report.what_if({"data_wait_s": "10 ms"}).text()
        how = await client.call_tool("explain", {"observations": observations, "how": "io_overhead"})
        assert "data_wait_s" in how.structured_content["text"]

    converse(tmp_path, body)


def test_a_consultation_over_the_protocol(tmp_path: Path) -> None:
    facts = example("data_starved_training")
    local = Consultation()

    async def body(client: Client) -> None:
        step = (await client.call_tool("next_question", {})).structured_content
        first = local.next_question()
        assert first is not None and step["question"]["fact"] == first.fact == "job"
        answered = await client.call_tool("answer", {"session": step["session"], "fact": "job", "value": "training"})
        assert not answered.is_error, text_of(answered)
        step = answered.structured_content
        local.answer("job", "training")
        assert step["turn"]["asked"] and step["turn"]["fact"] == "job"
        assert step["session"]["questions_asked"] == 1
        second = local.next_question()
        assert second is not None and step["question"]["fact"] == second.fact
        bad = await client.call_tool("answer", {"session": step["session"], "fact": "gpu_util", "value": "lots"})
        assert_tool_error(bad, "gpu_util: 'lots' is not a number")
        broken = await client.call_tool("answer", {"session": {"turns": "x"}, "fact": "gpu_util", "value": 0.5})
        assert_tool_error(broken, "cannot read the saved consultation")
        # play it to the end as a user holding the example's facts would
        for _ in range(25):
            question = step["question"]
            if question is None:
                break
            local_q = local.next_question()
            assert local_q is not None and local_q.fact == question["fact"]
            value = answer_from(local_q, facts)
            local.answer(question["fact"], value)
            result = await client.call_tool("answer", {"session": step["session"], "fact": question["fact"],
                                                       "value": value})
            assert not result.is_error, text_of(result)
            step = result.structured_content
        assert step["question"] is None and step["status"]["finished"]
        assert step["report"]["bottleneck"] == local.report().bottleneck == "input"
        remote = [(t["fact"], t["value"], t["asked"]) for t in step["session"]["turns"]]
        assert remote == [(t.fact, t.value, t.asked) for t in local.transcript]

    converse(tmp_path, body)


# ---- the server as a command ----------------------------------------------------------------------------------------


def test_dam_mcp_command_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    listed = subprocess.run([sys.executable, str(ROOT / "cli.py"), "mcp", "--list"], capture_output=True, text=True,
                            timeout=120, env=env)
    assert listed.returncode == 0, listed.stderr
    assert "diagnose_files" in listed.stdout and "dam://rules" in listed.stdout
    missing = subprocess.run([sys.executable, str(ROOT / "cli.py"), "mcp", "--allow", str(tmp_path / "nope")],
                             capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert missing.returncode == 2
    assert "--allow" in missing.stderr and "not a directory" in missing.stderr and "Traceback" not in missing.stderr
    without_sdk = subprocess.run([sys.executable, "-c", "import sys; sys.modules['mcp'] = None; "
                                  "from expert.commands import main; sys.exit(main(['mcp']))"],
                                 capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert without_sdk.returncode == 2
    assert "pip install 'dam-expert[mcp]'" in without_sdk.stderr and "Traceback" not in without_sdk.stderr
