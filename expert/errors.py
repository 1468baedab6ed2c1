"""Typed errors. Every message names what was wrong, where, and how to fix it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path


class ExpertError(Exception):
    """Base class of every error dam-expert raises on purpose."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input: where it is, what is wrong, what would be accepted."""

    where: str
    message: str
    hint: str = ""

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}"
        return f"{text} ({self.hint})" if self.hint else text


@dataclass
class _ProblemsError(ExpertError):
    problems: list[Problem] = field(default_factory=list)
    title: str = "invalid input"

    def __post_init__(self) -> None:
        super().__init__(str(self))

    def __str__(self) -> str:
        lines = [f"{self.title}:"] + [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


@dataclass
class ObservationError(_ProblemsError):
    """Observations that do not fit the fact vocabulary (unknown name, wrong type, out of range)."""

    title: str = "invalid observations"


@dataclass
class KnowledgeBaseError(_ProblemsError):
    """A knowledge-base or rule file that cannot be loaded (names the file, the entry and the field)."""

    title: str = "the knowledge base or rules cannot be loaded"


@dataclass
class OutputError(_ProblemsError):
    """An output that cannot be written (names the path and why: a missing folder, no permission, a full disk)."""

    title: str = "cannot write the output"


def write_output(path: str | Path, text: str, *, option: str = "--output") -> Path:
    """Write an output file (UTF-8); a failure raises OutputError naming the option, the path and the reason (a
    missing folder, a directory, no permission, a full disk), so every command exits 2 with the same message."""
    target = Path(path)
    where = f"{option} {path}" if option else str(path)
    try:
        target.write_text(text, encoding="utf-8")
    except IsADirectoryError:
        raise OutputError([Problem(where, "is a directory", "give a file name inside it")]) from None
    except FileNotFoundError:
        raise OutputError([Problem(where, f"the folder {target.parent} does not exist",
                                   "create it first, or write elsewhere")]) from None
    except OSError as exc:
        raise OutputError([Problem(where, f"cannot write: {exc.strerror or exc}",
                                   "check that the folder is writable and the disk has room")]) from None
    return target


class EngineError(ExpertError):
    """The rule engine failed on a diagnosis (a bug or a durable-rules fault, never bad input)."""


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with its control characters (ESC, BEL, C1 codes; not newline or tab) written as visible escapes
    (`\\x1b`), so a string from a file or a rule cannot move the cursor, retitle or clear the user's terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text) if _CONTROL.search(text) else text


def not_a_file(path: str | Path) -> str | None:
    """None for a regular file (or a symlink to one); otherwise what the path is, for an error message: "no such
    file", "a directory", "a symlink loop", "a broken symlink", "a FIFO (named pipe)", "a character device"..."""
    import errno
    import os
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symlink loop (the link points back at itself)"
        if os.path.islink(path):
            return f"a broken symlink (to {os.readlink(path)}, which does not exist)"
        if exc.errno == errno.ENOENT:
            return "no such file"
        return f"cannot be read: {exc.strerror or exc}"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    kinds = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((what for test, what in kinds if test(mode)), "not a regular file")
