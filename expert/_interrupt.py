"""Ctrl-C in the `dam` command: one line, `interrupted`, and exit 130, never a traceback or a death by signal.

Three stretches, three handlers:

* while the console script imports the library (rich, pydantic, the rules; a noticeable part of a second) and
  `main()` cannot catch KeyboardInterrupt yet, the guard at the top of `expert/__init__.py` (it must run before any
  other import) writes the line and exits, until `CommandWatch` takes SIGINT over from it in one step (no moment
  with Python's own handler, whose KeyboardInterrupt nothing would catch yet). A library user's process, whose main
  module is not the `dam` script, is never touched;
* while a command runs, `CommandWatch` raises KeyboardInterrupt as Python does and remembers it, for a Ctrl-C that
  comes back from Rust or C as another error;
* once the command is done, `finish_command` ignores SIGINT while the interpreter exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys


def is_dam_script() -> bool:
    """True when this process is the `dam` console script (its main module is the script pip writes)."""
    from . import _DAM_SCRIPTS

    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or ""
    return os.path.basename(path) in _DAM_SCRIPTS


class CommandWatch:
    """While a command runs, Ctrl-C raises KeyboardInterrupt as Python's own handler does, and is remembered (`seen`).

    A KeyboardInterrupt raised inside a callback from Rust or C does not always come back as itself: pydantic-core's
    serializer wraps it in a PydanticSerializationError, and where nothing can receive it Python reports it as
    "Exception ignored in ...". Remembered, the command can still end as interrupted (exit 130, one line); while
    the watch is on, what Python could not raise after a Ctrl-C is not printed. Only in the main thread, and only
    while Python's own handler or the start-up guard is in place (a program that set its own keeps it); on leaving,
    the handler it found is put back.
    """

    def __init__(self) -> None:
        self.seen = False
        self._installed = False
        self._hook = sys.unraisablehook
        self._previous: object = None

    def __enter__(self) -> CommandWatch:
        from . import _startup_sigint

        found = signal.getsignal(signal.SIGINT)
        if found is signal.default_int_handler or found is _startup_sigint:
            try:
                signal.signal(signal.SIGINT, self._handle)  # from the guard straight to this: no unguarded moment
            except ValueError:  # not the main thread: nothing to watch
                return self
            self._previous = found
            self._installed = True
            sys.unraisablehook = self._unraisable
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._installed:
            return
        if sys.unraisablehook == self._unraisable:
            sys.unraisablehook = self._hook
        if signal.getsignal(signal.SIGINT) == self._handle:
            signal.signal(signal.SIGINT, self._previous)  # type: ignore[arg-type]

    def _handle(self, signum: int, frame: object) -> None:
        self.seen = True
        raise KeyboardInterrupt

    def _unraisable(self, unraisable: sys.UnraisableHookArgs) -> None:
        if not (self.seen or isinstance(unraisable.exc_value, KeyboardInterrupt)):
            self._hook(unraisable)


def finish_command() -> None:
    """The command is done: ignore SIGINT while the interpreter exits.

    Python gives SIGINT back its default action as it finalizes, so a Ctrl-C then would kill the process (return code
    -2, no message) after the command had finished and written its output. Ignored, the exit code is the command's.
    """
    with contextlib.suppress(ValueError):  # not the main thread: nothing to do
        signal.signal(signal.SIGINT, signal.SIG_IGN)
