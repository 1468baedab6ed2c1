"""Reference checks, shared by the loader and `dam rules lint`: every name a rule or table uses must exist.

Facts (DAM004), enum and hardware values (DAM005), findings (DAM008), regimes and optimizations (DAM009), and regime
tables that list an optimization as both effective and wasted (DAM010), and thresholds written as `{kb: NAME}` that
name no knowledge value (DAM013). Each problem carries the wording of both
readers: `message` (the lint's, with a YAML path and a hint) and `loader` (the loader's, which refuses the rules);
either is None where only the other reports it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from typing import NamedTuple

from ..kb.knowledge import KnowledgeBase
from .logic import ORDERED, LeafVisitor, YamlPath, knowledge_values_at
from .model import Condition, FactTest, FindingRef, KnowledgeValue, RegimeTable, Then


class ReferenceProblem(NamedTuple):
    """One unknown name (or contradiction), located by a YAML path relative to what was checked."""

    lint: str  # DAM004, DAM005, DAM008, DAM009 or DAM010
    path: YamlPath
    message: str | None  # as `dam rules lint` words it (None: only the loader reports this)
    loader: str | None  # as the loader words it (None: only the linter reports this)
    hint: str = ""
    loader_at: str = ""  # the part of the rule the loader names ("when", "then", "then.bottleneck", ...)


def suggest(name: str, choices: Iterable[str]) -> str:
    """ "did you mean ...?" for close matches, or ""."""
    import difflib

    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.6)
    return f"did you mean {', '.join(close)}?" if close else ""


def condition_problems(node: Condition, kb: KnowledgeBase, concluded: Collection[str],
                       root: YamlPath = ()) -> Iterator[ReferenceProblem]:
    """Unknown facts, invalid values and findings no rule concludes, in the order of the condition's leaves."""
    return _ConditionCheck(kb, concluded).leaves(node, root)


class _ConditionCheck(LeafVisitor[ReferenceProblem]):
    def __init__(self, kb: KnowledgeBase, concluded: Collection[str]) -> None:
        self.kb, self.concluded = kb, concluded

    def finding(self, node: FindingRef, path: YamlPath) -> Iterator[ReferenceProblem]:
        if node.finding not in self.concluded:
            text = f"no rule concludes finding {node.finding!r}"
            yield ReferenceProblem("DAM008", (*path, "finding"), text, text, suggest(node.finding, self.concluded),
                                   "when")

    def fact(self, node: FactTest, path: YamlPath) -> Iterator[ReferenceProblem]:
        kb = self.kb
        spec = kb.facts.get(node.fact)
        if spec is None:
            text = f"unknown fact {node.fact!r}"
            yield ReferenceProblem("DAM004", (*path, "fact"), text, text, suggest(node.fact, kb.facts), "when")
            return
        if spec.type in ("text", "optimizations"):
            for op, _ in node.ops():
                if op != "known":
                    text = f"{node.fact} is {spec.type}, quoted in messages; only `known` may test it"
                    yield ReferenceProblem("DAM005", (*path, op), text, text, "", "when")
            return
        if spec.type not in ("enum", "hardware"):
            return
        allowed = (spec.choices or []) if spec.type == "enum" else list(kb.hardware)
        for op, value in node.ops():
            where = (*path, op)
            ordered = op in ORDERED
            if ordered:  # the linter stops at the operator; the loader also names each value
                yield ReferenceProblem("DAM005", where, f"{node.fact} is not numeric, so `{op}` is meaningless",
                                       f"{node.fact} is not numeric; {op} is meaningless", "use eq, ne, in or not_in",
                                       "when")
            for v in value if isinstance(value, list) else [value]:
                if v not in allowed:
                    text = f"{v!r} is not a value of {node.fact}"
                    yield ReferenceProblem("DAM005", where, None if ordered else text, text,
                                           suggest(str(v), allowed) or f"one of: {', '.join(allowed)}", "when")


def knowledge_value(kb: KnowledgeBase, value: KnowledgeValue) -> float | None:
    """The number a `{kb: NAME}` threshold names, or None. The names: the scorecard's bands,
    `scorecard.<metric id>.<bound>` (knowledge_base/scorecard.yaml), as message placeholders name them."""
    return kb.scorecard.bound(value.kb)


