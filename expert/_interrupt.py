"""Ctrl-C while the `dam` command starts: one line and exit 130, never a traceback from half-imported modules.

The console script imports `expert.commands` (and so this package) before `main()` can catch KeyboardInterrupt, and
those imports (rich, pydantic, the rules) take a noticeable part of a second. While the process is the `dam` script
and `main()` has not started, SIGINT is handled here; `main()` restores Python's own handler first thing. A library
user's process (whose main module is not the `dam` script) is never touched. This module is the first the package
imports, and imports nothing that Python has not loaded at start-up except, under its guard, `datetime`.
"""

from __future__ import annotations

import os
import signal
import sys

_SCRIPTS = frozenset({"dam", "dam.exe", "dam-script.py"})


def _interrupted(signum: int, frame: object) -> None:
    os.write(2, b"interrupted\n")
    os._exit(130)


def is_dam_script() -> bool:
    """True when this process is the `dam` console script (its main module is the script pip writes)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or ""
    return os.path.basename(path) in _SCRIPTS


def guard_startup() -> None:
    """Exit 130 with one line on SIGINT until `main()` starts, if this process is the `dam` console script."""
    if is_dam_script() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        try:
            signal.signal(signal.SIGINT, _interrupted)
        except ValueError:  # not the main thread
            return
        # pydantic-core imports `datetime` from Rust as it loads; a KeyboardInterrupt inside that import makes pyo3
        # panic (PanicException, not KeyboardInterrupt, with a Rust backtrace). Imported here, under the guard, it
        # is already loaded then and that import runs no Python code that a signal could interrupt.
        import datetime  # noqa: F401


def end_startup() -> None:
    """Give SIGINT back to Python (KeyboardInterrupt), once `main()` can catch it."""
    if signal.getsignal(signal.SIGINT) is _interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def finish_command() -> None:
    """The command is done: ignore SIGINT while the interpreter exits.

    Python gives SIGINT back its default action as it finalizes, so a Ctrl-C then would kill the process (return code
    -2, no message) after the command had finished and written its output. Ignored, the exit code is the command's.
    """
    try:  # noqa: SIM105 (contextlib is not loaded at start-up; this module imports only what is)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        pass


guard_startup()
