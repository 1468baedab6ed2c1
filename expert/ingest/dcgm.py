"""DCGM telemetry: `dcgmi dmon -e <ids>` text and dcgm-exporter's Prometheus text exposition.

Fields are keyed on their numeric ids, which DCGM kept stable when it renamed them (`PROF_DRAM_ACTIVE` became
`PROF_DRAM_UTIL_RATIO`); both spellings are accepted. Profiling fields are ratios in [0, 1]; 203/204 are percent.
Values are averaged over the kept samples and devices, with min, max and the sample count kept. The frame buffer
fields (250 FBTTL, 251 FBFRE, 252 FBUSD, MiB) give hbm_used_frac: FB_USED / (FB_USED + FB_FREE) per sample and
device (FB_USED / FB_TOTAL without FB_FREE), its peak over the kept samples (nvidia_smi.PEAK_MEMORY: the high-water
mark, which the memory rules read). Field 112 (clock event reasons, a bitmask of NVML's reasons) gives
clock_slowdown_frac: the share of samples not marked idle (bit 0x1) with a thermal or hardware slowdown bit set
(nvidia_smi.SLOWDOWN_REASONS).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..kb.knowledge import KnowledgeBase
from ._result import FileResult
from ._samples import Selector, Stat, add_fact
from ._source import Progress, Source, ascii_float, ascii_index, prom_labels, prom_samples
from .nvidia_smi import IDLE_REASON, SLOWDOWN_MASK, peak_memory


@dataclass(frozen=True)
class Field:
    """One DCGM field: id, dmon tag, legacy and current names (without the DCGM_FI_ prefix), unit, fact."""

    id: int
    tag: str | None
    names: tuple[str, ...]
    unit: str  # "ratio", "percent", "bytes/s", "MiB" or "bitmask"
    fact: str | None = None


FIELDS: tuple[Field, ...] = (
    Field(203, "GPUTL", ("DEV_GPU_UTIL", "DEV_GPU_UTIL_RATIO"), "percent", "gpu_util"),
    Field(204, "MCUTL", ("DEV_MEM_COPY_UTIL", "DEV_MEM_COPY_UTIL_RATIO"), "percent"),
    Field(112, None, ("DEV_CLOCK_THROTTLE_REASONS", "DEV_CLOCKS_EVENT_REASONS"), "bitmask", "clock_slowdown_frac"),
    Field(250, "FBTTL", ("DEV_FB_TOTAL",), "MiB"),
    Field(251, "FBFRE", ("DEV_FB_FREE",), "MiB"),
    Field(252, "FBUSD", ("DEV_FB_USED",), "MiB"),
    Field(1001, "GRACT", ("PROF_GR_ENGINE_ACTIVE", "PROF_GR_ENGINE_UTIL_RATIO"), "ratio", "gpu_util"),
    Field(1002, "SMACT", ("PROF_SM_ACTIVE", "PROF_SM_UTIL_RATIO"), "ratio", "sm_active"),
    Field(1003, "SMOCC", ("PROF_SM_OCCUPANCY", "PROF_SM_OCCUPANCY_RATIO"), "ratio"),
    Field(1004, "TENSO", ("PROF_PIPE_TENSOR_ACTIVE", "PROF_TENSOR_UTIL_RATIO", "PROF_PIPE_TENSOR_UTIL_RATIO"),
          "ratio", "tensor_active"),
    Field(1005, "DRAMA", ("PROF_DRAM_ACTIVE", "PROF_DRAM_UTIL_RATIO"), "ratio", "mem_bw_util"),
    Field(1006, "FP64A", ("PROF_PIPE_FP64_ACTIVE", "PROF_FP64_UTIL_RATIO"), "ratio"),
    Field(1007, "FP32A", ("PROF_PIPE_FP32_ACTIVE", "PROF_FP32_UTIL_RATIO"), "ratio"),
    Field(1008, "FP16A", ("PROF_PIPE_FP16_ACTIVE", "PROF_FP16_UTIL_RATIO"), "ratio"),
    Field(1009, "PCITX", ("PROF_PCIE_TX_BYTES",), "bytes/s"),
    Field(1010, "PCIRX", ("PROF_PCIE_RX_BYTES",), "bytes/s"),
    Field(1011, "NVLTX", ("PROF_NVLINK_TX_BYTES",), "bytes/s"),
    Field(1012, "NVLRX", ("PROF_NVLINK_RX_BYTES",), "bytes/s"),
    Field(1013, None, ("PROF_PIPE_TENSOR_IMMA_ACTIVE", "PROF_TENSOR_IMMA_UTIL_RATIO"), "ratio"),
    Field(1014, None, ("PROF_PIPE_TENSOR_HMMA_ACTIVE", "PROF_TENSOR_HMMA_UTIL_RATIO"), "ratio"),
    Field(1015, None, ("PROF_PIPE_TENSOR_DFMA_ACTIVE", "PROF_TENSOR_DFMA_UTIL_RATIO"), "ratio"),
)
BY_TAG = {f.tag: f for f in FIELDS if f.tag}
BY_NAME = {name: f for f in FIELDS for name in f.names}
BY_ID = {f.id: f for f in FIELDS}
FACTS = ("gpu_util", "sm_active", "tensor_active", "mem_bw_util", "hbm_used_frac", "hardware", "clock_slowdown_frac")
FB_TOTAL, FB_FREE, FB_USED = 250, 251, 252
_HOW = {  # how to get each fact's field, for the "not derived" reasons
    "gpu_util": "field 203 GPUTL (or 1001 GRACT)",
    "sm_active": "field 1002 SMACT",
    "tensor_active": "field 1004 TENSO",
    "mem_bw_util": "field 1005 DRAMA",
    "clock_slowdown_frac": "field 112 (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, DCGM_FI_DEV_CLOCKS_EVENT_REASONS)",
}
INT64_NO_DATA = 0x7FFFFFFFFFFFFFF0  # DCGM_INT64_NOT_SUPPORTED and the blank/not-found values above it
INT32_NO_DATA = 0x7FFFFFF0  # DCGM_INT32 blank region, for the ratio and percent fields
FP64_NO_DATA = 140737488355328.0  # DCGM_FP64_BLANK (2^47) and the not-supported values above it


def _unit_check(src: Source, line: int, f: Field, value: float) -> None:
    if f.unit == "bitmask":
        if value < 0 or not value.is_integer():
            raise src.problem(f"field {f.id} ({f.names[0]}): {value:g} is not a bitmask", line=line)
        return
    limit = 1.0 if f.unit == "ratio" else 100.0 if f.unit == "percent" else math.inf
    if not 0.0 <= value <= limit * 1.0001:
        what = ("a ratio in [0, 1]" if f.unit == "ratio" else "a percentage" if f.unit == "percent" else
                "a size in MiB" if f.unit == "MiB" else "a rate")
        raise src.problem(f"field {f.id} ({f.tag or f.names[0]}): {value:g} is not {what}", line=line)


def _no_data(f: Field, value: float) -> bool:
    if math.isnan(value) or value >= INT64_NO_DATA:
        return True
    return f.unit not in ("bytes/s", "bitmask") and (value >= FP64_NO_DATA or value >= INT32_NO_DATA)


class _Fields:
    """Per-field statistics over the kept samples."""

    def __init__(self) -> None:
        self.stats: dict[int, Stat] = {}
        self.no_data: dict[int, int] = {}
        self.memory: dict[tuple[str, int], dict[int, float]] = {}  # (entity, sample) -> frame buffer field values

    def add(self, f: Field, value: float, entity: str = "", sample: int = 0) -> None:
        if f.unit == "bitmask":  # clock event reasons: 1 per busy sample with a slowdown, 0 per one without
            mask = int(value)
            if not mask & IDLE_REASON:
                self.stats.setdefault(f.id, Stat()).add(1.0 if mask & SLOWDOWN_MASK else 0.0)
            return
        self.stats.setdefault(f.id, Stat()).add(value)
        if f.unit == "MiB":
            self.memory.setdefault((entity, sample), {})[f.id] = value

    def memory_shares(self) -> tuple[Stat, bool]:
        """The share of device memory in use per sample and device, and whether any used FB_TOTAL (no FB_FREE)."""
        shares, total_used = Stat(), False
        for values in self.memory.values():
            used = values.get(FB_USED)
            if used is None:
                continue
            if FB_FREE in values:
                cap = used + values[FB_FREE]
            elif FB_TOTAL in values:
                cap, total_used = values[FB_TOTAL], True
            else:
                continue
            if cap > 0:
                shares.add(min(1.0, used / cap))
        return shares, total_used

    def none(self, f: Field) -> None:
        self.no_data[f.id] = self.no_data.get(f.id, 0) + 1


def _finish(result: FileResult, fields: _Fields, seen: set[int], selector: Selector, label: str,
            dmon: bool = False) -> None:
    """Facts from the field statistics; reasons for the ones missing; other fields' means in the stats."""
    gpu_field = 203 if 203 in fields.stats else 1001
    for f in FIELDS:
        stat = fields.stats.get(f.id)
        if stat is None or not stat.count:
            continue
        scale = 0.01 if f.unit == "percent" else 1.0
        name = f"{f.id} {f.tag or f.names[0]}"
        if f.fact and (f.fact != "gpu_util" or f.id == gpu_field):
            value = min(1.0, max(0.0, stat.mean * scale))
            extra: dict[str, int | float | str | None] = {"field_id": f.id}
            if f.id == 1001:
                extra["note"] = "GR_ENGINE_ACTIVE stands in for GPU-Util (field 203 not in the log)"
            if f.unit == "bitmask":
                extra["note"] = ("share of the samples not marked idle with a thermal or hardware slowdown bit set "
                                 f"(mask {SLOWDOWN_MASK:#x}); the power cap is not one")
            add_fact(result, f.fact, value, stat, field_name=name, scale=scale, selector=selector, extra=extra)
        else:
            result.stats[f"field {name}"] = round(stat.mean, 6 if f.unit == "ratio" else 3)
    _memory(result, fields, seen, selector, label)
    for fact, how in _HOW.items():
        ids = [f.id for f in FIELDS if f.fact == fact]
        if dmon and not any(BY_ID[i].tag for i in ids):
            result.missing(fact, f"{how} has no dcgmi dmon column dam knows: read it from dcgm-exporter's metrics or "
                           "nvidia-smi --query-gpu=clocks_throttle_reasons.active")
        elif any(i in seen for i in ids) and all(BY_ID[i].unit == "bitmask" for i in ids):
            result.missing(fact, f"{how} marks every selected sample idle, or holds no data in them")
        elif any(i in seen for i in ids):
            empty = ", ".join(f"{i}: {fields.no_data.get(i, 0)} blank" for i in ids if i in seen)
            result.missing(fact, f"{how} holds no data in the selected samples ({empty}); profiling fields need "
                           "Volta or newer and the DCGM profiling module")
        else:
            result.missing(fact, f"{how} is not in the {label}")


