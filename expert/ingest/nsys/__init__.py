"""Nsight Systems exports (`nsys export --type sqlite`, or a `.nsys-rep` exported on the fly): the same facts as a
Kineto trace, from the same analysis, with the same provenance.

- `schema`: the export opened read-only, its tables and columns detected (exports differ by nsys version; what is
  missing is said in a note), bad inputs (not an nsys export, truncated, locked, empty) as located errors;
- `rows`: rows streamed from SQLite cursors, never loaded whole, as format-neutral records (`records.GpuActivity`,
  `RuntimeCall`, `SyncSpan`, `Range`): GPU activities ordered by (device, start) with their launch call joined by
  correlation id inside SQLite; opening a stream, a compressed file or a .nsys-rep (with `nsys` on PATH);
- `steps`: NVTX ranges as steps (named like steps and repeating, or `--step-range NAME`), DataLoader ranges;
- `host_sweep`, `gpu_sweep`, `analysis_sweep`: one device at a time, its rows swept from SQLite in time order into
  the shared trace analysis (`timeline.analysis`, `timeline.breakdown`: busy share, idle gaps and their causes, kernel
  classes, top kernels and operators, steady or step window) from running sums and streamed interval sets, so memory
  does not grow with the rows; the numbers are those of the in-memory analysis of the same rows;
- `adapter`: one device's records as the in-memory `timeline.Timeline` the Kineto reader fills (the reference the
  sweeps are tested against, and the bench's before/after baseline);
- `cluster`: with several devices, each device as a rank (`rank_trace.RankTrace`) for `ranks.analyse`: NCCL kernels
  as communication, the device the others wait for, sync wait, compute and step-time skew;
- `analysis`: the facts (`FACTS`), averaged over the devices as the Kineto reader does.
"""

from __future__ import annotations

from .analysis import FACTS, KERNEL_WAIT_US, DeviceResult, NsysAnalysis, analyse, parse, short_name
from .rows import NsysExport, export_report, open_export
from .schema import TABLES
from .steps import looks_like_step, step_base

__all__ = ["FACTS", "KERNEL_WAIT_US", "TABLES", "DeviceResult", "NsysAnalysis", "NsysExport", "analyse",
           "export_report", "looks_like_step", "open_export", "parse", "short_name", "step_base"]
