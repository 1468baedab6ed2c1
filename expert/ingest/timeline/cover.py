"""Interval sets over a timeline: covered length and membership by prefix sums (`Cover`), linear intersection and
difference of sorted disjoint lists, and the union of nested per-thread spans held in columns."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence

from ..intervals import Interval, union


class Cover:
    """A sorted disjoint interval list with prefix sums: covered length of [a, b] and membership in O(log n)."""

    def __init__(self, intervals: Sequence[Interval]) -> None:
        self.starts = [iv[0] for iv in intervals]
        self.ends = [iv[1] for iv in intervals]
        cum = [0.0]
        for s, e in intervals:
            cum.append(cum[-1] + e - s)
        self.cum = cum

    def upto(self, t: float) -> float:
        i = bisect_right(self.starts, t) - 1
        if i < 0:
            return 0.0
        return self.cum[i] + min(t, self.ends[i]) - self.starts[i]

    def between(self, a: float, b: float) -> float:
        return self.upto(b) - self.upto(a) if b > a else 0.0

    def contains(self, t: float) -> bool:
        i = bisect_right(self.starts, t) - 1
        return i >= 0 and t <= self.ends[i]

    def holds(self, a: float, b: float) -> bool:
        """[a, b] lies inside one interval."""
        i = bisect_right(self.starts, a) - 1
        return i >= 0 and b <= self.ends[i]

    def touches(self, a: float, b: float) -> bool:
        """Some interval meets [a, b] (one bisect: cheaper than `between` when only yes or no matters)."""
        i = bisect_left(self.ends, a)
        return i < len(self.ends) and self.starts[i] <= b

    @property
    def nonempty(self) -> bool:
        return bool(self.starts)

    @property
    def total(self) -> float:
        return self.cum[-1]


def intersect_all(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """Intersection of two sorted disjoint lists (linear)."""
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if e > s:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """a minus b, both sorted and disjoint (linear)."""
    out: list[Interval] = []
    j = 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            out.append((cur, e))
    return out


def union_columns(starts: Sequence[float], ends: Sequence[float], keep: Iterable[int],
                  threads: Sequence[int] | None = None, slack: float = 0.0) -> list[Interval]:
    """Union of the intervals at the indices `keep`. Events of one thread arrive nested, in start order (children
    after their parent) or in end order (children first, as older profilers write them); a running span per thread
    absorbs both, and a parent that arrives after its children takes the finished children back, so only the
    top-level spans are sorted at the end: a million operators become a few thousand intervals. Gaps shorter than
    `slack` are filled (to find only the long stretches without events)."""
    running: dict[int, list[float]] = {}
    finished: dict[int, list[Interval]] = {}
    for i in keep:
        s, e = starts[i], ends[i]
        if e <= s:
            continue
        th = threads[i] if threads is not None else 0
        cur = running.get(th)
        if cur is None:
            running[th] = [s, e]
            finished[th] = []
        elif s <= cur[1] + slack and e >= cur[0] - slack:  # overlaps (nested, enclosing or partial): absorb
            if s < cur[0]:
                cur[0] = s
                done = finished[th]
                while done and done[-1][1] + slack >= s:  # an enclosing span arriving after its children
                    if done[-1][0] < cur[0]:
                        cur[0] = done[-1][0]
                    done.pop()
            if e > cur[1]:
                cur[1] = e
        elif s > cur[1]:
            finished[th].append((cur[0], cur[1]))
            cur[0], cur[1] = s, e
        else:  # entirely before the running span: out of order
            finished[th].append((s, e))
    out: list[Interval] = []
    for th, done in finished.items():
        out.extend(done)
        out.append((running[th][0], running[th][1]))
    return union(out)

