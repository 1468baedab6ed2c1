"""The GPU side of one device of an export, swept from SQLite in start order: the analysed window (NVTX steps
extended to the end of the work launched in them, or the steady state) and the shared timeline analysis of it
(busy share, each idle gap split by cause, copies, exposed communication, kernel classes, top kernels and launching
operators, what the host ran during host-compute gaps) with the device's rank figures, from running sums, bounded
top-N tables and streamed interval sets, never from the rows held in memory.

The numbers are those of `timeline.analyse` / `timeline.step_windows` / `timeline.steady_window` /
`cluster.device_rank` on the same rows (the same sums in the same order; tests compare them on real exports)."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..intervals import Interval, union
from ..timeline.classes import Classifier
from ..timeline.model import H2D, KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET, PAGEABLE, PINNED
from ..timeline.windows import SteadyWindow, fmt_s, window_without_quiet_stretches
from .host_sweep import HostSweep
from .rows import _copy_info, _copy_kind_map
from .schema import COPY_ENUM_T, CUPTI_MEM_KINDS, KERNEL_T, MEM_ENUM_T, MEMCPY_T, NVTX_T, RUNTIME_T, STRINGS_T, quote

if TYPE_CHECKING:
    from ...kb.knowledge import KernelCatalog
    from .rows import NsysExport

_NAN = math.nan
_KINDS = (KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET)
Tick = Callable[[int], None]


@dataclass
class _Scan:
    """What the window pass learns: per-step GPU extents, the steady-state ingredients, counts."""

    ext: list[float] = field(default_factory=list)
    activities: int = 0
    g0: float = math.inf
    g1: float = -math.inf
    kernels: int = 0
    distinct: int = 0
    last_new: int = -1
    last_new_end: float = _NAN
    busy_slack: list[Interval] = field(default_factory=list)


class GpuSweep:
    """One device's activities (ordered by start), with its host side (`HostSweep`, swept first)."""

    def __init__(self, export: NsysExport, host: HostSweep, device: int, catalog: KernelCatalog, cls: Classifier,
                 loader: list[Interval], kernel_wait_us: float, tick: Tick | None = None) -> None:
        self.x, self.host, self.device, self.catalog, self.cls = export, host, device, catalog, cls
        self.loader, self.kernel_wait_us, self.tick = loader, kernel_wait_us, tick
        self.names: list[str] = []
        self._name_ids: dict[str, int] = {}
        self.op_names: list[str] = []
        self._op_ids: dict[str, int] = {}
        self._kernel_text = export._kernel_names()
        copy_kinds, _ = export.enum(COPY_ENUM_T, {})
        self._mem_kinds, _ = export.enum(MEM_ENUM_T, CUPTI_MEM_KINDS)
        self._copy_kind = _copy_kind_map(copy_kinds)
        self._decoded: dict[tuple[Any, ...], tuple[int, int, int]] = {}
        self.scan = _Scan()

    # -- rows ----------------------------------------------------------------------------------------------------
    def _name_id(self, name: str) -> int:
        found = self._name_ids.get(name)
        if found is None:
            found = self._name_ids[name] = len(self.names)
            self.names.append(name)
        return found

    def _decode(self, code: int, nid: Any, ck: Any, src: Any, dst: Any) -> tuple[int, int, int]:
        """(name id, kind, copy flag) of an activity row, interned in first-seen order as the timeline does."""
        key = (code, nid, ck, src, dst) if code else (0, nid, None, None)
        found = self._decoded.get(key)
        if found is None:
            if code == 0:
                found = (self._name_id(self._kernel_text.get(nid) or f"kernel {nid}"), KIND_KERNEL, 0)
            elif code == 1:
                name, kind, pageable = _copy_info(ck, src, dst, self._copy_kind, self._mem_kinds)
                flag = H2D | (PAGEABLE if pageable is True else PINNED if pageable is False else 0) \
                    if kind == "HtoD" else 0
                found = (self._name_id(name), KIND_MEMCPY, flag)
            else:
                found = (self._name_id("Memset (Device)"), KIND_MEMSET, 0)
            self._decoded[key] = found
        return found

    def _rows(self, attributed: bool) -> Iterator[tuple[Any, ...]]:
        """(code, name, start, end, launch start, launch call rowid, its thread, copyKind, srcKind, dstKind, rowid[,
        operator, operator name, module, module label]) of the device's activities by (start, table, rowid): the
        cursor itself (no generator frame per row), so the caller iterates it inside `export.guard()`."""
        x = self.x
        parts: list[str] = []
        for code, table in self.host.activity_tables():
            launch, join = x._launch_join(table)
            rid = "r.rid" if join else "NULL"
            tid = "r.tid" if join else "NULL"
            if table == KERNEL_T:
                col = x.kernel_name_column()
                name = f"a.{quote(col)}" if col else "-1"
            else:
                name = "-1"
            extra = (", ".join(x._col(table, c, "a") for c in ("copyKind", "srcKind", "dstKind")) if table == MEMCPY_T
                     else "-1, -1, -1")
            dev = x._col(table, "deviceId", "a", "0")
            parts.append(f"SELECT {code} AS code, {name}, a.start AS st, a.\"end\", {launch}, {rid} AS rid, {tid}, "
                         f"{extra}, a.rowid AS rw FROM {table} a{join} WHERE {dev} = {int(self.device)}")
        if not parts:
            return iter(())
        sql = " UNION ALL ".join(parts)
        if attributed:
            op, op_join = self._range_name("o", "os")
            mod, mod_join = self._range_name("m", "ms")
            short = f"CASE WHEN instr({op}, ',') > 0 THEN substr({op}, 1, instr({op}, ',') - 1) ELSE {op} END"
            if x.has(NVTX_T):
                sql = (f"SELECT q.*, t.op, {short}, t.module, {mod} FROM ({sql}) q LEFT JOIN temp.dam_attr t ON "
                       f"t.rid = q.rid LEFT JOIN {NVTX_T} o ON o.rowid = t.op{op_join} LEFT JOIN {NVTX_T} m ON "
                       f"m.rowid = t.module{mod_join}")
            else:
                sql = f"SELECT q.*, NULL, NULL, NULL, NULL FROM ({sql}) q"
        sql += " ORDER BY st, code, rw"
        with x.guard():
            return x.conn.execute(sql)

    def _range_name(self, alias: str, strings: str) -> tuple[str, str]:
        """(name expression, joins) of the NVTX range `alias` (emit_nvtx's annotation kept)."""
        cols = self.x.tables.get(NVTX_T, set())
        has_strings = self.x.has(STRINGS_T)
        if "text" in cols and "textId" in cols and has_strings:
            return (f"COALESCE({alias}.text, {strings}.value)",
                    f" LEFT JOIN {STRINGS_T} {strings} ON {strings}.id = {alias}.textId")
        if "text" in cols:
            return f"{alias}.text", ""
        if "textId" in cols and has_strings:
            return f"{strings}.value", f" LEFT JOIN {STRINGS_T} {strings} ON {strings}.id = {alias}.textId"
        return "NULL", ""

    def op_id(self, name: str) -> int:
        found = self._op_ids.get(name)
        if found is None:
            found = self._op_ids[name] = len(self.op_names)
            self.op_names.append(name)
        return found

    # -- the window pass -------------------------------------------------------------------------------------------
    def scan_windows(self, steps: Sequence[tuple[int, float, float]]) -> _Scan:
        """One pass: each step's extent to the end of the GPU work launched in it, and the steady state's inputs."""
        sc = self.scan = _Scan(ext=[s[2] for s in steps])
        starts = [s[1] for s in steps]
        ends = [s[2] for s in steps]
        slack = self.catalog.analysis.event_free_gap_us / 2
        busy_append = sc.busy_slack.append  # the busy union merged across gaps up to `slack` (UnionStream, inline)
        b_s = b_e = _NAN
        g0, g1 = sc.g0, sc.g1
        kernels, last_new, last_new_end = 0, -1, _NAN
        ext = sc.ext
        decoded = self._decoded
        seen: set[int] = set()
        launchers: dict[int, None] = {}  # launching threads, first seen first
        tick = self.tick
        n = 0
        for code, nid, start, end, launch, _rid, tid, ck, src, dst, _ in self._rows(False):
            s = start / 1000.0
            e = s + (end - start) / 1000.0
            found = decoded.get((code, nid, ck, src, dst) if code else (0, nid, None, None))
            if found is None:
                found = self._decode(code, nid, ck, src, dst)
            nm, kind = found[0], found[1]
            n += 1
            if s < g0:
                g0 = s
            if e > g1:
                g1 = e
            if e > s:
                if b_s != b_s:
                    b_s, b_e = s, e
                elif s <= b_e + slack:
                    if e > b_e:
                        b_e = e
                else:
                    busy_append((b_s, b_e))
                    b_s, b_e = s, e
            if kind == KIND_KERNEL:
                if nm not in seen:
                    seen.add(nm)
                    last_new, last_new_end = kernels, e
                kernels += 1
            if launch is not None:
                at = launch / 1000.0
                if starts:
                    k = bisect_right(starts, at) - 1
                    if k >= 0 and at < ends[k] and e > ext[k]:
                        ext[k] = e
                if tid is not None and tid not in launchers:
                    launchers[int(tid)] = None
            if tick is not None and n % 65536 == 0:
                tick(65536)
        if b_s == b_s:
            busy_append((b_s, b_e))
        sc.g0, sc.g1, sc.kernels, sc.last_new, sc.last_new_end = g0, g1, kernels, last_new, last_new_end
        sc.activities, sc.distinct = n, len(seen)
        self._order_threads(launchers)
        return sc

    def _order_threads(self, launchers: dict[int, None]) -> None:
        """The launching threads in first-launch order (the order the timeline builds its set of them in)."""
        known = set(self.host.threads)
        first = [t for t in launchers if t in known]
        if first:
            self.host.threads = first + [t for t in self.host.threads if t not in launchers]

    def step_windows(self, steps: Sequence[tuple[int, float, float]]) -> list[tuple[int, float, float]]:
        """`timeline.step_windows` from the window pass."""
        windows: list[tuple[int, float, float]] = []
        prev = -math.inf
        for (number, start, _), end in zip(steps, self.scan.ext, strict=True):
            start = max(start, prev)
            if end > start:
                windows.append((number, start, end))
                prev = end
        return windows

    def steady_window(self, first_us: float, last_us: float) -> SteadyWindow:
        """`timeline.steady_window` from the window pass and the host sweep."""
        sc, settings = self.scan, self.catalog.analysis
        if not sc.activities:
            return SteadyWindow([(first_us, last_us)], f"whole trace, 0 s–{fmt_s(last_us - first_us)} (no GPU "
                                "activity and no ProfilerStep spans)", 0.0)
        g0, g1 = sc.g0, sc.g1
        parts: list[str] = []
        start = g0
        if g0 - first_us > 0:
            longest = self._longest_call_before(g0)
            what = (f"; longest call {longest[0]} {fmt_s(longest[1])}"
                    if longest is not None and longest[1] > 0.1 * (g0 - first_us) else "")
            parts.append(f"from the first GPU activity at {fmt_s(g0 - first_us)} (before it: initialisation, no GPU "
                         f"work{what})")
        tail = sc.kernels - 1 - sc.last_new
        if sc.kernels and tail >= max(1, settings.warmup_min_tail_share * sc.kernels):
            cut = sc.last_new_end
            if cut > start:
                parts.append(f"after first-call warm-up (until {fmt_s(cut - first_us)}, the end of the last kernel run "
                             f"for the first time; {tail} of {sc.kernels} kernels repeat after it)")
                start = cut
        elif sc.kernels:
            parts.append(f"no steady tail after first-call warm-up ({sc.distinct} distinct kernels, the last new one "
                         f"{tail} kernels before the end), so the warm-up is kept")
        busy = union([*sc.busy_slack, *self.host.steady_host, *self.loader])
        return window_without_quiet_stretches(busy, start, g1, first_us, parts, settings.event_free_gap_us)

    def _longest_call_before(self, g0: float) -> tuple[str, float] | None:
        """The longest runtime call (first of equals, in table order) starting before the first GPU activity."""
        if not self.x.has(RUNTIME_T):
            return None
        host = self.host
        name_id = "r.nameId" if self.x.has(RUNTIME_T, "nameId") else "-1"
        best: tuple[str, float] | None = None
        with self.x.guard():
            for nid, start, end in self.x.conn.execute(
                    f"SELECT {name_id}, r.start, r.\"end\" FROM {RUNTIME_T} r WHERE r.start / 1000.0 < ?"
                    f"{host._proc_filter(RUNTIME_T, 'r', 'globalTid')} ORDER BY r.rowid", (g0,)):
                s = start / 1000.0
                d = (s + (end - start) / 1000.0) - s
                if best is None or d > best[1]:
                    best = (host.call_names.get(nid) or "", d)
        return best
