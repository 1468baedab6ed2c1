"""`dam schema NAME | --all --output-dir DIR`: JSON Schemas of the file formats, for editors and validators."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

EPILOG = """\
examples:
  dam schema rules                            the schema of rule files, on stdout
  dam schema --list                           every schema name
  dam schema --all --output-dir schemas/      write every schema (schemas/NAME.schema.json)
  dam schema --all --output-dir schemas/ --check   exit 1 if the committed schemas are stale

editors: put `# yaml-language-server: $schema=../schemas/rules.schema.json` on the first line of a rule file.
"""


def register(sub: Any) -> None:
    p = sub.add_parser("schema", help="JSON Schemas of rule, rule-test, knowledge-base, observation and report files",
                       description="Print or write the JSON Schemas generated from the pydantic models.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", metavar="NAME", help="a schema name (see --list), e.g. rules, observations")
    p.add_argument("--output", metavar="FILE", help="write the schema to FILE instead of stdout")
    p.add_argument("--all", action="store_true", help="every schema (needs --output-dir)")
    p.add_argument("--output-dir", metavar="DIR", help="directory for --all")
    p.add_argument("--check", action="store_true", help="with --all: exit 1 if a file in DIR differs")
    p.add_argument("--list", action="store_true", help="list the schema names")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .._resources import data_dir
    from ..kb.knowledge import KnowledgeBase
    from ..schemas import SCHEMAS, file_name, render, schema_for, write_all

    if args.list:
        for name, spec in SCHEMAS.items():
            print(f"{name:14s} {spec.description}")
        return 0
    kb = KnowledgeBase.load(data_dir("knowledge_base"))
    if args.all:
        if not args.output_dir:
            print("dam schema: --all needs --output-dir DIR", file=sys.stderr)
            return 2
        directory = Path(args.output_dir)
        if args.check:
            stale = [file_name(n) for n in SCHEMAS if not (directory / file_name(n)).is_file()
                     or (directory / file_name(n)).read_text(encoding="utf-8") != render(schema_for(n, kb))]
            if stale:
                print(f"stale schemas in {directory}: {', '.join(stale)}; regenerate them with "
                      f"`dam schema --all --output-dir {directory}`", file=sys.stderr)
                return 1
            print(f"{len(SCHEMAS)} schemas in {directory} are up to date")
            return 0
        for path in write_all(directory, kb):
            print(f"wrote {path}")
        return 0
    if args.name not in SCHEMAS:
        given = f"unknown schema {args.name!r}; " if args.name else ""
        print(f"dam schema: {given}give a NAME (one of: {', '.join(SCHEMAS)}) or --all --output-dir DIR",
              file=sys.stderr)
        return 2
    text = render(schema_for(args.name, kb))
    if args.output:
        from ..errors import write_output

        write_output(args.output, text)
    else:
        sys.stdout.write(text)
    return 0
