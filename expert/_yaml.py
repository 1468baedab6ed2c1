"""Safe YAML loading and pydantic validation with errors that name file, entry and field."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from .errors import KnowledgeBaseError, Problem, not_a_file

if TYPE_CHECKING:
    import yaml

M = TypeVar("M", bound=BaseModel)

# Limits on what a small input may cost. Every file this project reads is far below them.
MAX_FILE_BYTES = 32 * 2**20  # a YAML or JSON input file
MAX_NODES = 1_000_000  # values after alias expansion ("billion laughs": 600 bytes that expand to 10^9 values)
MAX_DEPTH = 200  # nesting of mappings and lists


@functools.cache
def _loader() -> Any:
    """The safe loader that refuses duplicate and non-string mapping keys, made on first use: PyYAML is imported only
    when a YAML file is read (~7 ms; a command given JSON, --set values or cached rules reads none)."""
    import yaml

    try:  # the C parser is ~10x faster; both are safe loaders (no arbitrary objects)
        base: Any = yaml.CSafeLoader
    except AttributeError:  # pragma: no cover - libyaml missing
        base = yaml.SafeLoader

    class DuplicateKeyError(yaml.MarkedYAMLError):
        """A mapping names the same key twice (YAML's last-wins would silently drop the first)."""

    class _Loader(base):  # type: ignore[misc]
        """A safe loader that refuses duplicate and non-string mapping keys."""

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            seen: dict[Any, yaml.Node] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, str):
                    raise DuplicateKeyError(None, None, f"the key {key!r} is not a name (quote it if it is meant as "
                                            "text)", key_node.start_mark)
                if key in seen:
                    raise DuplicateKeyError(None, None, f"duplicate key {key!r} (also on line "
                                            f"{seen[key].start_mark.line + 1}); each key may appear once",
                                            key_node.start_mark)
                seen[key] = key_node
            return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]

    _Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_yaml_map)
    return _Loader


def read_text(path: Path, error: type[KnowledgeBaseError] | Any = KnowledgeBaseError) -> str:
    """A text file's content (UTF-8, a byte-order mark allowed), refusing what is not a bounded regular file."""
    try:
        what = not_a_file(path)
        if what is not None:
            raise error([Problem(str(path), f"cannot read: {what}", "give a YAML or JSON file")])
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise error([Problem(str(path), f"the file is {size / 2**20:.0f} MiB; at most "
                                 f"{MAX_FILE_BYTES // 2**20} MiB is read", "is this the right file?")])
        raw = path.read_bytes()
        if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
            raise error([Problem(str(path), "UTF-16 text, not UTF-8",
                                 "save it as UTF-8: iconv -f UTF-16 -t UTF-8 FILE > FILE.utf8")])
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error([Problem(str(path), f"not UTF-8 text (byte {exc.start})", "save it as UTF-8")]) from None
    except OSError as exc:
        raise error([Problem(str(path), f"cannot read: {exc.strerror or exc}")]) from None


def check_size(data: Any, where: str, error: type[KnowledgeBaseError] | Any = KnowledgeBaseError) -> None:
    """Refuse data that expands past MAX_NODES values or MAX_DEPTH levels (shared aliases count every time)."""
    budget = MAX_NODES
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        node, depth = stack.pop()
        budget -= 1
        if budget < 0:
            raise error([Problem(where, f"the data expands to more than {MAX_NODES:,} values (aliases repeat "
                                 "what they point to)", "write it out without deeply nested aliases")])
        if depth > MAX_DEPTH:
            raise error([Problem(where, f"nested more than {MAX_DEPTH} levels deep")])
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


def load_yaml(path: Path) -> Any:
    """Parse a YAML file safely; syntax errors, duplicate or non-name keys, oversize, over-deep or alias-bomb
    input become a KnowledgeBaseError naming file and line."""
    import yaml

    text = read_text(path)
    try:
        data = yaml.load(text, Loader=_loader())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise KnowledgeBaseError([Problem(where, f"invalid YAML: {problem}")]) from None
    except RecursionError:
        raise KnowledgeBaseError([Problem(str(path), "nested too deeply to read")]) from None
    except ValueError as exc:  # e.g. an integer past Python's 4,300-digit conversion limit
        raise KnowledgeBaseError([Problem(str(path), f"invalid value: {exc}")]) from None
    check_size(data, str(path))
    return data


