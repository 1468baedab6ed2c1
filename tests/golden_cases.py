"""The golden cases of tests/golden/record.py as facts: every bundled example and every rule-test case (different
verdicts, findings chained across strata), for tests that compare two ways of building the same reports."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def golden_facts() -> list[dict[str, Any]]:
    """The facts of every golden case, in record.py's order."""
    sys.path.insert(0, str(ROOT / "tests" / "golden"))
    try:
        from record import cases
    finally:
        sys.path.pop(0)
    return [facts for _, facts in cases()]
