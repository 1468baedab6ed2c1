"""`dam compare`: before against after (traces, observation files or saved reports), and a regression gate."""

from __future__ import annotations

import argparse
import io
import sys
from typing import Any

EPILOG = """\
each side is one of (mixable):
  a trace/telemetry set   PyTorch profiler trace, nvidia-smi CSV/dmon, dcgmi dmon, dcgm-exporter text (dam ingest)
  an observation file     YAML/JSON of facts (dam ingest --as yaml, or written by hand)
  a saved report          dam diagnose ... --format json --output report.json (or --export json)
  several files per side: --before TRACE DCGM.txt --after TRACE2 DCGM2.txt (traces merge; observation files add
  facts the traces cannot give, such as batch_size)

examples:
  dam compare before.json.gz after.json.gz
  dam compare report_before.json after.pt.trace.json.gz --format markdown --output comment.md
  dam compare base.json.gz pr.json.gz --fail-if 'step_time_s > +5%' --fail-if 'verdict changed'
  dam compare a.yaml b.yaml --format json | jq .facts

--fail-if CONDITION (repeatable; the gate fails when any holds):
  step_time_s > +5%          relative change (signed percentage): after / before - 1
  step_time_s > +20ms        absolute change (signed number, units of the fact's dimension)
  gpu_util < -5 points       absolute change of a fraction, in percentage points
  mfu < 30%                  the after value (unsigned); dtype != bf16 for enum facts
  speedup < 0.95             before step time / after step time
  data_wait_s changed        moved beyond its own noise (a setting: any difference)
  verdict changed            the bottleneck moved; verdict == input / verdict != none: the after verdict
  new finding [ID]           a finding appeared (any, or that one); cleared finding [ID]
  combine with and, or, not and parentheses: 'step_time_s > +5% and step_time_s changed'
  A condition that needs a fact a side does not have fails the gate (fails closed), with the reason.

beyond noise: with per-step spread on both sides (ProfilerStep windows, telemetry samples) a change counts from 3
standard errors of the difference of the means; without, from 10% of the before value (fractions: and 1 point);
settings (hardware, dtype, batch_size, ...) on any difference. The rule and its sources: knowledge_base/compare.yaml.

exit codes: 0 compared (gate passed or none given), 1 a --fail-if condition held (or could not be evaluated),
2 bad input (the message names the file or the condition and what is accepted).
"""


_FILE_COLUMNS = 100  # the width of the rich view written to --output (dam diagnose writes its report as wide)


def register(sub: Any) -> None:
    p = sub.add_parser("compare", help="before against after: what moved, the verdicts, and a regression gate",
                       description="Compare two runs (before and after a change): the facts that moved beyond their "
                                   "noise, the verdict and axes, findings that appeared or cleared, where GPU time "
                                   "went, whether the change looks like one of the before report's recommendations "
                                   "and how its speed-up compares with the predicted bound; gate a CI job on it.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("before", nargs="?", metavar="A", help="before: a trace, telemetry log, observation file or report")
    p.add_argument("after", nargs="?", metavar="B", help="after: the same kinds")
    p.add_argument("--before", dest="before_files", nargs="+", default=[], metavar="FILE",
                   help="before as several files (instead of A)")
    p.add_argument("--after", dest="after_files", nargs="+", default=[], metavar="FILE",
                   help="after as several files (instead of B)")
    p.add_argument("--fail-if", action="append", default=[], metavar="CONDITION",
                   help="fail (exit 1) when the condition holds, e.g. 'step_time_s > +5%%' (repeatable; see below)")
    p.add_argument("--format", choices=["rich", "json", "markdown"], default="rich",
                   help="output: rich (terminal), json (the Comparison, for tools), markdown (a pull-request comment)")
    p.add_argument("--output", metavar="FILE",
                   help="write the output to FILE instead of stdout (rich: as plain text, 100 columns wide)")
    p.add_argument("--engine", choices=["auto", "durable", "pure"], default="auto",
                   help="rule engine (auto: durable-rules where it loads)")
    p.add_argument("--rules-dir", action="append", default=[], metavar="DIR",
                   help="extra rules directory, used beside the built-in rules for both sides (repeatable)")
    from .ingest import add_input_options

    add_input_options(p.add_argument_group("trace and telemetry options (both sides)"),
                      format_flag="--input-format")
    p.set_defaults(func=run)


def _side(positional: str | None, files: list[str], what: str) -> list[str]:
    from ..errors import ObservationError, Problem

    letter = "A" if what == "before" else "B"
    if positional and files:
        raise ObservationError([Problem(what, f"given twice, as {letter} and with --{what}",
                                        f"give either {letter} or --{what} FILE...")], title="cannot compare")
    chosen = [positional] if positional else files
    if not chosen:
        raise ObservationError([Problem(what, "missing", "dam compare A B, or --before FILE... --after FILE...")],
                               title="cannot compare")
    return chosen


def _write(text: str, output: str | None) -> None:
    from ..errors import write_output

    text = text if text.endswith("\n") else text + "\n"
    if output is None:
        sys.stdout.write(text)
        return
    write_output(output, text)


def run(args: argparse.Namespace) -> int:
    from ..compare.compute import compare
    from ..compare.sides import IngestOptions
    from ._common import make_expert
    from .ingest import _gpus, progress_bar

    before = _side(args.before, args.before_files, "before")
    after = _side(args.after, args.after_files, "after")
    expert = make_expert(args)
    columns = [c.strip() for c in args.columns.split(",")] if args.columns else None
    with progress_bar([*before, *after]) as progress:
        options = IngestOptions(format=args.input_format, steps=args.steps, window=args.window,
                                samples=args.samples, gpus=_gpus(args.gpu), columns=columns, progress=progress)
        comparison = compare(before if len(before) > 1 else before[0], after if len(after) > 1 else after[0],
                             expert=expert, fail_if=args.fail_if, ingest=options)
    if args.format == "json":
        _write(comparison.to_json(), args.output)
    elif args.format == "markdown":
        from ..compare.render import markdown

        _write(markdown(comparison, expert.kb), args.output)
    else:
        from ..compare.render import print_comparison
        from ..report.render.console import SafeConsole as Console

        if args.output is None:
            print_comparison(comparison, Console(), expert.kb)
        else:  # as `dam diagnose --output` does: plain text, no colour codes, for a file read later
            console = Console(record=True, file=io.StringIO(), width=_FILE_COLUMNS)
            print_comparison(comparison, console, expert.kb)
            _write(console.export_text(), args.output)
    if not comparison.gate.passed:
        for reason in comparison.gate.failed:
            print(f"dam compare: gate failed: {reason}", file=sys.stderr)
        return 1
    return 0
