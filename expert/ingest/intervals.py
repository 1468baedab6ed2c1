"""Interval arithmetic on sorted, disjoint (start, end) lists: union, intersection, total length."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Interval = tuple[float, float]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """The union of intervals as a sorted list of disjoint intervals (empty ones dropped)."""
    out: list[Interval] = []
    for start, end in sorted(iv for iv in intervals if iv[1] > iv[0]):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def intersect(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """The intersection of two sorted disjoint interval lists."""
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        start = max(a[i][0], b[j][0])
        end = min(a[i][1], b[j][1])
        if end > start:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def total(intervals: Iterable[Interval]) -> float:
    """Summed length."""
    return sum(end - start for start, end in intervals)


def overlap(a: Sequence[Interval], b: Sequence[Interval]) -> float:
    """Length of the intersection of two sorted disjoint interval lists."""
    return total(intersect(a, b))