def knowledge_value_names(kb: KnowledgeBase) -> list[str]:
    """Every name a `{kb: NAME}` threshold may use, in file order."""
    return kb.scorecard.bound_names()


def knowledge_value_problems(node: Condition, kb: KnowledgeBase, root: YamlPath = ()) -> Iterator[ReferenceProblem]:
    """Thresholds of a condition as written that name no knowledge value (named conditions are not entered)."""
    for _, _, value, path in knowledge_values_at(node, root):
        if knowledge_value(kb, value) is None:
            names = knowledge_value_names(kb)
            text = f"unknown knowledge value {{kb: {value.kb}}}"
            accepted = f"accepted: {{kb: NAME}} with NAME one of {', '.join(names)}"
            close = suggest(value.kb, names)
            yield ReferenceProblem("DAM013", (*path, "kb"), text, text, f"{close}; {accepted}" if close else accepted,
                                   "when")


def then_problems(then: Then, kb: KnowledgeBase, base: YamlPath = ("then",)) -> Iterator[ReferenceProblem]:
    """Unknown regimes, optimizations and measured facts of a rule's conclusions."""
    regimes = kb.regimes.regimes
    if then.bottleneck and then.bottleneck.regime not in regimes:
        text = f"unknown regime {then.bottleneck.regime!r}"
        yield ReferenceProblem("DAM009", (*base, "bottleneck", "regime"), text, text, f"one of: {', '.join(regimes)}",
                               "then.bottleneck")
    axes = kb.regimes.axes
    if then.axis and then.axis.axis not in axes:
        text = f"unknown axis {then.axis.axis!r}"
        yield ReferenceProblem("DAM009", (*base, "axis", "axis"), text, text,
                               f"knowledge_base/regimes.yaml `axes` defines: {', '.join(axes)}", "then.axis")
    ids = [("recommend", i, r.id) for i, r in enumerate(then.recommend)]
    ids += [("waste", i, w.id) for i, w in enumerate(then.waste)]
    for key, i, opt_id in ids:
        if opt_id not in kb.optimizations:
            text = f"unknown optimization {opt_id!r}"
            yield ReferenceProblem("DAM009", (*base, key, i, "id"), text, text, suggest(opt_id, kb.optimizations),
                                   "then")
    for i, fact in enumerate(then.measure):
        if fact not in kb.facts:
            yield ReferenceProblem("DAM004", (*base, "measure", i), f"`measure` names unknown fact {fact!r}",
                                   f"unknown fact {fact!r}", suggest(fact, kb.facts), "then.measure")


def table_problems(table: RegimeTable, kb: KnowledgeBase) -> Iterator[ReferenceProblem]:
    """An unknown regime or optimization in a regime table, or one listed as both effective and wasted."""
    if table.regime not in kb.regimes.regimes:
        text = f"unknown regime {table.regime!r}"
        yield ReferenceProblem("DAM009", ("regime",), text, text)
    entries = [("effective", i, opt) for i, opt in enumerate(table.effective)]
    entries += [("wasted", i, w.id) for i, w in enumerate(table.wasted)]
    for key, i, opt in entries:
        if opt not in kb.optimizations:
            text = f"unknown optimization {opt!r}"
            yield ReferenceProblem("DAM009", (key, i), text, text, suggest(opt, kb.optimizations))
    wasted = {w.id for w in table.wasted}
    for i, opt in enumerate(table.effective):
        if opt in wasted:
            yield ReferenceProblem("DAM010", ("effective", i),
                                   f"{opt} is listed as both effective and wasted for {table.regime}", None)
    both = set(table.effective) & wasted
    if both:
        yield ReferenceProblem("DAM010", (), None, f"listed as both effective and wasted: {', '.join(sorted(both))}")


__all__ = ["ReferenceProblem", "condition_problems", "knowledge_value", "knowledge_value_names",
           "knowledge_value_problems", "suggest", "table_problems", "then_problems"]