def _memory(result: FileResult, fields: _Fields, seen: set[int], selector: Selector, label: str) -> None:
    """hbm_used_frac from the frame buffer fields, or why not."""
    shares, total_used = fields.memory_shares()
    if shares.count:
        metric = ("252 FBUSD / 250 FBTTL" if total_used else "252 FBUSD / (252 FBUSD + 251 FBFRE)")
        peak_memory(result, shares, selector, metric=metric, extra={"field_id": FB_USED})
    elif FB_USED in seen and (FB_FREE in seen or FB_TOTAL in seen):
        result.missing("hbm_used_frac", "fields 252 FBUSD and 251 FBFRE (or 250 FBTTL) hold no data in the selected "
                       "samples")
    else:
        absent = [f"{i} {BY_ID[i].tag}" for i in (FB_USED, FB_FREE) if i not in seen]
        result.missing("hbm_used_frac", f"field{'s' if len(absent) > 1 else ''} {' and '.join(absent)} "
                       f"{'are' if len(absent) > 1 else 'is'} not in the {label}")


def parse_dmon(src: Source, kb: KnowledgeBase, *, window: tuple[float | None, float | None] | None = None,
               samples: tuple[float | None, float | None] | None = None, gpus: Sequence[int] | None = None,
               progress: Progress | None = None) -> FileResult:
    """`dcgmi dmon -e <ids>` output: `#Entity TAG ...` headers (repeated), `GPU n` / `GPU-I n` rows, `N/A`."""
    result = FileResult(path=src.label, name=src.name, format="dcgmi")
    selector = Selector(samples=samples, window=window, gpus=frozenset(gpus) if gpus else None)
    header: list[Field | None] | None = None
    tags: list[str] = []
    fields = _Fields()
    seen: set[int] = set()
    unknown: set[str] = set()
    rows = 0
    kinds: dict[str, int] = {}
    for number, text in src.lines(progress):
        stripped = text.strip()
        if not stripped:
            continue
        tokens = stripped.lstrip("#").split()
        if not tokens:
            continue
        first = tokens[0].casefold()
        if first == "entity":
            tags = tokens[1:]
            header = [BY_TAG.get(t.upper()) for t in tags]
            for t, f in zip(tags, header, strict=True):
                if f is None:
                    unknown.add(t)
                else:
                    seen.add(f.id)
            continue
        if first in ("id", "#id") or stripped.startswith("#"):
            continue
        if header is None:
            raise src.problem("a data row before the `#Entity ...` header line", line=number,
                              hint="give the whole dcgmi dmon output, header included")
        entity_index = ascii_index(tokens[1]) if len(tokens) >= 2 else None
        if entity_index is None:
            raise src.problem(f"expected an entity such as `GPU 0` or `GPU-I 1`, got {stripped[:30]!r}", line=number)
        kind, index, values = tokens[0], entity_index, tokens[2:]
        if len(values) != len(header):
            raise src.problem(f"expected {len(header)} values ({' '.join(tags)}), got {len(values)}", line=number)
        rows += 1
        kinds[kind] = kinds.get(kind, 0) + 1
        _dmon_row(src, number, kind, index, values, header, fields, selector)
    if header is None or rows == 0:
        raise src.problem("no samples in the file", hint="dcgmi dmon -e 203,1002,1004,1005 -c 60 > dcgm.txt")
    if len(kinds) > 1:
        result.notes.append("the log has both whole-GPU and MIG-instance (GPU-I) rows; all were averaged")
    selector.finish(result, False)
    result.stats.update(rows=rows, samples=selector.number)
    if unknown:
        result.stats["ignored_columns"] = ", ".join(sorted(unknown))
    _finish(result, fields, seen, selector, "log (add its id to dcgmi dmon -e ...)", dmon=True)
    result.missing("hardware", "dcgmi dmon does not print the device name; give --set hardware=ID (dam hardware list)")
    return result


