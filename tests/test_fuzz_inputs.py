"""Fuzz targets for what users hand the expert (issue 21): observation files (YAML, JSON), --set values, and traces
and telemetry logs (Kineto JSON, nvidia-smi CSV and dmon, dcgmi dmon, Prometheus text, nccl-tests). Whatever the
input, the outcome is a result or an ExpertError whose message names the input — never another exception, never a
hang (each example runs under an alarm).

Most targets call the library (fast); a few run the `dam` CLI in a subprocess (exit 0 or 2, no traceback).
The default profile fits CI on two noisy cores (~30 s); DAM_FUZZ=heavy runs many more examples:

    DAM_FUZZ=heavy python -m pytest -q tests/test_fuzz_inputs.py
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import expert
from expert.errors import ExpertError
from expert.observations.file import read_observation_file

FIXTURES = Path(__file__).parent / "fixtures" / "telemetry"
HEAVY = os.environ.get("DAM_FUZZ") == "heavy"
ALARM_S = 10  # one example taking this long is a hang


def _profile(examples: int) -> Callable[[Callable[..., None]], Callable[..., None]]:
    # no shrinking by default (it can take minutes on a slow machine); the failing example is printed as found
    phases = list(Phase) if HEAVY else [Phase.explicit, Phase.reuse, Phase.generate]
    return settings(max_examples=examples * 25 if HEAVY else examples, deadline=None, derandomize=not HEAVY,
                    phases=phases,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])


T = TypeVar("T")


@contextmanager
def _bounded(what: str) -> Iterator[None]:
    """Fail (rather than hang) when one example runs past ALARM_S."""
    def on_alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"{what}: still running after {ALARM_S} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(ALARM_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _expect_clean(call: Callable[[], T], names: list[str], what: str) -> T | None:
    """Run `call`: a result, or an ExpertError naming one of `names`. Anything else fails the example."""
    with _bounded(what):
        try:
            return call()
        except ExpertError as exc:
            text = str(exc)
            assert any(n in text for n in names), f"{what}: the message names none of {names}: {text[:600]}"
            return None


# ---- values a user might type or a tool might write ----------------------------------------------------------------
HOSTILE_TEXT = ["0,5", "0_3", "1e309", "-1e309", "nan", "NaN", "inf", "-inf", "²", "１２", "٩٥", "1" * 400, "0x10",
                "12 %", "12%%", "120ms", "1.5 s", "", " ", "[/x]", "[bold]x", "\x1b[31mred", "<script>", "null", "~",
                "true", "1/0", "-0", "1e-320", "5e-324", "12 GB", "12GiB", "∞", "½", "١٢", "0.5.1", "+-1"]
scalars = st.one_of(
    st.sampled_from(HOSTILE_TEXT),
    st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.booleans(),
    st.none(),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                      max_leaves=6)
KB = expert.default_expert().kb
FACT_NAMES = sorted(KB.facts)
names = st.one_of(st.sampled_from(FACT_NAMES), st.sampled_from(["description", "ranks", "hardware", "dtype",
                                                                 "time_breakdown"]), st.text(max_size=8))


def _observations() -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(names, values, max_size=6)


def _diagnose(raw: dict[str, Any]) -> Any:
    return expert.default_expert().diagnose(raw)


# ---- observation files ---------------------------------------------------------------------------------------------
def _serialise(data: Any, kind: str) -> bytes:
    if kind == "json":
        return json.dumps(data, default=str).encode()
    return yaml.safe_dump(data, allow_unicode=True).encode()


def _mutate(blob: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    for at, length, new in edits:
        at = at % (len(blob) + 1)
        blob = blob[:at] + new + blob[at + length:]
    return blob


edits = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 8),
                           st.one_of(st.binary(max_size=6), st.sampled_from([t.encode() for t in HOSTILE_TEXT]),
                                     st.sampled_from([b"{", b"}", b"[", b":", b",", b"\n", b"- ", b"&a", b"*a",
                                                      b"\xef\xbb\xbf", b"\xff\xfe", b'"', b"!!python/object"]))),
                 max_size=3)


def _check_file(path: Path) -> None:
    obs = _expect_clean(lambda: read_observation_file(path), [path.name], f"reading {path.name}")
    if obs is not None:
        raw = dict(obs.observations)
        _expect_clean(lambda: _diagnose(raw), [*map(str, raw), "observation"], f"diagnosing {path.name}")


@_profile(200)
@given(data=st.one_of(_observations(), values), kind=st.sampled_from(["yaml", "json"]), changes=edits)
def test_fuzz_observation_files(data: Any, kind: str, changes: list[tuple[int, int, bytes]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"run.{kind}"
        path.write_bytes(_mutate(_serialise(data, kind), changes))
        _check_file(path)


@_profile(150)
@given(pairs=st.lists(st.tuples(st.sampled_from(FACT_NAMES), st.one_of(st.sampled_from(HOSTILE_TEXT),
                                                                          st.text(max_size=10))), max_size=4))
def test_fuzz_set_values(pairs: list[tuple[str, str]]) -> None:
    from expert.commands._common import parse_sets

    # an empty value and a fact given twice with two values are errors naming the --set
    parsed = _expect_clean(lambda: parse_sets([f"{n}={v}" for n, v in pairs]), ["--set"], f"--set {pairs}")
    if parsed is None:
        assert any(not v.strip() for _, v in pairs) or len({n for n, _ in pairs}) < len(pairs)
        return
    raw: dict[str, Any] = dict(parsed)
    _expect_clean(lambda: _diagnose(raw), [*raw, "observation"], f"--set {pairs}")


# ---- traces and telemetry ------------------------------------------------------------------------------------------
TELEMETRY = sorted(p.name for p in FIXTURES.iterdir() if p.is_file())
_text_edit = st.tuples(st.integers(0, 100_000), st.integers(0, 12),
                       st.one_of(st.sampled_from(HOSTILE_TEXT),
                                 st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8),
                                 st.sampled_from([",", "\n", " ", '"', "{", "}", "#", "=", "GPU ", 'gpu="', "\t"])))


def _ingest(path: Path) -> None:
    from expert.ingest import ingest_result

    result = _expect_clean(lambda: ingest_result(path, kb=KB), [path.name], f"ingesting {path.name}")
    if result is not None:  # what was read must diagnose too
        raw = dict(result.observations)
        _expect_clean(lambda: _diagnose(raw), [*map(str, raw), "observation"], f"diagnosing {path.name}")


@_profile(300)
@given(fixture=st.sampled_from(TELEMETRY), changes=st.lists(_text_edit, min_size=1, max_size=4))
def test_fuzz_telemetry_edits(fixture: str, changes: list[tuple[int, int, str]]) -> None:
    text = (FIXTURES / fixture).read_text(encoding="utf-8")
    for at, length, new in changes:
        at = at % (len(text) + 1)
        text = text[:at] + new + text[at + length:]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / fixture
        path.write_text(text, encoding="utf-8")
        _ingest(path)


numbers = st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
                    st.sampled_from([0, 1, 1e30, -1, 2**64, 1e-9]))
events = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "X", "X", "i", "B", "E", "f", "s", "M", "?"]),
     "cat": st.sampled_from(["user_annotation", "cpu_op", "kernel", "cuda_runtime", "gpu_memcpy", "gpu_memset",
                             "python_function", "ac2g", "", "x"]),
     "name": st.one_of(st.sampled_from(["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#²", "ProfilerStep#",
                                        "ProfilerStep#99999999999999999999", "aten::mm", "cudaLaunchKernel",
                                        "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
                                        "ncclKernel_AllReduce_RING_LL_Sum_float", "Optimizer.step#SGD.step",
                                        "cudaStreamSynchronize", "Memcpy HtoD"]), st.text(max_size=10)),
     "pid": st.one_of(st.integers(-5, 2**40), st.text(max_size=4)),
     "tid": st.one_of(st.integers(-5, 2**40), st.text(max_size=4)),
     "ts": numbers, "dur": numbers},
    optional={"args": st.dictionaries(st.sampled_from(["device", "stream", "correlation", "External id",
                                                       "Input Dims", "flops", "bytes", "grid", "block"]),
                                      st.one_of(numbers, st.text(max_size=4), st.lists(numbers, max_size=3)),
                                      max_size=4)})


@_profile(200)
@given(trace_events=st.lists(events, max_size=30), devices=st.lists(
    st.fixed_dictionaries({"id": st.one_of(st.integers(-1, 2**40), st.text(max_size=3)),
                           "name": st.one_of(st.sampled_from(["NVIDIA H100 80GB HBM3", "[/x]", "A100"]),
                                             st.text(max_size=6))}), max_size=3),
    gz=st.booleans())
def test_fuzz_kineto_traces(trace_events: list[dict[str, Any]], devices: list[dict[str, Any]], gz: bool) -> None:
    import gzip

    blob = json.dumps({"schemaVersion": 1, "deviceProperties": devices, "traceEvents": trace_events}).encode()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("trace.json.gz" if gz else "trace.json")
        path.write_bytes(gzip.compress(blob) if gz else blob)
        _ingest(path)


# ---- a few through the CLI ------------------------------------------------------------------------------------------
DAM = shutil.which("dam", path=str(Path(sys.executable).parent)) or shutil.which("dam")


@pytest.mark.skipif(DAM is None, reason="the dam console script is not installed (pip install -e .)")
@_profile(4)
@given(fixture=st.sampled_from(TELEMETRY), changes=st.lists(_text_edit, min_size=1, max_size=3),
       data=_observations(), kind=st.sampled_from(["yaml", "json"]))
def test_fuzz_cli_exits_0_or_2(fixture: str, changes: list[tuple[int, int, str]], data: dict[str, Any],
                               kind: str) -> None:
    assert DAM is not None
    text = (FIXTURES / fixture).read_text(encoding="utf-8")
    for at, length, new in changes:
        at = at % (len(text) + 1)
        text = text[:at] + new + text[at + length:]
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / fixture
        trace.write_text(text, encoding="utf-8")
        obs = Path(tmp) / f"run.{kind}"
        obs.write_bytes(_serialise(data, kind))
        for args, path in ((["ingest", str(trace)], trace), (["diagnose", str(obs)], obs),
                           (["diagnose", "--from", str(trace)], trace)):
            result = subprocess.run([DAM, *args], capture_output=True, text=True, timeout=60, cwd=tmp)
            assert result.returncode in (0, 2), f"{args}: exit {result.returncode}: {result.stderr[-1500:]}"
            assert "Traceback" not in result.stderr, result.stderr[-1500:]
            if result.returncode == 2:
                assert path.name in result.stderr or any(str(k) in result.stderr for k in data), result.stderr