def _entry_name(data: Any, loc: tuple[int | str, ...]) -> str:
    """Describe the entry a validation error location points into, by its id or name when it has one."""
    parts: list[str] = []
    node = data
    for key in loc:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            parts.append(str(key))
            node = None
            continue
        if isinstance(node, dict):
            label = node.get("id") or node.get("name") or node.get("regime")
            parts.append(f"{key} ({label})" if isinstance(label, str) and isinstance(key, int) else str(key))
        else:
            parts.append(str(key))
    return short_location(parts)


def short_location(parts: list[str] | tuple[int | str, ...], keep: int = 5) -> str:
    """A dotted location; one nested past 2*keep levels shows its first and last `keep` parts and how many are left
    out (a rule nested 300 levels deep printed a location of over 1,000 characters)."""
    names = [str(p) for p in parts]
    if len(names) <= 2 * keep + 1:
        return ".".join(names)
    return ".".join([*names[:keep], f"…({len(names) - 2 * keep} levels)…", *names[-keep:]])


_UNION_BRANCHES = frozenset({"int", "float", "str", "bool"})


def validation_errors(exc: ValidationError) -> list[tuple[tuple[int | str, ...], str]]:
    """(location, message) of each validation error, with a number that is NaN or infinity said once: pydantic reports
    it for every branch of a number-or-string union (`lt.int`, `lt.float`, `in.1.str`)."""
    out: list[tuple[tuple[int | str, ...], str]] = []
    non_finite: set[tuple[int | str, ...]] = set()
    errors = exc.errors()
    for err in errors:
        loc = tuple(err["loc"])
        if err["type"] == "finite_number":
            non_finite.add(loc[:-1] if loc and loc[-1] in _UNION_BRANCHES else loc)
    for err in errors:
        loc = tuple(err["loc"])
        base = loc[:-1] if loc and loc[-1] in _UNION_BRANCHES else loc
        if base in non_finite:
            if (base, "") not in out:
                out.append((base, ""))
            continue
        out.append((loc, err["msg"]))
    return [(loc, msg or "NaN and infinity are not accepted here: give a finite number") for loc, msg in out]


def validate(model: type[M], data: Any, path: Path) -> M:
    """Validate parsed YAML against a model; every error names the file, the entry and the field."""
    if data is None:
        raise KnowledgeBaseError([Problem(str(path), "file is empty", "it must hold a YAML mapping")])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = [
            Problem(f"{path}: {_entry_name(data, loc)}", msg) for loc, msg in validation_errors(exc)
        ]
        raise KnowledgeBaseError(problems, title=f"{path.name} does not match its schema") from exc


_Path = tuple[str | int, ...]  # keys and indices from the document root (rules.logic.YamlPath)


def load_positioned(path: Path) -> tuple[Any, dict[_Path, int], list[tuple[int, str]]]:
    """Parse YAML safely, recording each node's line; returns (data, lines, duplicate keys as (line, key))."""
    text = path.read_text(encoding="utf-8")
    loader = _loader()(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    lines: dict[_Path, int] = {}
    duplicates: list[tuple[int, str]] = []
    if node is not None:
        _record(node, data, (), lines, duplicates)
    return data, lines, duplicates


def _record(node: yaml.Node, data: Any, path: _Path, lines: dict[_Path, int],
            duplicates: list[tuple[int, str]]) -> None:
    import yaml

    lines.setdefault(path, node.start_mark.line + 1)  # a mapping entry keeps the line of its key
    if isinstance(node, yaml.MappingNode) and isinstance(data, dict):
        by_text = {str(k): k for k in data}
        seen: set[str] = set()
        for key_node, value_node in node.value:
            text = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else None
            if text is None or text not in by_text:
                continue
            if text in seen:
                duplicates.append((key_node.start_mark.line + 1, text))
            seen.add(text)
            key = by_text[text]
            child = (*path, key if isinstance(key, (str, int)) else text)
            lines[child] = key_node.start_mark.line + 1
            _record(value_node, data[key], child, lines, duplicates)
    elif isinstance(node, yaml.SequenceNode) and isinstance(data, list):
        for i, (child, item) in enumerate(zip(node.value, data, strict=False)):
            _record(child, item, (*path, i), lines, duplicates)


def nearest_line(lines: dict[_Path, int], at: _Path) -> int | None:
    """The line of the node at `at` (from `load_positioned`), or of its nearest ancestor that exists."""
    key = tuple(at)
    while key:
        if key in lines:
            return lines[key]
        key = key[:-1]
    return lines.get((), 1)


def line_of(path: Path, at: _Path) -> int | None:
    """The line of the node at `at` in a YAML file (read again: for error messages only), or None."""
    import yaml

    try:
        return nearest_line(load_positioned(path)[1], at)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
