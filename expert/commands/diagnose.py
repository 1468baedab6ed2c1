"""`dam diagnose`: observations from a file, a bundled example and/or --set -> a report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ._common import example_path, parse_sets

EPILOG = """\
examples:
  dam diagnose examples/data_starved_training.yaml
  dam diagnose --example llm_decode_batch1 --format markdown
  dam diagnose --set hardware=h100-sxm --set dtype=bf16 --set gpu_util=45% \\
               --set data_wait_s=120ms --set step_time_s=300ms
  dam diagnose run.yaml --set host_cpu_util=95%     (--set overrides the file)

values: fractions accept 0.62 or 62%; times accept units (12 ms, 0.3 s); counts accept 7B / 70M;
bandwidth accepts 3.35 TB/s. "unknown" leaves a fact out. Fact names: knowledge_base/facts.yaml.
exit codes: 0 diagnosed, 2 invalid input (the message names the field and the accepted range).
"""


def register(sub: Any) -> None:
    p = sub.add_parser("diagnose", help="diagnose observations from a file and/or --set",
                       description="Diagnose why a job is slow from observed facts.", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", nargs="?", metavar="FILE", help="observation file (YAML or JSON)")
    p.add_argument("--from", dest="from_files", nargs="+", default=[], metavar="TRACE",
                   help="ingest profiler traces / GPU telemetry first (see dam ingest --help); several files merge; "
                        "FILE, --example and --set override what they give")
    p.add_argument("--example", metavar="NAME", help="diagnose a bundled example (see `dam examples`)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="an observation (repeatable)")
    p.add_argument("--format", choices=["rich", "json", "markdown"], default="rich", help="output format")
    p.add_argument("--output", metavar="FILE", help="write json/markdown output to FILE instead of stdout")
    p.add_argument("--export", choices=["markdown", "mermaid", "dot", "graphml", "json", "html"], metavar="FORMAT",
                   help="write an export instead (with --output FILE): markdown postmortem, mermaid, dot, graphml, "
                        "json (node-link + report, lossless) or html (self-contained)")
    p.add_argument("--engine", choices=["auto", "durable", "pure"], default="auto",
                   help="rule engine (auto: durable-rules where it loads)")
    p.add_argument("--rules-dir", action="append", default=[], metavar="DIR",
                   help="extra rules directory, used beside the built-in rules (repeatable)")
    from .ingest import add_input_options

    add_input_options(p.add_argument_group("--from options"), format_flag="--from-format")
    p.set_defaults(func=run)


def gather(args: argparse.Namespace) -> tuple[dict[str, Any], str | None]:
    """The raw observations named on the command line (file or example, then --set), and a description."""
    from ..observation_file import read_observation_file

    raw: dict[str, Any] = {}
    description = None
    if getattr(args, "from_files", None):
        from .ingest import ingested_observations

        observations, result = ingested_observations(args, args.from_files, make_expert(args).kb)
        raw.update(observations)
        description = "Diagnosed from " + ", ".join(f"{f.name} ({f.format})" for f in result.files)
        args.time_breakdown = result.time_breakdown  # where the GPU time goes, for the report
    path = example_path(args.example) if args.example else (Path(args.file) if args.file else None)
    if path is not None:
        obs_file = read_observation_file(path)
        raw.update(obs_file.observations)
        description = obs_file.description or description
        if obs_file.time_breakdown is not None:
            args.time_breakdown = obs_file.time_breakdown
    raw.update(parse_sets(args.set))
    return raw, description


def make_expert(args: argparse.Namespace) -> Any:
    """The default shared Expert, or a custom one for --rules-dir / --engine."""
    import expert

    if args.rules_dir or args.engine != "auto":
        return expert.Expert(extra_rules_dirs=args.rules_dir, engine=args.engine)
    return expert.default_expert()


def emit(report: Any, fmt: str, output: str | None, description: str | None = None) -> None:
    """Print (or write) a report in the chosen format."""
    if fmt == "rich":
        from rich.console import Console

        from ..render.terminal import print_report

        console = Console()
        if description:
            console.print(f"[bold]{description}[/bold]")
        print_report(report, console)
        return
    if fmt == "json":
        text = report.to_json()
    else:
        from ..export.markdown import postmortem

        text = postmortem(report, title="D·A·M diagnosis")
    if output:
        Path(output).write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


def run(args: argparse.Namespace) -> int:
    raw, description = gather(args)
    if not raw and not getattr(args, "from_files", None):
        print("dam diagnose: nothing to diagnose; give an observation FILE, --example NAME or --set NAME=VALUE "
              "(see dam diagnose --help)", file=sys.stderr)
        return 2
    # a trace that gives nothing to judge is diagnosed all the same: a report with no verdict, not an input error
    report = make_expert(args).diagnose(raw, time_breakdown=getattr(args, "time_breakdown", None))
    if args.export:
        from ..export import export, write

        if args.output:
            write(report, args.export, args.output)
        else:
            sys.stdout.write(export(report, args.export))
        return 0
    emit(report, args.format, args.output, description)
    return 0
