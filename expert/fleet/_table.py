"""The fleet dataset: one row per job in Parquet part files (pyarrow), one file per worker chunk, in one folder.

The folder is the state: a resumed run reads the job keys and fingerprints of its part files, and at the end of every
run part files are rewritten so that each job of the run's input has exactly one row (its newest).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ._inputs import is_local, url_to_fs

# Facts copied into their own columns (the full report is in report_json): context, the step, the headline ratios.
KEY_FACTS: dict[str, str] = {
    "hardware": "string", "workload": "string", "dtype": "string", "step_time_s": "double", "gpu_util": "double",
    "data_wait_s": "double", "io_overhead": "double", "mfu": "double", "arithmetic_intensity": "double",
    "num_gpus": "double", "scaling_efficiency": "double",
}
PART_PREFIX = "part-"
INDEX_COLUMNS = ["job_key", "fingerprint", "error_kind", "finished_at", "run_id"]


def schema() -> Any:
    """The Arrow schema of a fleet row."""
    import pyarrow as pa

    strings = pa.list_(pa.string())
    fields = [
        ("job_key", pa.string()), ("files", strings), ("labels", pa.map_(pa.string(), pa.string())),
        ("bottleneck", pa.string()), ("verdict_title", pa.string()), ("strength", pa.string()), ("axes", strings),
        ("axis_data", pa.float64()), ("axis_algorithm", pa.float64()), ("axis_machine", pa.float64()),
        ("recommended", strings), ("top_recommendation", pa.string()), ("max_speedup", pa.float64()),
        ("wasted", strings), ("findings", strings), ("missing", strings),
        *[(name, pa.string() if kind == "string" else pa.float64()) for name, kind in KEY_FACTS.items()],
        ("error", pa.string()), ("error_kind", pa.string()), ("attempts", pa.int32()), ("duration_s", pa.float64()),
        ("worker", pa.string()), ("run_id", pa.string()), ("finished_at", pa.timestamp("us", tz="UTC")),
        ("fingerprint", pa.string()), ("dam_version", pa.string()), ("engine", pa.string()),
        ("report_json", pa.large_string()),
    ]
    return pa.schema(fields)


def _join(out: str, name: str) -> str:
    return posixpath.join(out.rstrip("/"), name)


def write_part(rows: Sequence[Mapping[str, Any]], out: str, name: str,
               storage_options: Mapping[str, Any] | None = None) -> str:
    """Write rows as one Parquet file `name` in the folder `out` (atomically where the filesystem renames)."""
    import pyarrow as pa

    return write_table(pa.Table.from_pylist([dict(r) for r in rows], schema=schema()), out, name, storage_options)


def write_table(table: Any, out: str, name: str, storage_options: Mapping[str, Any] | None = None) -> str:
    """Write an Arrow table of rows as the part file `name`."""
    import pyarrow.parquet as pq

    fs, folder = url_to_fs(out, storage_options)
    final = _join(folder, name)
    target = _join(folder, f".{name}.tmp") if is_local(fs) else final
    with fs.open(target, "wb") as fh:
        pq.write_table(table, fh, compression="zstd")
    if target != final:
        fs.mv(target, final)
    return name


def list_parts(out: str, storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """The part file names in the dataset folder (empty when it does not exist)."""
    fs, folder = url_to_fs(out, storage_options)
    if not fs.isdir(folder):
        return []
    names = [posixpath.basename(p) for p in fs.ls(folder, detail=False)]
    return sorted(n for n in names if n.startswith(PART_PREFIX) and n.endswith(".parquet"))


def read_part(out: str, name: str, columns: Sequence[str] | None = None,
              storage_options: Mapping[str, Any] | None = None) -> Any:
    """One part file as an Arrow table."""
    import pyarrow.parquet as pq

    fs, folder = url_to_fs(out, storage_options)
    with fs.open(_join(folder, name), "rb") as fh:
        return pq.read_table(fh, columns=list(columns) if columns is not None else None)


@dataclass(frozen=True)
class IndexEntry:
    job_key: str
    fingerprint: str
    error_kind: str | None
    finished_at: datetime | None
    run_id: str
    part: str


def read_index(out: str, storage_options: Mapping[str, Any] | None = None) -> dict[str, IndexEntry]:
    """The newest row of each job in the dataset (job key -> where it is and what it was computed from)."""
    newest: dict[str, IndexEntry] = {}
    for name in list_parts(out, storage_options):
        table = read_part(out, name, INDEX_COLUMNS, storage_options)
        for record in table.to_pylist():
            entry = IndexEntry(record["job_key"], record["fingerprint"], record["error_kind"], record["finished_at"],
                               record["run_id"], name)
            old = newest.get(entry.job_key)
            if old is None or (entry.finished_at, entry.run_id) > (old.finished_at, old.run_id):
                newest[entry.job_key] = entry
    return newest


def read_rows(out: str, keep: Mapping[str, str] | None = None, columns: Sequence[str] | None = None,
              storage_options: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Rows of the dataset; with `keep` (job key -> part file) only those rows."""
    rows: list[dict[str, Any]] = []
    wanted = set(keep.values()) if keep is not None else None
    for name in list_parts(out, storage_options):
        if wanted is not None and name not in wanted:
            continue
        for record in read_part(out, name, columns, storage_options).to_pylist(maps_as_pydicts="strict"):
            if keep is None or keep.get(record["job_key"]) == name:
                rows.append(record)
    return rows


def compact(out: str, keep: Mapping[str, str], storage_options: Mapping[str, Any] | None = None) -> int:
    """Leave each kept job's row (job key -> part file) and drop every other row: part files whose rows are all
    dropped are deleted, the others rewritten. Returns the number of rows dropped."""
    import pyarrow as pa

    fs, folder = url_to_fs(out, storage_options)
    dropped = 0
    for name in list_parts(out, storage_options):
        keys = read_part(out, name, ["job_key"], storage_options).column("job_key").to_pylist()
        wanted = [keep.get(k) == name for k in keys]
        if all(wanted):
            continue
        dropped += wanted.count(False)
        if not any(wanted):
            fs.rm(_join(folder, name))
            continue
        table = read_part(out, name, None, storage_options).filter(pa.array(wanted))
        write_table(table, out, name, storage_options)
    return dropped


def remove_parts(out: str, names: Iterable[str], storage_options: Mapping[str, Any] | None = None) -> None:
    fs, folder = url_to_fs(out, storage_options)
    for name in names:
        fs.rm(_join(folder, name))
