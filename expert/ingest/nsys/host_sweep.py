"""The host side of one device of an export, swept from SQLite in time order: the threads that launch its work,
the operator (emit_nvtx's NVTX range, `names.is_operator_range`) behind each launch call, the union of host activity
on those threads (operators, non-blocking runtime calls, NVTX ranges that launch nothing), the union of blocking
calls, the union of launch calls (launch overhead where the GPU idles), and what ran at given instants (for the
host-compute idle gaps). Rows are never held: intervals leave as soon as they are final, into temporary SQLite tables
(`temp.dam_host`, `temp.dam_sync`, `temp.dam_lcall`, `temp.dam_slow`, `temp.dam_attr`) the GPU sweep reads back in
order.

Semantics follow the in-memory timeline analysis (`timeline.operators.Nesting`, `timeline.windows.host_intervals`):
a per-thread stack of ranges pushed in (start, -end) order holds exactly the chain `Nesting` walks, so the innermost
range around a call is the first on the stack that ends after it."""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..intervals import Interval, union
from ..timeline.classes import Classifier, api_name
from ..timeline.streams import UnionStream
from .names import MODULE, operator_sql
from .schema import KERNEL_T, MEMCPY_T, MEMSET_T, NVTX_T, RUNTIME_T, STRINGS_T

if TYPE_CHECKING:
    from .rows import NsysExport

_BATCH = 4096


class _Pairs:
    """Intervals as pairs of doubles."""

    def __init__(self) -> None:
        self.flat = array("d")

    def append_pair(self, s: float, e: float) -> None:
        self.flat.append(s)
        self.flat.append(e)

    def pairs(self) -> Iterator[Interval]:
        flat = self.flat
        return ((flat[k], flat[k + 1]) for k in range(0, len(flat), 2))


def ids_sql(values: Sequence[int] | set[int]) -> str:
    return ",".join(str(int(v)) for v in sorted(values)) or "NULL"


