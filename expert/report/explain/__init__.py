"""Explanations of a Report: why, how, why-not, what-if and counterfactuals.

why / how / why_not read only what the report recorded (the provenance graph, every rule's leaf trace and condition
tree, derivations, regime tables), so a saved report explains itself. what_if and counterfactuals re-diagnose
changed observations with an Expert (the shared default one unless given). Every result is a pydantic model with a
plain-text `text()` rendering; nothing here prints.

One module per question (why, how, why_not, what_if, counterfactuals); _shared holds what they share and _solve
the search for the observed input that moves a derived fact across a value.
"""

from __future__ import annotations

from ._shared import unknown_id
from .counterfactuals import Counterfactual, Counterfactuals, counterfactuals
from .how import How, how
from .what_if import FactChange, ScoreChange, WhatIf, diff, what_if
from .why import Step, Why, gain_text, why
from .why_not import Attempt, Blocker, WhyNot, why_not

__all__ = [
    "Attempt",
    "Blocker",
    "Counterfactual",
    "Counterfactuals",
    "FactChange",
    "How",
    "ScoreChange",
    "Step",
    "WhatIf",
    "Why",
    "WhyNot",
    "counterfactuals",
    "diff",
    "gain_text",
    "how",
    "unknown_id",
    "what_if",
    "why",
    "why_not",
]
