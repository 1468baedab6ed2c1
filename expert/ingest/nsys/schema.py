"""Nsight Systems export schema: the tables and columns read, detected per export (they differ by nsys version), and
the read-only connection with its located errors."""

from __future__ import annotations

import math
import sqlite3
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .names import sql_is_operator

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
CUPTI_COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoD", 4: "DtoH", 5: "DtoD", 6: "DtoD", 7: "DtoD", 8: "DtoD", 9: "HtoH",
               10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
CUPTI_MEM_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
              6: "Managed Static", 7: "Unknown"}
CUPTI_SYNC_KINDS = {0: "unknown", 1: "event", 2: "stream_wait", 3: "stream", 4: "context"}
HOST_BLOCKING = ("event", "stream", "context", "unknown")

HINT = "an Nsight Systems export: nsys export --type sqlite REPORT.nsys-rep (or give the .nsys-rep with nsys on PATH)"


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class NsysSchema:
    """A read-only connection to an Nsight Systems SQLite export: its detected tables and columns, and aggregates."""

    def __init__(self, path: Path, label: str) -> None:
        self.path, self.label = path, label
        self.tables: dict[str, set[str]] = {}
        self.missing_columns: dict[str, list[str]] = {}
        self.meta: dict[str, str] = {}
        self._launch_table: bool | None = None
        self.named_modules: bool | None = None  # any `nn.Module:` NVTX range (found once, by the host sweep)
        self._strings: dict[str, dict[int, str]] = {}
        try:
            self.conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=2.0,
                                        check_same_thread=False)
        except sqlite3.Error as exc:
            raise self._problem(exc) from exc
        # which NVTX ranges are operators (names.is_operator_range), for the queries that tell them apart
        self.conn.create_function("dam_is_op", 1, sql_is_operator, deterministic=True)
        try:
            self._detect()
        except BaseException:
            self.conn.close()
            raise

    def close(self) -> None:
        self.conn.close()

    # -- errors ----------------------------------------------------------------------------------------------------
    def _problem(self, exc: BaseException, doing: str = "reading") -> Exception:
        from ...errors import ObservationError, Problem
        from .._source import CANNOT_READ

        text = str(exc)
        if "locked" in text or "busy" in text:
            why = ("the database is locked by another process (is nsys still writing it? wait for the export to "
                   "finish, or copy the file)")
        elif "malformed" in text or "not a database" in text or "disk I/O" in text or "short read" in text:
            why = f"the SQLite file is truncated or damaged ({text})"
        else:
            why = f"SQLite error while {doing}: {text}"
        return ObservationError([Problem(self.label, why, HINT)], title=CANNOT_READ)

    @contextmanager
    def guard(self, doing: str = "reading") -> Iterator[None]:
        """Turn SQLite errors inside the block into a located ObservationError."""
        try:
            yield
        except sqlite3.Error as exc:
            raise self._problem(exc, doing) from exc

    # -- schema ----------------------------------------------------------------------------------------------------
    def _detect(self) -> None:
        from ...errors import ObservationError, Problem
        from .._source import CANNOT_READ

        with self.guard("reading the schema"):
            names = [r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')")]
            for name in names:
                if name in TABLES or name == "META_DATA_EXPORT":
                    self.tables[name] = {r[1] for r in self.conn.execute(f"PRAGMA table_info({quote(name)})")}
            if "META_DATA_EXPORT" in self.tables:
                self.meta = {str(k): str(v) for k, v in self.conn.execute("SELECT name, value FROM META_DATA_EXPORT")}
        accepted = "an nsys SQLite export (tables CUPTI_ACTIVITY_KIND_*, StringIds, NVTX_EVENTS, TARGET_INFO_GPU)"
        if not names:
            raise ObservationError([Problem(self.label, "an empty SQLite database (no tables)", HINT)],
                                   title=CANNOT_READ)
        nsys_like = any(n.startswith(("CUPTI_ACTIVITY_KIND_", "NVTX_", "TARGET_INFO_", "ENUM_NSYS_")) for n in names)
        if not nsys_like and "Nsight" not in self.meta.get("EXPORT_PRODUCT_NAME", ""):
            shown = ", ".join(sorted(names)[:8]) + (" ..." if len(names) > 8 else "")
            raise ObservationError([Problem(self.label, f"a SQLite database, but not an Nsight Systems export "
                                            f"(its tables: {shown})", f"give {accepted}")],
                                   title=CANNOT_READ)
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
        return f"{alias}.{quote(column)}" if self.has(table, column) else default

    def enum(self, table: str, fallback: dict[int, str]) -> tuple[dict[int, str], bool]:
        """An ENUM table's id -> label mapping (and whether it came from the export rather than CUPTI's numbering)."""
        if not self.has(table) or not {"id", "name"} <= self.tables[table]:
            return dict(fallback), False
        label = "label" if "label" in self.tables[table] else "name"
        with self.guard():
            return {int(i): str(v) for i, v in self.conn.execute(f"SELECT id, {label} FROM {table}")}, True

    def strings(self, ids_sql: str) -> dict[int, str]:
        """StringIds values for the ids a subquery gives (e.g. the distinct kernel names); each subquery runs once
        per export (the distinct names of a table are a full scan, and every device asks)."""
        if not self.has(STRINGS_T, "id") or not self.has(STRINGS_T, "value"):
            return {}
        found = self._strings.get(ids_sql)
        if found is None:
            with self.guard():
                found = self._strings[ids_sql] = {int(i): str(v) for i, v in self.conn.execute(
                    f"SELECT id, value FROM {STRINGS_T} WHERE id IN ({ids_sql})")}
        return dict(found)

    def _process(self, table: str, alias: str, column: str) -> str:
        return f"({alias}.{column} >> 24)" if self.has(table, column) else "-1"

    def activity_tables(self) -> list[str]:
        return [t for t in (KERNEL_T, MEMCPY_T, MEMSET_T) if self.has(t)]

    def kernel_name_column(self) -> str | None:
        for col in ("demangledName", "shortName", "mangledName", "name"):
            if self.has(KERNEL_T, col):
                return col
        return None

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


