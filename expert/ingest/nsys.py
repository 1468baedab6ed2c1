"""Nsight Systems exports (`nsys export --type sqlite`, or a `.nsys-rep` exported on the fly): the same facts as a
Kineto trace, with the same provenance.

Reading: the export is opened read-only and its tables and columns are detected (exports differ by nsys version;
what is missing is said in a note). Rows are streamed from SQLite cursors, never loaded whole: GPU activities come
ordered by (device, start) with the launching runtime call joined by correlation id inside SQLite, and are turned into
format-neutral records (`records.GpuActivity`, `RuntimeCall`, `SyncSpan`, `Range`) that the per-device analysis
(`device_analysis.analyse_device`) consumes one at a time.

Derivations, per device (`deviceId`), averaged over the devices as the Kineto reader does:

- windows: NVTX ranges that repeat and are named like steps (`train_step`, `step 12`, `ProfilerStep#3`, ...), or the
  range the user names (`step_range`, `--step-range NAME`); each range is extended to the end of the GPU work launched
  inside it, as Kineto's device steps are. Without them, the whole export;
- gpu_util, gpu_idle_gap_frac with its causes, host_wait_frac, mean_kernel_us, kernels_per_step, h2d_copy_frac,
  pageable_copy_frac; step_time_s and data_wait_s (DataLoader ranges) from the NVTX steps;
- NCCL kernels as communication: comm_frac (exposed), comm_overlap_frac, comm_time_s per step;
- host synchronization (CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, else *Synchronize runtime calls) in the file's stats;
- hardware from TARGET_INFO_GPU / TARGET_INFO_CUDA_DEVICE through the hardware catalog.
"""

from __future__ import annotations

import math
import re
import shutil
import sqlite3
import subprocess
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any

from ..kb.knowledge import KnowledgeBase
from ._result import FileResult
from ._source import Progress, Source
from .device_analysis import KERNEL_WAIT_US, DeviceTimeline, analyse_device, short_name
from .intervals import Interval, overlap, total, union
from .records import KERNEL, MEMCPY, MEMSET, GpuActivity, Range, RuntimeCall, SyncSpan

FACTS = ("step_time_s", "data_wait_s", "gpu_util", "gpu_idle_gap_frac", "host_wait_frac", "mean_kernel_us",
         "kernels_per_step", "pageable_copy_frac", "h2d_copy_frac", "comm_frac", "comm_overlap_frac", "comm_time_s",
         "hardware", "num_workers", "workload")
"""The facts an Nsight Systems export can give."""

SQLITE_MAGIC = b"SQLite format 3\x00"
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")

KERNEL_T, MEMCPY_T, MEMSET_T = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME_T, SYNC_T = "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX_T, STRINGS_T = "NVTX_EVENTS", "StringIds"
GPU_T, CUDA_DEVICE_T = "TARGET_INFO_GPU", "TARGET_INFO_CUDA_DEVICE"
COPY_ENUM_T, MEM_ENUM_T, SYNC_ENUM_T = "ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEM_KIND", "ENUM_CUPTI_SYNC_TYPE"

TABLES = (KERNEL_T, MEMCPY_T, MEMSET_T, RUNTIME_T, SYNC_T, NVTX_T, STRINGS_T, GPU_T, CUDA_DEVICE_T, COPY_ENUM_T,
          MEM_ENUM_T, SYNC_ENUM_T)
"""The tables read, when present."""

_WANTED: dict[str, tuple[str, ...]] = {
    KERNEL_T: ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName", "shortName"),
    MEMCPY_T: ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "copyKind", "bytes", "srcKind",
               "dstKind"),
    MEMSET_T: ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes"),
    RUNTIME_T: ("start", "end", "correlationId", "globalTid", "nameId"),
    SYNC_T: ("start", "end", "deviceId", "streamId", "globalPid", "syncType"),
    NVTX_T: ("start", "end", "text", "textId", "globalTid"),
}
"""Columns each table is read for; the ones a given export lacks are reported (start and end are required)."""

# CUPTI's numbering, used when the export has no ENUM tables (older nsys): CUpti_ActivityMemcpyKind, nsys's
# ENUM_CUDA_MEM_KIND, CUpti_ActivitySynchronizationType.
_COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoD", 4: "DtoH", 5: "DtoD", 6: "DtoD", 7: "DtoD", 8: "DtoD", 9: "HtoH",
               10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
_MEM_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
              6: "Managed Static", 7: "Unknown"}
_SYNC_KINDS = {0: "unknown", 1: "event", 2: "stream_wait", 3: "stream", 4: "context"}
_HOST_BLOCKING = ("event", "stream", "context", "unknown")

_STEP_WORDS = re.compile(r"(?i)^(?:profiler_?step|(?:train(?:ing)?|fwd_?bwd|forward_?backward|optimi[sz]er|"
                         r"eval|val(?:idation)?|inference|decode|serve)?[ _.-]?(?:step|iteration|iter|batch))$")
_NUMBER_SUFFIX = re.compile(r"^(?P<base>.*?)(?:\s*[#:_ -]\s*(?P<n>\d+))$")
_ANNOTATION = re.compile(r"(?:,\s*(?:seq|op_id)\s*=\s*\d+)+$")
_LOADER = ("enumerate(DataLoader)#", "enumerate(DataPipe)#")
_TRAINING = ("autograd::engine::evaluate_function", "Optimizer.step#")
_NOT_STEPS = re.compile(r"(?i)optimizer\.step|lr_scheduler|scheduler\.step|aten::|^cuda|^nccl")
_HINT = "an Nsight Systems export: nsys export --type sqlite REPORT.nsys-rep (or give the .nsys-rep with nsys on PATH)"
_NO_STEPS = ("the export has no NVTX ranges named like steps that repeat (annotate each iteration with "
             "torch.cuda.nvtx.range('step') or name the range with --step-range NAME)")


def step_base(name: str) -> tuple[str, int | None]:
    """A range name without emit_nvtx's `, seq = N, op_id = N` annotation and a trailing step number (`step#3`,
    `iteration 12`, `train_step_7`), and that number."""
    text = _ANNOTATION.sub("", name).strip()
    match = _NUMBER_SUFFIX.match(text)
    if match and match.group("base").strip():
        return match.group("base").strip(), int(match.group("n"))
    return text, None


