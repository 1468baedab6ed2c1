"""Serving-engine metrics (vLLM, SGLang /metrics text): facts, histogram quantiles, scrapes, sniffing, errors."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest

import cli
import expert
from expert.errors import ObservationError
from expert.ingest import ingest, ingest_result
from expert.ingest.serving_metrics import quantile

FIXTURES = Path(__file__).parent / "fixtures" / "telemetry"
INF = math.inf


@pytest.mark.parametrize(("q", "buckets", "expected"), [
    # rank 50 of 100 falls in (2.5, 5] holding 80 of them, 30 past its start: 2.5 + 2.5 x 30/80
    (0.5, [(1.0, 10), (2.5, 20), (5.0, 100), (INF, 100)], 2.5 + 2.5 * 30 / 80),
    # the first bucket is interpolated from 0
    (0.5, [(0.3, 80), (0.5, 100), (INF, 100)], 0.3 * 50 / 80),
    # a rank in the +Inf bucket is the highest finite bound, as PromQL's histogram_quantile gives
    (0.99, [(1.0, 10), (2.0, 20), (INF, 100)], 2.0),
    # the order the buckets come in does not matter
    (0.5, [(INF, 4), (2.0, 4), (1.0, 2)], 1.0),
    (0.25, [(1.0, 2), (2.0, 4), (INF, 4)], 0.5),
])
def test_quantile_is_prometheus_histogram_quantile(q: float, buckets: list[tuple[float, float]],
                                                   expected: float) -> None:
    assert quantile(q, buckets) == pytest.approx(expected)


@pytest.mark.parametrize("buckets", [[], [(1.0, 3.0)], [(1.0, 0.0), (INF, 0.0)]])
def test_no_quantile_without_an_inf_bucket_or_any_count(buckets: list[tuple[float, float]]) -> None:
    assert quantile(0.5, buckets) is None


def test_one_vllm_scrape_gives_the_gauges_and_the_medians_since_start() -> None:
    result = ingest_result(FIXTURES / "vllm_metrics.prom")
    assert result.files[0].format == "serving-metrics"
    values = result.observations.values()
    assert values["workload"] == "inference"
    assert (values["requests_running"], values["requests_waiting"]) == (14, 1)
    assert values["kv_cache_usage"] == pytest.approx(0.42)
    # 200 first tokens: 20 under 0.25 s, 80 under 0.5 s; the 100th in (0.5, 0.75] holding 60: 0.5 + 0.25 x 20/60
    assert values["ttft_ms"] == pytest.approx((0.5 + 0.25 * 20 / 60) * 1000)
    # request_time_per_output_token (a request's mean) wins over the per-token histogram for tpot_ms
    assert result.observations.facts["tpot_ms"].detail["metric"] == "vllm:request_time_per_output_token_seconds"
    assert result.observations.facts["itl_median_ms"].detail["metric"] == "vllm:inter_token_latency_seconds"
    assert values["itl_p99_ms"] > values["itl_median_ms"]
    assert values["ttft_queue_ms"] < values["ttft_ms"]
    assert "since the server started" in str(result.observations.facts["ttft_ms"].detail["method"])
    assert any("one scrape" in n for n in result.notes)
    assert "time between two scrapes" in result.not_derived["preemptions"]
    assert "hardware" in result.not_derived


def test_two_scrapes_give_the_window_between_them() -> None:
    one = ingest(FIXTURES / "vllm_metrics.prom").values()
    two = ingest_result(FIXTURES / "vllm_metrics_two_scrapes.prom")
    values = two.observations.values()
    # gauges: the mean of the two scrapes (14 and 30 running, 1 and 12 waiting rounded to a whole count)
    assert values["requests_running"] == 22
    assert values["requests_waiting"] == round(6.5)
    assert values["kv_cache_usage"] == pytest.approx((0.42 + 0.97) / 2)
    # histograms: only the 400 requests between the scrapes, which waited far longer than the first 200
    detail = two.observations.facts["ttft_ms"].detail
    assert detail["counted"] == 400
    assert values["ttft_ms"] == pytest.approx((2.5 + 2.5 * 160 / 200) * 1000)
    assert values["ttft_ms"] > one["ttft_ms"] and values["ttft_queue_ms"] > one["ttft_queue_ms"]
    assert not any("one scrape" in n for n in two.notes)
    assert two.files[0].stats["scrapes"] == 2


def test_sglang_names_and_several_series(tmp_path: Path) -> None:
    values = ingest(FIXTURES / "sglang_metrics.prom").values()
    assert (values["requests_running"], values["requests_waiting"]) == (48, 0)
    assert values["kv_cache_usage"] == pytest.approx(0.31)
    assert values["ttft_ms"] == pytest.approx((0.2 + 0.2 * 20 / 60) * 1000)
    # token 5,000 of 10,000 falls in (0.02, 0.04] holding 5,900 of them, 1,000 past its start
    assert values["itl_median_ms"] == pytest.approx((0.02 + 0.02 * 1000 / 5900) * 1000)
    # two models on one server: requests add up, KV-cache usage is averaged, histograms add up
    text = "\n".join([
        'vllm:num_requests_running{model_name="a"} 4', 'vllm:num_requests_running{model_name="b"} 6',
        'vllm:kv_cache_usage_perc{model_name="a"} 0.2', 'vllm:kv_cache_usage_perc{model_name="b"} 0.6',
        'vllm:time_to_first_token_seconds_bucket{le="1.0",model_name="a"} 10',
        'vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="a"} 10',
        'vllm:time_to_first_token_seconds_bucket{le="1.0",model_name="b"} 0',
        'vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="b"} 10',
        'vllm:num_requests_waiting{model_name="a"} NaN', ""])
    path = tmp_path / "two_models.prom"
    path.write_text(text)
    result = ingest_result(path)
    values = result.observations.values()
    assert values["requests_running"] == 10
    assert values["kv_cache_usage"] == pytest.approx(0.4)
    assert values["ttft_ms"] == pytest.approx(1000.0)  # rank 10 of 20 is the top of the (0, 1] bucket
    assert "requests_waiting" in result.not_derived  # NaN: no data


def test_a_restart_between_scrapes_reads_the_last_scrape(tmp_path: Path) -> None:
    scrape = ('vllm:time_to_first_token_seconds_bucket{{le="1.0"}} {0}\n'
              'vllm:time_to_first_token_seconds_bucket{{le="+Inf"}} {1}\n')
    path = tmp_path / "restart.prom"
    path.write_text(scrape.format(900, 1000) + scrape.format(2, 10))  # 1,000 counted, then 10 after a restart
    result = ingest_result(path)
    # the last scrape alone: rank 5 of 10 falls past the (0, 1] bucket's 2, so the highest finite bound
    assert result.observations.values()["ttft_ms"] == pytest.approx(1000.0)
    assert any("restarted" in n for n in result.notes)


def test_serving_metrics_are_told_from_dcgm_exporter_text() -> None:
    from expert.ingest._source import Source, sniff

    assert sniff(Source(FIXTURES / "vllm_metrics.prom")) == "serving-metrics"
    assert sniff(Source(FIXTURES / "sglang_metrics.prom")) == "serving-metrics"
    assert sniff(Source(FIXTURES / "dcgm_exporter.prom")) == "prometheus"
    mixed = (FIXTURES / "dcgm_exporter.prom").read_text() + (FIXTURES / "vllm_metrics.prom").read_text()
    result = ingest_result(io.StringIO(mixed))
    assert result.files[0].format == "prometheus"
    assert any("serving engine's metrics" in n for n in result.notes)


def test_malformed_or_empty_serving_metrics_name_file_and_line(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    bad = FIXTURES / "malformed" / "serving_non_numeric.prom"
    with pytest.raises(ObservationError) as info:
        ingest(bad)
    assert "serving_non_numeric.prom:2:" in str(info.value) and "'many' is not a number" in str(info.value)
    other = tmp_path / "python_only.prom"
    other.write_text("# TYPE python_gc_objects_collected_total counter\npython_gc_objects_collected_total 3\n")
    with pytest.raises(ObservationError, match="no vllm: or sglang: samples"):
        ingest(other, format="serving-metrics")
    assert cli.main(["ingest", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "serving_non_numeric.prom" in err and "Traceback" not in err
    assert cli.main(["ingest", str(FIXTURES / "vllm_metrics.prom"), "--window", "10:20"]) == 2
    assert "no time axis" in capsys.readouterr().err


def test_a_scrape_drives_the_ttft_rules() -> None:
    """Two scrapes of a server under load: first tokens at 4.5 s against a 1 s target, a quarter of it queueing
    (the queue-time median 1 s): the prefill, not the queue, is what misses the target."""
    raw = ingest(FIXTURES / "vllm_metrics_two_scrapes.prom").values()
    report = expert.diagnose({**raw, "hardware": "a100-sxm-80gb", "ttft_target_ms": 1000})
    fired = {e.rule_id for e in report.evaluations if e.fired}
    assert {"serving-ttft-slo-miss", "serving-ttft-prefill"} <= fired
    assert "serving-ttft-queueing" not in fired
    assert report.derived["ttft_queue_share"].value == pytest.approx(1000 / 4500)
