"""The analysis pass over one device's activities (ordered by start) inside its windows: the shared timeline
analysis (`timeline.analysis`, `timeline.breakdown`) and the device's rank figures (`cluster.device_rank`), computed
from running sums and streamed interval sets, with the host side read back from the host sweep's tables.

Everything `timeline.analyse` derives from held rows is a sweep here: the idle-gap split runs on `split_gap` with
streaming covers of the host activity and blocking calls; copies, exposed communication and the rank's busy,
compute, communication and overlap time are unions merged as the activities pass; kernel classes, kernels and
launching operators are sums keyed by name (bounded by the distinct names); operator instances are counted with a
bit per NVTX row."""

from __future__ import annotations

import math
import re
from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ...breakdown import TimeEntry, TraceWindow
from ..distributed import catalog as distributed_catalog
from ..intervals import Interval, total, union
from ..rank_trace import COMM, COMPUTE, MEMORY, NOT_COMPUTE, Collective, RankTrace
from ..timeline.analysis import idle_means, idle_shares, split_gap
from ..timeline.breakdown import assemble
from ..timeline.cover import Cover, intersect_all
from ..timeline.model import H2D, KIND_KERNEL, PAGEABLE, PINNED
from ..timeline.result import DeviceIdle, TimelineAnalysis, record_dispatch, slow_launches
from ..timeline.roofline import Roof, RoofAcc, sig6
from ..timeline.streams import (
    CoverCursor,
    CumTotal,
    IntersectStream,
    PointCover,
    Sink,
    UnionStream,
    intersect_iter,
    subtract_iter,
)
from .host_sweep import ids_sql
from .names import MODULE
from .schema import RUNTIME_T

if TYPE_CHECKING:
    from .gpu_sweep import GpuSweep

_NAN = math.nan


class _Rank:
    """The device's rank figures (`cluster.device_rank`) as the activities pass: unions per class (HTA's, from
    knowledge_base/distributed.yaml) covered per window, and the collectives per window."""

    def __init__(self, windows: Sequence[Interval]) -> None:
        self.cat = distributed_catalog()
        self.ws = list(windows)
        points = [t for w in self.ws for t in w]
        self.busy, self.compute, self.comm, self.overlap = (PointCover(points) for _ in range(4))
        self.inter = IntersectStream(self.overlap.push)

        def comm_sink(s: float, e: float) -> None:
            self.comm.push(s, e)
            self.inter.push_a(s, e)

        def compute_sink(s: float, e: float) -> None:
            self.compute.push(s, e)
            self.inter.push_b(s, e)

        self.compute_u = UnionStream(compute_sink, drop_empty=False)
        self.comm_u = UnionStream(comm_sink, drop_empty=False)
        self.classes: dict[tuple[int, int], int] = {}
        self.kinds: dict[int, str] = {}
        self.starts = [w[0] for w in self.ws]
        self.collectives: list[list[Collective]] = [[] for _ in self.ws]
        self.same_start: list[tuple[float, float, int]] = []  # comm events at one start, sorted as device_rank does

    def class_of(self, nm: int, kind: int, names: list[str]) -> int:
        text = names[nm]
        cat = self.cat
        c = self.classes[(nm, kind)] = (MEMORY if kind != KIND_KERNEL or cat.memory.search(text) else
                                        COMM if cat.comm.search(text) else
                                        NOT_COMPUTE if cat.not_compute.search(text) else COMPUTE)
        return c

    def comm_event(self, s: float, e: float, nm: int, names: list[str]) -> None:
        self.comm_u.add(s, e)
        if self.same_start and self.same_start[0][0] != s:
            self._collect(names)
        self.same_start.append((s, e, nm))

    def _collect(self, names: list[str]) -> None:
        ws = self.ws
        for s, e, nid in sorted(self.same_start):
            k = bisect_right(self.starts, s) - 1
            if k < 0 or s >= ws[k][1]:
                continue
            kind = self.kinds.get(nid)
            if kind is None:
                kind = self.kinds[nid] = self.cat.kind(names[nid])
            self.collectives[k].append((kind, e - s, -1.0, -1))  # nsys does not record collective sizes
        self.same_start.clear()

    def trace(self, names: list[str], device: int, steps: Sequence[int], *, path: str, name: str,
              label: str) -> RankTrace:
        self._collect(names)
        for u in (self.compute_u, self.comm_u):
            u.close()
        for cover in (self.busy, self.compute, self.comm, self.overlap):
            cover.close()
        ws = self.ws
        out = RankTrace(path=path, name=name, rank=device, rank_from="device", mode="gpu", device=device,
                        start_us=ws[0][0] if ws else 0.0, end_us=ws[-1][1] if ws else 0.0, label=label,
                        steps=list(steps)[: len(ws)])
        out.window_us = [b - a for a, b in ws]
        out.busy_us, out.compute_us, out.comm_us, out.overlap_us = (
            [c.between(2 * k) for k in range(len(ws))] for c in (self.busy, self.compute, self.comm, self.overlap))
        out.collectives = self.collectives
        return out


