"""Operator lookups on a timeline: spans nested per thread (the innermost span around an instant), and the operator
behind each GPU activity (by external id, else the innermost operator around its launch call) with the costed
operator whose FLOPs its kernels carry."""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence

from ..intervals import Interval, union
from ..opflops import OpCost
from .cover import Cover
from .model import Timeline


class Nesting:
    """Spans of one kind nested per thread: the innermost span around [s, e], by a bisect and a walk up parents."""

    def __init__(self, starts: Sequence[float], ends: Sequence[float], threads: Sequence[int], keep: list[int]) -> None:
        order = sorted(keep, key=lambda i: (threads[i], starts[i], -ends[i]))
        self.starts, self.ends = starts, ends
        self.by_thread: dict[int, tuple[list[float], list[int], list[int]]] = {}
        stacks: dict[int, list[int]] = {}
        for i in order:
            th = threads[i]
            st, ids, parents = self.by_thread.setdefault(th, ([], [], []))
            stack = stacks.setdefault(th, [])
            while stack and ends[ids[stack[-1]]] < ends[i]:
                stack.pop()  # ended before i does: not an ancestor of i, nor of anything after it
            parents.append(stack[-1] if stack else -1)
            st.append(starts[i])
            ids.append(i)
            stack.append(len(ids) - 1)

    def outermost(self, thread: int, i: int) -> int:
        """The outermost span around span `i` of `thread` (itself when it has no parent)."""
        st, ids, parents = self.by_thread[thread]
        k = bisect_right(st, self.starts[i]) - 1
        while k >= 0 and ids[k] != i:  # spans starting at the same instant: walk back to i
            k -= 1
        while k >= 0 and parents[k] >= 0:
            k = parents[k]
        return ids[k] if k >= 0 else i

    def innermost(self, thread: int, s: float, e: float) -> int:
        found = self.by_thread.get(thread)
        if found is None:
            return -1
        st, ids, parents = found
        k = bisect_right(st, s) - 1
        while k >= 0:
            i = ids[k]
            if self.starts[i] <= s and self.ends[i] >= e:
                return i
            k = parents[k]
        return -1


class OpIndex:
    """Operator lookups: the operator that made a runtime call (external id, else the innermost enclosing operator)
    and the operator whose FLOPs a launcher's kernels carry (itself, else the innermost costed ancestor)."""

    def __init__(self, tl: Timeline, costs: list[OpCost | None]) -> None:
        self.tl = tl
        n = len(tl.o_ext)
        ext = tl.o_ext
        self.order: Sequence[int] = range(n)
        self.ext_sorted: Sequence[int] = ext
        self.slot: array[int] | None = None  # external id -> operator, when the ids are dense and unique
        top = max(ext, default=-1)
        if 0 <= top <= 2 * n + 100_000:  # dense ids, as profilers assign them
            slot = array("i" if n < (1 << 31) else "q", [-1]) * (top + 1)
            unique = True
            for i in range(n):
                x = ext[i]
                if x >= 0:
                    if slot[x] >= 0:
                        unique = False  # ids repeat (traces stitched together): look them up by time as well
                        break
                    slot[x] = i
            self.slot = slot if unique else None
        if self.slot is None and any(ext[i] > ext[i + 1] for i in range(n - 1)):
            packed = [ext[i] * (1 << 24) + i if ext[i] >= 0 else -1 for i in range(n)] if n < (1 << 24) else None
            if packed is not None and top < (1 << 38):
                packed.sort()  # in place: no second list
                self.order = array("q", (p & ((1 << 24) - 1) if p >= 0 else 0 for p in packed))
                self.ext_sorted = array("q", (p >> 24 if p >= 0 else -1 for p in packed))
                del packed
            else:
                self.order = array("q", sorted(range(n), key=ext.__getitem__))
                self.ext_sorted = array("q", (ext[i] for i in self.order))
        self.costed = bytearray(1 if sid >= 0 and costs[sid] is not None else 0 for sid in tl.o_shape)
        self._costed_nest: Nesting | None = None
        self._all_nest: Nesting | None = None
        self._claim: dict[int, int] = {}

    def launcher(self, act: int) -> int:
        """The operator behind GPU activity `act`, or -1."""
        tl = self.tl
        r = tl.launcher[act]
        ext = tl.r_ext[r] if r >= 0 else tl.g_ext[act]
        at = tl.r_start[r] if r >= 0 else tl.g_start[act]
        op = -1
        if ext >= 0 and self.slot is not None:
            op = self.slot[ext] if ext < len(self.slot) else -1
        elif ext >= 0 and len(self.ext_sorted):
            j = bisect_left(self.ext_sorted, ext)
            while j < len(self.ext_sorted) and self.ext_sorted[j] == ext:  # several only in stitched traces
                cand = self.order[j]
                if op < 0 or tl.o_start[cand] <= at <= tl.o_end[cand]:
                    op = cand
                    if tl.o_start[cand] <= at <= tl.o_end[cand]:
                        break
                j += 1
        if op < 0 and r >= 0 and len(tl.o_start):
            if self._all_nest is None:
                self._all_nest = Nesting(tl.o_start, tl.o_end, tl.o_thread, list(range(len(tl.o_start))))
            op = self._all_nest.innermost(tl.r_thread[r], tl.r_start[r], tl.r_end[r])
        return op

    def prepare_claims(self, launchers: Iterable[int]) -> None:
        """Nest the costed operators that could be an ancestor of an uncosted launcher (they overlap one on the same
        thread): few, so the sort stays small."""
        tl = self.tl
        uncosted = bytearray(len(tl.o_start))
        for op in launchers:
            if op >= 0 and not self.costed[op]:
                uncosted[op] = 1
        by_thread: dict[int, list[Interval]] = {}
        for op in (i for i, flag in enumerate(uncosted) if flag):
            by_thread.setdefault(tl.o_thread[op], []).append((tl.o_start[op], tl.o_end[op]))
        covers = {th: Cover(union(ivs)) for th, ivs in by_thread.items()}
        keep = [i for i in range(len(tl.o_start)) if self.costed[i] and tl.o_thread[i] in covers
                and covers[tl.o_thread[i]].touches(tl.o_start[i], tl.o_end[i])] if covers else []
        self._costed_nest = Nesting(tl.o_start, tl.o_end, tl.o_thread, keep)

    def claim(self, op: int) -> int:
        """The operator whose FLOP/byte count covers `op`'s kernels: `op` if costed, else its innermost costed
        ancestor on the same thread (among those `prepare_claims` kept), else -1."""
        if self.costed[op]:
            return op
        found = self._claim.get(op)
        if found is None:
            tl = self.tl
            if self._costed_nest is None:
                self.prepare_claims([op])
            assert self._costed_nest is not None
            found = self._costed_nest.innermost(tl.o_thread[op], tl.o_start[op], tl.o_end[op])
            self._claim[op] = found
        return found
