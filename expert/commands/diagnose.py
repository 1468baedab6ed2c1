"""`dam diagnose`: observations from a file, a bundled example and/or --set -> a report."""

from __future__ import annotations

import argparse
import io
import sys
from typing import Any

from ..errors import ObservationError, Problem
from ._common import (
    add_hardware_file_option,
    example_path,
    make_expert,
    observation_path,
    parse_sets,
    write_text,
)

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
    p.add_argument("--output", metavar="FILE", help="write the report to FILE instead of stdout (rich: as plain text)")
    p.add_argument("--export", choices=["markdown", "mermaid", "dot", "graphml", "json", "html"], metavar="FORMAT",
                   help="write an export instead (with --output FILE): markdown postmortem, mermaid, dot, graphml, "
                        "json (node-link + report, lossless) or html (self-contained)")
    p.add_argument("--engine", choices=["auto", "durable", "pure"], default="auto",
                   help="rule engine (auto: durable-rules where it loads)")
    p.add_argument("--rules-dir", action="append", default=[], metavar="DIR",
                   help="extra rules directory, used beside the built-in rules (repeatable)")
    from .ingest import add_input_options

    add_hardware_file_option(p)

    add_input_options(p.add_argument_group("--from options"), format_flag="--from-format")
    p.set_defaults(func=run)


def gather(args: argparse.Namespace, origins: dict[str, str] | None = None) -> tuple[dict[str, Any], str | None]:
    """The raw observations named on the command line (file or example, then --set), and a description. The
    per-rank figures of a multi-GPU job (from --from traces or the file) are left in `args.ranks`."""
    from .._loadcache import bundled_yaml
    from ..observations.file import read_observation_file

    raw: dict[str, Any] = {}
    description = None
    args.ranks = []
    if getattr(args, "from_files", None):
        from .ingest import ingested_observations

        observations, result = ingested_observations(args, args.from_files, make_expert(args).kb)
        raw.update(observations)
        args.ranks = list(result.observations.ranks)
        description = "Diagnosed from " + ", ".join(f"{f.name} ({f.format})" for f in result.files)
        args.time_breakdown = result.time_breakdown  # where the GPU time goes, for the report
    path = example_path(args.example) if args.example else (observation_path(args.file, "diagnose") if args.file
                                                              else None)
    if path is not None:
        obs_file = read_observation_file(path, parse_yaml=bundled_yaml) if args.example else read_observation_file(path)
        raw.update(obs_file.observations)
        args.ranks = list(obs_file.ranks or args.ranks)
        description = obs_file.description or description
        if origins is not None:
            origins.update(dict.fromkeys(obs_file.observations, str(path)))
        if obs_file.time_breakdown is not None:
            args.time_breakdown = obs_file.time_breakdown
    sets = parse_sets(args.set)
    raw.update(sets)
    if origins is not None:
        origins.update(dict.fromkeys(sets, "--set"))
    return raw, description


def _placed(exc: ObservationError, origins: dict[str, str]) -> ObservationError:
    """The same problems, each prefixed with where its fact came from (a file, or --set)."""
    problems = [Problem(f"{origins[p.where]}: {p.where}", p.message, p.hint) if p.where in origins else p
                for p in exc.problems]
    return ObservationError(problems, title=exc.title)


def emit(report: Any, fmt: str, output: str | None, description: str | None = None) -> None:
    """Print (or write) a report in the chosen format."""
    if fmt == "rich":
        from rich.text import Text

        from ..report.render.console import SafeConsole as Console
        from ..report.render.terminal import print_report

        console = Console(record=output is not None, file=io.StringIO() if output else None,
                          width=100 if output else None)
        if description:
            console.print(Text(description, style="bold"))
        print_report(report, console)
        if output is None:
            return
        text = console.export_text()  # plain text, no colour codes: a file is read later, not on this terminal
    elif fmt == "json":
        text = report.to_json()
    else:
        from ..report.render.markdown import postmortem

        text = postmortem(report, title="D·A·M diagnosis")
    if output:
        write_text(output, text if text.endswith("\n") else text + "\n")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


def run(args: argparse.Namespace) -> int:
    origins: dict[str, str] = {}
    raw, description = gather(args, origins)
    if not raw and not getattr(args, "from_files", None):
        from ..errors import printable

        file = getattr(args, "file", None)
        given = f"{printable(file)} holds no observations" if file else "nothing to diagnose"
        print(f"dam diagnose: {given}; give an observation FILE (a mapping of fact names to values), --example NAME "
              "or --set NAME=VALUE (see dam diagnose --help)", file=sys.stderr)
        return 2
    # a trace that gives nothing to judge is diagnosed all the same: a report with no verdict, not an input error
    diagnostician = make_expert(args)
    breakdown = getattr(args, "time_breakdown", None)
    try:
        if args.ranks:  # the rank table of a multi-GPU job travels with the (validated) observations
            report = diagnostician.diagnose(diagnostician.observations(raw).model_copy(update={"ranks": args.ranks}),
                                            time_breakdown=breakdown)
        else:
            report = diagnostician.diagnose(raw, time_breakdown=breakdown)
    except ObservationError as exc:
        raise _placed(exc, origins) from None
    if args.export:
        from ..report.render import export, write

        if args.output:
            write(report, args.export, args.output)
        else:
            sys.stdout.write(export(report, args.export))
        return 0
    emit(report, args.format, args.output, description)
    return 0
