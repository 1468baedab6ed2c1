"""Traversal: the visitor over the six node types, walks with YAML paths, what a condition reads, resolution (named
conditions inlined, knowledge values bound to their numbers).

The only module that tests the type of a condition node (rules/model.py); everything else dispatches through
`ConditionVisitor` or uses these walks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

from ..model import AllOf, AnyOf, Condition, ConditionRef, FactTest, FindingRef, KnowledgeValue, NotOf

Value = int | float | str
YamlPath = tuple[str | int, ...]
R = TypeVar("R")
T = TypeVar("T")


_HOOK: dict[type, str] = {FactTest: "fact", AllOf: "all_of", AnyOf: "any_of", NotOf: "not_of", ConditionRef: "ref",
                          FindingRef: "finding"}


class ConditionVisitor(Generic[R]):
    """Dispatch on the node type: `visit(node, *args)` calls the hook for it with the same extra arguments."""

    def visit(self, node: Condition, *args: Any) -> R:
        hook = _HOOK.get(type(node))
        if hook is None:
            raise TypeError(f"not a condition: {node!r}")
        result: R = getattr(self, hook)(node, *args)
        return result

    def default(self, node: Condition, *args: Any, **kwargs: Any) -> R:
        """What a hook that is not overridden does: refuse the node."""
        raise TypeError(f"{type(self).__name__} cannot visit {node!r}")

    def fact(self, node: FactTest, *args: Any, **kwargs: Any) -> R:
        return self.default(node, *args)

    def all_of(self, node: AllOf, *args: Any, **kwargs: Any) -> R:
        return self.group(node, node.all, True, *args)

    def any_of(self, node: AnyOf, *args: Any, **kwargs: Any) -> R:
        return self.group(node, node.any, False, *args)

    def group(self, node: AllOf | AnyOf, parts: list[Condition], conjunctive: bool, *args: Any, **kwargs: Any) -> R:
        """An `all` (conjunctive) or an `any`, with its parts."""
        return self.default(node, *args)

    def not_of(self, node: NotOf, *args: Any, **kwargs: Any) -> R:
        return self.default(node, *args)

    def ref(self, node: ConditionRef, *args: Any, **kwargs: Any) -> R:
        return self.default(node, *args)

    def finding(self, node: FindingRef, *args: Any, **kwargs: Any) -> R:
        return self.default(node, *args)


def children(node: Condition) -> Sequence[Condition]:
    """The direct sub-conditions of a node (none for leaves and refs)."""
    if isinstance(node, AllOf):
        return node.all
    if isinstance(node, AnyOf):
        return node.any
    if isinstance(node, NotOf):
        return (node.not_,)
    return ()


def walk(node: Condition) -> Iterator[Condition]:
    """Every node of a condition tree, depth first."""
    yield node
    for child in children(node):
        yield from walk(child)


def walk_paths(node: Condition, path: YamlPath = ()) -> Iterator[tuple[Condition, YamlPath]]:
    """Every node with its YAML path (``all``/``any`` and an index, ``not``); named conditions are not entered."""
    yield node, path
    if isinstance(node, AllOf):
        for i, child in enumerate(node.all):
            yield from walk_paths(child, (*path, "all", i))
    elif isinstance(node, AnyOf):
        for i, child in enumerate(node.any):
            yield from walk_paths(child, (*path, "any", i))
    elif isinstance(node, NotOf):
        yield from walk_paths(node.not_, (*path, "not"))


class LeafVisitor(ConditionVisitor[Iterator[T]]):
    """Visits the leaves (fact tests, finding references, named-condition references) of a tree in order, each with
    its YAML path; the `fact`, `finding` and `ref` hooks yield items (nothing unless overridden)."""

    def leaves(self, node: Condition, path: YamlPath = ()) -> Iterator[T]:
        return self.visit(node, path)

    def fact(self, node: FactTest, path: YamlPath) -> Iterator[T]:
        return iter(())

    def finding(self, node: FindingRef, path: YamlPath) -> Iterator[T]:
        return iter(())

    def ref(self, node: ConditionRef, path: YamlPath) -> Iterator[T]:
        return iter(())

    def group(self, node: AllOf | AnyOf, parts: list[Condition], conjunctive: bool, path: YamlPath) -> Iterator[T]:
        key = "all" if conjunctive else "any"
        for i, child in enumerate(parts):
            yield from self.visit(child, (*path, key, i))

    def not_of(self, node: NotOf, path: YamlPath) -> Iterator[T]:
        return self.visit(node.not_, (*path, "not"))


def fact_tests(node: Condition) -> Iterator[FactTest]:
    """Every fact test, depth first."""
    return (n for n in walk(node) if isinstance(n, FactTest))


def conjunctions(node: Condition) -> Iterator[AllOf]:
    """Every `all`, depth first."""
    return (n for n in walk(node) if isinstance(n, AllOf))


def fact_tests_at(node: Condition, path: YamlPath = ()) -> Iterator[tuple[FactTest, YamlPath]]:
    """Every fact test with its YAML path."""
    return ((n, p) for n, p in walk_paths(node, path) if isinstance(n, FactTest))


def finding_refs_at(node: Condition, path: YamlPath = ()) -> Iterator[tuple[FindingRef, YamlPath]]:
    """Every finding reference with its YAML path."""
    return ((n, p) for n, p in walk_paths(node, path) if isinstance(n, FindingRef))


def condition_refs_at(node: Condition, path: YamlPath = ()) -> Iterator[tuple[ConditionRef, YamlPath]]:
    """Every reference to a named condition with its YAML path."""
    return ((n, p) for n, p in walk_paths(node, path) if isinstance(n, ConditionRef))


def facts_used(node: Condition) -> list[str]:
    """Fact names a resolved condition reads, in first-use order."""
    seen: list[str] = []
    for n in fact_tests(node):
        if n.fact not in seen:
            seen.append(n.fact)
    return seen


def finding_uses(node: Condition, conditions: Mapping[str, Condition] | None = None,
                 stack: tuple[str, ...] = ()) -> list[tuple[str, bool]]:
    """(finding, negated) for every finding reference, in order; named conditions are entered through
    `conditions` (name -> its `when`), except undefined ones and those already being entered (a cycle)."""
    out: list[tuple[str, bool]] = []

    def visit(n: Condition, negated: bool, inside: tuple[str, ...]) -> None:
        if isinstance(n, FindingRef):
            out.append((n.finding, negated))
        elif isinstance(n, ConditionRef):
            if conditions is not None and n.ref in conditions and n.ref not in inside:
                visit(conditions[n.ref], negated, (*inside, n.ref))
        else:
            flip = isinstance(n, NotOf)
            for child in children(n):
                visit(child, negated != flip, inside)

    visit(node, False, stack)
    return out


def findings_used(node: Condition) -> tuple[set[str], set[str]]:
    """(positively, negatively) referenced findings of a resolved condition."""
    pos: set[str] = set()
    neg: set[str] = set()
    for name, negated in finding_uses(node):
        (neg if negated else pos).add(name)
    return pos, neg


def refs_used(node: Condition, conditions: Mapping[str, Condition], stack: tuple[str, ...] = ()) -> set[str]:
    """Named conditions a condition uses, transitively (undefined and cyclic ones included, not entered)."""
    out: set[str] = set()
    for n, _ in condition_refs_at(node):
        out.add(n.ref)
        if n.ref in conditions and n.ref not in stack:
            out |= refs_used(conditions[n.ref], conditions, (*stack, n.ref))
    return out


class _Resolver(ConditionVisitor[Condition]):
    def __init__(self, lookup: Callable[[ConditionRef, tuple[str, ...]], Condition]) -> None:
        self.lookup = lookup

    def fact(self, node: FactTest, stack: tuple[str, ...]) -> Condition:
        return node

    def finding(self, node: FindingRef, stack: tuple[str, ...]) -> Condition:
        return node

    def all_of(self, node: AllOf, stack: tuple[str, ...]) -> Condition:
        return AllOf(all=[self.visit(c, stack) for c in node.all])

    def any_of(self, node: AnyOf, stack: tuple[str, ...]) -> Condition:
        return AnyOf(any=[self.visit(c, stack) for c in node.any])

    def not_of(self, node: NotOf, stack: tuple[str, ...]) -> Condition:
        return NotOf(not_=self.visit(node.not_, stack))

    def ref(self, node: ConditionRef, stack: tuple[str, ...]) -> Condition:
        return self.visit(self.lookup(node, stack), (*stack, node.ref))


def resolve(node: Condition, lookup: Callable[[ConditionRef, tuple[str, ...]], Condition]) -> Condition:
    """The condition with named conditions inlined: `lookup(ref, stack)` gives the condition a reference names
    (`stack`: the names being inlined around it), or raises."""
    return _Resolver(lookup).visit(node, ())


def knowledge_values_at(node: Condition,
                        path: YamlPath = ()) -> Iterator[tuple[FactTest, str, KnowledgeValue, YamlPath]]:
    """(test, operator, named value, YAML path of the operator) for every threshold written as a `KnowledgeValue`
    (named conditions are not entered)."""
    for test, at in fact_tests_at(node, path):
        for op, value in test.ops():
            if isinstance(value, KnowledgeValue):
                yield test, op, value, (*at, op)


class _Binder(ConditionVisitor[Condition]):
    """Rebuilds only the nodes that hold a knowledge value; the rest of the tree is shared."""

    def __init__(self, value_of: Callable[[KnowledgeValue], float | None]) -> None:
        self.value_of = value_of

    def fact(self, node: FactTest) -> Condition:
        ops = node.ops()
        if not any(isinstance(value, KnowledgeValue) for _, value in ops):
            return node
        data: dict[str, Any] = {"fact": node.fact}
        for op, value in ops:
            bound = self.value_of(value) if isinstance(value, KnowledgeValue) else value
            if bound is not None:
                data[op] = bound
        if node.known is not None or len(data) == 1:  # every threshold unknown: read it as a test of `known`
            data["known"] = True if node.known is None else node.known
        return FactTest.model_validate(data)

    def finding(self, node: FindingRef) -> Condition:
        return node

    def ref(self, node: ConditionRef) -> Condition:
        return node

    def all_of(self, node: AllOf) -> Condition:
        parts = [self.visit(c) for c in node.all]
        return node if all(a is b for a, b in zip(parts, node.all, strict=True)) else AllOf(all=parts)

    def any_of(self, node: AnyOf) -> Condition:
        parts = [self.visit(c) for c in node.any]
        return node if all(a is b for a, b in zip(parts, node.any, strict=True)) else AnyOf(any=parts)

    def not_of(self, node: NotOf) -> Condition:
        inner = self.visit(node.not_)
        return node if inner is node.not_ else NotOf(not_=inner)


def bind(node: Condition, value_of: Callable[[KnowledgeValue], float | None]) -> Condition:
    """The condition with every `KnowledgeValue` threshold replaced by `value_of(it)`, so that evaluation compares
    numbers only; the same object when it names none. A threshold `value_of` cannot give (None) is left out, and a
    test left with no operator becomes ``known: true`` (only `dam rules lint` binds such a tree, after reporting it;
    the loader refuses unknown names first)."""
    return _Binder(value_of).visit(node)
