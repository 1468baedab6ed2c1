"""`dam fleet query OUT "select ..."`: SQL over a fleet dataset with DuckDB (the optional `fleet-query` extra).

The dataset is the view `fleet` (the newest row of each job; `fleet_all` has every row of every part file).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import Problem
from ._inputs import FleetInputError, is_local, url_to_fs
from ._table import list_parts


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def query(out: str, sql: str,
          storage_options: Mapping[str, Any] | None = None) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run `sql` on the dataset in `out`; returns (column names, rows)."""
    try:
        import duckdb
    except ImportError as exc:
        raise FleetInputError([Problem("dam fleet query", "needs DuckDB, which is not installed",
                                       "pip install 'dam-expert[fleet-query]'")], title="missing extra") from exc
    parts = list_parts(out, storage_options)
    if not parts:
        raise FleetInputError([Problem(out, "no fleet dataset here (no part-*.parquet files)",
                                       "give the --out folder of a `dam fleet` run")])
    fs, folder = url_to_fs(out, storage_options)
    con = duckdb.connect()
    if is_local(fs):
        files = [f"{folder.rstrip('/')}/{p}" for p in parts]
    else:
        con.register_filesystem(fs)
        files = [str(fs.unstrip_protocol(f"{folder.rstrip('/')}/{p}")) for p in parts]
    listing = ", ".join(_quote(f) for f in files)
    con.execute(f"create view fleet_all as select * from read_parquet([{listing}], union_by_name = true)")
    con.execute("create view fleet as select * from fleet_all "
                "qualify row_number() over (partition by job_key order by finished_at desc, run_id desc) = 1")
    try:
        cursor = con.execute(sql)
        columns = [d[0] for d in cursor.description or []]
        rows = cursor.fetchall()
    except duckdb.Error as exc:
        raise FleetInputError([Problem("query", str(exc).strip(),
                                       "the table is `fleet`, e.g. select bottleneck, count(*) from fleet group by 1")],
                              title="the query failed") from exc
    finally:
        con.close()
    return columns, rows
