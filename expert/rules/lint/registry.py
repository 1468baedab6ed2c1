"""Every lint, in the order `dam rules lint --list` and docs/rules.md show them."""

from __future__ import annotations

from ...errors import KnowledgeBaseError, Problem
from .conclusions import ConflictingConclusions, RecommendsWasted
from .core import Lint, _suggest
from .definitions import ConditionCycle, DuplicateDefinition, FindingCycle, NegationCycle, UnusedCondition
from .load import InvalidYaml, LoadError, SchemaViolation
from .metadata import MissingMetadata, UnknownPlaceholder, UnmeasurableFact
from .references import (
    EffectiveAndWasted,
    InvalidFactValue,
    RepeatedBand,
    UnknownCondition,
    UnknownFact,
    UnknownFinding,
    UnknownKnowledgeValue,
    UnknownReference,
)
from .rule_tests import InvalidRuleTest, UntestedBranch, UntestedRule
from .satisfiability import ThresholdOutOfRange, UnobtainableFact, UnreachableRule, UnsatisfiableCondition
from .waivers import UnusedWaiver

LINTS: tuple[type[Lint], ...] = (
    InvalidYaml, SchemaViolation, DuplicateDefinition, UnknownFact, InvalidFactValue, UnknownCondition,
    ConditionCycle, UnknownFinding, UnknownReference, EffectiveAndWasted, NegationCycle, LoadError,
    UnknownKnowledgeValue,
    ThresholdOutOfRange, UnsatisfiableCondition, UnreachableRule, UnobtainableFact, UnusedCondition,
    ConflictingConclusions, RecommendsWasted, FindingCycle, MissingMetadata, UntestedRule, UntestedBranch,
    UnknownPlaceholder, UnmeasurableFact, RepeatedBand, InvalidRuleTest, UnusedWaiver,
)
LINTS_BY_ID: dict[str, type[Lint]] = {lint.id: lint for lint in LINTS}


def lint_page(lint_id: str) -> str:
    """The docs page of one lint; raises KnowledgeBaseError for an unknown id."""
    lint = LINTS_BY_ID.get(lint_id.upper())
    if lint is None:
        raise KnowledgeBaseError([Problem(f"lint {lint_id}", "no such lint",
                                          _suggest(lint_id.upper(), LINTS_BY_ID) or "see dam rules lint --list")])
    return lint.page()
