"""dam: the command line of dam-expert (`dam --help`), a thin entry point over the `expert` library.

The parser and the subcommands live in expert/commands/ (the installed `dam` script enters there directly); this file
lets a checkout run `python cli.py ...` without installing, and is not part of the wheel.
"""

from __future__ import annotations

import sys

try:
    from expert.commands import COMMANDS, build_parser, main
except KeyboardInterrupt:  # Ctrl-C while the library imports: a clean exit, as in main()
    print("interrupted", file=sys.stderr)
    sys.exit(130)

__all__ = ["COMMANDS", "build_parser", "main"]

if __name__ == "__main__":
    try:
        code = main()
    finally:
        from expert._interrupt import finish_command

        finish_command()  # a Ctrl-C as the interpreter exits cannot turn a finished command into a death by signal
    sys.exit(code)
