"""`dam rules lint`: structural errors and semantic lints for rule directories, each with an id, a severity and docs.

Errors (DAM0xx) are what would stop the rules from loading: invalid YAML, schema violations, unknown facts or
references, duplicates, reference and negation cycles. Lints (DAM1xx) are warnings about rules that load but are
probably wrong: thresholds outside a fact's range, conditions that can never hold, conclusions that contradict each
other, untested rules. Every diagnostic names a file and line. Waivers are data (``lint_waivers.yaml`` beside the
rules, rule id -> lint id -> reason), never comments; errors cannot be waived.

Conditions are analysed as unions of boxes (disjunctive normal form, expert.rules.logic.BoxAlgebra): a box holds,
per fact, an interval, allowed and excluded values and whether the fact must be known; a box is empty when some
fact's constraints contradict.

One module per lint family: load (DAM001, DAM002, DAM012), references (DAM004-006, DAM008-010, DAM013, the checks
the loader makes too, and DAM116), definitions (DAM003, DAM007, DAM011, DAM105, DAM108), satisfiability
(DAM101-104), conclusions (DAM106, DAM107), metadata (DAM109, DAM112, DAM113), rule_tests (DAM110, DAM111, DAM114),
waivers (DAM115); core and context hold what they share, registry the list, run the runner.
"""

from __future__ import annotations

from ..logic import Box, BoxAlgebra, Span, condition_text
from ..logic import TooComplex as _TooComplex
from ..logic import Unresolvable as _Unresolvable
from ..logic import walk_paths as walk_raw
from .conclusions import ConflictingConclusions, RecommendsWasted
from .context import LintContext
from .core import (
    WAIVER_FILE,
    ConditionSite,
    Diagnostic,
    Lint,
    LintResult,
    LintSeverity,
    RuleSite,
    SourceFile,
    TableSite,
    Value,
    YamlPath,
    load_positioned,
)
from .definitions import ConditionCycle, DuplicateDefinition, FindingCycle, NegationCycle, UnusedCondition
from .load import InvalidYaml, LoadError, SchemaViolation
from .metadata import MissingMetadata, UnknownPlaceholder, UnmeasurableFact
from .references import (
    EffectiveAndWasted,
    InvalidFactValue,
    UnknownCondition,
    UnknownFact,
    UnknownFinding,
    UnknownReference,
)
from .registry import LINTS, LINTS_BY_ID, lint_page
from .rule_tests import InvalidRuleTest, UntestedBranch, UntestedRule
from .run import _load_file, _load_problems, lint_paths
from .satisfiability import ThresholdOutOfRange, UnobtainableFact, UnreachableRule, UnsatisfiableCondition
from .waivers import UnusedWaiver, WaiverFile

__all__ = [
    "LINTS",
    "LINTS_BY_ID",
    "WAIVER_FILE",
    "Box",
    "BoxAlgebra",
    "ConditionCycle",
    "ConditionSite",
    "ConflictingConclusions",
    "Diagnostic",
    "DuplicateDefinition",
    "EffectiveAndWasted",
    "FindingCycle",
    "InvalidFactValue",
    "InvalidRuleTest",
    "InvalidYaml",
    "Lint",
    "LintContext",
    "LintResult",
    "LintSeverity",
    "LoadError",
    "MissingMetadata",
    "NegationCycle",
    "RecommendsWasted",
    "RuleSite",
    "SchemaViolation",
    "SourceFile",
    "Span",
    "TableSite",
    "ThresholdOutOfRange",
    "UnknownCondition",
    "UnknownFact",
    "UnknownFinding",
    "UnknownPlaceholder",
    "UnknownReference",
    "UnmeasurableFact",
    "UnobtainableFact",
    "UnreachableRule",
    "UnsatisfiableCondition",
    "UntestedBranch",
    "UntestedRule",
    "UnusedCondition",
    "UnusedWaiver",
    "Value",
    "WaiverFile",
    "YamlPath",
    "_TooComplex",
    "_Unresolvable",
    "_load_file",
    "_load_problems",
    "condition_text",
    "lint_page",
    "lint_paths",
    "load_positioned",
    "walk_raw",
]
