"""Serving-engine metrics: the Prometheus /metrics text of vLLM (`vllm:` metrics) or SGLang (`sglang:`), one scrape
or several appended (`curl -s localhost:8000/metrics >> serve.prom`, run a minute apart under load).

Gauges (requests running and waiting, KV-cache usage) are averaged over the scrapes. Histograms (time to first token,
time per output token, inter-token latency, queue time, end-to-end latency) count every request since the server
started: with two scrapes or more the last minus the first gives the requests in between, the window the figures
describe; with one scrape they describe every request since start-up, warm-up included (a note says so). A latency
is the median of its histogram, interpolated linearly within the bucket as PromQL's `histogram_quantile` does
(`itl_p99_ms` is the 99th percentile); the series of several models or engines (`model_name`, `engine` labels) are
added up, and the KV-cache usage of several engines averaged. Counters need the time between scrapes, which the
exposition text does not carry, so preemptions per minute are left to `--set`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..kb.knowledge import KnowledgeBase
from ._result import FileResult
from ._source import ENGINE_METRIC, Progress, Source, ascii_float, prom_labels, prom_samples

_HINT = "curl -s localhost:8000/metrics > serve.prom (vLLM or SGLang, while it serves under load)"


def looks_like(text: str) -> bool:
    """Whether a text holds samples of a serving engine's metrics (`vllm:...` or `sglang:...` lines)."""
    return ENGINE_METRIC.search(text) is not None


@dataclass(frozen=True)
class Gauge:
    """A fact read from a gauge: the first metric name present wins; `combine` adds or averages the series."""

    fact: str
    names: tuple[str, ...]
    combine: Literal["sum", "mean"]  # requests add up over engines and models; a usage fraction is averaged


@dataclass(frozen=True)
class Quantile:
    """A fact read as a quantile of a histogram in seconds, given in milliseconds: the first name present wins."""

    fact: str
    names: tuple[str, ...]
    q: float


GAUGES: tuple[Gauge, ...] = (
    Gauge("requests_running", ("vllm:num_requests_running", "sglang:num_running_reqs"), "sum"),
    Gauge("requests_waiting", ("vllm:num_requests_waiting", "sglang:num_queue_reqs"), "sum"),
    # vLLM V1 kv_cache_usage_perc, V0 gpu_cache_usage_perc, SGLang token_usage: all fractions (1 = full)
    Gauge("kv_cache_usage", ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"), "mean"),
)
_ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds", "sglang:inter_token_latency_seconds",
        "sglang:time_per_output_token_seconds")
