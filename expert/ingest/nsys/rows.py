"""Nsight Systems export rows as record streams: SQLite cursors turned into format-neutral records
(`records.GpuActivity`, `RuntimeCall`, `SyncSpan`, `Range`), one row at a time; and opening an export (a SQLite file,
a stream or compressed file spooled to disk, or a .nsys-rep exported with `nsys export`)."""

from __future__ import annotations

import math
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from .._source import Progress, Source
from ..records import KERNEL, MEMCPY, MEMSET, GpuActivity, Range, RuntimeCall, SyncSpan
from ..timeline.classes import api_name
from .schema import (
    COPY_ENUM_T,
    CUPTI_COPY_KINDS,
    CUPTI_MEM_KINDS,
    CUPTI_SYNC_KINDS,
    HINT,
    KERNEL_T,
    MEM_ENUM_T,
    MEMCPY_T,
    MEMSET_T,
    NVTX_T,
    REPORT_SUFFIXES,
    RUNTIME_T,
    SQLITE_MAGIC,
    STRINGS_T,
    SYNC_ENUM_T,
    SYNC_T,
    NsysSchema,
    quote,
)
from .steps import step_base


class NsysExport(NsysSchema):
    """A read-only view of an Nsight Systems SQLite export: detected tables and columns, and record streams."""

    def _launches(self) -> bool:
        """Build, once, a temporary table of launch calls keyed by (correlation id, process): one B-tree that every
        activity table joins against (SQLite would otherwise build an automatic index per statement)."""
        if self._launch_table is None:
            self._launch_table = self.has(RUNTIME_T, "correlationId")
            if self._launch_table:
                proc = "globalTid >> 24" if self.has(RUNTIME_T, "globalTid") else "-1"
                with self.guard("indexing the runtime calls"):
                    self.conn.execute("CREATE TEMP TABLE IF NOT EXISTS dam_launch (c INTEGER NOT NULL, p INTEGER NOT "
                                      "NULL, s INTEGER, e INTEGER, tid INTEGER, rid INTEGER, PRIMARY KEY (c, p)) "
                                      "WITHOUT ROWID")
                    self.conn.execute(f"INSERT OR IGNORE INTO temp.dam_launch SELECT correlationId, {proc}, start, "
                                      f"\"end\", {self.thread_key(RUNTIME_T, 'globalTid')}, rowid FROM {RUNTIME_T} "
                                      "WHERE correlationId IS NOT NULL")
        return self._launch_table

    def thread_key(self, table: str, column: str, alias: str = "") -> str:
        """The SQL of a row's host thread as one integer (its globalTid; -1 when unknown)."""
        if not self.has(table, column):
            return "-1"
        col = f"{alias}.{column}" if alias else column
        return f"(CASE WHEN {col} >= 0 THEN {col} ELSE -1 END)"

    def _launch_join(self, table: str) -> tuple[str, str]:
        """(launch-time expression, LEFT JOIN clause) matching an activity to its runtime call (r.c, r.p, r.s)."""
        if not self.has(table, "correlationId") or not self._launches():
            return "NULL", ""
        cond = "r.c = a.correlationId"
        if self.has(table, "globalPid") and self.has(RUNTIME_T, "globalTid"):
            cond += " AND r.p = (a.globalPid >> 24)"
        return "r.s", f" LEFT JOIN temp.dam_launch r ON {cond}"

    def activities(self, devices: Sequence[int] | None = None) -> Iterator[GpuActivity]:
        """Kernels, memcpys and memsets ordered by (device, start), each with the start of its launch call."""
        parts: list[str] = []
        for code, table in enumerate((KERNEL_T, MEMCPY_T, MEMSET_T)):
            if not self.has(table):
                continue
            launch, join = self._launch_join(table)
            if table == KERNEL_T:
                col = self.kernel_name_column()
                name = f"a.{quote(col)}" if col else "-1"
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
        mem_kinds, _ = self.enum(MEM_ENUM_T, CUPTI_MEM_KINDS)
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
        names = self.strings(f"SELECT DISTINCT {quote(col)} FROM {KERNEL_T}")
        if col == "demangledName" and self.has(KERNEL_T, "shortName"):
            # a demangled name the export left empty falls back to the short name
            for nid, text in list(names.items()):
                if not text:
                    del names[nid]
        return names

    def runtime_calls(self, name_like: str | None = None,
                      processes: Collection[int] | None = None) -> Iterator[RuntimeCall]:
        """Runtime/driver API calls (optionally only those whose name matches a LIKE pattern, or made by one of
        `processes`), in table order, named without nsys's API-version suffix (`cudaLaunchKernel_v7000` ->
        `cudaLaunchKernel`, as Kineto names it: `timeline.classes.api_name`)."""
        if not self.has(RUNTIME_T):
            return
        name = "s.value" if self.has(STRINGS_T) and self.has(RUNTIME_T, "nameId") else "''"
        join = f" LEFT JOIN {STRINGS_T} s ON s.id = r.nameId" if name != "''" else ""
        tests = ["s.value LIKE ?"] if name_like and join else []
        tid = "r.globalTid" if self.has(RUNTIME_T, "globalTid") else "-1"
        if processes and tid != "-1":
            tests.append(f"(r.globalTid >> 24) IN ({','.join(str(int(p)) for p in sorted(processes))})")
        where = f" WHERE {' AND '.join(tests)}" if tests else ""
        sql = (f"SELECT {name}, r.start, r.\"end\", {self._col(RUNTIME_T, 'correlationId', 'r')}, {tid} "
               f"FROM {RUNTIME_T} r{join}{where}")
        with self.guard():
            for nm, start, end, corr, gtid in self.conn.execute(sql, (name_like,) if name_like and join else ()):
                yield RuntimeCall(api_name(nm) if nm else "", start / 1000.0, (end - start) / 1000.0,
                                  corr if corr is not None else -1,
                                  (gtid >> 24) if gtid is not None and gtid >= 0 else -1,
                                  (gtid & 0xFFFFFF) if gtid is not None and gtid >= 0 else -1)

    def sync_spans(self) -> Iterator[SyncSpan]:
        """Synchronization records ordered by (device, start)."""
        if not self.has(SYNC_T):
            return
        kinds, _ = self.enum(SYNC_ENUM_T, {})
        labels = {i: _sync_kind(kinds.get(i, ""), i) for i in set(kinds) | set(CUPTI_SYNC_KINDS)}
        sql = (f"SELECT a.start, a.\"end\", {self._col(SYNC_T, 'deviceId', 'a', '0')}, "
               f"{self._col(SYNC_T, 'streamId', 'a')}, {self._process(SYNC_T, 'a', 'globalPid')}, "
               f"{self._col(SYNC_T, 'syncType', 'a')} FROM {SYNC_T} a ORDER BY 3, 1")
        with self.guard():
            for start, end, dev, stream, proc, kind in self.conn.execute(sql):
                yield SyncSpan(labels.get(kind, "unknown"), start / 1000.0, (end - start) / 1000.0, dev,
                               stream if stream is not None else -1, proc if proc is not None else -1)

    def _nvtx_name(self) -> tuple[str, str] | None:
        """(name expression, join clause) of NVTX_EVENTS' range names, or None when it has neither column."""
        cols = self.tables[NVTX_T]
        if "text" in cols and "textId" in cols and self.has(STRINGS_T):
            return "COALESCE(n.text, s.value)", f" LEFT JOIN {STRINGS_T} s ON s.id = n.textId"
        if "text" in cols:
            return "n.text", ""
        if "textId" in cols and self.has(STRINGS_T):
            return "s.value", f" LEFT JOIN {STRINGS_T} s ON s.id = n.textId"
        return None

    def ranges(self, prefixes: Sequence[str] = (), likes: Sequence[str] = (),
               processes: Collection[int] | None = None, ordered: bool = False,
               not_prefixes: Sequence[str] = ()) -> Iterator[Range]:
        """Closed NVTX ranges whose name starts with one of `prefixes` or matches one of the LIKE patterns (every
        range when neither is given) and starts with none of `not_prefixes` (tested first: a cheap way past the
        bulk, e.g. emit_nvtx's operators), of `processes` when given, in start order when `ordered`."""
        if not self.has(NVTX_T):
            return
        found = self._nvtx_name()
        if found is None:
            return
        name, join = found
        cols = self.tables[NVTX_T]
        tests = [f"substr({name}, 1, {len(p)}) = ?" for p in prefixes] + [f"{name} LIKE ?" for _ in likes]
        tid = "n.globalTid" if "globalTid" in cols else "-1"
        where = f"n.\"end\" IS NOT NULL AND n.\"end\" >= n.start AND {name} IS NOT NULL"
        if not_prefixes:
            where += "".join(f" AND substr({name}, 1, {len(p)}) <> ?" for p in not_prefixes)
        if tests:
            where += f" AND ({' OR '.join(tests)})"
        if processes and tid != "-1":
            where += f" AND (n.globalTid >> 24) IN ({','.join(str(int(p)) for p in sorted(processes))})"
        sql = (f"SELECT {name}, n.start, n.\"end\", {tid} FROM {NVTX_T} n{join} WHERE {where}"
               + (" ORDER BY n.start" if ordered else ""))
        with self.guard():
            for nm, start, end, gtid in self.conn.execute(sql, (*not_prefixes, *prefixes, *likes)):
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


def _copy_kind_map(enum: dict[int, str]) -> dict[int, str]:
    """copyKind id -> HtoD/DtoH/DtoD/HtoH/PtoP/other, from the export's ENUM labels or CUPTI's numbering."""
    if not enum:
        return dict(CUPTI_COPY_KINDS)
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
    return CUPTI_SYNC_KINDS.get(i, "unknown") if not label else "unknown"


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
            raise src.problem("not a SQLite database", hint=HINT)
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


