"""`dam fleet`: diagnose every job of a fleet into a Parquet dataset; `dam fleet query OUT SQL` queries it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

EPILOG = """\
inputs (fsspec URLs: local paths, and s3:// gs:// az:// with s3fs, gcsfs or adlfs installed):
  MANIFEST   a .csv or .jsonl file, one job per row: job_id, files (URLs separated by ';', relative to the
             manifest, globs allowed), facts (JSON object or name=value;name=value), labels (the same; any
             other CSV column is a label too)
  GLOB       'traces/**/*.json.gz' (quoted, or let the shell expand it): every file is a job, or --job-key
             groups them
  DIR        every trace, telemetry or observation (.yaml) file below it

A job is what `dam diagnose --from FILE... [FACTS.yaml] [--set ...]` diagnoses in one call: its trace and
telemetry files go to ingestion together (several ranks of one job, a trace plus its DCGM log), .yaml observation
files and manifest facts go on top.

examples:
  dam fleet traces/ --out fleet/                                  every file under traces/ is a job
  dam fleet 'runs/*/rank*.json.gz' --job-key 'runs/(?P<job>[^/]+)/' --out fleet/
  dam fleet jobs.csv --out s3://bucket/fleet/ --resume --timeout 120 --retries 1
  dam fleet jobs.jsonl --out fleet/ --engine dask --scheduler tcp://10.0.0.5:8786
  dam fleet query fleet/ "select bottleneck, count(*) as jobs from fleet group by 1 order by 2 desc"
  dam fleet query fleet/ "select job_key, error from fleet where error is not null"

output: OUT/part-*.parquet (one file per worker chunk; columns job_key, files, labels, bottleneck, strength,
axes, recommended, wasted, key facts, error, report_json, ...), OUT/_summary.md and OUT/_summary.html.
With --engine dask --scheduler, the inputs and OUT must be reachable from every worker (a shared filesystem or
object storage). Without --resume a run replaces the dataset in OUT; with it, jobs whose files (URL, size,
ETag/mtime), facts, rules and version are unchanged keep their rows, and only the others run.
A bad, empty or oversized file or a timeout becomes an error row with the message; the run goes on.
exit codes: 0 the run finished (even with error rows), 2 invalid arguments or input, 130 interrupted.
"""

QUERY_HELP = """\
dam fleet query OUT "SQL" [--as table|csv|json]: run SQL (DuckDB) on the dataset in OUT. The table `fleet` holds
the newest row of each job. Needs duckdb: pip install 'dam-expert[fleet-query]'."""


def register(sub: Any) -> None:
    p = sub.add_parser("fleet", help="diagnose every job of a fleet (local processes or Dask) into Parquet",
                       description="Diagnose every job of a fleet on a local process pool or on Dask, into a Parquet "
                                   "dataset and a summary.\n\n" + QUERY_HELP,
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", metavar="MANIFEST|GLOB|DIR", help="where the jobs are (or: query OUT SQL)")
    p.add_argument("--out", metavar="OUT", help="the dataset folder (local path or fsspec URL)")
    p.add_argument("--engine", choices=["local", "dask"], default="local",
                   help="local: a process pool on this machine (default); dask: a Dask cluster")
    p.add_argument("--workers", type=int, metavar="N", help="worker processes (default: the CPUs available)")
    p.add_argument("--scheduler", metavar="ADDR", help="a running Dask scheduler (tcp://HOST:PORT); --engine dask")
    p.add_argument("--job-key", metavar="REGEX",
                   help="group files into jobs: the named group `job` (else group 1, else the match) of REGEX in "
                        "each file's URL is its job key; unmatched files are left out")
    p.add_argument("--resume", action="store_true", help="keep the rows of unchanged jobs; run only the others")
    p.add_argument("--timeout", type=float, metavar="S", help="seconds per job; past it the job is an error row")
    p.add_argument("--retries", type=int, default=0, metavar="N",
                   help="further attempts after a timeout, an I/O error or a crashed worker (default 0)")
    p.add_argument("--max-trace-gb", type=float, metavar="G", help="skip jobs with a file over G GB (an error row)")
    p.add_argument("--as", dest="query_format", choices=["table", "csv", "json"], default="table",
                   help="query output format (dam fleet query)")
    p.set_defaults(func=run)


def _need(modules: list[str]) -> None:
    from ..fleet._run import require

    require(modules)


@contextmanager
def progress_bar() -> Iterator[Callable[[int, int, int], None] | None]:
    """A rich progress bar on stderr (on a terminal): jobs done, jobs/s, ETA, errors."""
    from ..report.render.console import SafeConsole as Console

    console = Console(stderr=True)
    if not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), TextColumn("{task.fields[errors]}"),
                  console=console, transient=True) as bar:
        task = bar.add_task("diagnosing", total=None, rate="", errors="")

        def update(done: int, total: int, errors: int) -> None:
            elapsed = bar.tasks[0].elapsed or 0.0
            rate = f"{done / elapsed:.1f} jobs/s" if elapsed > 0 and done else ""
            bar.update(task, completed=done, total=total, rate=rate,
                       errors=f"[red]{errors} errors[/red]" if errors else "")

        yield update


def run(args: argparse.Namespace) -> int:
    if args.inputs[0] == "query":
        return query(args)
    from ..errors import Problem
    from ..fleet._inputs import FleetInputError

    if not args.out:
        raise FleetInputError([Problem("--out", "is required", "the folder for the Parquet dataset: --out fleet/")],
                              title="invalid option")
    _need(["pyarrow", "fsspec"] + (["distributed"] if args.engine == "dask" else []))
    from ..fleet import run as fleet_run

    try:
        with progress_bar() as progress:
            result = fleet_run(args.inputs, out=args.out, engine=args.engine, workers=args.workers,
                               scheduler=args.scheduler, resume=args.resume, timeout=args.timeout,
                               retries=args.retries, max_trace_gb=args.max_trace_gb, job_key=args.job_key,
                               progress=progress, load_rows=False)
    except KeyboardInterrupt:
        print("dam fleet: interrupted; the jobs finished so far are in the output folder; rerun with --resume to "
              "run only the rest", file=sys.stderr)
        raise
    _print(result, args.resume)
    return 0


def _print(result: Any, resumed: bool) -> None:
    from rich.table import Table
    from rich.text import Text

    from ..fleet._summary import INSUFFICIENT
    from ..report.render.console import SafeConsole as Console

    console = Console()
    # notes quote the files left out, and the paths are the user's --out: printed as text, never rich markup
    for note in result.notes:
        console.print(Text(f"note: {note}", style="yellow"), soft_wrap=True)  # paths stay whole
    kinds = result.error_kinds()
    errors = f"{result.errors} error rows" + (" (" + ", ".join(f"{k} {n}" for k, n in kinds.items()) + ")"
                                              if kinds else "")
    unchanged = f"{result.resumed} unchanged (--resume), " if resumed else ""
    console.print(f"[bold]{result.jobs} jobs[/bold]: {result.ran} run in {result.seconds:.1f} s "
                  f"({result.jobs_per_s:.1f} jobs/s, {result.engine} engine), {unchanged}{errors}", highlight=False)
    counts: dict[str, int] = {}
    for row in result.rows:
        if not row.get("error"):
            name = row.get("bottleneck") or INSUFFICIENT
            counts[name] = counts.get(name, 0) + 1
    if counts:
        table = Table("verdict", "jobs", title="verdicts")
        for name, n in sorted(counts.items(), key=lambda kv: -kv[1]):
            table.add_row(name, str(n))
        console.print(table)
    if result.abandoned:
        console.print(f"{result.abandoned} job(s) stuck in native code were abandoned on their Dask workers; "
                      "restart those workers to reclaim them", style="yellow")
    # paths and a command to copy: never broken across lines (the terminal wraps them if it must)
    console.print(Text(f"rows: {result.out} (Parquet); summary: {', '.join(result.files)}"), soft_wrap=True)
    if result.errors:
        console.print(Text(f'errors: dam fleet query {result.out} "select job_key, error_kind, error from fleet where '
                           'error is not null"'), soft_wrap=True)


def query(args: argparse.Namespace) -> int:
    from ..errors import Problem
    from ..fleet._inputs import FleetInputError

    if len(args.inputs) != 3:
        example = 'dam fleet query fleet/ "select bottleneck, count(*) from fleet group by 1"'
        raise FleetInputError([Problem("dam fleet query", "expected OUT and one SQL statement", example)],
                              title="invalid arguments")
    _need(["pyarrow", "fsspec", "duckdb"])
    from ..fleet._query import query as run_query

    columns, rows = run_query(args.inputs[1], args.inputs[2])
    if args.query_format == "json":
        import json

        for row in rows:
            sys.stdout.write(json.dumps(dict(zip(columns, row, strict=True)), default=str, ensure_ascii=False) + "\n")
        return 0
    if args.query_format == "csv":
        import csv

        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows([[_cell(v) for v in row] for row in rows])
        return 0
    from rich.table import Table
    from rich.text import Text

    from ..report.render.console import SafeConsole as Console

    table = Table()  # names and values are the user's data, printed as text (never rich markup)
    for column in columns:
        table.add_column(Text(column))
    for row in rows:
        table.add_row(*[Text(_cell(v)) for v in row])
    Console().print(table)
    return 0


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={_cell(v)}" for k, v in value.items())
    return str(value)
