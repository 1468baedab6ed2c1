"""Interval sets as streams, for readers that sweep rows in time order instead of holding them: the union of
intervals pushed in start order, intersection and difference of sorted disjoint streams, and covered length with the
exact arithmetic of `cover.Cover` (the same prefix sums, added in the same order), so a streaming analysis gives the
numbers the in-memory one gives. Memory: the intervals in flight, never the stream."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence

from ..intervals import Interval

Sink = Callable[[float, float], None]
"""Where finished intervals go, in order."""


class UnionStream:
    """The union of intervals added in start order, each merged interval passed to `sink` once it is final.
    `drop_empty`: skip zero-length intervals (as `intervals.union` does); without it they are kept, as
    `cluster._Merged` keeps them."""

    def __init__(self, sink: Sink, *, drop_empty: bool = True, slack: float = 0.0) -> None:
        self.sink, self.drop_empty, self.slack = sink, drop_empty, slack
        self.s = self.e = math.nan

    def add(self, s: float, e: float) -> None:
        if self.drop_empty and e <= s:
            return
        if self.s != self.s:
            self.s, self.e = s, e
        elif s <= self.e + self.slack:
            if e > self.e:
                self.e = e
        else:
            self.sink(self.s, self.e)
            self.s, self.e = s, e

    def close(self) -> None:
        if self.s == self.s:
            self.sink(self.s, self.e)
            self.s = self.e = math.nan


class CumTotal:
    """`Cover(pieces).total` of the pieces pushed in order."""

    def __init__(self) -> None:
        self.cum = 0.0

    def push(self, s: float, e: float) -> None:
        self.cum = self.cum + e - s


class PointCover:
    """`Cover.upto(t)` at known, sorted points `points`, from the intervals of a sorted disjoint stream pushed in
    order; `values` after `close()`."""

    def __init__(self, points: Sequence[float]) -> None:
        self.points = points
        self.values = [0.0] * len(points)
        self.k = 0
        self.cur: Interval | None = None
        self.cum = 0.0

    def _at(self, t: float) -> float:
        cur = self.cur
        return 0.0 if cur is None else self.cum + min(t, cur[1]) - cur[0]

    def push(self, s: float, e: float) -> None:
        pts, k = self.points, self.k
        while k < len(pts) and pts[k] < s:
            self.values[k] = self._at(pts[k])
            k += 1
        self.k = k
        if self.cur is not None:
            self.cum = self.cum + self.cur[1] - self.cur[0]
        self.cur = (s, e)

    def close(self) -> list[float]:
        while self.k < len(self.points):
            self.values[self.k] = self._at(self.points[self.k])
            self.k += 1
        return self.values

    def between(self, i: int) -> float:
        """`Cover.between(points[i], points[i + 1])` (after close)."""
        a, b = self.points[i], self.points[i + 1]
        return self.values[i + 1] - self.values[i] if b > a else 0.0


class IntersectStream:
    """The intersection of two sorted disjoint streams pushed separately (`push_a`, `push_b`), with the steps of
    `cover.intersect_all`: pieces go to `sink` as soon as both sides are known."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.a: deque[Interval] = deque()
        self.b: deque[Interval] = deque()

    def push_a(self, s: float, e: float) -> None:
        self.a.append((s, e))
        self._run()

    def push_b(self, s: float, e: float) -> None:
        self.b.append((s, e))
        self._run()

    def prune(self, floor_a: float, floor_b: float) -> None:
        """Drop what waits for a side that cannot meet it: no later interval of a starts before `floor_a`, none of b
        before `floor_b` (the steps `intersect_all` would take, without output, once those arrive)."""
        a, b = self.a, self.b
        if not a:
            while b and b[0][1] <= floor_a:
                b.popleft()
        if not b:
            while a and a[0][1] <= floor_b:
                a.popleft()

    def _run(self) -> None:
        a, b, sink = self.a, self.b, self.sink
        while a and b:
            x, y = a[0], b[0]
            s, e = max(x[0], y[0]), min(x[1], y[1])
            if e > s:
                sink(s, e)
            if x[1] < y[1]:
                a.popleft()
            else:
                b.popleft()


def intersect_iter(a: Iterable[Interval], b: Iterable[Interval]) -> Iterator[Interval]:
    """`cover.intersect_all` of two sorted disjoint streams, lazily."""
    ia, ib = iter(a), iter(b)
    x, y = next(ia, None), next(ib, None)
    while x is not None and y is not None:
        s, e = max(x[0], y[0]), min(x[1], y[1])
        if e > s:
            yield s, e
        if x[1] < y[1]:
            x = next(ia, None)
        else:
            y = next(ib, None)


def subtract_iter(a: Iterable[Interval], b: Iterable[Interval]) -> Iterator[Interval]:
    """`cover.subtract` (a minus b) of two sorted disjoint streams, lazily; holds the intervals of b that overlap the
    current one of a."""
    ib = iter(b)
    ahead: deque[Interval] = deque()  # b[j:], as far as read
    done = False

    def fill() -> bool:
        nonlocal done
        if done:
            return False
        nxt = next(ib, None)
        if nxt is None:
            done = True
            return False
        ahead.append(nxt)
        return True

    for s, e in a:
        cur = s
        while True:  # drop b[j] while b[j].end <= cur
            if not ahead and not fill():
                break
            if ahead[0][1] <= cur:
                ahead.popleft()
            else:
                break
        k = 0
        while True:
            if k >= len(ahead) and not fill():
                break
            bs, be = ahead[k]
            if bs >= e:
                break
            if bs > cur:
                yield cur, bs
            cur = max(cur, be)
            k += 1
        if cur < e:
            yield cur, e


class CoverCursor:
    """`cover.Cover` over a sorted disjoint stream, for queries at nondecreasing times (a gap sweep's): covered length
    of [a, b] and membership, with the same prefix-sum arithmetic."""

    def __init__(self, intervals: Iterable[Interval]) -> None:
        self._it = iter(intervals)
        self._next = next(self._it, None)
        self._any = self._next is not None
        self._cur: Interval | None = None
        self._cum = 0.0

    @property
    def nonempty(self) -> bool:
        return self._any

    def _advance(self, t: float) -> None:
        nxt = self._next
        while nxt is not None and nxt[0] <= t:
            cur = self._cur
            if cur is not None:
                self._cum = self._cum + cur[1] - cur[0]
            self._cur = nxt
            nxt = self._next = next(self._it, None)

    def upto(self, t: float) -> float:
        self._advance(t)
        cur = self._cur
        return 0.0 if cur is None else self._cum + min(t, cur[1]) - cur[0]

    def between(self, a: float, b: float) -> float:
        if b <= a:
            return 0.0
        lo = self.upto(a)
        return self.upto(b) - lo

    def contains(self, t: float) -> bool:
        self._advance(t)
        return self._cur is not None and t <= self._cur[1]
