"""Fleet diagnosis: every job of a fleet diagnosed, on a local process pool or on Dask, into a Parquet dataset.

>>> import expert.fleet
>>> result = expert.fleet.run("traces/*.json.gz", out="fleet-out", workers=4)        # doctest: +SKIP
>>> result.rows[0]["bottleneck"], result.rows[0]["recommended"][:2]                   # doctest: +SKIP
('input', ['prefetching', 'double_buffering'])

A job is what one `dam diagnose --from FILE... [FACTS.yaml] [--set ...]` call diagnoses: its trace and telemetry
files (fsspec URLs, ingested together), its observation files (YAML) and its typed facts. Rows (one per job, one
Parquet file per worker chunk) carry the verdict, axes, recommendations, wasted spends, key facts, the error of a job
that could not be diagnosed, and the full report JSON (`expert.Report.model_validate_json(row["report_json"])`).
Needs the `fleet` extra (pyarrow, dask[distributed], fsspec); `query` needs duckdb (the `fleet-query` extra).
"""

from __future__ import annotations

from ._inputs import FileRef, FleetInputError, Job, collect_jobs, read_manifest
from ._run import ENGINES, FleetRun, run
from ._summary import FleetSummary, summarize, to_html, to_markdown
from ._table import KEY_FACTS

COLUMNS = ("job_key", "files", "bottleneck", "strength", "recommended", "wasted", "error", "report_json")
"""The columns every consumer may rely on (the dataset has more: labels, axes, key facts, timings)."""

__all__ = [
    "COLUMNS",
    "ENGINES",
    "KEY_FACTS",
    "FileRef",
    "FleetInputError",
    "FleetRun",
    "FleetSummary",
    "Job",
    "collect_jobs",
    "read_manifest",
    "run",
    "summarize",
    "to_html",
    "to_markdown",
]