class _Exposed:
    """Host-to-device copy time and communication not overlapped by other GPU work, inside the windows (`_device`'s
    tail in timeline.analysis), from the unions of copies, communication and the rest the activity pass merges."""

    def __init__(self, windows: Sequence[Interval]) -> None:
        self.h2d_total = CumTotal()
        h2d_w = IntersectStream(self.h2d_total.push)
        for s, e in windows:
            h2d_w.push_b(s, e)
        self.comm_sum: float = 0
        self.overlap_total = CumTotal()
        self.overlap = overlap = IntersectStream(self.overlap_total.push)

        def comm_piece(s: float, e: float) -> None:
            self.comm_sum += e - s
            overlap.push_a(s, e)

        comm_w = IntersectStream(comm_piece)
        for s, e in windows:
            comm_w.push_b(s, e)
        self.h2d_sink: Sink = h2d_w.push_a
        self.comm_sink: Sink = comm_w.push_a
        self.compute_sink: Sink = overlap.push_b
        self.any_comm = False


class _HostIdle:
    """The host activity inside the host-compute gaps (`_host_during_idle` of timeline.analysis: host_w intersected
    with the union of those gaps), taken from the host-activity stream as the gap sweep reads it: the sweep appends
    each gap once its cursor has read past the gap's end, so every interval the gap meets has gone by."""

    def __init__(self, host_w: Iterator[Interval]) -> None:
        self.src = host_w
        self.recent: deque[Interval] = deque()
        self.floor = -math.inf  # no later gap reaches back before this
        self.gap: list[float] | None = None  # the pending gap (touching ones merge, as intervals.union merges them)
        self.mids = array("d")
        self.lengths = array("d")

    def stream(self) -> Iterator[Interval]:
        recent = self.recent
        for iv in self.src:
            while recent and recent[0][1] <= self.floor:
                recent.popleft()
            recent.append(iv)
            yield iv

    def append(self, gap: Interval, /) -> None:
        a, b = gap
        if b <= a:
            return
        g = self.gap
        if g is not None and a <= g[1]:
            if b > g[1]:
                g[1] = b
            return
        if g is not None:
            self._pieces(g)
        self.gap = [a, b]
        self.floor = a

    def _pieces(self, g: list[float]) -> None:
        a, b = g
        for s, e in self.recent:
            if s >= b:
                break
            ps, pe = max(s, a), min(e, b)
            if pe > ps:
                self.mids.append((ps + pe) / 2)
                self.lengths.append(pe - ps)

    def advance(self, t: float) -> None:
        """The sweep has reached `t`: later gaps start there or after."""
        g = self.gap
        if g is not None:
            if t <= g[1]:
                return
            self._pieces(g)
            self.gap = None
        self.floor = t

    def close(self) -> None:
        if self.gap is not None:
            self._pieces(self.gap)
            self.gap = None


