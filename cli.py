"""dam: the command line of dam-expert (`dam --help`), a thin entry point over the `expert` library.

The parser and the subcommands live in expert/commands/; this file only hands over to them, so the console script
(and the copy of this file an editable install makes) never needs to change when a command is added.
"""

from __future__ import annotations

import sys

from expert.commands import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