def _dmon_row(src: Source, number: int, kind: str, index: int, values: list[str], header: list[Field | None],
              fields: _Fields, selector: Selector) -> None:
    entity = f"{kind} {index}"
    if not selector.keep(entity, index):
        return
    for f, cell in zip(header, values, strict=True):
        if f is None:
            continue
        if cell.upper() in ("N/A", "N/S", "-"):
            fields.none(f)
            continue
        parsed = ascii_float(cell)
        if parsed is None:
            raise src.problem(f"field {f.id} ({f.tag}): {cell!r} is not a number", line=number,
                              hint="values are numbers or N/A")
        value = parsed
        if _no_data(f, value):
            fields.none(f)
            continue
        _unit_check(src, number, f, value)
        fields.add(f, value, entity, selector.number)


def parse_prometheus(src: Source, kb: KnowledgeBase, *, window: tuple[float | None, float | None] | None = None,
                     samples: tuple[float | None, float | None] | None = None, gpus: Sequence[int] | None = None,
                     progress: Progress | None = None) -> FileResult:
    """dcgm-exporter's /metrics text (one scrape or several appended); sentinel values mean "no data"."""
    result = FileResult(path=src.label, name=src.name, format="prometheus")
    selector = Selector(samples=samples, window=window, gpus=frozenset(gpus) if gpus else None)
    fields = _Fields()
    seen: set[int] = set()
    models: dict[str, int] = {}
    other_metrics: set[str] = set()
    lines = dcgm_lines = 0
    timestamps = False
    for number, metric, label_text, value_text, stamp in prom_samples(src, progress):
        lines += 1
        f = BY_NAME.get(metric[len("DCGM_FI_"):]) if metric.startswith("DCGM_FI_") else None
        if f is None:
            other_metrics.add(metric)
            continue
        dcgm_lines += 1
        seen.add(f.id)
        labels = prom_labels(src, number, label_text) if label_text else {}
        parsed = ascii_float(value_text)
        if parsed is None:
            raise src.problem(f"{metric}: {value_text!r} is not a number", line=number,
                              hint="a finite number in ASCII digits, such as 0.42")
        value = parsed
        gpu_text = labels.get("gpu", "0")
        label_gpu = ascii_index(gpu_text)
        if label_gpu is None:
            raise src.problem(f"{metric}: label gpu={gpu_text!r} is not a GPU index", line=number,
                              hint="dcgm-exporter labels GPUs with ASCII digits: gpu=\"0\"")
        gpu = label_gpu
        entity = f"GPU {gpu}" + (f"/GPU-I {labels['GPU_I_ID']}" if labels.get("GPU_I_ID") else "")
        if stamp and not (stamp.isascii() and stamp.isdigit() and len(stamp) <= 16):
            raise src.problem(f"{metric}: timestamp {stamp!r} is not milliseconds since the epoch", line=number,
                              hint="the exposition format's optional timestamp is an integer of milliseconds")
        t = int(stamp) / 1000.0 if stamp else None
        timestamps = timestamps or t is not None
        if not selector.keep(f"{metric} {entity}", gpu, t, device=entity):
            continue
        if labels.get("modelName"):
            models[labels["modelName"]] = models.get(labels["modelName"], 0) + 1
        if _no_data(f, value):
            fields.none(f)
            continue
        _unit_check(src, number, f, value)
        fields.add(f, value, entity, selector.number)
    if dcgm_lines == 0:
        raise src.problem("no DCGM_FI_* samples in the file" if lines else "no samples in the file",
                          hint="curl -s localhost:9400/metrics > dcgm.prom (dcgm-exporter)")
    selector.finish(result, timestamps)
    result.stats.update(samples=dcgm_lines)
    if other_metrics:
        result.stats["other_metrics"] = len(other_metrics)
        if any(m.startswith(("vllm:", "sglang:")) for m in other_metrics):
            result.notes.append("the file holds a serving engine's metrics too (vllm:, sglang:), which this DCGM "
                                "reading leaves out: save the engine's /metrics as a file of its own and give both")
    _finish(result, fields, seen, selector, "exporter's metrics (enable it in dcp-metrics-included.csv)")
    if models:
        result.add_hardware(models, kb, what="modelName", metric="modelName",
                            method="modelName label mapped through the hardware catalog's aliases")
    else:
        result.missing("hardware", "the samples carry no modelName label; give --set hardware=ID")
    return result
