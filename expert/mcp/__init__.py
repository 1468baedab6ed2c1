"""`dam mcp`: the deterministic expert behind Model Context Protocol tools, for AI agents (stdio transport).

Tools: diagnose, ingest, diagnose_files, explain, next_question / answer (a consultation), hardware, and compare
where the library has `expert.compare`. Resources: the fact vocabulary, the hardware catalog, the rules with their
docs, the JSON Schemas and the agent guide (docs/SKILL.md). Tool schemas come from the pydantic models
(expert/mcp/models.py) refined with the vocabulary, as `dam schema` publishes them.

The tools and resources (`Toolbox`, `Resources`) are plain Python; only `build_server` needs the `mcp` SDK
(`pip install 'dam-expert[mcp]'`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .paths import AllowedPaths
from .resources import Resources
from .tools import Toolbox, ToolResult, compare_function

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

    from ..expert import Expert

__all__ = ["AllowedPaths", "Resources", "ToolResult", "Toolbox", "build_server", "compare_function", "create"]


def create(allow: Sequence[str | Path] = (), *, expert: Expert | None = None,
           rules_dirs: Sequence[Path] | None = None, base: Path | None = None) -> tuple[Toolbox, Resources]:
    """The tools and resources over `expert` (default: the shared one on the bundled rules), reading files only
    inside `allow` (default: the working directory). `rules_dirs` are the expert's rule directories (for the docs)."""
    from .._resources import data_dir

    if expert is None:
        from .. import default_expert

        expert = default_expert()
    allowed = AllowedPaths(allow, base)
    dirs = list(rules_dirs) if rules_dirs is not None else [data_dir("rules")]
    return Toolbox(expert, allowed), Resources(expert, dirs)


def build_server(toolbox: Toolbox, resources: Resources) -> Server[Any]:
    """The MCP server (the SDK's low-level Server) over these tools and resources."""
    from .server import build_server as build

    return build(toolbox, resources)