def looks_like_step(base: str) -> bool:
    """True for range names that mean one training/serving iteration (a pattern, not a guess: see _STEP_WORDS)."""
    return bool(_STEP_WORDS.match(base.strip())) and not _NOT_STEPS.search(base)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class NsysExport:
    """A read-only view of an Nsight Systems SQLite export: detected tables and columns, and record streams."""

    def __init__(self, path: Path, label: str) -> None:
        self.path, self.label = path, label
        self.tables: dict[str, set[str]] = {}
        self.missing_columns: dict[str, list[str]] = {}
        self.meta: dict[str, str] = {}
        self._launch_table: bool | None = None
        try:
            self.conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=2.0,
                                        check_same_thread=False)
        except sqlite3.Error as exc:
            raise self._problem(exc) from exc
        try:
            self._detect()
        except BaseException:
            self.conn.close()
            raise

    def close(self) -> None:
        self.conn.close()

    # -- errors ----------------------------------------------------------------------------------------------------
    def _problem(self, exc: BaseException, doing: str = "reading") -> Exception:
        from ..errors import ObservationError, Problem

        text = str(exc)
        if "locked" in text or "busy" in text:
            why = ("the database is locked by another process (is nsys still writing it? wait for the export to "
                   "finish, or copy the file)")
        elif "malformed" in text or "not a database" in text or "disk I/O" in text or "short read" in text:
            why = f"the SQLite file is truncated or damaged ({text})"
        else:
            why = f"SQLite error while {doing}: {text}"
        return ObservationError([Problem(self.label, why, _HINT)], title="cannot read telemetry")

    @contextmanager
    def guard(self, doing: str = "reading") -> Iterator[None]:
        """Turn SQLite errors inside the block into a located ObservationError."""
        try:
            yield
        except sqlite3.Error as exc:
            raise self._problem(exc, doing) from exc

    # -- schema ----------------------------------------------------------------------------------------------------
    def _detect(self) -> None:
        from ..errors import ObservationError, Problem

        with self.guard("reading the schema"):
            names = [r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')")]
            for name in names:
                if name in TABLES or name == "META_DATA_EXPORT":
                    self.tables[name] = {r[1] for r in self.conn.execute(f"PRAGMA table_info({_q(name)})")}
            if "META_DATA_EXPORT" in self.tables:
                self.meta = {str(k): str(v) for k, v in self.conn.execute("SELECT name, value FROM META_DATA_EXPORT")}
        accepted = "an nsys SQLite export (tables CUPTI_ACTIVITY_KIND_*, StringIds, NVTX_EVENTS, TARGET_INFO_GPU)"
        if not names:
            raise ObservationError([Problem(self.label, "an empty SQLite database (no tables)", _HINT)],
                                   title="cannot read telemetry")
        nsys_like = any(n.startswith(("CUPTI_ACTIVITY_KIND_", "NVTX_", "TARGET_INFO_", "ENUM_NSYS_")) for n in names)
        if not nsys_like and "Nsight" not in self.meta.get("EXPORT_PRODUCT_NAME", ""):
            shown = ", ".join(sorted(names)[:8]) + (" ..." if len(names) > 8 else "")
            raise ObservationError([Problem(self.label, f"a SQLite database, but not an Nsight Systems export "
                                            f"(its tables: {shown})", f"give {accepted}")],
                                   title="cannot read telemetry")
        for table, wanted in _WANTED.items():
            cols = self.tables.get(table)
            if cols is None:
                continue
            if "start" not in cols or "end" not in cols:
                self.missing_columns[table] = [c for c in ("start", "end") if c not in cols]
                del self.tables[table]
                continue
            lacking = [c for c in wanted if c not in cols]
            if table == KERNEL_T and ("demangledName" in cols or "shortName" in cols or "mangledName" in cols):
                lacking = [c for c in lacking if c not in ("demangledName", "shortName")]
            if table == NVTX_T and ("text" in cols or "textId" in cols):
                lacking = [c for c in lacking if c not in ("text", "textId")]
            if lacking:
                self.missing_columns[table] = lacking

    def has(self, table: str, column: str | None = None) -> bool:
        cols = self.tables.get(table)
        return cols is not None and (column is None or column in cols)

    def _col(self, table: str, column: str, alias: str, default: str = "-1") -> str:
        return f"{alias}.{_q(column)}" if self.has(table, column) else default

    def enum(self, table: str, fallback: dict[int, str]) -> tuple[dict[int, str], bool]:
        """An ENUM table's id -> label mapping (and whether it came from the export rather than CUPTI's numbering)."""
        if not self.has(table) or not {"id", "name"} <= self.tables[table]:
            return dict(fallback), False
        label = "label" if "label" in self.tables[table] else "name"
        with self.guard():
            return {int(i): str(v) for i, v in self.conn.execute(f"SELECT id, {label} FROM {table}")}, True

    def strings(self, ids_sql: str) -> dict[int, str]:
        """StringIds values for the ids a subquery gives (e.g. the distinct kernel names)."""
        if not self.has(STRINGS_T, "id") or not self.has(STRINGS_T, "value"):
            return {}
        with self.guard():
            return {int(i): str(v) for i, v in
                    self.conn.execute(f"SELECT id, value FROM {STRINGS_T} WHERE id IN ({ids_sql})")}

    # -- records ---------------------------------------------------------------------------------------------------
    def _process(self, table: str, alias: str, column: str) -> str:
        return f"({alias}.{column} >> 24)" if self.has(table, column) else "-1"

    def activity_tables(self) -> list[str]:
        return [t for t in (KERNEL_T, MEMCPY_T, MEMSET_T) if self.has(t)]

    def _launches(self) -> bool:
        """Build, once, a temporary table of launch calls keyed by (correlation id, process): one B-tree that every
        activity table joins against (SQLite would otherwise build an automatic index per statement)."""
        if self._launch_table is None:
            self._launch_table = self.has(RUNTIME_T, "correlationId")
            if self._launch_table:
                proc = "globalTid >> 24" if self.has(RUNTIME_T, "globalTid") else "-1"
                with self.guard("indexing the runtime calls"):
                    self.conn.execute("CREATE TEMP TABLE IF NOT EXISTS dam_launch (c INTEGER NOT NULL, p INTEGER NOT "
                                      "NULL, s INTEGER, PRIMARY KEY (c, p)) WITHOUT ROWID")
                    self.conn.execute(f"INSERT OR IGNORE INTO temp.dam_launch SELECT correlationId, {proc}, start "
                                      f"FROM {RUNTIME_T} WHERE correlationId IS NOT NULL")
        return self._launch_table

    def _launch_join(self, table: str) -> tuple[str, str]:
        """(launch-time expression, LEFT JOIN clause) matching an activity to its runtime call (r.c, r.p, r.s)."""
        if not self.has(table, "correlationId") or not self._launches():
            return "NULL", ""
        cond = "r.c = a.correlationId"
        if self.has(table, "globalPid") and self.has(RUNTIME_T, "globalTid"):
            cond += " AND r.p = (a.globalPid >> 24)"
        return "r.s", f" LEFT JOIN temp.dam_launch r ON {cond}"

    def kernel_name_column(self) -> str | None:
        for col in ("demangledName", "shortName", "mangledName", "name"):
            if self.has(KERNEL_T, col):
                return col
        return None

    def activities(self, devices: Sequence[int] | None = None) -> Iterator[GpuActivity]:
        """Kernels, memcpys and memsets ordered by (device, start), each with the start of its launch call."""
        parts: list[str] = []
        for code, table in enumerate((KERNEL_T, MEMCPY_T, MEMSET_T)):
            if not self.has(table):
                continue
            launch, join = self._launch_join(table)
            if table == KERNEL_T:
                col = self.kernel_name_column()
                name = f"a.{_q(col)}" if col else "-1"
                extra = "-1, 0, -1, -1"
            elif table == MEMCPY_T:
                name = "-1"
                extra = ", ".join((self._col(table, "copyKind", "a"), self._col(table, "bytes", "a", "0"),
                                   self._col(table, "srcKind", "a"), self._col(table, "dstKind", "a")))
            else:
                name = "-1"
                extra = f"-1, {self._col(table, 'bytes', 'a', '0')}, -1, -1"
            device = self._col(table, "deviceId", "a", "0")
            where = f" WHERE {device} IN ({','.join(str(int(d)) for d in devices)})" if devices else ""
            parts.append(f"SELECT {code}, {name}, a.start, a.\"end\", {device}, {self._col(table, 'streamId', 'a')}, "
                         f"{self._col(table, 'correlationId', 'a')}, {self._process(table, 'a', 'globalPid')}, "
                         f"{launch}, {extra} FROM {table} a{join}{where}")
        if not parts:
            return
        names = self._kernel_names()
        copy_kinds, _ = self.enum(COPY_ENUM_T, {})
        mem_kinds, _ = self.enum(MEM_ENUM_T, _MEM_KINDS)
        copy_kind = _copy_kind_map(copy_kinds)
        sql = " UNION ALL ".join(parts) + " ORDER BY 5, 3"
        nan = math.nan
        memset_name = "Memset (Device)"
        copy_names: dict[tuple[int, int, int], tuple[str, str, bool | None]] = {}
        with self.guard():
            cursor = self.conn.execute(sql)
            for code, nid, start, end, dev, stream, corr, proc, launch, ck, nbytes, src, dst in cursor:
                s = start / 1000.0
                launch_us = launch / 1000.0 if launch is not None else nan
                if code == 0:
                    yield GpuActivity(KERNEL, names.get(nid) or f"kernel {nid}", s, (end - start) / 1000.0, dev,
                                      stream, corr if corr is not None else -1, proc if proc is not None else -1,
                                      launch_us)
                elif code == 1:
                    key = (ck, src, dst)
                    info = copy_names.get(key)
                    if info is None:
                        info = copy_names[key] = _copy_info(ck, src, dst, copy_kind, mem_kinds)
                    yield GpuActivity(MEMCPY, info[0], s, (end - start) / 1000.0, dev, stream,
                                      corr if corr is not None else -1, proc if proc is not None else -1, launch_us,
                                      info[1], nbytes or 0, info[2])
                else:
                    yield GpuActivity(MEMSET, memset_name, s, (end - start) / 1000.0, dev, stream,
                                      corr if corr is not None else -1, proc if proc is not None else -1, launch_us,
                                      "", nbytes or 0)

    def _kernel_names(self) -> dict[int, str]:
        col = self.kernel_name_column()
        if col is None:
            return {}
        names = self.strings(f"SELECT DISTINCT {_q(col)} FROM {KERNEL_T}")
        if col == "demangledName" and self.has(KERNEL_T, "shortName"):
            # a demangled name the export left empty falls back to the short name
            for nid, text in list(names.items()):
                if not text:
                    del names[nid]
        return names

    def runtime_calls(self, name_like: str | None = None) -> Iterator[RuntimeCall]:
        """Runtime/driver API calls (optionally only those whose name matches a LIKE pattern), in table order."""
        if not self.has(RUNTIME_T):
            return
        name = "s.value" if self.has(STRINGS_T) and self.has(RUNTIME_T, "nameId") else "''"
        join = f" LEFT JOIN {STRINGS_T} s ON s.id = r.nameId" if name != "''" else ""
        where = " WHERE s.value LIKE ?" if name_like and join else ""
        tid = "r.globalTid" if self.has(RUNTIME_T, "globalTid") else "-1"
        sql = (f"SELECT {name}, r.start, r.\"end\", {self._col(RUNTIME_T, 'correlationId', 'r')}, {tid} "
               f"FROM {RUNTIME_T} r{join}{where}")
        with self.guard():
            for nm, start, end, corr, gtid in self.conn.execute(sql, (name_like,) if where else ()):
                yield RuntimeCall(nm or "", start / 1000.0, (end - start) / 1000.0, corr if corr is not None else -1,
                                  (gtid >> 24) if gtid is not None and gtid >= 0 else -1,
                                  (gtid & 0xFFFFFF) if gtid is not None and gtid >= 0 else -1)

    def sync_spans(self) -> Iterator[SyncSpan]:
        """Synchronization records ordered by (device, start)."""
        if not self.has(SYNC_T):
            return
        kinds, _ = self.enum(SYNC_ENUM_T, {})
        labels = {i: _sync_kind(kinds.get(i, ""), i) for i in set(kinds) | set(_SYNC_KINDS)}
        sql = (f"SELECT a.start, a.\"end\", {self._col(SYNC_T, 'deviceId', 'a', '0')}, "
               f"{self._col(SYNC_T, 'streamId', 'a')}, {self._process(SYNC_T, 'a', 'globalPid')}, "
               f"{self._col(SYNC_T, 'syncType', 'a')} FROM {SYNC_T} a ORDER BY 3, 1")
        with self.guard():
            for start, end, dev, stream, proc, kind in self.conn.execute(sql):
                yield SyncSpan(labels.get(kind, "unknown"), start / 1000.0, (end - start) / 1000.0, dev,
                               stream if stream is not None else -1, proc if proc is not None else -1)

    def ranges(self, prefixes: Sequence[str] = (), likes: Sequence[str] = ()) -> Iterator[Range]:
        """Closed NVTX ranges whose name starts with one of `prefixes` or matches one of the LIKE patterns."""
        if not self.has(NVTX_T) or not (prefixes or likes):
            return
        cols = self.tables[NVTX_T]
        if "text" in cols and "textId" in cols and self.has(STRINGS_T):
            name, join = "COALESCE(n.text, s.value)", f" LEFT JOIN {STRINGS_T} s ON s.id = n.textId"
        elif "text" in cols:
            name, join = "n.text", ""
        elif "textId" in cols and self.has(STRINGS_T):
            name, join = "s.value", f" LEFT JOIN {STRINGS_T} s ON s.id = n.textId"
        else:
            return
        tests = [f"substr({name}, 1, {len(p)}) = ?" for p in prefixes] + [f"{name} LIKE ?" for _ in likes]
        tid = "n.globalTid" if "globalTid" in cols else "-1"
        sql = (f"SELECT {name}, n.start, n.\"end\", {tid} FROM {NVTX_T} n{join} "
               f"WHERE n.\"end\" IS NOT NULL AND n.\"end\" >= n.start AND ({' OR '.join(tests)})")
        with self.guard():
            for nm, start, end, gtid in self.conn.execute(sql, (*prefixes, *likes)):
                yield Range(str(nm), start / 1000.0, end / 1000.0,
                            (gtid >> 24) if gtid is not None and gtid >= 0 else -1,
                            (gtid & 0xFFFFFF) if gtid is not None and gtid >= 0 else -1)

    def range_names(self, limit: int = 12) -> list[tuple[str, int]]:
        """The most frequent NVTX range names with their counts (after removing step numbers and annotations)."""
        if not self.has(NVTX_T):
            return []
        cols = self.tables[NVTX_T]
        if "textId" in cols and self.has(STRINGS_T):
            name = "COALESCE(n.text, s.value)" if "text" in cols else "s.value"
            join = f" LEFT JOIN {STRINGS_T} s ON s.id = n.textId"
        elif "text" in cols:
            name, join = "n.text", ""
        else:
            return []
        counts: Counter[str] = Counter()
        with self.guard():
            sql = (f"SELECT {name}, count(*) FROM {NVTX_T} n{join} WHERE n.\"end\" IS NOT NULL GROUP BY 1 "
                   f"ORDER BY 2 DESC LIMIT 5000")
            for nm, cnt in self.conn.execute(sql):
                if nm:
                    counts[step_base(str(nm))[0]] += int(cnt)
        return counts.most_common(limit)

    # -- aggregates (in SQLite) ------------------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        with self.guard():
            for key, table in (("kernels", KERNEL_T), ("memcpys", MEMCPY_T), ("memsets", MEMSET_T),
                               ("runtime_calls", RUNTIME_T), ("sync_records", SYNC_T), ("nvtx_events", NVTX_T)):
                if self.has(table):
                    out[key] = int(self.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
        return out

    def extent(self) -> tuple[float, float] | None:
        """(first start, last end) in microseconds over GPU activities and runtime calls."""
        lo, hi = math.inf, -math.inf
        with self.guard():
            for table in (*self.activity_tables(), RUNTIME_T):
                if not self.has(table):
                    continue
                a, b = self.conn.execute(f"SELECT min(start), max(\"end\") FROM {table}").fetchone()
                if a is not None:
                    lo, hi = min(lo, a / 1000.0), max(hi, b / 1000.0)
        return (lo, hi) if lo < hi else None

    def device_processes(self) -> dict[int, set[int]]:
        """Device -> the processes that ran activities on it (empty sets when the export has no globalPid)."""
        out: dict[int, set[int]] = defaultdict(set)
        with self.guard():
            for table in self.activity_tables():
                dev = self._col(table, "deviceId", "a", "0")
                proc = self._process(table, "a", "globalPid")
                for d, p in self.conn.execute(f"SELECT {dev}, {proc} FROM {table} a GROUP BY 1, 2"):
                    out[int(d)]
                    if p is not None and p >= 0:
                        out[int(d)].add(int(p))
        return dict(out)

    def step_extents(self, steps: dict[int, list[tuple[int, float, float]]]) -> dict[tuple[int, int], float]:
        """(step key, device) -> end (us) of the last GPU activity launched inside the step, computed in SQLite
        (a temporary table of steps, and each launch call mapped to the step it began in)."""
        out: dict[tuple[int, int], float] = {}
        if not self.has(RUNTIME_T, "globalTid") or not self._launches():
            return out
        with self.guard("projecting steps onto the GPU"):
            self.conn.execute("CREATE TEMP TABLE IF NOT EXISTS dam_steps (p INTEGER, s INTEGER, e INTEGER, "
                              "k INTEGER)")
            self.conn.execute("DELETE FROM temp.dam_steps")
            rows = [(p, round(s * 1000), round(e * 1000), k) for p, lst in steps.items()
                    for k, s, e in lst]
            self.conn.executemany("INSERT INTO temp.dam_steps VALUES (?, ?, ?, ?)", rows)
            self.conn.execute("CREATE INDEX IF NOT EXISTS temp.dam_steps_ps ON dam_steps (p, s)")
            for table in self.activity_tables():
                if not self.has(table, "correlationId"):
                    continue
                _, join = self._launch_join(table)
                dev = self._col(table, "deviceId", "a", "0")
                sql = (f"SELECT st.k, {dev}, max(a.\"end\") FROM {table} a{join.replace('LEFT JOIN', 'JOIN')} "
                       "JOIN temp.dam_steps st ON st.p = r.p AND st.s = (SELECT max(x.s) FROM "
                       "temp.dam_steps x WHERE x.p = r.p AND x.s <= r.s) "
                       "WHERE r.s < st.e GROUP BY 1, 2")
                for k, d, end in self.conn.execute(sql):
                    key = (int(k), int(d))
                    out[key] = max(out.get(key, -math.inf), end / 1000.0)
        return out

    def gpu_names(self) -> dict[int, str]:
        """CUDA device id -> device name, from TARGET_INFO_CUDA_DEVICE and TARGET_INFO_GPU (when present)."""
        names: dict[int, str] = {}
        with self.guard():
            by_id: dict[int, str] = {}
            if self.has(GPU_T, "name"):
                id_col = "id" if self.has(GPU_T, "id") else None
                cuda_col = "cuDevice" if self.has(GPU_T, "cuDevice") else None
                sql = f"SELECT {id_col or '-1'}, {cuda_col or '-1'}, name FROM {GPU_T}"
                for gid, cuda, name in self.conn.execute(sql):
                    if name:
                        by_id[int(gid) if gid is not None else -1] = str(name)
                        if cuda is not None and cuda >= 0:
                            names.setdefault(int(cuda), str(name))
            if self.has(CUDA_DEVICE_T, "cudaId"):
                cols = self.tables[CUDA_DEVICE_T]
                name_col = "name" if "name" in cols else "NULL"
                gpu_col = "gpuId" if "gpuId" in cols else "NULL"
                for cuda, gid, name in self.conn.execute(f"SELECT cudaId, {gpu_col}, {name_col} FROM {CUDA_DEVICE_T}"):
                    text = name or (by_id.get(int(gid)) if gid is not None else None)
                    if text and cuda is not None:
                        names[int(cuda)] = str(text)
            for gid, text in by_id.items():
                names.setdefault(gid, text)
        return names


def _copy_kind_map(enum: dict[int, str]) -> dict[int, str]:
    """copyKind id -> HtoD/DtoH/DtoD/HtoH/PtoP/other, from the export's ENUM labels or CUPTI's numbering."""
    if not enum:
        return dict(_COPY_KINDS)
    out: dict[int, str] = {}
    for i, label in enum.items():
        text = label.lower().replace("_", "-").replace(" ", "")
        if "peer" in text or "ptop" in text:
            out[i] = "PtoP"
        elif "host-to-device" in text or text.endswith("htod"):
            out[i] = "HtoD"
        elif "device-to-host" in text or text.endswith("dtoh"):
            out[i] = "DtoH"
        elif "host-to-host" in text or text.endswith("htoh"):
            out[i] = "HtoH"
        elif "host-to-array" in text or "htoa" in text:
            out[i] = "HtoD"
        elif "array-to-host" in text or "atoh" in text:
            out[i] = "DtoH"
        elif "device" in text or "array" in text:
            out[i] = "DtoD"
        else:
            out[i] = "other"
    return out


def _copy_info(ck: int | None, src: int | None, dst: int | None, kinds: dict[int, str],
               mem: dict[int, str]) -> tuple[str, str, bool | None]:
    """(Kineto-style name, copy kind, host side pageable?) of a memcpy."""
    kind = kinds.get(ck, "other") if ck is not None else "other"
    src_label = mem.get(src, "") if src is not None and src >= 0 else ""
    dst_label = mem.get(dst, "") if dst is not None and dst >= 0 else ""
    host = src_label if kind == "HtoD" else dst_label if kind == "DtoH" else ""
    pageable = True if host == "Pageable" else False if host == "Pinned" else None
    name = f"Memcpy {kind}" + (f" ({src_label} -> {dst_label})" if src_label and dst_label else "")
    return name, kind, pageable


def _sync_kind(label: str, i: int) -> str:
    text = label.lower()
    if "wait" in text:
        return "stream_wait"
    if "event" in text:
        return "event"
    if "stream" in text:
        return "stream"
    if "context" in text or "device" in text:
        return "context"
    return _SYNC_KINDS.get(i, "unknown") if not label else "unknown"


# -- opening ------------------------------------------------------------------------------------------------------

@contextmanager
def open_export(src: Source, progress: Progress | None = None) -> Iterator[tuple[NsysExport, list[str]]]:
    """The export behind a Source: a SQLite file read in place, a stream or compressed file spooled to a temporary
    file, or a .nsys-rep exported with `nsys export --type sqlite` into a temporary directory. Yields it with notes."""
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="dam-nsys-") as tmp:
        path = src.path
        if path is not None and path.suffix.lower() in REPORT_SUFFIXES:
            path, note = export_report(src, Path(tmp))
            notes.append(note)
        elif not src.head().startswith(SQLITE_MAGIC):
            raise src.problem("not a SQLite database", hint=_HINT)
        elif path is None or src.head()[:16] != _raw_head(path):
            spooled = Path(tmp) / "export.sqlite"
            with src.open(progress) as fh, open(spooled, "wb") as out:
                try:
                    shutil.copyfileobj(fh, out, 1 << 20)
                except (EOFError, OSError) as exc:
                    raise src.problem(f"compressed data is truncated or corrupt ({exc})") from exc
            path = spooled
        export = NsysExport(path, src.label)
        try:
            yield export, notes
        finally:
            export.close()


def _raw_head(path: Path) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(16)
    except OSError:
        return b""


def export_report(src: Source, tmp: Path) -> tuple[Path, str]:
    """Run `nsys export --type sqlite` on a .nsys-rep into `tmp`; a clear error when nsys is not on PATH."""
    assert src.path is not None
    exe = shutil.which("nsys")
    out = tmp / (src.path.stem + ".sqlite")
    if exe is None:
        raise src.problem("an Nsight Systems report (.nsys-rep): reading it needs the `nsys` command, which is not "
                          "on PATH", hint=f"export it where Nsight Systems is installed: nsys export --type sqlite "
                          f"--output {src.path.stem}.sqlite {src.path.name}, then give the .sqlite file")
    cmd = [exe, "export", "--type=sqlite", "--force-overwrite=true", f"--output={out}", str(src.path)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", check=False)
    except OSError as exc:
        raise src.problem(f"could not run {exe}: {exc.strerror or exc}") from exc
    if proc.returncode != 0 or not out.is_file():
        lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        said = lines[-1].strip() if lines else "no output"
        raise src.problem(f"`nsys export --type sqlite` failed (exit {proc.returncode}): {said}",
                          hint="check that the report opens in this nsys version (nsys --version)")
    return out, f"exported with `{Path(exe).name} export --type sqlite` ({exe}) to a temporary file"


# -- analysis -------------------------------------------------------------------------------------------------------

@dataclass
class NsysAnalysis:
    """The facts of one export (`result`) and the per-device timelines behind them."""

    result: FileResult
    devices: dict[int, DeviceTimeline] = field(default_factory=dict)
    windows: dict[int, list[Interval]] = field(default_factory=dict)
    step_name: str | None = None


def parse(src: Source, kb: KnowledgeBase, *, steps: tuple[int | None, int | None] | None = None,
          window: tuple[float | None, float | None] | None = None, gpus: Sequence[int] | None = None,
          step_range: str | None = None, progress: Progress | None = None,
          kernel_wait_us: float = KERNEL_WAIT_US) -> FileResult:
    """Read an Nsight Systems export and derive the facts listed in `FACTS`."""
    return analyse(src, kb, steps=steps, window=window, gpus=gpus, step_range=step_range, progress=progress,
                   kernel_wait_us=kernel_wait_us).result


def analyse(src: Source, kb: KnowledgeBase, *, steps: tuple[int | None, int | None] | None = None,
            window: tuple[float | None, float | None] | None = None, gpus: Sequence[int] | None = None,
            step_range: str | None = None, progress: Progress | None = None,
            kernel_wait_us: float = KERNEL_WAIT_US) -> NsysAnalysis:
    """`parse`, keeping the per-device timelines (busy, idle causes, classes, top kernels, copies, communication)."""
    result = FileResult(path=src.label, name=src.name, format="nsys")
    with open_export(src, progress) as (export, notes):
        result.notes.extend(notes)
        analysis = _Analysis(export, src, kb, result, steps, window, gpus, step_range, kernel_wait_us)
        analysis.progress = progress
        analysis.run()
        if progress is not None and src.size:
            progress(src.size, src.size)
    return NsysAnalysis(result, analysis.timelines, analysis.device_windows, analysis.step_name)


def _fmt_s(us: float) -> str:
    return f"{us / 1e6:.3g} s"


class _Analysis:
    """Turns an export's record streams into facts on a FileResult."""

    def __init__(self, export: NsysExport, src: Source, kb: KnowledgeBase, result: FileResult,
                 steps: tuple[int | None, int | None] | None, window: tuple[float | None, float | None] | None,
                 gpus: Sequence[int] | None, step_range: str | None, kernel_wait_us: float) -> None:
        self.x, self.src, self.kb, self.r = export, src, kb, result
        self.step_numbers, self.time_window, self.gpus = steps, window, gpus
        self.step_range, self.kernel_wait_us = step_range, kernel_wait_us
        self.timelines: dict[int, DeviceTimeline] = {}
        self.device_windows: dict[int, list[Interval]] = {}
        self.step_name: str | None = None
        self.n_steps: dict[int, int] = {}
        self._numbers: dict[int, int] = {}
        self._no_steps_reason = _NO_STEPS
        self.devices: dict[int, set[int]] = {}
        self.loader_by_proc: dict[int, list[Interval]] = defaultdict(list)
        self.first = self.last = 0.0
        self.label = "whole export"
        self.progress: Progress | None = None
        self._scan: tuple[list[Range], list[Range], int] | None = None

    def run(self) -> None:
        x, r = self.x, self.r
        for fact in FACTS:
            r.missing(fact, "not derived from this export")
        version = x.meta.get("EXPORT_PRODUCT_VERSION")
        counts = x.counts()
        r.stats.update(reader="sqlite3 cursors", bytes=self.src.size or 0)
        if version:
            r.stats["nsys_version"] = version
        r.stats.update(counts)
        self._schema_notes()
        extent = x.extent()
        devices = x.device_processes()
        gpu_rows = sum(counts.get(k, 0) for k in ("kernels", "memcpys", "memsets"))
        if extent is None or not devices or gpu_rows == 0:
            reason = ("the export has no CUPTI kernel, memcpy or memset records (profile with nsys profile -t cuda)"
                      if not x.activity_tables() else "the export's kernel, memcpy and memset tables are empty")
            for fact in FACTS:
                if fact not in ("hardware", "step_time_s", "data_wait_s", "num_workers", "workload"):
                    r.missing(fact, reason)
            self._hardware(set())
            if extent is None:
                self._loader_and_workload({}, self._nvtx()[1])
                for fact in ("step_time_s", "data_wait_s"):
                    r.missing(fact, reason)
                return
            self._steps_windows(set(), extent)
            return
        chosen = set(devices)
        if self.gpus:
            chosen &= set(self.gpus)
            if not chosen:
                raise self.src.problem(f"--gpu {','.join(map(str, self.gpus))}: the export has GPU activity on "
                                       f"devices {', '.join(map(str, sorted(devices)))} only")
        self.devices = {d: devices[d] for d in sorted(chosen)}
        self._steps_windows(chosen, extent)
        self._timelines()
        self._facts()
        self._syncs()
        self._hardware(chosen)

    # -- schema ----------------------------------------------------------------------------------------------------
    def _schema_notes(self) -> None:
        x, r = self.x, self.r
        absent = [t for t in (KERNEL_T, MEMCPY_T, MEMSET_T, RUNTIME_T, SYNC_T, NVTX_T, STRINGS_T) if t not in x.tables]
        if absent:
            r.notes.append("the export has no " + ", ".join(absent) + " table" + ("s" if len(absent) > 1 else "")
                           + " (not traced, or an older nsys); derived without them")
        if x.missing_columns:
            text = "; ".join(f"{t}: {', '.join(cols)}" for t, cols in x.missing_columns.items())
            version = x.meta.get("EXPORT_PRODUCT_VERSION", "version unknown")
            r.notes.append(f"columns missing from this export (nsys {version}): {text}; derived without them")
        if x.has(MEMCPY_T) and not x.has(COPY_ENUM_T):
            r.notes.append(f"no {COPY_ENUM_T} table: memcpy kinds read with CUPTI's numbering")

    # -- windows ---------------------------------------------------------------------------------------------------
    def _steps_windows(self, chosen: set[int], extent: tuple[float, float]) -> None:
        x, r = self.x, self.r
        self.first, self.last = extent
        self.label = self._whole_label(self._whole_window())
        steps_by_proc = self._steps()
        loader = self._nvtx()[1]
        self._loader_and_workload(steps_by_proc, loader)
        for rg in loader:
            if rg.name.endswith("__next__"):
                self.loader_by_proc[rg.process].append((rg.start_us, rg.end_us))
        if not chosen:
            if steps_by_proc:
                self._step_time({p: [(s, e) for _, s, e in v] for p, v in steps_by_proc.items()}, steps_by_proc)
            return
        ext = x.step_extents(steps_by_proc) if steps_by_proc else {}
        per_device: dict[int, list[Interval]] = {}
        used_steps: dict[int, list[tuple[int, float, float]]] = {}
        whole = self._whole_window()
        for dev in sorted(chosen):
            procs = self.devices.get(dev, set())
            candidates = [p for p in procs if p in steps_by_proc] or (list(steps_by_proc) if len(steps_by_proc) == 1
                                                                      else [])
            if not candidates:
                per_device[dev] = [whole]
                if steps_by_proc:
                    r.notes.append(f"device {dev}: none of its processes has the step ranges; used the whole export")
                continue
            proc = max(candidates, key=lambda p: len(steps_by_proc[p]))
            lst = steps_by_proc[proc]
            windows: list[Interval] = []
            prev = -math.inf
            for k, s, e in lst:
                end = max(e, ext.get((k, dev), -math.inf))
                s = max(s, prev)
                if end > s:
                    windows.append((s, end))
                    prev = end
            per_device[dev] = windows
            used_steps[dev] = lst
            self.n_steps[dev] = len(windows)
        self.device_windows = per_device
        if used_steps:
            n = min(len(v) for v in used_steps.values())
            numbers = [k for k, _, _ in next(iter(used_steps.values()))]
            self.label = (f"NVTX {self.step_name!r} #{self._numbers[numbers[0]]}–#{self._numbers[numbers[-1]]} "
                          f"({n} steps)" if n > 1 else f"NVTX {self.step_name!r} #{self._numbers[numbers[0]]} (1 step)")
            self._step_time(per_device, used_steps)
        else:
            self.label = self._whole_label(whole)
            for fact in ("step_time_s", "kernels_per_step", "comm_time_s"):
                r.missing(fact, self._no_steps_reason)
            r.missing("data_wait_s", self._no_steps_reason)
        span = sum(total(w) for w in per_device.values()) / max(1, len(per_device))
        r.stats.update(window=self.label, window_s=round(span / 1e6, 6))

    def _whole_window(self) -> Interval:
        lo, hi = self.first, self.last
        if self.time_window is not None:
            a, b = self.time_window
            lo = max(lo, self.first + a * 1e6) if a is not None else lo
            hi = min(hi, self.first + b * 1e6) if b is not None else hi
            if hi <= lo:
                raise self.src.problem(f"--window is outside the export, which lasts {_fmt_s(self.last - self.first)}")
        return lo, hi

    def _whole_label(self, whole: Interval) -> str:
        return (f"whole export, {_fmt_s(whole[0] - self.first)}–{_fmt_s(whole[1] - self.first)} "
                "(no NVTX step ranges)")

    def _steps(self) -> dict[int, list[tuple[int, float, float]]]:
        """Process -> its step ranges as (key, start_us, end_us), outermost and non-overlapping, after --steps and
        --window; sets step_name. Raises when --step-range names a range the export does not have."""
        x, r = self.x, self.r
        if self.step_range:
            name = self.step_range.strip()
            found = self._nvtx()[0]
            if not found:
                shown = ", ".join(f"{n!r} ×{c}" for n, c in x.range_names())
                raise self.src.problem(f"--step-range {name}: no NVTX range of that name in the export"
                                       + (f" (most frequent: {shown})" if shown else " (it has no NVTX ranges)"),
                                       hint="name a range the export has; trailing step numbers (step#3, "
                                            "iteration 12) and emit_nvtx's ', seq = N, op_id = N' are ignored")
            base = name
        else:
            candidates: dict[str, list[Range]] = defaultdict(list)
            for rg in self._nvtx()[0]:
                b, _ = step_base(rg.name)
                if looks_like_step(b):
                    candidates[b].append(rg)
            repeating = {b: v for b, v in candidates.items() if len(v) >= 2}
            if not repeating:
                if candidates:
                    self._no_steps_reason = (f"the step-like NVTX range {next(iter(candidates))!r} occurs once; "
                                             "name a repeating range with --step-range NAME")
                elif self.step_numbers is not None:
                    raise self.src.problem(f"--steps: {_NO_STEPS}", hint="use --window START:END (seconds) instead")
                return {}
            base = max(repeating, key=lambda b: (sum(rg.end_us - rg.start_us for rg in repeating[b]), b))
            found = repeating[base]
            others = sorted(b for b in repeating if b != base)
            if others:
                r.notes.append(f"NVTX step ranges: used {base!r}; also named like steps: {', '.join(others)} "
                               "(choose with --step-range NAME)")
        self.step_name = base
        by_thread: dict[tuple[int, int], list[Range]] = defaultdict(list)
        for rg in found:
            by_thread[(rg.process, rg.thread)].append(rg)
        by_proc: dict[int, list[Range]] = {}
        for (proc, _), lst in by_thread.items():
            if proc not in by_proc or len(lst) > len(by_proc[proc]):
                by_proc[proc] = lst
        out: dict[int, list[tuple[int, float, float]]] = {}
        key = 0
        self._numbers = {}
        for proc, lst in by_proc.items():
            lst.sort(key=lambda rg: (rg.start_us, -rg.end_us))
            outer: list[Range] = []
            for rg in lst:
                if outer and rg.start_us < outer[-1].end_us:
                    continue  # nested in (or overlapping) the previous step: keep the outermost
                outer.append(rg)
            numbered = [(step_base(rg.name)[1], rg) for rg in outer]
            if any(n is None for n, _ in numbered):
                numbered = [(i + 1, rg) for i, (_, rg) in enumerate(numbered)]
            kept: list[tuple[int, float, float]] = []
            for n, rg in numbered:
                assert n is not None
                if self.step_numbers is not None:
                    lo, hi = self.step_numbers
                    if (lo is not None and n < lo) or (hi is not None and n > hi):
                        continue
                if self.time_window is not None:
                    w_lo, w_hi = self.time_window
                    if (w_lo is not None and rg.start_us < self.first + w_lo * 1e6) or \
                            (w_hi is not None and rg.start_us > self.first + w_hi * 1e6):
                        continue
                kept.append((key, rg.start_us, rg.end_us))
                self._numbers[key] = n
                key += 1
            if kept:
                out[proc] = kept
        if not out:
            available = sorted({n for n in self._all_numbers(by_proc)})
            shown = ", ".join(f"#{n}" for n in available[:20]) + (" ..." if len(available) > 20 else "")
            raise self.src.problem(f"no {base!r} step ranges in the selected range (the export has {shown})",
                                   hint=f"pick steps the export has, e.g. --steps {available[0]}:{available[-1]}"
                                   if available else "")
        return out

    def _nvtx(self) -> tuple[list[Range], list[Range], int]:
        """One scan of NVTX_EVENTS, kept: (step ranges: the named one, or candidates named like steps; DataLoader
        ranges; the number of backward/optimizer ranges)."""
        if self._scan is None:
            named = self.step_range.strip() if self.step_range else None
            steps: list[Range] = []
            loader: list[Range] = []
            training = 0
            for rg in self.x.ranges(prefixes=(*_LOADER, *_TRAINING, *((named,) if named else ())),
                                    likes=() if named else ("%step%", "%iter%", "%batch%")):
                name = rg.name
                if named is not None:
                    if name == named or step_base(name)[0] == named:
                        steps.append(rg)
                elif not name.startswith(_LOADER) and not name.startswith(_TRAINING):
                    steps.append(rg)
                if name.startswith(_LOADER):
                    loader.append(rg)
                elif name.startswith(_TRAINING):
                    training += 1
            self._scan = (steps, loader, training)
        return self._scan

    @staticmethod
    def _all_numbers(by_proc: dict[int, list[Range]]) -> Iterator[int]:
        for lst in by_proc.values():
            nums = [step_base(rg.name)[1] for rg in lst]
            if any(n is None for n in nums):
                yield from range(1, len(lst) + 1)
            else:
                yield from (n for n in nums if n is not None)

    def _step_time(self, windows: dict[int, list[Interval]], steps: dict[int, list[tuple[int, float, float]]]) -> None:
        per_step = [e - s for w in windows.values() for s, e in w]
        if not per_step:
            return
        n = round(sum(len(w) for w in windows.values()) / len(windows))
        self.r.add("step_time_s", sum(per_step) / len(per_step) / 1e6,
                   method=f"mean step window: NVTX range {self.step_name!r} extended to the end of the GPU work it "
                   "launched", window=getattr(self, "label", None), samples=n, min=round(min(per_step) / 1e6, 6),
                   max=round(max(per_step) / 1e6, 6), devices=",".join(map(str, sorted(windows))),
                   file=self.src.label)
        self._data_wait(windows)

    def _data_wait(self, windows: dict[int, list[Interval]]) -> None:
        r = self.r
        if not any(self.loader_by_proc.values()):
            r.missing("data_wait_s", "the export has no DataLoader __next__ NVTX ranges (profile with "
                      "torch.autograd.profiler.emit_nvtx(), or the input pipeline is not a torch DataLoader)")
            return
        waits = [overlap(self._loader_spans(dev), [w]) for dev, ws in windows.items() for w in ws]
        span = sum(total(ws) for ws in windows.values())
        if not waits:
            return
        r.add("data_wait_s", sum(waits) / len(waits) / 1e6, method="DataLoader __next__ NVTX time inside the step "
              "windows, per step", samples=len(waits), min=round(min(waits) / 1e6, 6), max=round(max(waits) / 1e6, 6),
              share_of_step=round(sum(waits) / span, 4) if span else None, file=self.src.label)

    def _loader_and_workload(self, steps: dict[int, list[tuple[int, float, float]]], loader: list[Range]) -> None:
        r = self.r
        iters = Counter(rg.name[rg.name.index("#") + 1:-9] for rg in loader if rg.name.endswith("__next__"))
        if not iters:
            r.missing("num_workers", "the export has no DataLoader __next__ NVTX ranges")
        elif set(iters) == {"_SingleProcessDataLoaderIter"}:
            r.add("num_workers", 0, method="the DataLoader iterator is _SingleProcessDataLoaderIter (num_workers=0)",
                  file=self.src.label)
        else:
            r.missing("num_workers", f"the DataLoader uses {', '.join(sorted(iters))}; the export does not record "
                      "how many workers")
        training = self._nvtx()[2]
        if training:
            r.add("workload", "training", method=f"{training} backward/optimizer NVTX ranges in the export",
                  file=self.src.label)
        else:
            r.missing("workload", "no backward or optimizer NVTX ranges in the export; it may be inference, or "
                      "profiled without torch.autograd.profiler.emit_nvtx()")

    # -- devices ---------------------------------------------------------------------------------------------------
    def _timelines(self) -> None:
        """Stream each chosen device's activities through the per-device analysis (the one swap point)."""
        whole = self._whole_window()
        stream: Iterator[GpuActivity] = self.x.activities(sorted(self.devices))
        if self.progress is not None and self.src.size:
            stream = _reporting(stream, self.progress, self.src.size, int(self.r.stats.get("kernels", 0))
                                + int(self.r.stats.get("memcpys", 0)) + int(self.r.stats.get("memsets", 0)))
        for dev, acts in groupby(stream, key=lambda a: a.device):
            if dev not in self.devices:
                continue
            windows = self.device_windows.setdefault(dev, [whole])
            self.timelines[dev] = analyse_device(dev, acts, windows, data_spans=self._loader_spans(dev),
                                                 kernel_wait_us=self.kernel_wait_us)

    def _loader_spans(self, dev: int) -> list[Interval]:
        """The DataLoader spans of the processes that drive a device (all of them when processes are unknown)."""
        procs = self.devices.get(dev, set())
        spans = [iv for p in procs for iv in self.loader_by_proc.get(p, [])]
        if not spans and (not procs or set(self.loader_by_proc) <= {-1}):
            spans = [iv for v in self.loader_by_proc.values() for iv in v]
        return union(spans)

    def _facts(self) -> None:
        r = self.r
        used = {d: t for d, t in self.timelines.items() if t.busy_us > 0}
        if not used:
            for fact in ("gpu_util", "gpu_idle_gap_frac", "host_wait_frac", "mean_kernel_us", "kernels_per_step",
                         "pageable_copy_frac", "h2d_copy_frac", "comm_frac", "comm_overlap_frac", "comm_time_s"):
                r.missing(fact, f"no GPU activity inside {self.label}")
            return
        tls = list(used.values())

        def mean(get: Callable[[DeviceTimeline], float]) -> float:
            return sum(get(t) for t in tls) / len(tls)

        devs = ",".join(map(str, sorted(used)))
        n_steps = min((self.n_steps.get(d, 0) for d in used), default=0)
        common: dict[str, Any] = {"window": self.label, "devices": devs, "file": self.src.label}
        if n_steps:
            common["samples"] = n_steps
        activities = sum(t.activities for t in tls)
        r.add("gpu_util", mean(lambda t: t.share(t.busy_us)),
              method=f"union of {activities} kernel/memcpy/memset intervals over the window", **common)
        r.add("gpu_idle_gap_frac", mean(lambda t: t.share(t.idle_us)),
              method="window time with no kernel, memcpy or memset running",
              idle_data_wait=round(mean(lambda t: t.share(t.idle_data_us)), 4),
              idle_host_wait=round(mean(lambda t: t.share(t.idle_host_us)), 4),
              idle_kernel_wait=round(mean(lambda t: t.share(t.idle_kernel_us)), 4),
              idle_other=round(mean(lambda t: t.share(t.idle_other_us)), 4), **common)
        matched = sum(t.launches_matched for t in tls)
        if matched == 0:
            r.missing("host_wait_frac", "GPU activities cannot be matched to their launch calls (no "
                      f"{RUNTIME_T} rows with correlation ids)")
        else:
            r.add("host_wait_frac", mean(lambda t: t.share(t.idle_host_us)), method="HTA idle breakdown: gaps whose "
                  "next activity was launched after the previous one ended, less the part overlapping DataLoader "
                  "waits", launches_matched=round(matched / max(1, activities), 4), **common)
        kernels = sum(t.kernels.count for t in tls)
        if kernels:
            lo = min(t.kernels.lo for t in tls if t.kernels.count)
            hi = max(t.kernels.hi for t in tls if t.kernels.count)
            r.add("mean_kernel_us", max(sum(t.kernels.total for t in tls) / kernels, 1e-3),
                  method=f"mean duration of {kernels} kernels", min=lo, max=hi, **common)
            if n_steps:
                r.add("kernels_per_step", round(kernels / len(tls) / n_steps),
                      method=f"{kernels} kernels over {n_steps} steps on {len(tls)} device(s)", **common)
        else:
            r.missing("mean_kernel_us", f"no kernels inside {self.label}")
            r.missing("kernels_per_step", f"no kernels inside {self.label}")
        r.add("h2d_copy_frac", mean(lambda t: t.share(t.h2d_us)),
              method="union of host-to-device memcpy intervals over the window",
              h2d_bytes=sum(t.h2d_bytes for t in tls), d2h_bytes=sum(t.d2h_bytes for t in tls),
              d2h_copy_frac=round(mean(lambda t: t.share(t.d2h_us)), 4), **common)
        pageable = sum(t.h2d_pageable_us for t in tls)
        pinned = sum(t.h2d_pinned_us for t in tls)
        unknown = sum(t.h2d_unknown_us for t in tls)
        if pageable + pinned > 0:
            r.add("pageable_copy_frac", pageable / (pageable + pinned), method="host-to-device copy time from pageable "
                  "memory (srcKind) over all host-to-device copy time", copy_us=round(pageable + pinned, 3),
                  copies=sum(t.h2d_copies for t in tls), **common)
        elif unknown > 0:
            r.missing("pageable_copy_frac", f"the host-to-device copies do not say whether host memory was pinned "
                      f"(no srcKind column in {MEMCPY_T})")
        else:
            r.missing("pageable_copy_frac", f"no host-to-device copies inside {self.label}")
        comm = any(t.comm_kernels for t in tls)
        r.add("comm_frac", mean(lambda t: t.share(t.comm_exposed_us)), method="NCCL/RCCL kernel time not "
              "overlapped by other GPU work" if comm else "no NCCL/RCCL kernels in the export", **common)
        if comm:
            comm_us = sum(t.comm_us for t in tls)
            exposed = sum(t.comm_exposed_us for t in tls)
            r.add("comm_overlap_frac", 1.0 - exposed / comm_us if comm_us > 0 else 0.0,
                  method="share of NCCL/RCCL kernel time that runs concurrently with other GPU work",
                  comm_kernels=sum(t.comm_kernels for t in tls), **common)
            if n_steps:
                r.add("comm_time_s", mean(lambda t: t.comm_us) / n_steps / 1e6,
                      method="union of NCCL/RCCL kernel intervals per step, overlapped or not", **common)
        else:
            r.missing("comm_overlap_frac", "no NCCL/RCCL kernels in the export")
            r.missing("comm_time_s", "no NCCL/RCCL kernels in the export")
        if len(self.devices) > 1 or len({p for ps in self.devices.values() for p in ps}) > 1:
            procs = {p for ps in self.devices.values() for p in ps}
            r.notes.append(f"{len(used)} devices" + (f" in {len(procs)} processes" if procs else "")
                           + " in this export; the facts are their mean (per-device figures below)")
        for dev, tl in sorted(self.timelines.items()):
            r.notes.append(_device_note(tl, n_steps=self.n_steps.get(dev, 0)))

    def _syncs(self) -> None:
        """Host synchronization: SYNCHRONIZATION records (host-blocking kinds), else *Synchronize runtime calls."""
        x, res = self.x, self.r
        per_device: dict[int, list[Interval]] = defaultdict(list)
        calls = 0
        source = SYNC_T
        if x.has(SYNC_T):
            for sp in x.sync_spans():
                if sp.kind in _HOST_BLOCKING and sp.device in self.device_windows:
                    per_device[sp.device].append((sp.start_us, sp.start_us + sp.dur_us))
        elif x.has(RUNTIME_T):
            source = f"*Synchronize calls in {RUNTIME_T}"
            spans = [(c.start_us, c.start_us + c.dur_us) for c in x.runtime_calls("%Synchronize%")]
            for dev in self.device_windows:
                per_device[dev] = spans
        else:
            return
        shares: list[float] = []
        for dev, ws in self.device_windows.items():
            spans = [iv for iv in per_device.get(dev, []) if _in(ws, iv[0])]
            calls += len(spans)
            span = total(ws)
            shares.append(min(1.0, overlap(union(spans), ws) / span) if span else 0.0)
        if not shares:
            return
        share = sum(shares) / len(shares)
        res.stats["host_sync_calls"] = calls
        n = min((self.n_steps.get(d, 0) for d in self.device_windows), default=0)
        if n:
            res.stats["host_syncs_per_step"] = round(calls / len(shares) / n, 2)
        res.stats["host_sync_share"] = round(share, 4)
        if calls:
            res.notes.append(f"{calls} host synchronizations ({source}) inside {self.label}, blocking the host "
                             f"{share:.1%} of the time")

    def _hardware(self, devices: set[int]) -> None:
        r = self.r
        names = self.x.gpu_names()
        if not names:
            r.missing("hardware", f"the export has no {GPU_T} / {CUDA_DEVICE_T} device names (an export without "
                      "device tables, e.g. trimmed or from an older nsys); give --set hardware=ID (dam hardware list)")
            return
        chosen = [names[d] for d in sorted(devices) if d in names] or list(names.values())
        r.add_hardware(Counter(chosen), self.kb, what="device name", file=self.src.label,
                       method=f"{GPU_T}.name mapped through the hardware catalog's aliases",
                       several="the export lists several device models")


def _reporting(stream: Iterator[GpuActivity], progress: Progress, size: int, rows: int) -> Iterator[GpuActivity]:
    """Pass the activities through, calling progress(bytes, size) in proportion to the rows read."""
    step = 1 << 16
    for i, act in enumerate(stream, start=1):
        if i % step == 0 and rows:
            progress(min(size, size * i // rows), size)
        yield act


def _in(windows: list[Interval], t: float) -> bool:
    return any(a <= t < b for a, b in windows)


def _device_note(tl: DeviceTimeline, *, n_steps: int) -> str:
    """One line per device: busy, idle causes, copies, communication, classes and top kernels."""
    parts = [f"device {tl.device}: busy {tl.share(tl.busy_us):.1%} of {tl.window_us / 1e3:.4g} ms",
             f"idle {tl.share(tl.idle_us):.1%} (host wait {tl.share(tl.idle_host_us):.1%}, data wait "
             f"{tl.share(tl.idle_data_us):.1%}, kernel wait {tl.share(tl.idle_kernel_us):.1%}, other "
             f"{tl.share(tl.idle_other_us):.1%}; {tl.gaps} gaps, longest {tl.longest_gap_us / 1e3:.3g} ms)"]
    if tl.h2d_copies or tl.d2h_copies:
        parts.append(f"H2D {tl.h2d_copies} copies {tl.h2d_bytes / 1e6:.4g} MB ({tl.share(tl.h2d_us):.1%}), "
                     f"D2H {tl.d2h_copies} copies {tl.d2h_bytes / 1e6:.4g} MB ({tl.share(tl.d2h_us):.1%})")
    if tl.comm_kernels:
        parts.append(f"NCCL {tl.comm_kernels} kernels {tl.share(tl.comm_us):.1%}, exposed "
                     f"{tl.share(tl.comm_exposed_us):.1%}")
    breakdown = tl.time_breakdown(5)
    if breakdown["classes"]:
        parts.append("classes " + ", ".join(f"{c['class']} {c['share']:.0%}" for c in breakdown["classes"][:5]))
    if breakdown["top_kernels"]:
        parts.append("top kernels " + ", ".join(f"{short_name(k['name'])} {k['share']:.1%} ×{k['count']}"
                                                for k in breakdown["top_kernels"]))
    return "; ".join(parts)