def analyse_device(g: GpuSweep, windows: list[Interval], *, roof: Roof | None, source: str,
                   window: TraceWindow | None, steps: Sequence[tuple[int, float, float]], rank_steps: Sequence[int],
                   path: str, name: str, label: str) -> tuple[TimelineAnalysis | None, RankTrace]:
    """`timeline.analyse(tl, windows, {device}, ...)` and `cluster.device_rank(tl, device, windows, ...)` of the
    device's rows, in one pass over its activities and two over its host rows (the sweep, then the instants)."""
    host, cls, cat, names = g.host, g.cls, g.catalog, g.names
    top_n = cat.analysis.top_n
    wl = windows
    span_raw = total(wl)
    span = span_raw or 1.0
    w_starts = [w[0] for w in wl]
    loader = intersect_all(union(g.loader), wl)
    cov_w, cov_l = Cover(wl), Cover(loader)
    sync_all = host.stored("dam_sync")
    cov_s = CoverCursor(intersect_iter(subtract_iter(sync_all, loader) if loader else sync_all, wl))
    sync_point = CoverCursor(host.stored("dam_sync"))
    host_all: Iterator[Interval] = host.stored("dam_host")
    if loader:
        host_all = subtract_iter(host_all, loader)
    if host.sync_intervals:
        host_all = subtract_iter(host_all, host.stored("dam_sync"))
    cov_k = None  # inside launch calls: launch overhead where the GPU idles, not host compute
    if host.slow_intervals:  # a first launch loading its module: neither steady launch overhead nor host compute
        host_all = subtract_iter(host_all, host.stored("dam_slow"))
    if host.launch_intervals:
        host_all = subtract_iter(host_all, host.stored("dam_lcall"))
        in_launch: Iterator[Interval] = host.stored("dam_lcall")
        if loader:
            in_launch = subtract_iter(in_launch, loader)
        if host.sync_intervals:
            in_launch = subtract_iter(in_launch, host.stored("dam_sync"))
        cov_k = CoverCursor(intersect_iter(in_launch, wl))
    idle_host = _HostIdle(intersect_iter(host_all, wl))
    cov_h = CoverCursor(idle_host.stream())
    launch_gap = cat.analysis.launch_gap_max_us
    short = g.kernel_wait_us
    acc = DeviceIdle()
    gaps = idle_host
    exposed = _Exposed(wl)
    rank = _Rank(wl)
    w_lo, w_hi = (wl[0][0], wl[-1][1]) if wl else (0.0, 0.0)
    prev, ms, me = w_lo, _NAN, _NAN
    classes: dict[tuple[int, int], str] = {}
    of = cls.of
    # window sums (the breakdown's)
    n_all = matched = 0
    in_w = kern_n = 0
    kern_sum: float = 0
    kern_min = kern_max = _NAN
    gpu_total: float = 0
    copies = {"pageable": 0.0, "pinned": 0.0, "unknown": 0.0}
    per_class: dict[str, list[float]] = {}
    per_kernel: dict[int, list[float]] = {}
    groups: dict[int, RoofAcc] = {}
    group_count: dict[int, int] = {}
    class_groups: dict[str, dict[int, float]] = {}
    seen_ops = bytearray(host.max_nvtx_rowid // 8 + 1)
    per_module: dict[str, list[float]] = {}
    module_spans: dict[str, set[int]] = {}
    op_ids: dict[str, int] = {}
    module_rx = re.compile(r"_\d+$")
    tick = g.tick
    h_s = h_e = c_s = c_e = x_s = x_e = r_s = r_e = _NAN  # the running intervals of the unions
    h2d_push, comm_push, compute_push = exposed.h2d_sink, exposed.comm_sink, exposed.compute_sink
    every_push = rank.busy.push
    rank_classes = rank.classes
    any_comm = False
    decoded = g._decoded
    for row in (g._rows(True) if wl else ()):
        code, nid, start, end, launch, _rid, _tid, ck, src, dst, _, op, op_text, module, module_text = row
        s = start / 1000.0
        e = s + (end - start) / 1000.0
        at = launch / 1000.0 if launch is not None else _NAN
        found = decoded.get((code, nid, ck, src, dst) if code else (0, nid, None, None))
        if found is None:
            found = g._decode(code, nid, ck, src, dst)
        nm, kind, flag = found
        n_all += 1
        if launch is not None:
            matched += 1
        key = (nm, kind)
        c = classes.get(key)
        if c is None:
            c = classes[key] = of(names, nm, kind)
        # busy time and the idle gaps (timeline.analysis._Analyzer._device)
        if me == me and s <= me:
            if e > me:
                me = e
        else:
            if me == me:
                acc.busy += cov_w.between(ms, me)
                if me > prev:
                    prev = me
                    idle_host.advance(prev)
            if s > prev:
                split_gap(acc, prev, s, at, True, short, cov_w, cov_l, cov_s, cov_h, sync_point, launch_gap, gaps,
                          cov_k)
            ms, me = s, e
        # unions merged inline (UnionStream.add, unrolled: this loop runs once per activity)
        if e > s:
            if flag & H2D:
                if h_s != h_s:
                    h_s, h_e = s, e
                elif s <= h_e:
                    if e > h_e:
                        h_e = e
                else:
                    h2d_push(h_s, h_e)
                    h_s, h_e = s, e
            if c == "communication":
                any_comm = True
                if c_s != c_s:
                    c_s, c_e = s, e
                elif s <= c_e:
                    if e > c_e:
                        c_e = e
                else:
                    comm_push(c_s, c_e)
                    c_s, c_e = s, e
            elif x_s != x_s:
                x_s, x_e = s, e
            elif s <= x_e:
                if e > x_e:
                    x_e = e
            else:
                compute_push(x_s, x_e)
                x_s, x_e = s, e
        elif c == "communication":
            any_comm = True
        rc = rank_classes.get(key)
        if rc is None:
            rc = rank.class_of(nm, kind, names)
        if r_s != r_s:
            r_s, r_e = s, e
        elif s <= r_e:
            if e > r_e:
                r_e = e
        else:
            every_push(r_s, r_e)
            r_s, r_e = s, e
        if rc == COMPUTE:
            rank.compute_u.add(s, e)
        elif rc == COMM:
            rank.comm_event(s, e, nm, names)
        # inside the window: the breakdown's sums
        k = bisect_right(w_starts, s) - 1
        if k >= 0 and s < wl[k][1]:
            d = e - s
            in_w += 1
            gpu_total += d
            if kind == KIND_KERNEL:
                kern_n += 1
                kern_sum += d
                if kern_n == 1:
                    kern_min = kern_max = d
                elif d < kern_min:
                    kern_min = d
                elif d > kern_max:
                    kern_max = d
            if flag & H2D:
                copies["pageable" if flag & PAGEABLE else "pinned" if flag & PINNED else "unknown"] += d
            pc = per_class.get(c)
            if pc is None:
                pc = per_class[c] = [0.0, 0.0]
            pc[0] += d
            pc[1] += 1
            pk = per_kernel.get(nm)
            if pk is None:
                pk = per_kernel[nm] = [0.0, 0.0, kind]
            pk[0] += d
            pk[1] += 1
            if op is not None:
                op_name = op_ids.get(op_text)
                if op_name is None:
                    op_name = op_ids[op_text] = g.op_id(str(op_text))
                grp = groups.get(op_name)
                if grp is None:
                    grp = groups[op_name] = RoofAcc()
                grp.time += d
                grp.cls[c] = grp.cls.get(c, 0.0) + d
                byte, bit = op >> 3, 1 << (op & 7)
                if not seen_ops[byte] & bit:
                    seen_ops[byte] |= bit
                    group_count[op_name] = group_count.get(op_name, 0) + 1
                cg = class_groups.setdefault(c, {})
                cg[op_name] = cg.get(op_name, 0.0) + d
                if module is not None and module >= 0:
                    label = module_rx.sub("", str(module_text)[len(MODULE):])
                    t = per_module.setdefault(label, [0.0])
                    t[0] += d
                    module_spans.setdefault(label, set()).add(module)
        if not n_all & 1023:  # what waits for the other side of an intersection, bounded
            exposed.overlap.prune(c_s if c_s == c_s else s, x_s if x_s == x_s else s)
            cu, xu = rank.comm_u, rank.compute_u
            rank.inter.prune(cu.s if cu.s == cu.s else s, xu.s if xu.s == xu.s else s)
            if tick is not None and not n_all & 65535:
                tick(65536)
    if me == me:
        acc.busy += cov_w.between(ms, me)
        if me > prev:
            prev = me
    for u_s, u_e, push in ((h_s, h_e, h2d_push), (c_s, c_e, comm_push), (x_s, x_e, compute_push),
                           (r_s, r_e, every_push)):
        if u_s == u_s:
            push(u_s, u_e)
    exposed.any_comm = any_comm
    ranked_trace = rank.trace(names, g.device, rank_steps, path=path, name=name, label=label)
    if acc.busy <= 0:
        return None, ranked_trace
    if prev < w_hi:
        split_gap(acc, prev, w_hi, _NAN, False, short, cov_w, cov_l, cov_s, cov_h, sync_point, launch_gap, gaps,
                  cov_k)
    acc.h2d = exposed.h2d_total.cum
    if exposed.any_comm:
        acc.comm = exposed.comm_sum - exposed.overlap_total.cum
    idle = idle_means([acc], span)
    blocked, blocking_calls, device_frees = _blocking(g, wl, w_starts)
    modules = [TimeEntry(name=f"{MODULE}{label}", gpu_time_s=sig6(t[0] / 1e6),
                         share=sig6(t[0] / gpu_total if gpu_total else 0.0), count=len(module_spans[label]))
               for label, t in sorted(per_module.items(), key=lambda kv: -kv[1][0])[:top_n]]
    breakdown, facts = assemble(names, g.op_names, cls, cat, roof, gpu_total=gpu_total, kernels=kern_n,
                                per_class=per_class, per_kernel=per_kernel, groups=groups, group_count=group_count,
                                class_groups=class_groups, kern_roof={}, counted=0, modules=modules, source=source,
                                window=window, steps=steps, devices=[g.device], graph_launches=host.graph_launches)
    facts["_launch_gap_us"] = launch_gap
    one_off_us = facts["_one_off_launch_us"] = cat.analysis.one_off_launch_min_us
    facts["_slow_launch"] = slow_launches([(nm, cov_w.between(a, b)) for nm, a, b in
                                           host.slow_launch_calls()], one_off_us)
    breakdown.host_during_idle, facts["idle_host_ops"] = _host_during_idle(g, idle_host, span, top_n, facts)
    breakdown.idle = idle_shares(idle)
    analysis = TimelineAnalysis(
        span_us=span_raw, devices=[g.device], activities=in_w, idle=idle, kernels=kern_n,
        kernel_mean_us=kern_sum / kern_n if kern_n else None, kernel_min_us=kern_min if kern_n else None,
        kernel_max_us=kern_max if kern_n else None, copies=copies, has_comm=exposed.any_comm,
        has_runtime=host.has_runtime, launches_matched=matched / n_all if n_all else 0.0,
        graph_launches=host.graph_launches, blocking_calls=blocking_calls, blocking_share=min(1.0, blocked / span),
        breakdown=breakdown, facts=facts, device_frees=device_frees)
    return analysis, ranked_trace


def _blocking(g: GpuSweep, wl: list[Interval], w_starts: list[float]) -> tuple[float, int, int]:
    """Time the host spent in blocking calls that start inside the windows (their union over the windows), how many
    there are, and how many of them return device memory (cudaFree)."""
    host, x = g.host, g.x
    if not host.blocking_ids or not x.has(RUNTIME_T) or not x.has(RUNTIME_T, "nameId"):
        return 0.0, 0, 0
    blocked = CumTotal()
    inter = IntersectStream(blocked.push)
    for s, e in wl:
        inter.push_b(s, e)
    u = UnionStream(inter.push_a)
    count = frees = 0
    free_ids = host.free_ids
    sql = (f"SELECT r.start, r.\"end\", r.nameId FROM {RUNTIME_T} r WHERE r.nameId IN ({ids_sql(host.blocking_ids)})"
           f"{host._proc_filter(RUNTIME_T, 'r', 'globalTid')} ORDER BY r.start")
    with x.guard():
        for start, end, name_id in x.conn.execute(sql):
            s = start / 1000.0
            k = bisect_right(w_starts, s) - 1
            if k >= 0 and s < wl[k][1]:
                count += 1
                frees += name_id in free_ids
                u.add(s, s + (end - start) / 1000.0)
    u.close()
    return blocked.cum, count, frees


def _host_during_idle(g: GpuSweep, idle: _HostIdle, span: float, top_n: int,
                      facts: dict[str, Any]) -> tuple[list[TimeEntry], str | None]:
    """What the launching threads ran while the GPU idled in host-compute gaps (`_host_during_idle` of
    timeline.analysis): each stretch of host activity in such a gap credited to what ran at its middle, and the part
    inside an outermost operator that launched GPU work, copies left out, to `facts` (`_host_dispatch_us`...)."""
    idle.close()
    mids, lengths = idle.mids, idle.lengths
    facts["_host_dispatch_us"] = 0.0
    if not mids:
        return [], None
    credit: dict[str, float] = {}
    count: dict[str, int] = {}
    dispatch: dict[str, float] = {}
    is_copy = g.host.cls.is_host_copy
    for k, (_, who, outer) in enumerate(g.host.at_instants(mids)):
        credit[who] = credit.get(who, 0.0) + lengths[k]
        count[who] = count.get(who, 0) + 1
        if outer is not None and not (is_copy(outer) or is_copy(who)):
            dispatch[outer] = dispatch.get(outer, 0.0) + lengths[k]
    record_dispatch(facts, sum(lengths), dispatch, top_n)
    ranked = sorted(credit.items(), key=lambda kv: -kv[1])
    entries = [TimeEntry(name=who, gpu_time_s=sig6(t / 1e6), share=sig6(t / span), count=count[who])
               for who, t in ranked[:top_n]]
    top = [who for who, _ in ranked[:3]]
    text = top[0] if len(top) == 1 else ", ".join(top[:-1]) + " and " + top[-1]
    return entries, text

