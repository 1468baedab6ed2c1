"""The Model Context Protocol server: the tools and resources on the SDK's low-level `Server`, over stdio.

The low-level server is used because it takes each tool's JSON Schemas as given (expert.mcp.schema builds them from
the pydantic models and the fact vocabulary) instead of deriving them from Python signatures. Tool handlers run in a
worker thread, so a long ingest does not stall the protocol. Every `ExpertError` becomes a tool error (`isError`)
whose text is the message the command line prints; anything else becomes a one-line internal error, never a
traceback.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from .._version import __version__
from ..errors import ExpertError
from .resources import Resources
from .tools import Toolbox

NAME = "dam-expert"
INSTRUCTIONS = """\
dam-expert is a deterministic rule-engine expert: it tells why a training job or inference service is slow along the \
D·A·M axes (Data, Algorithm, Machine) and explains every conclusion back to the facts. It never guesses: with too \
little evidence `bottleneck` is null and `missing` / `next_measurements` say what would settle it.
- Have numbers (utilization, step time, data wait, hardware, dtype)? Call diagnose.
- Have profiler traces or GPU telemetry files? Call diagnose_files (or ingest first to see what they give).
- Not sure what to measure? Run a consultation: next_question, then answer until no question is left.
- Follow-ups on a report: explain (why, why_not, how, what_if, counterfactuals). Catalog entries: hardware.
- Read the resource dam://guide for how to read a report (verdict strength, conflicting evidence, the wasted list); \
dam://facts is the vocabulary of fact names and accepted values."""


_PROGRESS_EVERY_S = 0.25
Ctx = ServerRequestContext[Any]


def _progress(ctx: Ctx) -> Callable[[int, int | None], None]:
    """A progress callback for the worker thread: `notifications/progress` on the request (a no-op unless the
    client asked for progress), at most every quarter second, best effort."""
    last = [0.0]

    def report(done: int, total: int | None) -> None:
        now = time.monotonic()
        if now - last[0] < _PROGRESS_EVERY_S:
            return
        last[0] = now
        with contextlib.suppress(Exception):  # the client went away or ignores progress: reading goes on
            anyio.from_thread.run(ctx.session.report_progress, float(done), None if total is None else float(total),
                                  "reading")

    return report


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def build_server(toolbox: Toolbox, resources: Resources) -> Server[Any]:
    """The low-level server with every tool and resource of `toolbox` and `resources`."""
    annotations = types.ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                                        open_world_hint=False)
    tools = [types.Tool(name=spec.name, title=spec.title, description=spec.description,
                        input_schema=spec.input_schema, output_schema=spec.output_schema,
                        annotations=annotations.model_copy(update={"title": spec.title}))
             for spec in toolbox.tools.values()]

    async def list_tools(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            result = await anyio.to_thread.run_sync(toolbox.call, params.name, params.arguments, _progress(ctx))
        except ExpertError as exc:
            return _error(f"{params.name}: {exc}")
        except Exception as exc:  # a bug: say so in one line, never a traceback
            print(f"dam mcp: internal error in {params.name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return _error(f"{params.name}: internal error ({type(exc).__name__}: {exc}); this is a bug in "
                          "dam-expert, not a problem with the input")
        return types.CallToolResult(content=[types.TextContent(text=t) for t in result.texts],
                                    structured_content=result.structured)

    async def list_resources(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[
            types.Resource(uri=r.uri, name=r.name, title=r.title, description=r.description, mime_type=r.mime_type)
            for r in resources.listed])

    async def list_templates(ctx: Ctx,
                             params: types.PaginatedRequestParams | None) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(uri_template=t.uri_template, name=t.name, title=t.title,
                                   description=t.description, mime_type=t.mime_type)
            for t in resources.templates])

    async def read_resource(ctx: Ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        try:
            text, mime = await anyio.to_thread.run_sync(resources.read, uri)
        except ExpertError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, text=text, mime_type=mime)])

    return Server(NAME, version=__version__, title="dam-expert",
                  description="Why is this ML job slow? A deterministic D·A·M expert system.",
                  instructions=INSTRUCTIONS, on_list_tools=list_tools, on_call_tool=call_tool,
                  on_list_resources=list_resources, on_list_resource_templates=list_templates,
                  on_read_resource=read_resource)


def serve_stdio(server: Server[Any]) -> None:
    """Serve one client over standard input and output until it disconnects."""

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)
