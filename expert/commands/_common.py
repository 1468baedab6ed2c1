"""Shared helpers for command modules: errors to exit code 2, example lookup."""

from __future__ import annotations

from pathlib import Path


def example_path(name: str) -> Path:
    """A bundled example by name (with or without .yaml)."""
    from .._resources import examples_dir
    from ..errors import ObservationError, Problem

    directory = examples_dir()
    names = sorted(p.stem for p in directory.glob("*.yaml"))
    stem = name.removesuffix(".yaml")
    if stem in names:  # only a bundled example's own name: never a path (--example /etc/passwd)
        return directory / f"{stem}.yaml"
    raise ObservationError([Problem(f"--example {name}", "no such bundled example", f"one of: {', '.join(names)}")],
                           title="unknown example")


def parse_sets(pairs: list[str]) -> dict[str, str]:
    """--set NAME=VALUE pairs as a mapping; malformed pairs raise ObservationError."""
    from ..errors import ObservationError, Problem

    values: dict[str, str] = {}
    problems = []
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            problems.append(Problem(f"--set {pair}", "expected NAME=VALUE", "e.g. --set gpu_util=62%"))
            continue
        values[name.strip()] = value.strip()
    if problems:
        raise ObservationError(problems, title="cannot read --set")
    return values


def write_text(path: str | Path, text: str) -> Path:
    """Write an output file; failures raise OutputError naming the path and the reason (exit code 2)."""
    from ..errors import write_output

    return write_output(path, text)
