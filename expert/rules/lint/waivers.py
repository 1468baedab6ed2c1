"""Waivers: ``lint_waivers.yaml`` beside the rules (rule id -> lint id -> reason), and the lint of stale ones."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .core import Lint


class WaiverFile(BaseModel):
    """``lint_waivers.yaml``: per rule (or named condition, or ``table/REGIME``), lint id -> reason."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    waivers: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description="subject (rule id, named condition, or table/REGIME) -> {lint id: reason it is accepted}",
    )


class UnusedWaiver(Lint):
    id = "DAM115"
    name = "unused-waiver"
    severity = "warning"
    summary = "A waiver suppresses nothing, names an unknown lint, or tries to waive an error."
    docs = """
**Why it matters.** Stale waivers hide future problems of the same kind on the same rule. Errors cannot be waived:
the loader refuses the rules whatever the waiver says.

**Fix.** Delete the waiver (or correct its rule id or lint id).
"""
