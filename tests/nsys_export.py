"""Build small Nsight Systems SQLite exports for tests, in the layout `nsys export --type sqlite` writes (schema 3.x),
with the option to leave tables or columns out the way older nsys versions do.

Times are given in microseconds and stored in nanoseconds, as nsys stores them. Processes are numbered; globalPid is
`pid << 24` and globalTid `pid << 24 | tid`, nsys's serialized GlobalId layout.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Kernel:
    name: str
    start: float
    end: float
    launch: float | None
    device: int = 0
    stream: int = 7
    pid: int = 100


@dataclass
class Copy:
    kind: int  # CUPTI copyKind: 1 HtoD, 2 DtoH, 8 DtoD
    start: float
    end: float
    launch: float | None
    nbytes: int = 1024
    src: int = 0  # ENUM_CUDA_MEM_KIND: 0 pageable, 1 pinned, 2 device
    dst: int = 2
    device: int = 0
    pid: int = 100


@dataclass
class Nvtx:
    text: str
    start: float
    end: float
    pid: int = 100
    tid: int = 1
    registered: bool = False  # the name in StringIds (textId) instead of the text column


@dataclass
class Sync:
    start: float
    end: float
    sync_type: int = 3  # 3 stream synchronize, 2 stream wait event (GPU-side)
    device: int = 0
    pid: int = 100


@dataclass
class Export:
    kernels: list[Kernel] = field(default_factory=list)
    copies: list[Copy] = field(default_factory=list)
    memsets: list[tuple[float, float, int]] = field(default_factory=list)  # (start, end, device)
    nvtx: list[Nvtx] = field(default_factory=list)
    syncs: list[Sync] = field(default_factory=list)
    runtime_extra: list[tuple[str, float, float, int]] = field(default_factory=list)  # (name, start, end, pid)
    gpus: dict[int, str] = field(default_factory=dict)
    version: str = "2026.2.1.210"
    drop_tables: Sequence[str] = ()
    drop_columns: dict[str, Sequence[str]] = field(default_factory=dict)


_COLUMNS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid",
                                   "demangledName", "shortName", "gridX", "blockX"],
    "CUPTI_ACTIVITY_KIND_MEMCPY": ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes",
                                   "copyKind", "srcKind", "dstKind"],
    "CUPTI_ACTIVITY_KIND_MEMSET": ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "value",
                                   "bytes"],
    "CUPTI_ACTIVITY_KIND_RUNTIME": ["start", "end", "eventClass", "globalTid", "correlationId", "nameId",
                                    "returnValue"],
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ["start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                            "syncType"],
    "NVTX_EVENTS": ["start", "end", "eventType", "text", "globalTid", "textId", "domainId"],
    "StringIds": ["id", "value"],
    "TARGET_INFO_GPU": ["vmId", "id", "name", "cuDevice"],
    "META_DATA_EXPORT": ["name", "value"],
    "ENUM_CUDA_MEMCPY_OPER": ["id", "name", "label"],
    "ENUM_CUDA_MEM_KIND": ["id", "name", "label"],
    "ENUM_CUPTI_SYNC_TYPE": ["id", "name", "label"],
}
_COPY_ENUM = [(0, "CUDA_MEMCPY_KIND_UNKNOWN", "Unknown"), (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"),
              (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"), (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device"),
              (10, "CUDA_MEMCPY_KIND_PTOP", "Peer-to-Peer")]
_MEM_ENUM = [(0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"), (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
             (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device")]
_SYNC_ENUM = [(0, "UNKNOWN", "Unknown"), (1, "EVENT_SYNCHRONIZE", "Event sync"),
              (2, "STREAM_WAIT_EVENT", "Stream wait sync"), (3, "STREAM_SYNCHRONIZE", "Stream sync"),
              (4, "CONTEXT_SYNCHRONIZE", "Context sync")]


def _ns(us: float) -> int:
    return round(us * 1000)


def write(path: Path, spec: Export) -> Path:
    """Write the export to `path` (replacing it) and return the path."""
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    strings: dict[str, int] = {}

    def sid(text: str) -> int:
        return strings.setdefault(text, len(strings) + 1)

    rows: dict[str, list[dict[str, object]]] = {t: [] for t in _COLUMNS}
    corr = 1000
    launch_name = sid("cudaLaunchKernel_v7000")
    copy_name = sid("cudaMemcpyAsync_v3020")
    for k in spec.kernels:
        corr += 1
        rows["CUPTI_ACTIVITY_KIND_KERNEL"].append(
            {"start": _ns(k.start), "end": _ns(k.end), "deviceId": k.device, "contextId": 1, "streamId": k.stream,
             "correlationId": corr, "globalPid": k.pid << 24, "demangledName": sid(k.name),
             "shortName": sid(k.name.split("<")[0].split("(")[0].replace("void ", "")), "gridX": 1, "blockX": 128})
        if k.launch is not None:
            rows["CUPTI_ACTIVITY_KIND_RUNTIME"].append(
                {"start": _ns(k.launch), "end": _ns(k.launch + 2), "eventClass": 0, "globalTid": (k.pid << 24) | 1,
                 "correlationId": corr, "nameId": launch_name, "returnValue": 0})
    for c in spec.copies:
        corr += 1
        rows["CUPTI_ACTIVITY_KIND_MEMCPY"].append(
            {"start": _ns(c.start), "end": _ns(c.end), "deviceId": c.device, "streamId": 7, "correlationId": corr,
             "globalPid": c.pid << 24, "bytes": c.nbytes, "copyKind": c.kind, "srcKind": c.src, "dstKind": c.dst})
        if c.launch is not None:
            rows["CUPTI_ACTIVITY_KIND_RUNTIME"].append(
                {"start": _ns(c.launch), "end": _ns(c.launch + 2), "eventClass": 0, "globalTid": (c.pid << 24) | 1,
                 "correlationId": corr, "nameId": copy_name, "returnValue": 0})
    for start, end, device in spec.memsets:
        corr += 1
        rows["CUPTI_ACTIVITY_KIND_MEMSET"].append(
            {"start": _ns(start), "end": _ns(end), "deviceId": device, "streamId": 7, "correlationId": corr,
             "globalPid": 100 << 24, "value": 0, "bytes": 64})
    for name, start, end, pid in spec.runtime_extra:
        corr += 1
        rows["CUPTI_ACTIVITY_KIND_RUNTIME"].append(
            {"start": _ns(start), "end": _ns(end), "eventClass": 0, "globalTid": (pid << 24) | 1,
             "correlationId": corr, "nameId": sid(name), "returnValue": 0})
    for s in spec.syncs:
        rows["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"].append(
            {"start": _ns(s.start), "end": _ns(s.end), "deviceId": s.device, "streamId": 7, "correlationId": 0,
             "globalPid": s.pid << 24, "syncType": s.sync_type})
    for n in spec.nvtx:
        rows["NVTX_EVENTS"].append(
            {"start": _ns(n.start), "end": _ns(n.end), "eventType": 59, "text": None if n.registered else n.text,
             "globalTid": (n.pid << 24) | n.tid, "textId": sid(n.text) if n.registered else None, "domainId": 0})
    for gid, name in spec.gpus.items():
        rows["TARGET_INFO_GPU"].append({"vmId": 0, "id": gid, "name": name, "cuDevice": gid})
    rows["META_DATA_EXPORT"] = [{"name": "EXPORT_PRODUCT_NAME", "value": "NVIDIA Nsight Systems"},
                                {"name": "EXPORT_PRODUCT_VERSION", "value": spec.version}]
    rows["ENUM_CUDA_MEMCPY_OPER"] = [dict(zip(("id", "name", "label"), r, strict=True)) for r in _COPY_ENUM]
    rows["ENUM_CUDA_MEM_KIND"] = [dict(zip(("id", "name", "label"), r, strict=True)) for r in _MEM_ENUM]
    rows["ENUM_CUPTI_SYNC_TYPE"] = [dict(zip(("id", "name", "label"), r, strict=True)) for r in _SYNC_ENUM]
    rows["StringIds"] = [{"id": i, "value": v} for v, i in strings.items()]
    for table, columns in _COLUMNS.items():
        if table in spec.drop_tables:
            continue
        cols = [c for c in columns if c not in spec.drop_columns.get(table, ())]
        quoted = ", ".join('"end"' if c == "end" else c for c in cols)
        conn.execute(f"CREATE TABLE {table} ({quoted})")
        conn.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' for _ in cols)})",
                         ([r.get(c) for c in cols] for r in rows[table]))
    conn.commit()
    conn.close()
    return path


def steps(name: str, bounds: Iterable[tuple[float, float]], *, pid: int = 100, numbered: bool = False) -> list[Nvtx]:
    """NVTX ranges for steps ("train_step" or, numbered, "train_step#1", "train_step#2", ...)."""
    return [Nvtx(f"{name}#{i}" if numbered else name, a, b, pid=pid) for i, (a, b) in enumerate(bounds, start=1)]
