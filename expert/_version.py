"""The one place the version is written (pyproject.toml reads it; `dam --version` and `expert.__version__` too)."""

__version__ = "0.1.0"
