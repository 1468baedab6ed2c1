"""`dam mcp`: serve the expert to AI agents over the Model Context Protocol (stdio)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

EPILOG = """\
An MCP client (Claude Desktop / Code, an IDE, an agent framework) starts this command and talks to it over standard
input and output; it is not meant to be run by hand. Client configuration, e.g.:

  {"mcpServers": {"dam": {"command": "dam", "args": ["mcp", "--allow", "/data/traces"]}}}

tools:      diagnose, ingest, diagnose_files, explain, next_question, answer, hardware (and compare, where the
            library has it)
resources:  dam://facts, dam://hardware, dam://rules, dam://rules/{rule_id}, dam://schemas/{name}, dam://guide

Files named in tool calls (traces, telemetry) must lie inside an --allow directory (default: the working directory);
symlinks and `..` are resolved before the check. Errors come back as tool errors with the messages `dam` prints.
The guide for agents: docs/SKILL.md (also the resource dam://guide).

examples:
  dam mcp                                   serve, reading files under the working directory only
  dam mcp --allow ~/traces --allow /scratch/profiles
  dam mcp --list                            print the tools and resources, then exit
needs: pip install 'dam-expert[mcp]'
"""


def register(sub: Any) -> None:
    p = sub.add_parser("mcp", help="serve the expert to AI agents over the Model Context Protocol (stdio)",
                       description="Start a Model Context Protocol server on standard input/output: the diagnosis, "
                                   "ingestion, explanation, consultation and catalog as tools, the vocabulary, "
                                   "catalog and rule docs as resources.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--allow", action="append", default=[], metavar="DIR",
                   help="a directory tool calls may read files from (repeatable; default: the working directory)")
    p.add_argument("--engine", choices=["auto", "durable", "pure"], default="auto",
                   help="rule engine (auto: durable-rules where it loads)")
    p.add_argument("--rules-dir", action="append", default=[], metavar="DIR",
                   help="extra rules directory, used beside the built-in rules (repeatable)")
    p.add_argument("--list", action="store_true", help="print the tools and resources, then exit")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        import mcp.server.lowlevel  # noqa: F401  (the SDK is an optional extra)
    except ImportError:
        print("dam mcp: the Model Context Protocol SDK (mcp >= 2.3) is not installed; install it with "
              "pip install 'dam-expert[mcp]'", file=sys.stderr)
        return 2
    from .._resources import data_dir
    from ..mcp import build_server, create
    from ._common import make_expert

    toolbox, resources = create(args.allow, expert=make_expert(args),
                                rules_dirs=[data_dir("rules"), *(Path(d) for d in args.rules_dir)])
    if args.list:
        print("tools:")
        for spec in toolbox.tools.values():
            print(f"  {spec.name:15s} {spec.title}")
        print("resources:")
        for r in resources.listed:
            print(f"  {r.uri:22s} {r.title}")
        for t in resources.templates:
            print(f"  {t.uri_template:22s} {t.title}")
        print(f"files are read only inside: {toolbox.allowed.describe()}")
        return 0
    server = build_server(toolbox, resources)
    if sys.stdin.isatty():
        print("dam mcp: serving the Model Context Protocol on stdin/stdout; an MCP client starts this command "
              "(see dam mcp --help). Ctrl-C stops it.", file=sys.stderr)
    from ..mcp.server import serve_stdio

    serve_stdio(server)
    return 0
