"""nccl-tests output (`all_reduce_perf`, `all_gather_perf`, ... from github.com/NVIDIA/nccl-tests): the table of
message size, time, algorithm bandwidth and bus bandwidth, out-of-place and in-place.

Bus bandwidth (busbw) is the figure comparable with the link's speed (nccl-tests doc/PERFORMANCE.md); the highest busbw
over the message sizes (large messages, where latency no longer counts) becomes `nccl_bus_bandwidth`, which the
rules compare with the interconnect catalog's per-direction bandwidth. The `Using devices` lines name the GPUs
(`hardware`); the ranks and hosts they list are kept in the file's stats.
"""

from __future__ import annotations

import re
from collections import Counter

from ..kb.knowledge import KnowledgeBase
from ._result import FileResult
from ._source import NCCL_TESTS_START, Progress, Source, ascii_float

FACTS = ("nccl_bus_bandwidth", "hardware")
_TEST = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
# re.ASCII: `\d` would match "²" and other Unicode digits that int() refuses (issue 22)
_DEVICE = re.compile(r"^#\s*Rank\s+(\d{1,9})\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+"
                     r"\[[^\]]*\]\s+(.+?)\s*$", re.ASCII)
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)", re.ASCII)
_SIZE = re.compile(r"[0-9]{1,19}", re.ASCII)  # a message size in bytes, as nccl-tests prints it
_MPI_PREFIX = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")  # mpirun --tag-output
_HINT = "the text nccl-tests prints (all_reduce_perf -b 8 -e 8G -f 2 -g 1 > allreduce.txt)"


def looks_like(text: str) -> bool:
    """Whether the head of a text is nccl-tests output (its `# nThread N nGpus M` or `# Collective test starting`
    line, possibly after NCCL's INFO lines and with mpirun's [rank,0]<stdout>: tags)."""
    return NCCL_TESTS_START.search(text) is not None


def parse(src: Source, kb: KnowledgeBase, *, progress: Progress | None = None) -> FileResult:
    """Read an nccl-tests log; raises a located ObservationError when its table is malformed or missing."""
    result = FileResult(path=src.label, name=src.name, format="nccl-tests")
    for fact in FACTS:
        result.missing(fact, "not in this nccl-tests output")
    columns: list[str] | None = None
    test = ""
    devices: Counter[str] = Counter()
    hosts: set[str] = set()
    ranks: set[int] = set()
    rows: list[tuple[int, float, int, float, str]] = []  # (size B, busbw GB/s, line, time us, placement)
    average: float | None = None
    for number, line in src.lines(progress):
        text = _MPI_PREFIX.sub("", line.strip(), count=1).strip()
        if not text:
            continue
        if text.startswith("#"):
            if m := _TEST.match(text):
                test = m.group(1)
            elif m := _DEVICE.match(text):
                ranks.add(int(m.group(1)))
                hosts.add(m.group(2))
                devices[m.group(3)] += 1
            elif m := _AVG.match(text):
                average = ascii_float(m.group(1))
            else:
                tokens = text.lstrip("#").split()
                if "size" in tokens and "busbw" in tokens:
                    columns = tokens
            continue
        if columns is None:
            if text[:1].isdigit():
                raise src.problem("a table row before the column header (# size count type ... busbw)",
                                  line=number, hint=_HINT)
            continue
        tokens = text.split()
        if not _SIZE.fullmatch(tokens[0]):
            if tokens[0][:1].isdigit():  # "²16777216": a digit to str.isdigit(), not to int() (issue 22)
                raise src.problem(f"column size: {tokens[0]!r} is not a size in bytes (ASCII digits)", line=number,
                                  hint=_HINT)
            continue  # a warning or message NCCL printed between the rows
        if len(tokens) != len(columns):
            raise src.problem(f"expected {len(columns)} columns ({' '.join(columns)}), found {len(tokens)}",
                              line=number, hint=_HINT)
        for k, name in enumerate(columns):
            if name != "busbw":
                continue
            placement = "out-of-place" if k == columns.index("busbw") else "in-place"
            time_k = k - 2 if k >= 2 and columns[k - 2] == "time" else None
            value = ascii_float(tokens[k])
            if value is None:
                raise src.problem(f"column busbw: {tokens[k]!r} is not a finite number", line=number,
                                  hint=_HINT)
            busbw = value
            elapsed = (ascii_float(tokens[time_k]) if time_k is not None else None) or float("nan")
            rows.append((int(tokens[0]), busbw, number, elapsed, placement))
    if columns is None:
        raise src.problem("no nccl-tests table (a `# size count type ... time algbw busbw` header and its rows)",
                          hint=_HINT)
    if not rows:
        raise src.problem("the nccl-tests table has no rows", hint=_HINT)
    size, busbw, at_line, elapsed, placement = max(rows, key=lambda r: (r[1], r[0]))
    result.add("nccl_bus_bandwidth", busbw, method=f"highest busbw of {len(rows)} measurements "
               f"({len({r[0] for r in rows})} message sizes, out-of-place and in-place)", metric="busbw",
               test=test or None, size_bytes=size, placement=placement, time_us=elapsed if elapsed == elapsed else None,
               line=at_line, ranks=len(ranks) or None, hosts=len(hosts) or None, file=src.label,
               avg_bus_bandwidth=average)
    result.stats.update(rows=len(rows), max_size_bytes=max(r[0] for r in rows))
    if test:
        result.stats["test"] = test
    if ranks:
        result.stats.update(ranks=len(ranks), hosts=len(hosts))
    if devices:
        result.add_hardware(devices, kb, what="device name", file=src.label,
                            method="the GPUs nccl-tests lists under `Using devices`, mapped through the hardware "
                                   "catalog's aliases", several="nccl-tests ran on several device models")
    else:
        result.missing("hardware", "the output lists no devices (`# Using devices` lines)")
    return result
