"""`dam examples`: list the bundled examples."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("examples", help="list the bundled examples", description="List the bundled examples.")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .._loadcache import bundled_yaml
    from .._resources import examples_dir
    from ..observations.file import read_observation_file

    for path in sorted(examples_dir().glob("*.yaml")):
        print(f"{path.stem:32s} {read_observation_file(path, parse_yaml=bundled_yaml).description or ''}")
    return 0
