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

The bundled example files are kept here parsed too (`bundled_yaml`, keyed by their bytes, the package code and
PyYAML's files), so that `dam diagnose --example NAME` and `dam examples` need not import PyYAML.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import stat
import sys
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


def _unpickle(directory: Path, name: str) -> Any:
    """The object stored as `name`, or None (missing, unreadable, truncated, from other code, or not private)."""
    path = directory / name
    try:
        if not _private(os.stat(directory)):
            return None
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or not _private(st):
                return None
            return pickle.load(f)  # our own file, in a directory only this user can write
    except Exception:  # missing, unreadable, truncated or from other code: load afresh
        return None


def _read(directory: Path, key: str) -> tuple[KnowledgeBase, RuleSet] | None:
    entry = _unpickle(directory, f"{_PREFIX}{key}{_SUFFIX}")
    if (isinstance(entry, tuple) and len(entry) == 3 and entry[0] == key and isinstance(entry[1], KnowledgeBase)
            and isinstance(entry[2], RuleSet)):
        return entry[1], entry[2]
    return None


def _write(directory: Path, key: str, kb: KnowledgeBase, ruleset: RuleSet) -> None:
    _store(directory, _PREFIX, key, (key, kb, ruleset), KEEP)


def _store(directory: Path, prefix: str, key: str, entry: Any, keep: int) -> None:
    """Write `entry` as `prefix + key` atomically, keeping the `keep` newest entries of that prefix."""
    import tempfile  # only here: a run that reads the cache needs neither it nor the `random` it imports

    try:
        data = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
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
        os.replace(tmp, directory / f"{prefix}{key}{_SUFFIX}")
        tmp = None
        _prune(directory, prefix, keep)
    except OSError:  # read-only, full, or gone: nothing is stored
        pass
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _prune(directory: Path, prefix: str = _PREFIX, keep: int = KEEP) -> None:
    """Keep the `keep` most recently written entries of `prefix`."""
    entries = []
    for path in directory.glob(f"{prefix}*{_SUFFIX}"):
        try:
            entries.append((path.stat().st_mtime_ns, path))
        except OSError:
            continue
    for _, path in sorted(entries, reverse=True)[keep:]:
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


# ---- bundled example files, parsed ---------------------------------------------------------------------------------

_EXAMPLE_PREFIX = "example-"
KEEP_EXAMPLES = 64  # the bundled examples of a few checkouts or versions


def _pyyaml_fingerprint(update: Any) -> None:
    """Feed the name, size and mtime of PyYAML's files into the hash, found without importing it (the parse is what
    this PyYAML makes of the bytes; importing it is the ~7 ms this cache saves)."""
    import importlib.util

    spec = importlib.util.find_spec("yaml")
    if spec is None or not spec.submodule_search_locations:
        raise OSError("PyYAML not found")
    for location in spec.submodule_search_locations:
        with os.scandir(location) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_file():
                    st = entry.stat()
                    update(f"{entry.name}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())


def _example_key(path: Path, raw: bytes) -> str:
    digest = hashlib.sha256()
    update = digest.update
    update(f"{FORMAT}\0{__version__}\0{sys.version}\0example\0{path}\0".encode())
    _code_fingerprint(update)
    _pyyaml_fingerprint(update)
    update(raw)
    return digest.hexdigest()


def bundled_yaml(path: Path) -> Any:
    """`load_yaml(path)` for a bundled example file (`dam diagnose --example`, `dam examples`): from the cache where
    an entry for exactly these bytes, this package code and this PyYAML exists, so the command need not import
    PyYAML; otherwise parsed as `load_yaml` parses it (its errors raised) and stored. Only the package's own example
    files come here: nothing a user wrote is copied into the cache."""
    from ._yaml import MAX_FILE_BYTES, load_yaml

    directory = None if disabled() else cache_dir()
    key = None
    if directory is not None:
        try:
            if path.is_file() and path.stat().st_size <= MAX_FILE_BYTES:
                key = _example_key(path, path.read_bytes())
        except (OSError, ValueError):
            key = None
    if directory is not None and key is not None:
        entry = _unpickle(directory, f"{_EXAMPLE_PREFIX}{key}{_SUFFIX}")
        if isinstance(entry, tuple) and len(entry) == 2 and entry[0] == key:
            return entry[1]
    data = load_yaml(path)
    if directory is not None and key is not None and _example_key(path, path.read_bytes()) == key:  # unchanged since
        _store(directory, _EXAMPLE_PREFIX, key, (key, data), KEEP_EXAMPLES)
    return data
