"""Locate the bundled rules/ and knowledge_base/ directories (installed wheel or source checkout)."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """Return the directory holding `name` ("rules" or "knowledge_base")."""
    installed = _PACKAGE / "_data" / name  # the wheel maps the top-level folders here
    if installed.is_dir():
        return installed
    checkout = _PACKAGE.parent / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"cannot find the bundled {name}/ directory (looked in {installed} and {checkout})")


def examples_dir() -> Path:
    """Return the directory of bundled examples."""
    return data_dir("examples")
