"""Condition trees: the one owner of their node types and their logic.

A condition (rules/model.py) is a tree of FactTest, AllOf, AnyOf, NotOf, ConditionRef and FindingRef nodes. Every
walk, evaluation, negation, normal form and constraint analysis of one goes through this package; no other module
tests node types (inside it, only _tree.py does). Import from here; the private modules are _tree (traversal),
_values (Kleene tables, operators, text), _nnf (negation normal form) and _boxes (spans, boxes, witnesses).
Public API:

Traversal
    ``ConditionVisitor[R]``  ``visit(node, *args)`` calls the hook for the node's type: ``fact``, ``all_of`` /
        ``any_of`` (both default to ``group``), ``not_of``, ``ref``, ``finding``; every hook defaults to ``default``,
        which raises TypeError. Subclasses override the hooks they need, with their own extra arguments.
    ``LeafVisitor[T]``  yields from ``fact`` / ``finding`` / ``ref`` hooks for every leaf, in order, with its YAML path.
    ``children(node)``, ``walk(node)``, ``walk_paths(node, path)`` (with YAML paths; refs are not entered),
    ``fact_tests``, ``fact_tests_at``, ``finding_refs_at``, ``condition_refs_at``, ``conjunctions``,
    ``facts_used``, ``findings_used``, ``finding_uses`` and ``refs_used`` (through named conditions),
    ``resolve(node, lookup)`` (named conditions inlined), ``knowledge_values_at`` (thresholds written as
    ``{kb: NAME}``, with their YAML paths) and ``bind(node, value_of)`` (those thresholds replaced by numbers).
Three-valued (Kleene) logic
    ``Outcome``, ``OUTCOMES``, ``FLIP``, ``kleene_and``, ``kleene_or``, ``kleene_not``, ``and3``, ``or3``;
    ``possible(node, fact, finding)``: the outcomes a condition can still take, given what each leaf still can
    (a planner's view of partial knowledge).
Operators
    ``Operator``, ``OPERATORS`` (lt, le, gt, ge, eq, ne, in, not_in, known: symbol, words, negation), ``SYMBOLS``,
    ``NEGATION`` (op -> its negation), ``ORDERED`` (the operators that compare numbers), ``negate_op``,
    ``negate_test``, ``compare(op, value, constant)`` and ``comparator(op, constant)`` (the same test built once,
    for compiled conditions).
Negation normal form
    ``NnfFold[T]``: a fold that sees only leaves ``(fact, op, constant)``, findings ``(id, positive)``, ``conj`` and
    ``disj`` (``not`` pushed to the leaves); ``finding_branches(node, leaf, conj, disj)``: the condition as
    alternatives, each fact-only expressions plus findings that must be concluded or absent.
Constraint boxes
    ``Span`` (one fact: an interval, allowed and excluded values, known or unknown), ``span_of(op, constant)``,
    ``Span.narrow(op, constant, domain)`` (a span intersected with one test; None when empty), ``Span.contains``;
    ``Box`` (spans per fact plus findings), ``BoxAlgebra`` (a condition as a union of boxes, findings optionally
    expanded into the conditions of the rules concluding them), ``TooComplex``, ``Unresolvable``;
    ``Witness``: fact constraints (``Constraints = dict[str, Span]``) under which a condition is true, or false;
    hooks ``settled`` (a known fact's outcome), ``concluded`` and ``through`` (findings) adapt it to a planner.
Formatting
    ``format_constant(value, precision)``, ``condition_text(node)``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._tree import (
    ConditionVisitor,
    LeafVisitor,
    Value,
    YamlPath,
    bind,
    children,
    condition_refs_at,
    conjunctions,
    fact_tests,
    fact_tests_at,
    facts_used,
    finding_refs_at,
    finding_uses,
    findings_used,
    knowledge_values_at,
    refs_used,
    resolve,
    walk,
    walk_paths,
)
from ._values import (
    FLIP,
    NEGATION,
    OPERATORS,
    ORDERED,
    OUTCOMES,
    SYMBOLS,
    Operator,
    Outcome,
    and3,
    comparator,
    compare,
    condition_text,
    format_constant,
    kleene_and,
    kleene_not,
    kleene_or,
    negate_op,
    negate_test,
    or3,
    possible,
)

if TYPE_CHECKING:
    from ._boxes import Box, BoxAlgebra, Constraints, Span, TooComplex, Unresolvable, Witness, span_of
    from ._nnf import FindingBranch, NnfFold, finding_branches

# normal forms and boxes load on first use: diagnosing with the pure engine needs neither
_LAZY = {**dict.fromkeys(("Box", "BoxAlgebra", "Constraints", "Span", "TooComplex", "Unresolvable", "Witness",
                          "span_of"), "._boxes"),
         **dict.fromkeys(("FindingBranch", "NnfFold", "finding_branches"), "._nnf")}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "FLIP", "NEGATION", "OPERATORS", "ORDERED", "OUTCOMES", "SYMBOLS", "Box", "BoxAlgebra", "ConditionVisitor",
    "Constraints", "FindingBranch", "LeafVisitor", "NnfFold", "Operator", "Outcome", "Span", "TooComplex",
    "Unresolvable", "Value", "Witness", "YamlPath", "and3", "bind", "children", "comparator", "compare",
    "condition_refs_at", "condition_text", "conjunctions", "fact_tests", "fact_tests_at", "facts_used",
    "finding_branches", "finding_refs_at", "finding_uses", "findings_used", "format_constant", "kleene_and",
    "kleene_not", "kleene_or", "knowledge_values_at", "negate_op", "negate_test", "or3", "possible", "refs_used",
    "resolve", "span_of", "walk", "walk_paths",
]
