"""`dam ingest`: profiler traces and GPU telemetry -> observations (table, or a file `dam diagnose` reads)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, overload

EPILOG = """\
inputs (--format auto tells them apart):
  kineto           PyTorch profiler trace, .json or .json.gz (prof.export_chrome_trace / tensorboard_trace_handler)
  nsys             Nsight Systems export: nsys export --type sqlite report.nsys-rep (a .nsys-rep needs nsys on PATH)
  nvidia-smi       nvidia-smi --query-gpu=timestamp,index,name,utilization.gpu,memory.used,memory.total,
                   clocks_throttle_reasons.active,pcie.link.gen.current,pcie.link.gen.max,
                   pcie.link.width.current,pcie.link.width.max --format=csv -l 1
  nvidia-smi-dmon  nvidia-smi dmon -s u
  dcgmi            dcgmi dmon -e 203,1002,1004,1005
  prometheus       dcgm-exporter text (curl -s localhost:9400/metrics)
  nccl-tests       all_reduce_perf -b 8 -e 8G -f 2 (and the other nccl-tests): the size/algbw/busbw table
  serving-metrics  vLLM or SGLang /metrics (curl -s localhost:8000/metrics >> serve.prom, twice a minute apart
                   under load): requests running and waiting, KV-cache usage, median TTFT, TPOT and queue time

examples:
  dam ingest trace.json.gz                         a table of the facts, their sources, and what is missing
  dam ingest trace.json.gz dcgm.txt --as yaml --output run.yaml ; dam diagnose run.yaml
  dam ingest trace.json.gz --steps 3:8             keep ProfilerStep#3 ... #8
  dam ingest smi.csv --window 60:300               seconds 60 to 300 of the log
  dam ingest run.sqlite --step-range train_step    NVTX range train_step marks one step (nsys exports)
  dam diagnose --from trace.json.gz dcgm.txt       ingest and diagnose in one go
  dam ingest traces/                               the rank traces of a multi-GPU job, compared rank by rank
  dam ingest 'run/rank*.json' --workers 4          a glob; 4 processes read the ranks in parallel
  dam ingest big_trace.json --workers 1            read a large trace in this process only
  dam diagnose --from traces/ allreduce_perf.txt   a job's ranks and an nccl-tests run of its GPUs
  dam diagnose --from serve.prom --set hardware=h100-sxm --set ttft_target_ms=1000   a vLLM server

