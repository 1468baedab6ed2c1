"""Paths an agent names are confined to the directories the user allowed (`dam mcp --allow DIR`).

A path is made absolute against the server's working directory, then every symlink and `..` in it is resolved
before it is compared with the (equally resolved) allowed directories, so neither `../../etc/passwd` nor a symlink
inside an allowed directory that points outside it gets through. The file that is then read is the resolved one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..errors import ObservationError, Problem


class AllowedPaths:
    """The directories tool calls may read from (resolved once, at start-up)."""

    def __init__(self, directories: Sequence[str | Path], base: Path | None = None) -> None:
        self.base = (base or Path.cwd()).resolve()
        problems: list[Problem] = []
        roots: list[Path] = []
        for raw in directories:
            path = (self.base / Path(raw).expanduser()).resolve()
            if not path.is_dir():
                problems.append(Problem(f"--allow {raw}", "not a directory", "give an existing directory"))
            elif path not in roots:
                roots.append(path)
        if problems:
            raise ObservationError(problems, title="cannot start the MCP server")
        self.roots: list[Path] = roots or [self.base]

    def describe(self) -> str:
        return ", ".join(str(r) for r in self.roots)

    def allows(self, path: Path) -> bool:
        """Whether a resolved path lies inside an allowed directory."""
        return any(path == root or path.is_relative_to(root) for root in self.roots)

    def resolve(self, raw: str, where: str) -> Path:
        """The real path of a file an agent named, or an ObservationError naming it and the allowed directories."""
        if not isinstance(raw, str) or not raw.strip():
            raise ObservationError([Problem(where, "expected a file path")], title="invalid path")
        if raw.strip() == "-":
            raise ObservationError([Problem(where, "standard input is the MCP channel and cannot be read",
                                            "give a file path")], title="invalid path")
        if "\x00" in raw:
            raise ObservationError([Problem(where, "the path contains a NUL byte")], title="invalid path")
        candidate = self.base / Path(os.path.expanduser(raw))
        try:
            real = candidate.resolve(strict=False)
        except (OSError, RuntimeError) as exc:  # a symlink loop
            raise ObservationError([Problem(f"{where} {raw}", f"cannot resolve the path: {exc}")],
                                   title="invalid path") from exc
        if not self.allows(real):
            raise ObservationError([Problem(f"{where} {raw}", f"{real} is outside the allowed directories",
                                            f"allowed: {self.describe()}; start the server with --allow DIR to "
                                            "add one")], title="path not allowed")
        if not real.exists():
            raise ObservationError([Problem(f"{where} {raw}", "no such file")], title="cannot read the file")
        if not real.is_file():
            raise ObservationError([Problem(f"{where} {raw}", "not a regular file")], title="cannot read the file")
        return real
