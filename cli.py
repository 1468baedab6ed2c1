"""dam: the command line of dam-expert (a thin layer over the `expert` library)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DESCRIPTION = """\
dam-expert tells you *why* a training job or an inference service is slow, and what to do about it.
It classifies the bottleneck along the D·A·M axes (Data, Algorithm, Machine) with declarative rules
taken from the D·A·M framework, and explains every conclusion back to your observations.
"""

DIAGNOSE_EPILOG = """\
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


def _parse_sets(pairs: Sequence[str]) -> dict[str, str]:
    from expert.errors import ObservationError, Problem

    values: dict[str, str] = {}
    problems = []
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            problems.append(Problem(f"--set {pair}", "expected NAME=VALUE", "e.g. --set gpu_util=62%"))
            continue
        values[name.strip()] = value.strip()
    if problems:
        raise ObservationError(problems, title="cannot read --set")
    return values


def _example_path(name: str) -> Path:
    from expert._resources import examples_dir
    from expert.errors import ObservationError, Problem

    directory = examples_dir()
    for candidate in (directory / name, directory / f"{name}.yaml"):
        if candidate.is_file():
            return candidate
    names = sorted(p.stem for p in directory.glob("*.yaml"))
    raise ObservationError([Problem(f"--example {name}", "no such bundled example", f"one of: {', '.join(names)}")])


def cmd_diagnose(args: argparse.Namespace) -> int:
    import expert
    from expert.observation_file import read_observation_file

    raw: dict[str, Any] = {}
    description = None
    path = _example_path(args.example) if args.example else (Path(args.file) if args.file else None)
    if path is not None:
        obs_file = read_observation_file(path)
        raw.update(obs_file.observations)
        description = obs_file.description
    raw.update(_parse_sets(args.set or []))
    if not raw:
        print("dam diagnose: nothing to diagnose; give an observation FILE, --example NAME or --set NAME=VALUE "
              "(see dam diagnose --help)", file=sys.stderr)
        return 2
    engine = args.engine
    if args.rules_dir or engine != "auto":
        diag = expert.Expert(extra_rules_dirs=args.rules_dir or [], engine=engine)
    else:
        diag = expert.default_expert()
    report = diag.diagnose(raw)
    if args.format == "json":
        text = report.to_json()
    elif args.format == "markdown":
        from expert.render.markdown import render

        text = render(report)
    else:
        from rich.console import Console

        from expert.render.terminal import print_report

        console = Console()
        if description:
            console.print(f"[bold]{description}[/bold]")
        print_report(report, console)
        return 0
    if args.output:
        Path(args.output).write_text(text + ("" if text.endswith("\n") else "\n"), encoding="utf-8")
    else:
        print(text)
    return 0


def cmd_hardware(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    import expert
    from expert.errors import ObservationError, Problem

    kb = expert.default_expert().kb
    console = Console()
    if args.action == "list":
        table = Table(title="Hardware catalog (dense peaks; TFLOP/s, GB/s)")
        for col in ("id", "name", "bf16", "fp8", "fp32", "memory GB/s", "ridge bf16 FLOP/B"):
            table.add_column(col)
        for hw in kb.hardware.values():
            bf16 = hw.peak("bf16") or hw.peak("fp16")
            ridge = f"{bf16 * 1e12 / (hw.memory_bandwidth_gbs * 1e9):.0f}" if bf16 else "—"
            table.add_row(hw.id, hw.name, _opt(bf16), _opt(hw.peak("fp8")), _opt(hw.peak("fp32")),
                          f"{hw.memory_bandwidth_gbs:g}", ridge)
        console.print(table)
        return 0
    hw_id = kb.resolve_hardware(args.id or "")
    if hw_id is None:
        import difflib

        close = difflib.get_close_matches((args.id or "").casefold(), list(kb.hardware), n=3, cutoff=0.4)
        raise ObservationError([Problem(f"hardware {args.id}", "not in the catalog",
                                        f"did you mean {', '.join(close)}?" if close else "see dam hardware list")])
    hw = kb.hardware[hw_id]
    table = Table(title=f"{hw.id}: {hw.name}", show_header=False)
    table.add_column("field")
    table.add_column("value")
    for dtype, peak in hw.peak_tflops.items():
        table.add_row(f"dense {dtype} peak", f"{peak:g} TFLOP/s" if peak is not None else "not published")
    table.add_row("memory", f"{hw.memory_gb:g} GB {hw.memory_type}, {hw.memory_bandwidth_gbs:g} GB/s")
    if hw.host_link:
        table.add_row("host link", f"{hw.host_link} ({hw.host_link_gbs:g} GB/s bidirectional)")
    if hw.scale_up_link:
        table.add_row("scale-up link", hw.scale_up_link + (f" ({hw.scale_up_gbs:g} GB/s)" if hw.scale_up_gbs else ""))
    table.add_row("vendor headline is sparse", "yes (dense shown)" if hw.sparse_headline else "no")
    table.add_row("aliases", ", ".join(hw.aliases))
    table.add_row("source", hw.source)
    if hw.notes:
        table.add_row("notes", hw.notes)
    console.print(table)
    return 0


def _opt(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


def cmd_examples(args: argparse.Namespace) -> int:
    from expert._resources import examples_dir
    from expert.observation_file import read_observation_file

    for path in sorted(examples_dir().glob("*.yaml")):
        print(f"{path.stem:32s} {read_observation_file(path).description or ''}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dam", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version="dam-expert 0.1.0")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    diag = sub.add_parser("diagnose", help="diagnose observations from a file and/or --set",
                          description="Diagnose why a job is slow from observed facts.", epilog=DIAGNOSE_EPILOG,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    diag.add_argument("file", nargs="?", metavar="FILE", help="observation file (YAML or JSON)")
    diag.add_argument("--example", metavar="NAME", help="diagnose a bundled example (see `dam examples`)")
    diag.add_argument("--set", action="append", metavar="NAME=VALUE", help="an observation (repeatable)")
    diag.add_argument("--format", choices=["rich", "json", "markdown"], default="rich", help="output format")
    diag.add_argument("--output", metavar="FILE", help="write json/markdown output to FILE instead of stdout")
    diag.add_argument("--engine", choices=["auto", "durable", "pure"], default="auto",
                      help="rule engine (auto: durable-rules where it loads)")
    diag.add_argument("--rules-dir", action="append", metavar="DIR", help="extra rules directory (repeatable)")
    diag.set_defaults(func=cmd_diagnose)

    hw = sub.add_parser("hardware", help="the hardware catalog", description="Show the hardware catalog.")
    hw.add_argument("action", choices=["list", "show"])
    hw.add_argument("id", nargs="?", help="catalog id or device name (for show)")
    hw.set_defaults(func=cmd_hardware)

    ex = sub.add_parser("examples", help="list the bundled examples")
    ex.set_defaults(func=cmd_examples)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from expert.errors import ExpertError

    try:
        return int(args.func(args))
    except ExpertError as exc:
        print(f"dam {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