A directory or glob of PyTorch profiler traces (one per rank, e.g. tensorboard_trace_handler's output) is grouped
into jobs by each trace's distributedInfo (or a rank in the file name: rank3.json): the job's facts come from the
ranks compared (the straggler the others wait for, the waits, the transfers of the rank that waits least, the
median rank's node-level facts), in any order the files are given. Several jobs or captures: pick one with --job N.

For a profiler trace the table is followed by where the GPU time goes (kernel classes, top kernels and operators with
their intensity and share of the roofline, why the GPU idles); --as json|yaml writes it as `time_breakdown`, which
`dam diagnose FILE` carries into the report. Record with record_shapes=True for per-operator FLOPs.
An uncompressed trace of 100 MB or more is decoded in worker processes, by byte range (the same result as one
process; a .json.gz is read in one process, since gzip cannot be entered in the middle): --workers 1, or
DAM_INGEST_WORKERS=1 in the environment, turns that off. The devices of an Nsight Systems export of a million
rows or more are swept in worker processes too, one device each (the same result as one process).
Several files merge (a trace plus a DCGM log of the same run); when two measure the same fact the trace wins over
DCGM, and DCGM over nvidia-smi. --format names the INPUT format; --as names the OUTPUT format.
exit codes: 0 ingested, 2 unreadable or malformed input (the message names the file and line).
"""

_PROGRESS_MIN_BYTES = 16 << 20


class _InputFormats(Sequence[str]):
    """"auto" and the input formats of expert.ingest, imported only when argparse reads them (a --format value, help,
    a usage error): `dam diagnose` without --from never imports the ingest package."""

    def _all(self) -> list[str]:
        from ..ingest import FORMATS

        return ["auto", *FORMATS]

    def __contains__(self, value: object) -> bool:
        return value in self._all()

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...

    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self._all()[index]


def add_input_options(p: argparse.ArgumentParser, *, format_flag: str = "--format") -> None:
    """Options shared by `dam ingest` and `dam diagnose --from`."""
    p.add_argument(format_flag, dest="input_format", choices=_InputFormats(), default="auto",
                   help="input format (default: auto-detect)")
    p.add_argument("--steps", metavar="A:B", help="ProfilerStep numbers to keep, inclusive (traces): 2:5, 3:, :8, 7")
    p.add_argument("--step-range", metavar="NAME",
                   help="NVTX range that marks one step in an Nsight Systems export (default: a repeating range "
                        "named like a step: step, iteration, train_step, ProfilerStep#N)")
    p.add_argument("--window", metavar="A:B", help="seconds from the start of the recording to keep: 10:70")
    p.add_argument("--samples", metavar="A:B", help="sample numbers to keep in telemetry logs (1-based): 5:60")
    p.add_argument("--gpu", metavar="N[,N]", help="device indices to keep (default: all, averaged)")
    p.add_argument("--columns", metavar="F,F,...",
                   help="the --query-gpu fields of an nvidia-smi CSV written with noheader")
    p.add_argument("--job", type=int, metavar="N",
                   help="with the rank traces of several jobs (or captures), which one to read (1 = earliest)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="processes reading rank traces, the byte ranges of one uncompressed trace of 100 MB or "
                        "more, or the devices of an Nsight Systems export of a million rows or more, in parallel "
                        "(default: $DAM_INGEST_WORKERS, else as many as CPUs and memory allow; 1: one process)")


def register(sub: Any) -> None:
    p = sub.add_parser("ingest", help="turn profiler traces and GPU telemetry into observations",
                       description="Read PyTorch profiler traces, Nsight Systems exports, nvidia-smi, dcgmi dmon or "
                                   "dcgm-exporter output and "
                                   "print the facts they give, where each came from, and what could not be derived.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="trace or telemetry file, a directory of them, or a glob (- reads standard input)")
    add_input_options(p)
    p.add_argument("--as", "--output-format", dest="output_format", choices=["rich", "json", "yaml"], default=None,
                   help="output: rich (a table), or json/yaml (an observation file `dam diagnose FILE` reads)")
    p.add_argument("--output", metavar="FILE",
                   help="write the output to FILE instead of stdout (without --as: json for a .json name, yaml for "
                        ".yaml/.yml, else the table as plain text)")
    from ._common import add_hardware_file_option

    add_hardware_file_option(p)  # device names a trace gives are looked up in these entries too
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
    with progress_bars(files) as (update, _):
        yield update


@contextmanager
def progress_bars(files: list[str]) -> Iterator[tuple[Callable[[int, int | None], None] | None,
                                                      Callable[[str, int, int | None], None] | None]]:
    """Rich progress on stderr for large inputs (only on a terminal): one bar for the files read one by one, and one
    per job for the rank traces of multi-GPU jobs. Yields (progress, job_progress) callbacks, or Nones."""
    from ..ingest.ranks import expand

    try:
        paths = [Path(str(p)) for p in expand([f for f in files if f != "-"])[0]]
    except Exception:  # ingestion itself reports bad inputs, with their location
        paths = []
    sizes = [p.stat().st_size for p in paths if p.is_file()]
    from ..report.render.console import SafeConsole as Console

    console = Console(stderr=True)
    if not sizes or sum(sizes) < _PROGRESS_MIN_BYTES or not console.is_terminal:
        yield None, None
        return
    from rich.markup import escape
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), console=console, transient=True) as bar:
        task = bar.add_task("reading", total=None)
        state = {"last": 0}
        jobs: dict[str, Any] = {}

        def update(done: int, total: int | None) -> None:
            if jobs:
                return  # the per-job bars show the rank traces
            if done < state["last"]:  # the next file started
                bar.reset(task)
            state["last"] = done
            bar.update(task, completed=done, total=total)

        def update_job(label: str, done: int, total: int | None) -> None:
            if label not in jobs:
                if not jobs:
                    bar.update(task, visible=False)
                # the description column is rich markup; a label quotes a trace's backend, a folder or a file name
                jobs[label] = bar.add_task(escape(label), total=total)
            bar.update(jobs[label], completed=done, total=total)

        yield update, update_job


def ingest_args(args: argparse.Namespace, files: list[str], kb: Any = None) -> Any:
    """Run ingestion for parsed command-line options; returns an IngestResult."""
    from ..ingest import ingest_result

    if files.count("-") > 1:
        from ..errors import ObservationError, Problem

        raise ObservationError([Problem("FILE -", f"standard input is given {files.count('-')} times; it can be read "
                                        "once", "give - once, and the other inputs as files")], title="invalid option")
    sources: list[Any] = [sys.stdin.buffer if f == "-" else f for f in files]
    columns = [c.strip() for c in args.columns.split(",")] if getattr(args, "columns", None) else None
    workers = getattr(args, "workers", None)
    if workers is not None and workers < 1:
        from ..errors import ObservationError, Problem

        raise ObservationError([Problem(f"--workers {workers}", "expected 1 or more processes")],
                               title="invalid option")
    with progress_bars(files) as (progress, job_progress):
        return ingest_result(sources, format=args.input_format, steps=args.steps, window=args.window,
                             samples=args.samples, gpus=_gpus(args.gpu), columns=columns, progress=progress, kb=kb,
                             step_range=getattr(args, "step_range", None),
                             job=getattr(args, "job", None), workers=workers, job_progress=job_progress)


def ingested_observations(args: argparse.Namespace, files: list[str], kb: Any) -> tuple[dict[str, Any], Any]:
    """The observations `--from FILE...` gives (each {value, source, ...}; facts it could not derive left out), and
    the IngestResult; what could not be derived is said on stderr, less the facts the user gives beside the traces
    (an observation FILE, --example or --set: they override what the traces give)."""
    result = ingest_args(args, files, kb)
    observations = {k: v for k, v in result.to_observation_file()["observations"].items() if v["value"] != "unknown"}
    given = given_facts(args)
    missing = [fact for fact in result.not_derived if fact not in given]
    if missing:
        print(f"dam {args.command}: not derived from {', '.join(f.name for f in result.files)}: "
              f"{', '.join(missing)} (dam ingest shows why)", file=sys.stderr)
    return observations, result


def given_facts(args: argparse.Namespace) -> set[str]:
    """The facts named beside --from: --set NAME=VALUE pairs and the observations of FILE or --example (read for
    their names only; a file that cannot be read is reported when the command reads it)."""
    names = {str(pair).split("=", 1)[0].strip() for pair in getattr(args, "set", None) or [] if "=" in str(pair)}
    example, file = getattr(args, "example", None), getattr(args, "file", None)
    try:
        from .._loadcache import bundled_yaml
        from ..observations.file import read_observation_file
        from ._common import example_path

        if example:
            names |= set(read_observation_file(example_path(example), parse_yaml=bundled_yaml).observations)
        elif file and file != "-" and Path(file).is_file():
            names |= set(read_observation_file(Path(file)).observations)
    except Exception:  # the command reads the file again and reports what is wrong with it
        pass
    return {n for n in names if n}


def run(args: argparse.Namespace) -> int:
    from ..errors import write_output
    from ._common import make_expert

    fmt = args.output_format or _format_for(args.output)
    result = ingest_args(args, args.files, make_expert(args).kb if args.hardware_file else None)
    if fmt == "rich":
        import io

        from ..report.render.console import SafeConsole as Console
        from ..report.render.ingest import print_ingest

        if not args.output:
            print_ingest(result, Console())
            return 0
        console = Console(record=True, file=io.StringIO(), width=100)  # --output: the table as plain text
        print_ingest(result, console)
        write_output(args.output, console.export_text())
        return 0
    data = result.to_observation_file()
    if fmt == "json":
        import json

        text = json.dumps(data, indent=2, ensure_ascii=False)
    else:
        import yaml

        header = "".join(f"# {line}\n" for line in _header_lines(result))
        text = header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120)
    text = text if text.endswith("\n") else text + "\n"
    if args.output:
        write_output(args.output, text)
    else:
        sys.stdout.write(text)
    return 0


def _format_for(output: str | None) -> str:
    """The output format an --output name implies when --as is not given (rich, the table, on stdout)."""
    suffix = Path(output).suffix.lower() if output else ""
    return {".json": "json", ".yaml": "yaml", ".yml": "yaml"}.get(suffix, "rich")


def _header_lines(result: Any) -> list[str]:
    lines = ["Written by `dam ingest`; diagnose with `dam diagnose THIS_FILE`."]
    for f in result.files:
        lines.append(f"{f.name}: {f.format}, " + ", ".join(f"{k} {v}" for k, v in f.stats.items()))
    lines.extend(f"note: {n}" for n in result.notes)
    return lines
