"""A cache of the loaded knowledge base and rule set, so a cold `dam diagnose` need not parse and validate every
YAML file again (issue 20: parsing, validating and resolving them is ~50 ms of a ~260 ms cold run).

The cache is never required: any error reading it (missing, corrupted, written by another version, not ours) is
ignored and the files are loaded as without it; a directory that cannot be written (read-only, no home) only means
nothing is stored. `DAM_NO_CACHE=1` turns it off. Where it lives: `$XDG_CACHE_HOME/dam-expert` or
`~/.cache/dam-expert` (`~/Library/Caches/dam-expert` on macOS, `%LOCALAPPDATA%\\dam-expert\\Cache` on Windows).

An entry is keyed by a hash of everything the loaded objects depend on: the content and path of every file read
(the knowledge base's *.yaml, each rules directory's rule files), the path, size and modification time of every
module of this package (so an edited checkout never reuses objects built by other code), and the versions of this
package, Python and pydantic. The entry is a pickle: it is read only from a directory and a file owned by this
user that no one else may write, and written atomically (a temporary file renamed into place).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from ._version import __version__
from .kb.knowledge import KnowledgeBase
from .rules.ruleset import RuleSet, rule_file_paths

FORMAT = 1  # bump when what an entry holds changes shape
KEEP = 8  # entries kept (several checkouts or rule directories in turn); older ones are removed on write
_PREFIX = "rules-"
_SUFFIX = ".pickle"
_PACKAGE = Path(__file__).resolve().parent


def disabled() -> bool:
    """True when the environment turns the cache off (DAM_NO_CACHE set to anything but "", "0")."""
    return os.environ.get("DAM_NO_CACHE", "") not in ("", "0")


def cache_dir() -> Path | None:
    """Where entries live (not created here), or None where no user cache directory can be named."""
    if sys.platform == "win32":  # pragma: no cover - CI runs on Linux
        base = os.environ.get("LOCALAPPDATA")
        return Path(base) / "dam-expert" / "Cache" if base else None
    if sys.platform == "darwin":  # pragma: no cover
        home = os.environ.get("HOME")
        return Path(home) / "Library" / "Caches" / "dam-expert" if home else None
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):  # the XDG spec: a relative path is invalid and ignored
        return Path(xdg) / "dam-expert"
    home = os.environ.get("HOME")
    return Path(home) / ".cache" / "dam-expert" if home else None


def _code_fingerprint(update: Any) -> None:
    """Feed the path, size and mtime of every module of the package into the hash."""
    stack = [str(_PACKAGE)]
    found: list[tuple[str, int, int]] = []
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.name.endswith(".py"):
                    st = entry.stat()
                    found.append((entry.path, st.st_size, st.st_mtime_ns))
                elif entry.name != "__pycache__" and entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    for path, size, mtime in sorted(found):
        update(f"{path}\0{size}\0{mtime}\0".encode())


def cache_key(kb_dir: Path, rules_dirs: list[Path]) -> str | None:
    """The hash an entry for these directories is stored under; None when one of them cannot be read (the loader then
    reports what is wrong, as without a cache)."""
    digest = hashlib.sha256()
    update = digest.update
    import pydantic

    update(f"{FORMAT}\0{__version__}\0{sys.version}\0{pydantic.VERSION}\0".encode())
    try:
        _code_fingerprint(update)
        kb_files = sorted(p for p in kb_dir.glob("*.yaml") if p.is_file())
        update(f"kb\0{kb_dir.resolve()}\0".encode())
        for path in kb_files:
            update(f"{path.name}\0".encode())
            update(path.read_bytes())
        for directory in rules_dirs:
            if not directory.is_dir():
                return None
            update(f"rules\0{directory}\0{directory.resolve()}\0".encode())
            for path in rule_file_paths(directory):
                update(f"{path}\0".encode())
                update(path.read_bytes())
    except (OSError, ValueError):
        return None
    return digest.hexdigest()


def _private(st: os.stat_result) -> bool:
    """Owned by this user and writable by no one else (POSIX; elsewhere the user's own profile directory)."""
    if not hasattr(os, "getuid"):  # pragma: no cover - Windows
        return True
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _read(directory: Path, key: str) -> tuple[KnowledgeBase, RuleSet] | None:
    path = directory / f"{_PREFIX}{key}{_SUFFIX}"
    try:
        if not _private(os.stat(directory)):
            return None
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or not _private(st):
                return None
            entry = pickle.load(f)  # our own file, in a directory only this user can write
    except Exception:  # missing, unreadable, truncated or from other code: load afresh
        return None
    if (isinstance(entry, tuple) and len(entry) == 3 and entry[0] == key and isinstance(entry[1], KnowledgeBase)
            and isinstance(entry[2], RuleSet)):
        return entry[1], entry[2]
    return None


def _write(directory: Path, key: str, kb: KnowledgeBase, ruleset: RuleSet) -> None:
    try:
        data = pickle.dumps((key, kb, ruleset), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # something unpicklable in a custom rule set: just not cached
        return
    tmp: str | None = None
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(os.stat(directory)):
            return
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=_SUFFIX, dir=directory)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, directory / f"{_PREFIX}{key}{_SUFFIX}")
        tmp = None
        _prune(directory)
    except OSError:  # read-only, full, or gone: nothing is stored
        pass
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _prune(directory: Path) -> None:
    """Keep the KEEP most recently written entries."""
    entries = []
    for path in directory.glob(f"{_PREFIX}*{_SUFFIX}"):
        try:
            entries.append((path.stat().st_mtime_ns, path))
        except OSError:
            continue
    for _, path in sorted(entries, reverse=True)[KEEP:]:
        with contextlib.suppress(OSError):
            path.unlink()


def load(kb_dir: Path, rules_dirs: list[Path]) -> tuple[KnowledgeBase, RuleSet]:
    """The knowledge base of `kb_dir` and the rule set of `rules_dirs` checked against it, from the cache where an
    entry for exactly these files and this code exists; otherwise loaded (errors raised as by the loaders) and
    stored for the next time."""
    directory = None if disabled() else cache_dir()
    key = cache_key(kb_dir, rules_dirs) if directory is not None else None
    if directory is not None and key is not None:
        found = _read(directory, key)
        if found is not None:
            return found
    kb = KnowledgeBase.load(kb_dir)
    ruleset = RuleSet.load(rules_dirs, kb)
    if directory is not None and key is not None and cache_key(kb_dir, rules_dirs) == key:  # no file changed meanwhile
        _write(directory, key, kb, ruleset)
    return kb, ruleset
