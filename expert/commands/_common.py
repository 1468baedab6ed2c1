"""Shared helpers for command modules: errors to exit code 2, example lookup, the Expert a command line asks for and
the options that shape it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


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


def observation_path(given: str, command: str) -> Path:
    """The path of an observation file (or, for explain, a report) named on the command line. "-" (standard input) is
    refused with a clear message: those files are read by path (facts can still be given with --set, and traces or
    telemetry piped with `--from -`)."""
    from ..errors import ObservationError, Problem

    if given == "-":
        if command == "explain":
            problem = ("reading a report from standard input is not supported",
                       "save it to a file (dam diagnose ... --format json --output report.json) and run `dam explain "
                       "report.json` (a file named - is ./-)")
        else:
            problem = ("reading observations from standard input is not supported",
                       f"save them to a file and run `dam {command} FILE` (a file named - is ./-), give facts with "
                       "--set NAME=VALUE, or pipe a trace or telemetry through `dam diagnose --from -`")
        title = "cannot read the report" if command == "explain" else "cannot read the observation file"
        raise ObservationError([Problem("-", *problem)], title=title)
    return Path(given)


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
        name, value = name.strip(), value.strip()
        if not value:
            problems.append(Problem(f"--set {pair}", "the value is empty",
                                    f"give a value after '=', or --set {name}=unknown to leave it out"))
            continue
        if name in values and values[name] != value:
            problems.append(Problem(f"--set {name}", f"given twice ({values[name]} and {value})",
                                    "give each fact once"))
            continue
        values[name] = value
    if problems:
        raise ObservationError(problems, title="cannot read --set")
    return values


def write_text(path: str | Path, text: str) -> Path:
    """Write an output file; failures raise OutputError naming the path and the reason (exit code 2)."""
    from ..errors import write_output

    return write_output(path, text)


def add_hardware_file_option(p: argparse.ArgumentParser) -> None:
    """--hardware-file, shared by diagnose, consult, ingest and hardware."""
    p.add_argument("--hardware-file", metavar="FILE",
                   help="extra hardware entries (YAML or JSON, the schema of knowledge_base/hardware.yaml: a "
                        "`hardware:` list, a list, or one entry) used beside the catalog; an id the catalog already "
                        "has is an error (a resumed consultation needs the same --hardware-file again)")


def make_expert(args: argparse.Namespace) -> Any:
    """The default shared Expert, or a custom one for --rules-dir / --engine / --hardware-file (built once per
    command line)."""
    import expert

    rules_dirs = getattr(args, "rules_dir", None) or []
    engine: Any = getattr(args, "engine", "auto")
    hardware_file = getattr(args, "hardware_file", None)
    if not (rules_dirs or engine != "auto" or hardware_file):
        return expert.default_expert()
    built = getattr(args, "_expert", None)
    if built is None:
        built = expert.Expert(extra_rules_dirs=rules_dirs, engine=engine, extra_hardware=hardware_file)
        args._expert = built
    return built
