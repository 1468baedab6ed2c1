"""Dtypes, bytes per dtype and iron-law terms are knowledge-base data (issue 11): a new numeric format (fp4) added in
YAML only is diagnosed and counted from a trace; the report schema lists the iron-law terms of the knowledge base."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml
from kineto_builder import Trace

import expert
from expert._resources import data_dir
from expert.errors import ObservationError
from expert.ingest import ingest_result
from expert.ingest.opflops import OpCostModel, OpShapes
from expert.kb.knowledge import KnowledgeBase
from expert.schemas import schema_for

# fp4 as a test knowledge base might add it: half a byte per element, a dense peak on the B200 only. The profiler
# spelling is this test's own (no released PyTorch records unpacked fp4 tensors), so nothing bundled knows it.
FP4 = "c10::Float4_test"
FP4_PEAK = 9000.0


def _edit(path: Path, change: Any) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")


@pytest.fixture(scope="module")
def fp4_kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled knowledge base with fp4 added, by editing three YAML files and nothing else."""
    target = tmp_path_factory.mktemp("kb") / "knowledge_base"
    shutil.copytree(data_dir("knowledge_base"), target)
    _edit(target / "units.yaml", lambda d: d["dtypes"].update({"fp4": {"bytes": 0.5, "torch_types": [FP4]}}))

    def choices(d: dict[str, Any]) -> None:
        next(f for f in d["facts"] if f["name"] == "dtype")["choices"].append("fp4")

    def b200(d: dict[str, Any]) -> None:
        next(h for h in d["hardware"] if h["id"] == "b200")["peak_tflops"]["fp4"] = FP4_PEAK

    _edit(target / "facts.yaml", choices)
    _edit(target / "hardware.yaml", b200)
    return target


def _fp4_trace(path: Path, types: str = FP4) -> Path:
    """Three steps of 10 fp4 matmuls (1024³, 4 us each) on a B200."""
    t = Trace(device={"id": 0, "name": "NVIDIA B200", "totalGlobalMem": 191_000_000_000, "computeMajor": 10,
                      "computeMinor": 0, "numSms": 148})
    ts = 0.0
    for s in range(3):
        start, gpu = ts, ts + 10
        for _ in range(10):
            t.launch("aten::mm", "nvjet_tst_128x256_64x4_2x1_v_bz_TNT", ts, gpu, 4,
                     dims=[[1024, 1024], [1024, 1024]], types=[types, types])
            ts += 2
            gpu += 4
        ts = gpu
        t.step(s + 1, start, ts - start)
    return t.write(path)


def test_fp4_added_in_yaml_only_is_diagnosed(fp4_kb: Path) -> None:
    ex = expert.Expert(knowledge_base=fp4_kb)
    report = ex.diagnose({"hardware": "b200", "dtype": "fp4", "achieved_tflops": 4500.0})
    assert report.observations["dtype"].value == "fp4"
    assert report.derived["peak_tflops"].value == FP4_PEAK
    assert report.derived["flops_to_peak"].value == pytest.approx(0.5)
    with pytest.raises(ObservationError, match="fp4"):  # the bundled knowledge base has no fp4
        expert.diagnose({"hardware": "b200", "dtype": "fp4"})


def test_fp4_tensors_of_a_trace_are_counted_at_half_a_byte(fp4_kb: Path, tmp_path: Path) -> None:
    kb = KnowledgeBase.load(fp4_kb)
    result = ingest_result(_fp4_trace(tmp_path / "fp4.json"), kb=kb)
    values = result.observations.values()
    flops, moved = 2.0 * 1024 ** 3, 3 * 1024 * 1024 * 0.5  # two operands read, the result written, 0.5 B each
    assert values["dtype"] == "fp4"
    assert values["bytes_moved"] == pytest.approx(10 * moved)
    assert values["arithmetic_intensity"] == pytest.approx(flops / moved)
    tb = result.time_breakdown
    assert tb is not None and tb.roof is not None and tb.roof.hardware == "b200" and tb.roof.dtype == "fp4"
    mm = next(e for e in tb.top_ops if e.name == "aten::mm")
    assert mm.pct_of_roof == pytest.approx(flops / 4e-6 / (FP4_PEAK * 1e12), rel=1e-4)
    # the bundled knowledge base does not know the spelling: no bytes, no dtype
    bundled = ingest_result(_fp4_trace(tmp_path / "bundled.json"))
    assert "dtype" not in bundled.observations.values() and "bytes_moved" not in bundled.observations.values()


def test_the_cost_model_reads_its_element_types_from_the_knowledge_base(fp4_kb: Path) -> None:
    shapes = OpShapes.of([[64, 128], [128, 32]], [FP4, FP4])
    assert OpCostModel().cost("aten::mm", shapes) is None  # unknown type: not a tensor to the bundled table
    cost = OpCostModel(KnowledgeBase.load(fp4_kb).units.torch_types()).cost("aten::mm", shapes)
    assert cost is not None and cost.dtype == "fp4" and cost.bytes == (64 * 128 + 128 * 32 + 64 * 32) * 0.5


def test_a_torch_type_listed_for_two_types_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "knowledge_base"
    shutil.copytree(data_dir("knowledge_base"), target)
    _edit(target / "units.yaml", lambda d: d["element_types"]["int32"]["torch_types"].append("float"))
    with pytest.raises(expert.KnowledgeBaseError, match="float"):
        KnowledgeBase.load(target)


def test_the_report_schema_lists_the_knowledge_base_iron_law_terms(fp4_kb: Path) -> None:
    kb = KnowledgeBase.load(fp4_kb)
    terms = schema_for("report", kb)["$defs"]["IronLawTerm"]["properties"]["term"]["enum"]
    assert terms == [*kb.regimes.iron_law_terms(), "unexplained"] == ["input", "data", "compute", "latency",
                                                                      "unexplained"]
    report = expert.Expert(knowledge_base=fp4_kb).diagnose({"step_time_s": 1.0, "data_wait_s": 0.25})
    assert [t.term for t in report.iron_law.terms] == ["input", "data", "compute", "latency", "unexplained"]


def test_the_consultation_why_is_why_ask() -> None:
    from expert.consult import session
    from expert.consult.models import WhyAsk

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert session.Why is WhyAsk
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
