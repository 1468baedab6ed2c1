"""nvidia-smi output: `--query-gpu=... --format=csv[,noheader][,nounits] [-l N]` and `nvidia-smi dmon`.

utilization.gpu (dmon: `sm`) is the share of the sample period with at least one kernel running: it becomes
gpu_util, averaged over the kept samples and devices. `name` maps to the hardware catalog. memory.used /
memory.total becomes hbm_used_frac: its peak over the kept samples and devices, the high-water mark (`peak_memory`).
The clock event (throttle) reasons become clock_slowdown_frac: the share of busy samples (utilization.gpu above 0, or
every sample without that column) in which a thermal or hardware slowdown held the clocks down (`SLOWDOWN_REASONS`).
pcie.link.gen/width .current against .max become pcie_link_frac (`_link_share`): per device the best share of its
capable link bandwidth seen in a busy sample (an idle GPU lowers its link generation to save power, and a busy one
may too between bursts), and the lowest of those over the devices.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from datetime import datetime

from ..kb.knowledge import KnowledgeBase
from ._result import FileResult, Scalar
from ._samples import Selector, Stat, add_fact
from ._source import Progress, Source, ascii_float, ascii_index, is_header_cell

FACTS = ("gpu_util", "hbm_used_frac", "hardware", "clock_slowdown_frac", "pcie_link_frac")
MISSING = frozenset({"[n/a]", "n/a", "[not supported]", "[unknown error]", "[insufficient permissions]",
                     "[gpu is lost]", "[requested functionality has been deprecated]", "-", ""})
_NUMBER = re.compile(r"^([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(%|[KMGT]i?B|W|[KMG]?Hz|C|s)?$")
_UNIT_SUFFIX = re.compile(r"\s*\[[^\]]*\]\s*$")
_TIME_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S")
_REASON_PREFIXES = ("clocks_throttle_reasons", "clocks_event_reasons")  # the older and the current spelling
SLOWDOWN_REASONS = {"hw_slowdown": 0x8, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
                    "hw_power_brake_slowdown": 0x80}
"""The clock event reasons that are a slowdown, not the power cap or idle: NVML nvmlClocksThrottleReason* bits
(https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksThrottleReasons.html): HW slowdown (clocks cut by 2x or
more: temperature, power brake, fast-trigger power protection), SW and HW thermal slowdown, HW power brake."""
SLOWDOWN_MASK = sum(SLOWDOWN_REASONS.values())
IDLE_REASON = 0x1  # NVML's GPU-idle reason: nothing runs, so the sample says nothing of the job
_SLOWDOWN_COLUMNS = {f"{prefix}.{reason}": reason for prefix in _REASON_PREFIXES for reason in SLOWDOWN_REASONS}
_ACTIVE_COLUMNS = {f"{prefix}.active" for prefix in _REASON_PREFIXES}
LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
"""GB/s per lane and direction of each PCIe generation after line coding (PCI-SIG: 2.5 and 5 GT/s with 8b/10b, 8, 16 and
32 GT/s with 128b/130b, 64 GT/s PAM4 with 242/256 FLIT): what pcie_link_frac compares."""
_LINK_GEN = {"pcie.link.gen.current": "current", "pcie.link.gen.gpucurrent": "current",
             "pcie.link.gen.max": "max", "pcie.link.gen.gpumax": "gpumax", "pcie.link.gen.hostmax": "hostmax"}
_LINK_WIDTH = ("pcie.link.width.current", "pcie.link.width.max")
_LINK_CURRENT = {column for column, role in _LINK_GEN.items() if role == "current"} | {_LINK_WIDTH[0]}
_KNOWN = {"utilization.gpu", "name", "index", "timestamp", "memory.used", "memory.total", *_SLOWDOWN_COLUMNS,
          *_ACTIVE_COLUMNS, *_LINK_GEN, *_LINK_WIDTH}
_MEMORY = ("memory.used", "memory.total")
PEAK_MEMORY = ("the peak (the high-water mark of any device), not the mean: rules/memory_capacity.yaml and "
               "rules/host.yaml read hbm_used_frac as how close the job comes to running out of device memory")
"""Why hbm_used_frac is the peak share, not the mean (knowledge_base/facts.yaml: "Peak share of device memory the
job uses"): every rule that reads it asks whether the job's memory fits (memory_use_low: "the job peaks at ...")."""


def _number(src: Source, line: int, column: str, text: str) -> float | None:
    """A numeric cell (units such as `%` or `MiB` stripped); `[N/A]` and friends are None."""
    cell = text.strip()
    if cell.casefold() in MISSING:
        return None
    match = _NUMBER.match(cell)
    if not match:
        raise src.problem(f"column {column}: {cell!r} is not a number", line=line,
                          hint="expected values such as 62 or 62 %, or [N/A]")
    value = ascii_float(match.group(1))
    if value is None:
        raise src.problem(f"column {column}: {cell!r} is not a finite number", line=line,
                          hint="expected values such as 62 or 62 %, or [N/A]")
    return value


def _plain_number(src: Source, line: int, column: str, text: str) -> float:
    value = ascii_float(text)
    if value is None:
        raise src.problem(f"column {column}: {text!r} is not a number", line=line,
                          hint="dmon prints numbers, or - for no data")
    return value


def _timestamp(src: Source, line: int, text: str) -> float | None:
    cell = text.strip()
    if cell.casefold() in MISSING:
        return None
    for fmt in _TIME_FORMATS:
        try:
            return datetime.strptime(cell, fmt).timestamp()
        except ValueError:
            continue
    raise src.problem(f"column timestamp: {cell!r} is not a time", line=line, hint="expected 2024/01/31 13:48:11.412")


def _slowdown(src: Source, line: int, row: dict[str, str]) -> bool | None:
    """Whether a thermal or hardware slowdown held the clocks down in this sample (None: the row does not say, or the
    bitmask marks the GPU idle)."""
    said = False
    for column in sorted(_SLOWDOWN_COLUMNS.keys() & row.keys()):
        cell = row[column].strip().casefold()
        if cell in MISSING:
            continue
        if cell not in ("active", "not active"):
            raise src.problem(f"column {column}: {row[column].strip()!r} is neither Active nor Not Active", line=line)
        if cell == "active":
            return True
        said = True
    for column in sorted(_ACTIVE_COLUMNS & row.keys()):
        cell = row[column].strip().casefold()
        if cell in MISSING:
            continue
        try:
            mask = int(cell, 16) if cell.startswith("0x") else int(cell)
        except ValueError:
            raise src.problem(f"column {column}: {row[column].strip()!r} is not a bitmask", line=line,
                              hint="nvidia-smi prints it as 0x0000000000000004") from None
        if mask & IDLE_REASON:
            return None
        if mask & SLOWDOWN_MASK:
            return True
        said = True
    return False if said else None


def _link_share(src: Source, line: int, row: dict[str, str]) -> float | None:
    """The share of its capable bandwidth the link runs at in this sample: the lane rate of the current generation
    times the current width over the same at the maximum (`LANE_GBS`); a generation or a width pair alone gives its
    own ratio. pcie.link.gen.max is the most the GPU and the system allow; without it, the lower of gpumax and
    hostmax. None when the row gives no complete pair."""
    gens: dict[str, float] = {}
    for column, role in _LINK_GEN.items():
        if column in row and (value := _number(src, line, column, row[column])) is not None:
            if value not in LANE_GBS:
                raise src.problem(f"column {column}: {value:g} is not a PCIe generation", line=line,
                                  hint="nvidia-smi prints 1 to 6")
            gens.setdefault(role, value)
    capable = gens.get("max") or min((gens[k] for k in ("gpumax", "hostmax") if k in gens), default=None)
    share: float | None = None
    if "current" in gens and capable is not None:
        share = LANE_GBS[int(gens["current"])] / LANE_GBS[int(capable)]
    current, widest = (_number(src, line, c, row[c]) if c in row else None for c in _LINK_WIDTH)
    if current is not None and widest is not None:
        if not 0 < current <= 64 or not 0 < widest <= 64:
            raise src.problem(f"columns {', '.join(_LINK_WIDTH)}: x{current:g} of x{widest:g} is not a PCIe link "
                              "width", line=line, hint="nvidia-smi prints lane counts such as 16 and 16")
        share = (1.0 if share is None else share) * current / widest
    return None if share is None else min(1.0, share)


def _finish_link(result: FileResult, links: dict[str, float], busy_seen: bool, selector: Selector,
                 header: list[str]) -> None:
    if links:
        worst = min(links, key=lambda device: links[device])
        result.add("pcie_link_frac", links[worst], metric="pcie.link.gen / pcie.link.width, current over max",
                   method="per device the best share of the capable link bandwidth in a busy sample (utilization.gpu "
                   f"above 0: an idle GPU lowers its link generation to save power); the lowest, {worst}'s",
                   window=selector.describe(), device=worst, devices=",".join(sorted(links)), file=result.path)
    elif not _LINK_CURRENT & set(header):
        result.missing("pcie_link_frac", "the query has no PCIe link columns (add pcie.link.gen.current,"
                       "pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max to --query-gpu)")
    elif "utilization.gpu" not in header:
        result.missing("pcie_link_frac", "the query has no utilization.gpu column, so no sample is known to be busy "
                       "(an idle GPU lowers its link generation to save power)")
    elif busy_seen:
        result.missing("pcie_link_frac", "no busy sample gives both the current and the maximum of the link's "
                       "generation or width")
    else:
        result.missing("pcie_link_frac", "no busy sample (utilization.gpu above 0) in the selection: an idle GPU "
                       "lowers its link generation to save power, so an idle reading says nothing")


def _finish_slowdown(result: FileResult, slowdown: Stat, selector: Selector, header: list[str]) -> None:
    if slowdown.count:
        result.add("clock_slowdown_frac", slowdown.mean, metric="clock event reasons (" + ", ".join(
                   SLOWDOWN_REASONS) + ")", method=f"share of {slowdown.count} busy samples (utilization.gpu above "
                   "0, not marked idle) with a thermal or hardware slowdown active", window=selector.describe(),
                   samples=slowdown.count, devices=",".join(sorted(selector.entities)), file=result.path)
    elif (_SLOWDOWN_COLUMNS.keys() | _ACTIVE_COLUMNS) & set(header):
        result.missing("clock_slowdown_frac", "no busy sample in the selection says which clock event reasons were "
                       "active")
    else:
        result.missing("clock_slowdown_frac", "the query has no clock event reasons (add "
                       "clocks_throttle_reasons.active to --query-gpu)")


def _finish_util(result: FileResult, kb: KnowledgeBase, util: Stat, selector: Selector, field_name: str,
                 names: dict[str, int], has_name_column: bool, no_name_reason: str) -> None:
    if util.count:
        value = min(1.0, max(0.0, util.mean / 100.0))
        add_fact(result, "gpu_util", value, util, field_name=field_name, scale=0.01, selector=selector)
    if "gpu_util" not in result.not_derived:
        result.missing("gpu_util", f"no {field_name} values in the selected samples")
    if names:
        result.add_hardware(names, kb, what="device name", metric="name",
                            method="device name mapped through the hardware catalog's aliases",
                            several="several device models in the log")
    elif has_name_column:
        result.missing("hardware", "the name column holds no device name in the selected samples")
    else:
        result.missing("hardware", no_name_reason)


def parse_csv(src: Source, kb: KnowledgeBase, *, window: tuple[float | None, float | None] | None = None,
              samples: tuple[float | None, float | None] | None = None, gpus: Sequence[int] | None = None,
              columns: Sequence[str] | None = None, progress: Progress | None = None) -> FileResult:
    """`nvidia-smi --query-gpu=... --format=csv` output, with or without header and units, one or many samples."""
    result = FileResult(path=src.label, name=src.name, format="nvidia-smi")
    selector = Selector(samples=samples, window=window, gpus=frozenset(gpus) if gpus else None)
    header: list[str] | None = [_clean(c) for c in columns] if columns else None
    raw_header: list[str] | None = None
    util = Stat()
    memory = Stat()  # memory.used / memory.total per sample and device
    slowdown = Stat()  # 1 per busy sample with a thermal or hardware slowdown active, 0 per one without
    names: dict[str, int] = {}
    links: dict[str, float] = {}  # device -> the best share of its capable link bandwidth in a busy sample
    busy_seen = False
    rows = 0
    ignored: set[str] = set()
    for number, text in src.lines(progress):
        if not text.strip():
            continue
        try:
            cells = next(csv.reader([text], skipinitialspace=True))
        except csv.Error as exc:
            raise src.problem(f"not CSV: {exc}", line=number) from exc
        if raw_header is not None and cells == raw_header:
            continue  # a repeated header (logs appended to one file)
        if header is None:
            if all(is_header_cell(c) for c in cells) and any(c.strip() for c in cells):
                raw_header = cells
                header = [_clean(c) for c in cells]
                known = _KNOWN & set(header)
                if not known - {"timestamp", "index"}:
                    raise src.problem(f"none of the columns ({', '.join(header)}) is one dam reads (utilization.gpu, "
                                      "name, memory.used, memory.total, clocks_throttle_reasons.active)", line=number,
                                      hint="nvidia-smi --query-gpu=timestamp,index,name,utilization.gpu --format=csv")
                ignored = set(header) - _KNOWN
                continue
            raise src.problem("no header row (nvidia-smi ran with --format=csv,noheader?)", line=number,
                              hint="give the --query-gpu field list with --columns, e.g. "
                                   "--columns timestamp,index,name,utilization.gpu")
        if len(cells) != len(header):
            raise src.problem(f"expected {len(header)} columns ({', '.join(header)}), got {len(cells)}", line=number,
                              hint="is the file cut short, or were the columns given wrongly?")
        row = dict(zip(header, cells, strict=True))
        rows += 1
        t = _timestamp(src, number, row["timestamp"]) if "timestamp" in row else None
        index_text = row.get("index", "0").strip()
        gpu = ascii_index(index_text)
        if "index" in row and gpu is None:
            raise src.problem(f"column index: {index_text!r} is not a GPU index", line=number)
        if not selector.keep(f"GPU {gpu if gpu is not None else 0}", gpu if gpu is not None else 0, t):
            continue
        busy = True
        measured_busy = False  # utilization.gpu says a kernel ran in this sample
        if "utilization.gpu" in row:
            value = _number(src, number, "utilization.gpu", row["utilization.gpu"])
            if value is not None:
                if not 0.0 <= value <= 100.0:
                    raise src.problem(f"column utilization.gpu: {value:g} is not a percentage", line=number)
                util.add(value)
                busy = measured_busy = value > 0
        link = _link_share(src, number, row)
        if measured_busy:
            busy_seen = True
            if link is not None:
                device = f"GPU {gpu if gpu is not None else 0}"
                links[device] = max(link, links.get(device, 0.0))
        slowed = _slowdown(src, number, row)
        if slowed is not None and busy:
            slowdown.add(1.0 if slowed else 0.0)
        if "name" in row and row["name"].strip().casefold() not in MISSING:
            names[row["name"].strip()] = names.get(row["name"].strip(), 0) + 1
        if "memory.used" in row and "memory.total" in row:
            used = _number(src, number, "memory.used", row["memory.used"])
            cap = _number(src, number, "memory.total", row["memory.total"])
            if used is not None and cap is not None and cap > 0:
                if not 0.0 <= used <= cap * 1.0001:
                    raise src.problem(f"columns memory.used, memory.total: {used:g} of {cap:g} is not a share of "
                                      "the device memory", line=number)
                memory.add(min(1.0, used / cap))
    if header is None or rows == 0:
        raise src.problem("no samples in the file", hint="nvidia-smi --query-gpu=... --format=csv -l 1 > log.csv")
    selector.finish(result, "timestamp" in header)
    result.stats.update(rows=rows, samples=selector.number)
    if ignored:
        result.stats["ignored_columns"] = ", ".join(sorted(ignored))
    if "utilization.gpu" not in header:
        result.missing("gpu_util", "the query has no utilization.gpu column")
    _finish_util(result, kb, util, selector, "utilization.gpu", names, "name" in header,
                 "the query has no name column (add name to --query-gpu)")
    _finish_slowdown(result, slowdown, selector, header)
    _finish_link(result, links, busy_seen, selector, header)
    if memory.count:
        peak_memory(result, memory, selector, metric="memory.used / memory.total")
    elif all(c in header for c in _MEMORY):
        result.missing("hbm_used_frac", "no memory.used and memory.total values in the selected samples")
    else:
        absent = " and ".join(c for c in _MEMORY if c not in header)
        result.missing("hbm_used_frac", f"the query has no {absent} column{'s' if ' and ' in absent else ''} (add "
                       "memory.used,memory.total to --query-gpu)")
    return result


def peak_memory(result: FileResult, memory: Stat, selector: Selector, *, metric: str,
                extra: dict[str, Scalar | None] | None = None) -> None:
    """hbm_used_frac: the peak of the sampled shares of device memory in use (`PEAK_MEMORY` says why the peak), with
    the mean and the lowest in its provenance."""
    result.add("hbm_used_frac", min(1.0, max(0.0, memory.hi)), metric=metric,
               method=f"peak of {memory.count} samples of {metric} (the high-water mark of any device)",
               aggregate=PEAK_MEMORY, window=selector.describe(),
               samples=memory.count, min=round(memory.lo, 6), max=round(memory.hi, 6), mean=round(memory.mean, 6),
               devices=",".join(sorted(selector.entities)), file=result.path, **(extra or {}))


def _clean(cell: str) -> str:
    """`utilization.gpu [%]` -> `utilization.gpu`."""
    return _UNIT_SUFFIX.sub("", cell.strip()).strip().casefold()


def parse_dmon(src: Source, kb: KnowledgeBase, *, window: tuple[float | None, float | None] | None = None,
               samples: tuple[float | None, float | None] | None = None, gpus: Sequence[int] | None = None,
               progress: Progress | None = None) -> FileResult:
    """`nvidia-smi dmon [-s ...] [-o DT]`: `# gpu pwr gtemp mtemp sm mem ...` headers (repeated), `-` for no data."""
    result = FileResult(path=src.label, name=src.name, format="nvidia-smi-dmon")
    selector = Selector(samples=samples, window=window, gpus=frozenset(gpus) if gpus else None)
    header: list[str] | None = None
    util = Stat()
    rows = 0
    for number, text in src.lines(progress):
        stripped = text.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            tokens = stripped.lstrip("#").split()
            if tokens and tokens[0].casefold() in ("gpu", "date"):
                header = [t.casefold() for t in tokens]
            continue  # the units line (# Idx W C ...) and other comments
        if header is None:
            raise src.problem("a data row before the `# gpu ...` header line", line=number,
                              hint="give the whole nvidia-smi dmon output, header included")
        tokens = stripped.split()
        if len(tokens) != len(header):
            raise src.problem(f"expected {len(header)} columns ({' '.join(header)}), got {len(tokens)}", line=number)
        row = dict(zip(header, tokens, strict=True))
        rows += 1
        t = None
        if "date" in row and "time" in row:
            try:
                t = datetime.strptime(f"{row['date']} {row['time']}", "%Y%m%d %H:%M:%S").timestamp()
            except ValueError as exc:
                raise src.problem(f"date/time {row['date']} {row['time']!r} is not YYYYMMDD HH:MM:SS",
                                  line=number) from exc
        dmon_gpu = ascii_index(row.get("gpu", ""))
        if dmon_gpu is None:
            raise src.problem(f"column gpu: {row.get('gpu')!r} is not a GPU index", line=number,
                              hint="dmon prints the GPU index in ASCII digits: 0, 1, ...")
        gpu = dmon_gpu
        if not selector.keep(f"GPU {gpu}", gpu, t):
            continue
        if "sm" in row:
            value = None if row["sm"] == "-" else _plain_number(src, number, "sm", row["sm"])
            if value is not None:
                if not 0.0 <= value <= 100.0:
                    raise src.problem(f"column sm: {value:g} is not a percentage", line=number)
                util.add(value)
    if header is None or rows == 0:
        raise src.problem("no samples in the file", hint="nvidia-smi dmon -s u -c 60 > dmon.txt")
    selector.finish(result, "date" in header)
    result.stats.update(rows=rows, samples=selector.number)
    if "sm" not in header:
        result.missing("gpu_util", "the dmon output has no sm column (use -s u)")
    _finish_util(result, kb, util, selector, "sm", {}, False,
                 "nvidia-smi dmon does not print the device name; give --set hardware=ID (dam hardware list)")
    return result