QUANTILES: tuple[Quantile, ...] = (
    Quantile("ttft_ms", ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"), 0.5),
    # a request's mean time per output token (vLLM V1) where kept, else the per-token histogram (the same as the ITL)
    Quantile("tpot_ms", ("vllm:request_time_per_output_token_seconds", *_ITL), 0.5),
    Quantile("itl_median_ms", _ITL, 0.5),
    Quantile("itl_p99_ms", _ITL, 0.99),
    Quantile("ttft_queue_ms", ("vllm:request_queue_time_seconds", "sglang:queue_time_seconds"), 0.5),
    Quantile("latency_ms", ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds"), 0.5),
)
FACTS = ("workload", *(g.fact for g in GAUGES), *(q.fact for q in QUANTILES))

_Series = tuple[str, tuple[tuple[str, str], ...]]  # metric name, labels (sorted, `le` left out)


@dataclass
class _Scrapes:
    """Every sample of the file, by series, in the order the scrapes appended them."""

    values: dict[_Series, list[float]] = field(default_factory=dict)  # gauge series
    buckets: dict[_Series, dict[float, list[float]]] = field(default_factory=dict)  # histogram series, by `le`
    scrapes: int = 0

    def add(self, metric: str, labels: dict[str, str], value: float) -> None:
        """One sample; a series seen again starts the next scrape."""
        if metric.endswith("_bucket") and "le" in labels:
            bound = _bound(labels.pop("le"))
            if bound is None:
                return
            per_bound = self.buckets.setdefault((metric[: -len("_bucket")], tuple(sorted(labels.items()))), {})
            seen = per_bound.setdefault(bound, [])
        else:
            seen = self.values.setdefault((metric, tuple(sorted(labels.items()))), [])
        seen.append(value)
        self.scrapes = max(self.scrapes, len(seen))

    def gauge(self, name: str) -> list[list[float]]:
        """The values of each series of a gauge, one per scrape."""
        return [v for (metric, _), v in self.values.items() if metric == name]

    def histogram(self, name: str) -> list[dict[float, list[float]]]:
        """The buckets of each series of a histogram, each bucket's cumulative count per scrape."""
        return [b for (metric, _), b in self.buckets.items() if metric == name]


def _bound(text: str) -> float | None:
    if text.strip() in ("+Inf", "Inf", "+inf", "inf"):
        return math.inf
    return ascii_float(text)


def quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """PromQL's histogram_quantile over cumulative (upper bound, count) buckets, +Inf last: linear within the bucket
    the rank falls in (from 0 for the first bucket), the highest finite bound where it falls in the +Inf bucket.
    None where no observation was counted."""
    ordered = sorted(buckets)
    if not ordered or ordered[-1][0] != math.inf or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    below_bound, below_count = 0.0, 0.0
    for bound, count in ordered:
        if count >= rank:
            if bound == math.inf:
                return below_bound
            inside = count - below_count
            if inside <= 0:
                return bound
            return below_bound + (bound - below_bound) * (rank - below_count) / inside
        below_bound, below_count = bound, count
    return below_bound  # pragma: no cover - the +Inf bucket holds every count


def parse(src: Source, kb: KnowledgeBase, *, progress: Progress | None = None) -> FileResult:
    """Read a serving engine's /metrics text; raises a located ObservationError where a line is malformed or no
    engine metric is found."""
    result = FileResult(path=src.label, name=src.name, format="serving-metrics")
    scrapes = _Scrapes()
    engines: set[str] = set()
    for number, metric, label_text, value_text, _stamp in prom_samples(src, progress):
        if not metric.startswith(("vllm:", "sglang:")):
            continue  # the process and Python collectors' metrics, and any other exporter's
        engines.add(metric.split(":", 1)[0])
        value = ascii_float(value_text)
        if value is None:
            if value_text.strip().lower() in ("nan", "+inf", "-inf", "inf"):
                continue  # no data in this sample (Prometheus allows NaN and infinities)
            raise src.problem(f"{metric}: {value_text!r} is not a number", line=number,
                              hint="a finite number in ASCII digits, such as 0.42")
        scrapes.add(metric, prom_labels(src, number, label_text) if label_text else {}, value)
    if not engines:
        raise src.problem("no vllm: or sglang: samples in the file", hint=_HINT)
    window = "between the first and the last scrape" if scrapes.scrapes > 1 else "since the server started"
    result.add("workload", "inference", method="a serving engine's metrics", file=src.label)
    for gauge in GAUGES:
        _gauge(result, scrapes, gauge, whole=kb.facts[gauge.fact].type == "integer")
    for q in QUANTILES:
        _quantile(result, scrapes, q, window)
    if scrapes.scrapes == 1 and any(q.fact in result.measured for q in QUANTILES):
        result.notes.append("one scrape: the latencies count every request since the server started, warm-up "
                            "included; append a second scrape a minute later (curl ... >> FILE) for the window "
                            "between them")
    result.missing("preemptions", "a counter (num_preemptions_total): its rate needs the time between two scrapes, "
                   "which the text does not carry; give --set preemptions=N (per minute)")
    result.missing("hardware", "a serving engine's metrics do not name the GPU; give --set hardware=ID")
    result.stats.update(scrapes=scrapes.scrapes, engine=", ".join(sorted(engines)),
                        series=len(scrapes.values) + len(scrapes.buckets))
    return result


def _gauge(result: FileResult, scrapes: _Scrapes, gauge: Gauge, *, whole: bool) -> None:
    """The fact of a gauge: per series the mean over the scrapes, then the series added up (requests) or averaged (a
    usage fraction); a count (`whole`) rounded to the nearest whole number."""
    for name in gauge.names:
        series = scrapes.gauge(name)
        if not series:
            continue
        means = [sum(v) / len(v) for v in series]
        total = sum(means) if gauge.combine == "sum" else sum(means) / len(means)
        value: float | int = round(total) if whole else min(max(total, 0.0), 1.0)
        how = "mean over the scrapes" + (f", {'summed' if gauge.combine == 'sum' else 'averaged'} over "
                                         f"{len(series)} series" if len(series) > 1 else "")
        result.add(gauge.fact, value, metric=name, series=len(series), scrapes=max(len(v) for v in series),
                   method=how + (" and rounded" if whole and value != total else ""),
                   mean=total if whole and value != total else None, max=max(max(v) for v in series))
        return
    result.missing(gauge.fact, f"no {_names(gauge.names)} samples")


def _quantile(result: FileResult, scrapes: _Scrapes, q: Quantile, window: str) -> None:
    for name in q.names:
        series = scrapes.histogram(name)
        if not series:
            continue
        totals: dict[float, float] = {}
        for buckets in series:
            # a count that fell between the scrapes: the server restarted, and the last scrape alone counts
            restarted = any(len(c) > 1 and c[-1] < c[0] for c in buckets.values())
            note = f"{name}: counts fell between the scrapes (the server restarted?); the last scrape alone is read"
            if restarted and note not in result.notes:
                result.notes.append(note)
            for bound, counts in buckets.items():
                counted = counts[-1] - counts[0] if len(counts) > 1 and not restarted else counts[-1]
                totals[bound] = totals.get(bound, 0.0) + counted
        seconds = quantile(q.q, list(totals.items()))
        if seconds is None:
            result.missing(q.fact, f"{name} counted nothing {window}")
            return
        counted = totals.get(math.inf, 0.0)
        which = "median" if q.q == 0.5 else f"{q.q:.0%} quantile"
        result.add(q.fact, seconds * 1000.0, metric=name, quantile=q.q, counted=counted, series=len(series),
                   method=f"{which} of {counted:.0f} counted {window} (histogram_quantile, linear in the bucket)")
        return
    result.missing(q.fact, f"no {_names(q.names)} histogram")


def _names(names: tuple[str, ...]) -> str:
    """A metric and, briefly, its other spellings: `vllm:x (or 2 other names)`."""
    return names[0] + (f" (or {len(names) - 1} other names)" if len(names) > 2 else
                       f" (or {names[1]})" if len(names) == 2 else "")
