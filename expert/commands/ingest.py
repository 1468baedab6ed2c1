"""`dam ingest`: profiler traces and GPU telemetry -> observations (table, or a file `dam diagnose` reads)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

EPILOG = """\
inputs (--format auto tells them apart):
  kineto           PyTorch profiler trace, .json or .json.gz (prof.export_chrome_trace / tensorboard_trace_handler)
  nvidia-smi       nvidia-smi --query-gpu=timestamp,index,name,utilization.gpu --format=csv -l 1
  nvidia-smi-dmon  nvidia-smi dmon -s u
  dcgmi            dcgmi dmon -e 203,1002,1004,1005
  prometheus       dcgm-exporter text (curl -s localhost:9400/metrics)

examples:
  dam ingest trace.json.gz                         a table of the facts, their sources, and what is missing
  dam ingest trace.json.gz dcgm.txt --as yaml --output run.yaml ; dam diagnose run.yaml
  dam ingest trace.json.gz --steps 3:8             keep ProfilerStep#3 ... #8
  dam ingest smi.csv --window 60:300               seconds 60 to 300 of the log
  dam diagnose --from trace.json.gz dcgm.txt       ingest and diagnose in one go

For a profiler trace the table is followed by where the GPU time goes (kernel classes, top kernels and operators with
their intensity and share of the roofline, why the GPU idles); --as json|yaml writes it as `time_breakdown`, which
`dam diagnose FILE` carries into the report. Record with record_shapes=True for per-operator FLOPs.
Several files merge (a trace plus a DCGM log of the same run); when two measure the same fact the trace wins over
DCGM, and DCGM over nvidia-smi. --format names the INPUT format; --as names the OUTPUT format.
exit codes: 0 ingested, 2 unreadable or malformed input (the message names the file and line).
"""

_PROGRESS_MIN_BYTES = 16 << 20


def add_input_options(p: argparse.ArgumentParser, *, format_flag: str = "--format") -> None:
    """Options shared by `dam ingest` and `dam diagnose --from`."""
    from ..ingest import FORMATS

    p.add_argument(format_flag, dest="input_format", choices=["auto", *FORMATS], default="auto",
                   help="input format (default: auto-detect)")
    p.add_argument("--steps", metavar="A:B", help="ProfilerStep numbers to keep, inclusive (traces): 2:5, 3:, :8, 7")
    p.add_argument("--window", metavar="A:B", help="seconds from the start of the recording to keep: 10:70")
    p.add_argument("--samples", metavar="A:B", help="sample numbers to keep in telemetry logs (1-based): 5:60")
    p.add_argument("--gpu", metavar="N[,N]", help="device indices to keep (default: all, averaged)")
    p.add_argument("--columns", metavar="F,F,...",
                   help="the --query-gpu fields of an nvidia-smi CSV written with noheader")


def register(sub: Any) -> None:
    p = sub.add_parser("ingest", help="turn profiler traces and GPU telemetry into observations",
                       description="Read PyTorch profiler traces, nvidia-smi, dcgmi dmon or dcgm-exporter output and "
                                   "print the facts they give, where each came from, and what could not be derived.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", metavar="FILE", help="trace or telemetry file (- reads standard input)")
    add_input_options(p)
    p.add_argument("--as", "--output-format", dest="output_format", choices=["rich", "json", "yaml"], default="rich",
                   help="output: rich (a table), or json/yaml (an observation file `dam diagnose FILE` reads)")
    p.add_argument("--output", metavar="FILE", help="write json/yaml output to FILE instead of stdout")
    p.set_defaults(func=run)


def _gpus(text: str | None) -> list[int] | None:
    from ..errors import ObservationError, Problem

    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise ObservationError([Problem(f"--gpu {text}", "expected device indices such as 0 or 0,1")],
                               title="invalid option") from exc


@contextmanager
def progress_bar(files: list[str]) -> Iterator[Callable[[int, int | None], None] | None]:
    """A rich progress bar on stderr for large files (only on a terminal); yields the callback or None."""
    sizes = [Path(f).stat().st_size for f in files if f != "-" and Path(f).is_file()]
    from rich.console import Console

    console = Console(stderr=True)
    if not sizes or max(sizes) < _PROGRESS_MIN_BYTES or not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), console=console, transient=True) as bar:
        task = bar.add_task("reading", total=None)
        state = {"last": 0}

        def update(done: int, total: int | None) -> None:
            if done < state["last"]:  # the next file started
                bar.reset(task)
            state["last"] = done
            bar.update(task, completed=done, total=total)

        yield update


def ingest_args(args: argparse.Namespace, files: list[str], kb: Any = None) -> Any:
    """Run ingestion for parsed command-line options; returns an IngestResult."""
    from ..ingest import ingest_result

    sources: list[Any] = [sys.stdin.buffer if f == "-" else f for f in files]
    columns = [c.strip() for c in args.columns.split(",")] if getattr(args, "columns", None) else None
    with progress_bar(files) as progress:
        return ingest_result(sources, format=args.input_format, steps=args.steps, window=args.window,
                             samples=args.samples, gpus=_gpus(args.gpu), columns=columns, progress=progress, kb=kb)


def ingested_observations(args: argparse.Namespace, files: list[str], kb: Any) -> tuple[dict[str, Any], Any]:
    """The observations `--from FILE...` gives (each {value, source, ...}; facts it could not derive left out), and
    the IngestResult; what could not be derived is said on stderr."""
    result = ingest_args(args, files, kb)
    observations = {k: v for k, v in result.to_observation_file()["observations"].items() if v["value"] != "unknown"}
    if result.not_derived:
        print(f"dam {args.command}: not derived from {', '.join(f.name for f in result.files)}: "
              f"{', '.join(result.not_derived)} (dam ingest shows why)", file=sys.stderr)
    return observations, result


def run(args: argparse.Namespace) -> int:
    result = ingest_args(args, args.files)
    if args.output_format == "rich":
        from rich.console import Console

        from ..render.ingest import print_ingest

        print_ingest(result, Console())
        return 0
    data = result.to_observation_file()
    if args.output_format == "json":
        import json

        text = json.dumps(data, indent=2, ensure_ascii=False)
    else:
        import yaml

        header = "".join(f"# {line}\n" for line in _header_lines(result))
        text = header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120)
    text = text if text.endswith("\n") else text + "\n"
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


def _header_lines(result: Any) -> list[str]:
    lines = ["Written by `dam ingest`; diagnose with `dam diagnose THIS_FILE`."]
    for f in result.files:
        lines.append(f"{f.name}: {f.format}, " + ", ".join(f"{k} {v}" for k, v in f.stats.items()))
    lines.extend(f"note: {n}" for n in result.notes)
    return lines
