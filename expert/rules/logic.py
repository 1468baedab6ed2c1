"""Walking condition trees: the nodes of a tree, the facts and findings it reads."""

from __future__ import annotations

from collections.abc import Iterator

from .model import AllOf, AnyOf, Condition, FactTest, FindingRef, NotOf


def walk(node: Condition) -> Iterator[Condition]:
    """Every node of a condition tree, depth first."""
    yield node
    if isinstance(node, AllOf):
        for child in node.all:
            yield from walk(child)
    elif isinstance(node, AnyOf):
        for child in node.any:
            yield from walk(child)
    elif isinstance(node, NotOf):
        yield from walk(node.not_)


def findings_used(node: Condition) -> tuple[set[str], set[str]]:
    """(positively, negatively) referenced findings of a resolved condition."""
    pos: set[str] = set()
    neg: set[str] = set()

    def visit(n: Condition, negated: bool) -> None:
        if isinstance(n, FindingRef):
            (neg if negated else pos).add(n.finding)
        elif isinstance(n, AllOf):
            for c in n.all:
                visit(c, negated)
        elif isinstance(n, AnyOf):
            for c in n.any:
                visit(c, negated)
        elif isinstance(n, NotOf):
            visit(n.not_, not negated)

    visit(node, False)
    return pos, neg


def facts_used(node: Condition) -> list[str]:
    """Fact names a resolved condition reads, in first-use order."""
    seen: list[str] = []
    for n in walk(node):
        if isinstance(n, FactTest) and n.fact not in seen:
            seen.append(n.fact)
    return seen
