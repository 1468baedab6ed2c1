"""The `dam` command line: the parser and the dispatcher over the subcommand modules in this package.

Each subcommand lives in expert/commands/<name>.py and exposes `register(subparsers)`; add new ones to COMMANDS.
The `dam` console script enters here (`expert.commands:main`); the root `cli.py` of a checkout only re-exports it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Collection, Sequence

from .._version import __version__

DESCRIPTION = """\
dam-expert tells you *why* a training job or an inference service is slow, and what to do about it.
It classifies the bottleneck along the D·A·M axes (Data, Algorithm, Machine) with declarative rules
taken from the D·A·M framework, and explains every conclusion back to your observations.

start here:
  dam examples                              the bundled example cases
  dam diagnose --example data_starved_training
  dam diagnose --set gpu_util=62% --set hardware=h100-sxm ...
  dam consult                               not sure what to measure? answer a few questions
"""

COMMANDS = ["diagnose", "hardware", "examples", "rules", "schema", "explain", "plot", "ingest", "consult", "compare",
            "fleet", "mcp"]


def build_parser(only: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The `dam` parser with every subcommand, or only those named in `only` (their modules are imported, and
    their registration run, only then: `dam diagnose` need not import what `dam ingest` or `dam mcp` needs)."""
    parser = argparse.ArgumentParser(prog="dam", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"dam-expert {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        if only is None or name in only:
            importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def _needed(argv: Sequence[str]) -> Collection[str] | None:
    """The subcommands a command line needs registered: the one it names; none for a bare `--version`; all (None)
    when it names none or an unknown one, so that help and usage errors list every subcommand."""
    for arg in argv:
        if not arg.startswith("-"):
            return [arg] if arg in COMMANDS else None
        if arg not in ("--version",):
            return None  # -h/--help, or an option the top level rejects: the full usage
    return [] if argv else None


# The cyclic collector's first threshold while the `dam` script runs (Python's default: 700). Starting a command
# allocates about a million objects (imports, pydantic model classes, the rule set) and frees almost none, so at 700
# the collector walks the growing heap again and again for nothing: ~4 % of a cold `dam diagnose` (issue 20).
SCRIPT_GC_THRESHOLD = 100_000
TRACKER_WARNINGS = "ignore::UserWarning:multiprocessing.resource_tracker"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `dam` command line (sys.argv when `argv` is None); the exit code."""
    from .._interrupt import finish_command, is_dam_script

    # In the `dam` script the start-up guard (expert/__init__.py) answers a Ctrl-C until `_main`'s CommandWatch
    # takes over from it; a Ctrl-C is caught from the first line to the last.
    if argv is None and is_dam_script():  # the process is the command: it ends when main() returns
        import gc

        # Worker processes (rank and nsys readers) share semaphores through multiprocessing's resource tracker, a
        # process of its own. A Ctrl-C that ends the command while workers start can leave it one to unlink, which it
        # does, and then it warns "There appear to be 1 leaked semaphore objects" on the terminal after the
        # command's one line. Processes started from here on (the tracker, the workers) take this process's -W
        # options: that warning of that module is not shown (the tracker still cleans up what it warns about).
        sys.warnoptions.append(TRACKER_WARNINGS)
        gc.set_threshold(SCRIPT_GC_THRESHOLD, *gc.get_threshold()[1:])
        try:
            code = _main(argv)
        finally:
            finish_command()  # a Ctrl-C from here on cannot turn a finished command into a death by signal
            gc.freeze()  # what is alive now lives until exit: the interpreter's final collection need not walk it
        return _end_process(code)
    return _main(argv)


def _end_process(code: int) -> int:
    """End the `dam` script's process with `code` now, without the interpreter's teardown: freeing every module
    and object one by one is ~10 ms of a ~200 ms cold `dam diagnose` (issue 20), and nothing of it is seen. What
    an exit must still do is done first: the atexit handlers (logging, multiprocessing's workers, weakref
    finalizers), then the standard streams flushed. Returns `code` instead, for the interpreter's own exit, while
    another thread runs (the interpreter joins it) or when a stream cannot be flushed (it reports that as always)."""
    import atexit
    import os
    import threading

    if threading.active_count() > 1:
        return code
    atexit._run_exitfuncs()  # run once: they are cleared, so an interpreter exit after this would not repeat them
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            return code
    os._exit(code)


def _main(argv: Sequence[str] | None) -> int:
    from .._interrupt import CommandWatch

    with CommandWatch() as watch:
        try:
            return _command(argv)
        except KeyboardInterrupt:
            pass
        except Exception:
            if not watch.seen:  # a Ctrl-C that came back wrapped (pydantic-core's serializer) is still the user's
                raise
        except BaseException as exc:
            # a Ctrl-C while a Rust extension initialises can come back as its panic (pyo3's PanicException, a
            # BaseException: pydantic-core's `import datetime` interrupted); an exit stays an exit
            if isinstance(exc, (SystemExit, GeneratorExit)) or not watch.seen:
                raise
    print("interrupted", file=sys.stderr)
    return 130


def _command(argv: Sequence[str] | None) -> int:
    parser = build_parser(_needed(sys.argv[1:] if argv is None else argv))  # Ctrl-C here: caught in _main
    args = parser.parse_args(argv)
    from ..errors import ExpertError, printable

    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except ExpertError as exc:
        print(f"dam {args.command}: {printable(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