class _Batch:
    """Intervals bound for one temporary table (written sorted), kept until `_BATCH` of them call `full`."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.rows: list[Interval] = []
        self.count = 0
        self.full: Callable[[], None] = lambda: None

    def add(self, s: float, e: float) -> None:
        self.rows.append((s, e))
        self.count += 1
        if len(self.rows) >= _BATCH:
            self.full()

    def write(self, conn: Any) -> None:
        if self.rows:
            conn.executemany(f"INSERT INTO temp.{self.table} VALUES (?, ?)", self.rows)
            self.rows.clear()


class HostSweep:
    """The host rows of the processes `procs` that drive `device` (all processes when the export does not say)."""

    def __init__(self, export: NsysExport, device: int, procs: set[int], cls: Classifier) -> None:
        self.x, self.device, self.procs, self.cls = export, device, {p for p in procs if p >= 0}, cls
        self.call_names: dict[int, str] = {}
        self.blocking_ids: set[int] = set()
        self.free_ids: set[int] = set()  # blocking calls that return device memory (Classifier.is_device_free)
        self.graph_ids: set[int] = set()
        self.launch_ids: set[int] = set()  # launch calls (Classifier.is_launch_call)
        self.threads: list[int] = []  # launching threads (globalTid), in the timeline's set order once known
        self.has_runtime = False
        self.graph_launches = 0
        self.steady_host: list[Interval] = []
        self.sync_intervals = 0
        self.launch_intervals = 0
        self.slow_intervals = 0  # one-off launch calls (kernels.yaml analysis.one_off_launch_min_us or longer)
        self.one_off_calls: list[tuple[int, float, float]] = []  # those calls: (rowid, start, end), in start order
        self.max_nvtx_rowid = 0
        self._prepare()

    # -- SQL ---------------------------------------------------------------------------------------------------------
    def _proc_filter(self, table: str, alias: str, column: str) -> str:
        if not self.procs or not self.x.has(table, column):
            return ""
        return f" AND ({alias}.{column} >> 24) IN ({ids_sql(self.procs)})"

    def activity_tables(self) -> Iterator[tuple[int, str]]:
        for code, table in enumerate((KERNEL_T, MEMCPY_T, MEMSET_T)):
            if self.x.has(table):
                yield code, table

    def _prepare(self) -> None:
        x, conn = self.x, self.x.conn
        with x.guard("indexing the launch calls"):
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS dam_ml (rid INTEGER PRIMARY KEY, tid INTEGER, s INTEGER)")
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS dam_ls (tid INTEGER, s INTEGER)")
            conn.execute("CREATE INDEX IF NOT EXISTS temp.dam_ls_ts ON dam_ls (tid, s)")
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS dam_host (s REAL, e REAL)")
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS dam_sync (s REAL, e REAL)")
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS dam_lcall (s REAL, e REAL)")
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS dam_slow (s REAL, e REAL)")
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS dam_attr (rid INTEGER PRIMARY KEY, op INTEGER, module "
                         "INTEGER)")
            for table in ("dam_ml", "dam_ls", "dam_host", "dam_sync", "dam_lcall", "dam_slow", "dam_attr"):
                conn.execute(f"DELETE FROM temp.{table}")
            for _, table in self.activity_tables():
                _, join = x._launch_join(table)
                if not join:
                    continue
                dev = x._col(table, "deviceId", "a", "0")
                conn.execute(f"INSERT OR IGNORE INTO temp.dam_ml SELECT r.rid, r.tid, r.s FROM {table} a"
                             f"{join.replace('LEFT JOIN', 'JOIN')} WHERE {dev} = {int(self.device)}")
            matched = [int(t) for (t,) in conn.execute("SELECT DISTINCT tid FROM temp.dam_ml")]
            rt = x.has(RUNTIME_T)
            rt_tid = x.thread_key(RUNTIME_T, "globalTid", "r")
            rt_where = "1" + self._proc_filter(RUNTIME_T, "r", "globalTid")
            if rt:
                self.has_runtime = conn.execute(f"SELECT 1 FROM {RUNTIME_T} r WHERE {rt_where} LIMIT 1").fetchone() \
                    is not None
            if matched:
                conn.execute("INSERT INTO temp.dam_ls SELECT tid, s FROM temp.dam_ml")
            elif self.has_runtime:  # no call matched: every call counts as a launch (timeline.windows.launch_starts)
                conn.execute(f"INSERT INTO temp.dam_ls SELECT {rt_tid}, r.start FROM {RUNTIME_T} r WHERE {rt_where}")
            # the launching threads, as the timeline finds them: those of matched calls, else every thread with
            # runtime calls, else every thread with NVTX ranges (their order is settled by the sweeps: first launch)
            if x.has(NVTX_T):
                self.max_nvtx_rowid = int(conn.execute(f"SELECT max(rowid) FROM {NVTX_T}").fetchone()[0] or 0)
            if matched:
                launching = matched
            elif self.has_runtime:
                launching = [int(t) for (t,) in conn.execute(f"SELECT {rt_tid} FROM {RUNTIME_T} r WHERE {rt_where} "
                                                             "GROUP BY 1 ORDER BY min(r.rowid)")]
            else:
                nv = self._nvtx()
                launching = []
                if nv is not None:
                    _, join, tid, where = nv
                    launching = [int(t) for (t,) in conn.execute(f"SELECT {tid} FROM {NVTX_T} n{join} WHERE {where} "
                                                                 "GROUP BY 1 ORDER BY min(n.start)")]
            self.threads = list(dict.fromkeys(launching))
            if rt and x.has(RUNTIME_T, "nameId") and x.has(STRINGS_T):  # cudaLaunchKernel_v7000 -> cudaLaunchKernel
                self.call_names = {i: api_name(nm) for i, nm in
                                   x.strings(f"SELECT DISTINCT nameId FROM {RUNTIME_T}").items()}
            self.blocking_ids = {i for i, nm in self.call_names.items() if self.cls.is_blocking(nm)}
            self.free_ids = {i for i in self.blocking_ids if self.cls.is_device_free(self.call_names[i])}
            self.graph_ids = {i for i, nm in self.call_names.items() if self.cls.is_graph_launch(nm)}
            self.launch_ids = {i for i, nm in self.call_names.items() if self.cls.is_launch_call(nm)}
            if self.graph_ids:
                self.graph_launches = int(conn.execute(
                    f"SELECT count(*) FROM {RUNTIME_T} r WHERE {rt_where} AND r.nameId IN "
                    f"({ids_sql(self.graph_ids)})").fetchone()[0])
        conn.commit()

    def _nvtx(self) -> tuple[str, str, str, str] | None:
        """(name expression, join, thread expression, WHERE) of the NVTX ranges the timeline reads of `procs`."""
        if not self.x.has(NVTX_T):
            return None
        found = self.x._nvtx_name()
        if found is None:
            return None
        name, join = found
        tid = self.x.thread_key(NVTX_T, "globalTid", "n")
        where = (f"n.\"end\" IS NOT NULL AND n.\"end\" >= n.start AND {name} IS NOT NULL"
                 + self._proc_filter(NVTX_T, "n", "globalTid"))
        return name, join, tid, where

    def _rows(self, *, named: bool = False, near: str = "", op_launches: bool = False) -> Iterator[tuple[Any, ...]]:
        """The NVTX ranges and runtime calls on the launching threads, by (start, ranges first, -end, rowid): (start,
        end, thread, kind, flag, matched, name, rowid, 0|1). kind: 0 operator, 2 `nn.Module:` range, 3 other range
        (flag: it contains a launch), 1 runtime call (flag: blocking; matched: it launched work on the device); name
        (when `named`): the range's name, the call's name id. `near`: a filter keeping the rows around some instant
        (formatted with the row's start and end columns). `op_launches`: an operator's flag says whether a launch
        starts inside it, its end included (else it is 0)."""
        x = self.x
        threads = ids_sql(self.threads)
        exact = -1 not in self.threads  # the threads are known: they imply the processes
        parts: list[str] = []
        nv = self._nvtx()
        if nv is not None:
            name, join, tid, where = nv
            if exact and x.has(NVTX_T, "globalTid"):
                tid, where = "n.globalTid", where.split(" AND (n.globalTid >> 24)")[0]
            is_op = operator_sql("nm")  # emit_nvtx's operators (names.is_operator_range)
            kind = f"CASE WHEN {is_op} THEN 0 WHEN substr(nm, 1, {len(MODULE)}) = '{MODULE}' THEN 2 ELSE 3 END"
            op_flag = ("EXISTS (SELECT 1 FROM temp.dam_ls l WHERE l.tid = th AND l.s >= st AND l.s <= en)"
                       if op_launches else "0")
            launches = (f"CASE WHEN {is_op} THEN {op_flag} ELSE EXISTS (SELECT 1 FROM temp.dam_ls l WHERE l.tid = th "
                        "AND l.s >= st AND l.s < en) END")
            close = near.format(s="n.start", e="n.\"end\"") if near else ""
            parts.append(f"SELECT st, en, th, {kind}, {launches}, 0, {'nm' if named else 'NULL'}, rw, 0 AS grp FROM "
                         f"(SELECT n.start AS st, n.\"end\" AS en, {tid} AS th, {name} AS nm, n.rowid AS rw FROM "
                         f"{NVTX_T} n{join} WHERE {where} AND {tid} IN ({threads}){close})")
        if x.has(RUNTIME_T):
            tid = x.thread_key(RUNTIME_T, "globalTid", "r")
            procs = self._proc_filter(RUNTIME_T, "r", "globalTid")
            if exact and x.has(RUNTIME_T, "globalTid"):
                tid, procs = "r.globalTid", ""
            name_id = "r.nameId" if x.has(RUNTIME_T, "nameId") else "-1"
            blocking = f"{name_id} IN ({ids_sql(self.blocking_ids)})" if self.blocking_ids else "0"
            close = near.format(s="r.start", e="r.\"end\"") if near else ""
            parts.append(f"SELECT r.start, r.\"end\", {tid}, 1, {blocking}, r.rowid IN (SELECT rid FROM temp.dam_ml), "
                         f"{name_id if named else 'NULL'}, r.rowid, 1 AS grp FROM {RUNTIME_T} r WHERE {tid} IN "
                         f"({threads}){procs}{close}")
        if not parts:
            return iter(())
        sql = " UNION ALL ".join(parts) + " ORDER BY 1, grp, 2 DESC, 8"
        with x.guard():
            return x.conn.execute(sql)

    def _sweep_rows(self) -> Iterator[tuple[int, int, int, int, int]]:
        """The rows of the first sweep, compact: (start, end, thread, code, rowid) by (start, ranges first, -end,
        rowid). code: 0 operator; 4 + launches `nn.Module:` range, 6 + launches other range (launches: it contains a
        launch call); 8 + 4 * launch + 2 * blocking + matched a runtime call (launch: a launch call by its name,
        `Classifier.is_launch_call`; matched: it launched work on the device)."""
        x = self.x
        threads = ids_sql(self.threads)
        exact = -1 not in self.threads  # the threads are known: they imply the processes
        parts: list[str] = []
        cols = x.tables.get(NVTX_T, set())
        if x.has(NVTX_T) and ("text" in cols or ("textId" in cols and x.has(STRINGS_T))):
            tid = "n.globalTid" if exact and "globalTid" in cols else x.thread_key(NVTX_T, "globalTid", "n")
            procs = "" if exact and "globalTid" in cols else self._proc_filter(NVTX_T, "n", "globalTid")
            launches = (f"EXISTS (SELECT 1 FROM temp.dam_ls l WHERE l.tid = {tid} AND l.s >= n.start AND "
                        "l.s < n.\"end\")")
            where = f"n.\"end\" IS NOT NULL AND n.\"end\" >= n.start AND {tid} IN ({threads}){procs}"
            found = x._nvtx_name()
            if found is not None:  # names in the row (emit_nvtx's operators), else in StringIds: one scan
                name, join = found
                code = (f"CASE WHEN {operator_sql(name)} THEN 0 WHEN substr({name}, 1, {len(MODULE)}) = '{MODULE}' "
                        f"THEN 4 + {launches} ELSE 6 + {launches} END")
                parts.append(f"SELECT n.start AS st, n.\"end\" AS en, {tid} AS th, {code} AS code, n.rowid AS rw FROM "
                             f"{NVTX_T} n{join} WHERE {name} IS NOT NULL AND {where}")
        if x.has(RUNTIME_T):
            tid = x.thread_key(RUNTIME_T, "globalTid", "r")
            procs = self._proc_filter(RUNTIME_T, "r", "globalTid")
            if exact and x.has(RUNTIME_T, "globalTid"):
                tid, procs = "r.globalTid", ""
            name_id = "r.nameId" if x.has(RUNTIME_T, "nameId") else "-1"
            blocking = f"2 * ({name_id} IN ({ids_sql(self.blocking_ids)}))" if self.blocking_ids else "0"
            launch = f"4 * ({name_id} IN ({ids_sql(self.launch_ids)}))" if self.launch_ids else "0"
            parts.append(f"SELECT r.start AS st, r.\"end\" AS en, {tid} AS th, 8 + {launch} + {blocking} + (r.rowid IN "
                         f"(SELECT rid FROM temp.dam_ml)) AS code, r.rowid AS rw FROM {RUNTIME_T} r WHERE {tid} IN "
                         f"({threads}){procs}")
        if not parts:
            return iter(())
        sql = f"SELECT * FROM ({' UNION ALL '.join(parts)}) ORDER BY st, code >> 3, en DESC, rw"
        with x.guard():
            return x.conn.execute(sql)

    # -- the first sweep -----------------------------------------------------------------------------------------
    def sweep(self, steady_slack: float, one_off_us: float, tick: Callable[[int], None] | None = None) -> None:
        """Attribute launch calls to operators (temp.dam_attr: call rowid -> operator and module NVTX rowids), write
        the host-activity union (temp.dam_host), the union of blocking calls (temp.dam_sync) and the union of launch
        calls (temp.dam_lcall; those of `one_off_us` or more, one-off first launches, in temp.dam_slow) of the
        launching threads; keep the host activity merged across gaps up to `steady_slack` (for the steady-state
        window)."""
        x = self.x
        conn = x.conn
        host_buf: list[Interval] = []
        sync_buf: list[Interval] = []
        lcall_t, slow_t = _Batch("dam_lcall"), _Batch("dam_slow")
        attr_buf: list[tuple[int, int, int]] = []
        steady_host, steady_sync_host = _Pairs(), _Pairs()

        def flush() -> None:
            with x.guard("writing temporary tables"):
                if host_buf:
                    conn.executemany("INSERT INTO temp.dam_host VALUES (?, ?)", host_buf)
                    host_buf.clear()
                if sync_buf:
                    conn.executemany("INSERT INTO temp.dam_sync VALUES (?, ?)", sync_buf)
                    sync_buf.clear()
                for table in (lcall_t, slow_t):
                    table.write(conn)
                if attr_buf:
                    conn.executemany("INSERT OR IGNORE INTO temp.dam_attr VALUES (?, ?, ?)", attr_buf)
                    attr_buf.clear()

        # the steady state's host activity: the host and blocking-call unions, each merged across gaps up to the
        # slack (filling gaps shorter than an event-free stretch changes no stretch), then their union
        steady = UnionStream(steady_host.append_pair, slack=steady_slack)
        steady_sync = UnionStream(steady_sync_host.append_pair, slack=steady_slack)

        def to_sync(s: float, e: float) -> None:
            sync_buf.append((s, e))
            steady_sync.add(s, e)
            self.sync_intervals += 1
            if len(sync_buf) >= _BATCH:
                flush()

        sync = UnionStream(to_sync)

        lcall_t.full = slow_t.full = flush
        lcall, slow = UnionStream(lcall_t.add), UnionStream(slow_t.add)
        nan = math.nan
        hs = he = nan  # the host union's running interval (slack 0, empty ones skipped)
        op_stacks: dict[int, list[tuple[float, float, int, int]]] = {}  # thread -> (end, start, rowid, module)
        mod_stacks: dict[int, list[tuple[float, float, int]]] = {}  # thread -> (end, start, rowid)
        pending: list[tuple[int, int, tuple[float, float, int, int]]] = []  # operators waiting for their module
        pending_at = -math.inf
        modules = self._has_modules()
        batch = _BATCH

        def resolve() -> None:
            for th, k, entry in pending:
                stack = mod_stacks.get(th)
                if not stack:
                    continue
                e, s = entry[0], entry[1]
                for m_end, m_start, m_row in reversed(stack):
                    if m_start <= s and m_end >= e:
                        ops = op_stacks[th]
                        if k < len(ops) and ops[k] is entry:
                            ops[k] = (e, s, entry[2], m_row)
                        break
            pending.clear()

        with x.guard():
            for n, (start, end, th, code, rowid) in enumerate(self._sweep_rows(), 1):
                s = start / 1000.0
                if tick is not None and not n & 65535:
                    tick(65536)
                if code >= 8:
                    if pending:
                        resolve()
                    e = s + (end - start) / 1000.0
                    if code & 2:
                        sync.add(s, e)
                    elif e > s:
                        if code & 4 and e - s < one_off_us:  # a launch call
                            lcall.add(s, e)
                        elif code & 4:  # a one-off (a first launch loading its module), not launch overhead
                            slow.add(s, e)
                            self.one_off_calls.append((rowid, s, e))
                        if hs != hs:
                            hs, he = s, e
                        elif s <= he:
                            if e > he:
                                he = e
                        else:
                            host_buf.append((hs, he))
                            steady.add(hs, he)
                            if len(host_buf) >= batch:
                                flush()
                            hs, he = s, e
                    if code & 1:
                        ops = op_stacks.get(th)
                        if ops:
                            for entry in reversed(ops):
                                if entry[0] >= e:
                                    attr_buf.append((rowid, entry[2], entry[3]))
                                    if len(attr_buf) >= batch:
                                        flush()
                                    break
                    continue
                e = end / 1000.0
                if pending and s > pending_at:
                    resolve()
                if not code & 1 and e > s:  # operators, and ranges that launch nothing, are host activity
                    if hs != hs:
                        hs, he = s, e
                    elif s <= he:
                        if e > he:
                            he = e
                    else:
                        host_buf.append((hs, he))
                        steady.add(hs, he)
                        if len(host_buf) >= batch:
                            flush()
                        hs, he = s, e
                if code == 0:
                    stack = op_stacks.get(th)
                    if stack is None:
                        stack = op_stacks[th] = []
                    while stack and stack[-1][0] < e:
                        stack.pop()
                    entry = (e, s, rowid, -1)
                    stack.append(entry)
                    if modules:
                        pending.append((th, len(stack) - 1, entry))
                        pending_at = s
                elif code < 6:
                    stack_m = mod_stacks.setdefault(th, [])
                    while stack_m and stack_m[-1][0] < e:
                        stack_m.pop()
                    stack_m.append((e, s, rowid))
        if pending:
            resolve()
        if hs == hs:
            host_buf.append((hs, he))
            steady.add(hs, he)
        sync.close()
        lcall.close()
        slow.close()
        self.launch_intervals, self.slow_intervals = lcall_t.count, slow_t.count
        steady.close()
        steady_sync.close()
        self.steady_host = union([*steady_host.pairs(), *steady_sync_host.pairs()])
        flush()
        conn.commit()

    def _has_modules(self) -> bool:
        """Whether any NVTX range is named `nn.Module: ...` (once per export)."""
        found = self.x.named_modules
        if found is None:
            cols = self.x.tables.get(NVTX_T, set())
            checks = []
            if "text" in cols:
                checks.append(f"SELECT 1 FROM {NVTX_T} WHERE substr(text, 1, {len(MODULE)}) = '{MODULE}' LIMIT 1")
            if "textId" in cols and self.x.has(STRINGS_T):
                checks.append(f"SELECT 1 FROM {STRINGS_T} WHERE substr(value, 1, {len(MODULE)}) = '{MODULE}' LIMIT 1")
            with self.x.guard():
                found = any(self.x.conn.execute(sql).fetchone() is not None for sql in checks)
            self.x.named_modules = found
        return found

    def slow_launch_calls(self) -> Iterator[tuple[str, float, float]]:
        """The one-off launch calls the sweep found (`one_off_calls`), named: (name, start, end) in microseconds."""
        if not self.one_off_calls:
            return
        x = self.x
        names: dict[int, int] = {}
        if x.has(RUNTIME_T, "nameId"):
            with x.guard():
                names = dict(x.conn.execute(f"SELECT rowid, nameId FROM {RUNTIME_T} WHERE rowid IN "
                                            f"({ids_sql([row for row, _, _ in self.one_off_calls])})"))
        for row, s, e in self.one_off_calls:
            yield self.call_names.get(names.get(row, -1)) or "", s, e

    # -- reading back --------------------------------------------------------------------------------------------
    def stored(self, table: str) -> Iterator[Interval]:
        """A temporary interval table in order (written sorted)."""
        with self.x.guard():
            yield from self.x.conn.execute(f"SELECT s, e FROM temp.{table} ORDER BY rowid")

    # -- what ran at given instants ------------------------------------------------------------------------------
    def at_instants(self, mids: Sequence[float]) -> Iterator[tuple[float, str, str | None]]:
        """For each instant (sorted): the innermost operator or NVTX range on a launching thread around it, the one
        that started last across threads (as `TimelineAnalysis` credits host-compute gaps), else the innermost
        runtime call, else "runtime calls"; and the outermost operator around it on the thread of that innermost
        operator when a launch starts inside that outermost one (else None); yields (instant, name, outermost)."""
        conn = self.x.conn
        with self.x.guard("writing temporary tables"):
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS dam_mid (t REAL)")
            conn.execute("DELETE FROM temp.dam_mid")
            conn.executemany("INSERT INTO temp.dam_mid VALUES (?)", ((m,) for m in mids))
            conn.execute("CREATE INDEX IF NOT EXISTS temp.dam_mid_t ON dam_mid (t)")
            conn.commit()
        # only rows around some instant can be innermost at one (a superset is harmless: the stacks still hold the
        # chain of every instant); the test in SQL is widened by 1 ns either side of the microsecond conversion
        near = (" AND EXISTS (SELECT 1 FROM temp.dam_mid m WHERE m.t >= ({s} - 1) / 1000.0 AND "
                "m.t <= ({e} + 1) / 1000.0)")
        ops: dict[int, list[tuple[float, float, str, int]]] = {}
        spans: dict[int, list[tuple[float, float, str, int]]] = {}
        calls: dict[int, list[tuple[float, float, str, int]]] = {}
        order = [th for th in self._set_order()]
        k = 0
        names = self.call_names

        def push(stacks: dict[int, list[tuple[float, float, str, int]]], th: int, s: float, e: float, nm: str,
                 flag: int = 0) -> None:
            stack = stacks.setdefault(th, [])
            while stack and stack[-1][0] < e:
                stack.pop()
            stack.append((e, s, nm, flag))

        def innermost(stacks: dict[int, list[tuple[float, float, str, int]]], th: int,
                      t: float) -> tuple[float, float, str, int] | None:
            for item in reversed(stacks.get(th, ())):
                if item[0] >= t:
                    return item
            return None

        def answer(t: float) -> tuple[str, str | None]:
            best_start, best_name, found = -math.inf, "", False
            outer: tuple[float, float, str, int] | None = None  # the stack's bottom holds every operator above it
            for th in order:
                o = innermost(ops, th, t)
                if o is not None and o[1] > best_start:
                    best_start, best_name, found = o[1], o[2], True
                    outer = ops[th][0]
                sp = innermost(spans, th, t)
                if sp is not None and sp[1] > best_start:
                    best_start, best_name, found = sp[1], sp[2], True
            if found:
                return best_name, outer[2] if outer is not None and outer[3] else None
            for th in order:
                c = innermost(calls, th, t)
                if c is not None:
                    return c[2], None
            return "runtime calls", None

        with self.x.guard():
            for start, end, th, kind, flag, _, name, _, _ in self._rows(named=True, near=near, op_launches=True):
                s = start / 1000.0
                while k < len(mids) and mids[k] < s:
                    yield mids[k], *answer(mids[k])
                    k += 1
                if kind == 0:
                    push(ops, th, s, end / 1000.0, str(name).split(",", 1)[0], int(flag))
                elif kind == 1:
                    push(calls, th, s, s + (end - start) / 1000.0, names.get(name) or "")
                else:
                    push(spans, th, s, end / 1000.0, str(name))
        while k < len(mids):
            yield mids[k], *answer(mids[k])
            k += 1

    def _set_order(self) -> list[int]:
        """The launching threads in the order the analysis visits them (first launch first)."""
        return list(self.threads)
