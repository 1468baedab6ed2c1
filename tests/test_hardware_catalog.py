"""The hardware catalog (issue 13): the spellings users type, family defaults and the report saying which variant was
picked, the new entries and the corrected ones, the missing-peak finding, and hardware a user brings
(--hardware-file, Expert(extra_hardware=...))."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from expert import Expert
from expert.errors import KnowledgeBaseError, ObservationError
from expert.ingest import ingest
from expert.kb.knowledge import HardwareSpec, KnowledgeBase, hardware_key
from expert.report.render import export
from expert.report.render.terminal import print_report

EXPERT = Expert(engine="pure")
KB = EXPERT.kb

NEW_ENTRIES = ["t4", "a10g", "a10", "l40", "rtx-4090", "rtx-6000-ada", "h100-nvl", "h800", "h20", "gh200-96gb",
               "gh200-144gb", "b300", "gb200", "mi250x-gcd", "mi250x-oam", "mi325x", "mi355x", "tpu-v6e", "trainium2",
               "trainium", "gaudi2", "h200-nvl"]
UNPUBLISHED = {"h800", "h20"}  # no public vendor datasheet: every figure null, the source says so


# ---- names: the spellings users type ----------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "expected"), [
    ("h100-sxm", "h100-sxm"), ("H100 SXM", "h100-sxm"), ("h100_sxm", "h100-sxm"), ("NVIDIA H100-SXM5", "h100-sxm"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("nvidia h100 80gb hbm3", "h100-sxm"), ("  H100 SXM  ", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H100 NVL", "h100-nvl"), ("NVIDIA H200 NVL", "h200-nvl"),
    ("NVIDIA H200", "h200-sxm"),
    ("A100 80GB", "a100-sxm-80gb"), ("a100-80gb", "a100-sxm-80gb"), ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
    ("NVIDIA A100-SXM4-40GB", "a100-40gb"), ("A100 40GB", "a100-40gb"),
    ("a10g", "a10g"), ("A10G", "a10g"), ("NVIDIA A10G", "a10g"), ("NVIDIA A10", "a10"),
    ("Tesla T4", "t4"), ("T4", "t4"), ("tesla-t4", "t4"),
    ("NVIDIA L40S", "l40s"), ("NVIDIA L40", "l40"), ("NVIDIA L4", "l4"),
    ("Tesla V100-SXM2-32GB", "v100-sxm2"), ("Tesla V100-PCIE-32GB", "v100-pcie"),
    ("Tesla V100S-PCIE-32GB", "v100s-pcie"), ("Tesla P100-PCIE-16GB", "p100-pcie-16gb"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"), ("NVIDIA A800-SXM4-80GB", "a800-sxm-80gb"), ("NVIDIA A30", "a30"),
    ("NVIDIA RTX A5000", "rtx-a5000"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"), ("RTX 4090", "rtx-4090"), ("rtx4090", "rtx-4090"),
    ("NVIDIA GeForce RTX 3090", "rtx-3090"), ("RTX 3090", "rtx-3090"), ("NVIDIA A40", "a40"),
    ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),
    ("NVIDIA H800", "h800"), ("NVIDIA H20", "h20"), ("NVIDIA GH200 480GB", "gh200-96gb"),
    ("NVIDIA GH200 144G HBM3e", "gh200-144gb"), ("NVIDIA B200", "b200"), ("NVIDIA B300", "b300"),
    ("NVIDIA GB200", "gb200"),
    ("AMD Instinct MI250X", "mi250x-gcd"), ("AMD Instinct MI250X / MI250", "mi250x-gcd"),
    ("MI250X package", "mi250x-oam"), ("AMD Instinct MI300X", "mi300x"), ("AMD Instinct MI325X", "mi325x"),
    ("mi355x", "mi355x"),
    ("TPU v4", "tpu-v4"), ("TPU v5 lite", "tpu-v5e"), ("TPU v5", "tpu-v5p"), ("TPU v6 lite", "tpu-v6e"),
    ("Cloud TPU v6e", "tpu-v6e"),
    ("AWS Trainium2", "trainium2"), ("trn2", "trainium2"), ("trn1", "trainium"), ("AWS Trainium", "trainium"),
    ("Intel Gaudi 2", "gaudi2"), ("HL-225", "gaudi2"),
    ("Gaudi3", "gaudi3"), ("HL-325L", "gaudi3"),
])
def test_ids_aliases_and_device_names_resolve(name: str, expected: str) -> None:
    found = KB.hardware_resolution(name)
    assert found is not None and found.id == expected, name
    assert found.note is None  # an id or alias is no assumption
    assert KB.resolve_hardware(name) == expected


@pytest.mark.parametrize(("name", "expected", "others"), [
    ("h100", "h100-sxm", ["h100-pcie", "h100-nvl"]),
    ("H100", "h100-sxm", ["h100-pcie"]),
    ("NVIDIA H100", "h100-sxm", ["h100-pcie"]),  # no longer a silent alias: the H100 comes in three variants
    ("a100", "a100-sxm-80gb", ["a100-40gb", "a100-pcie-80gb"]),
    ("A100 PCIe", "a100-pcie-80gb", ["a100-40gb"]),
    ("A100 SXM", "a100-sxm-80gb", ["a100-40gb"]),
    ("mi250x", "mi250x-gcd", ["mi250x-oam"]),  # the device PyTorch sees is one GCD
    ("gh200", "gh200-96gb", ["gh200-144gb"]),
    ("h200", "h200-sxm", ["h200-nvl"]),
    ("v100", "v100-sxm2", ["v100-pcie", "v100s-pcie"]),
])
def test_a_family_name_resolves_to_its_declared_default_and_says_so(name: str, expected: str,
                                                                     others: list[str]) -> None:
    found = KB.hardware_resolution(name)
    assert found is not None and found.id == expected and found.family is not None
    assert found.note is not None and found.note.startswith(f"{name} -> {expected} (")
    for other in others:
        assert other in found.note


@pytest.mark.parametrize(("name", "expected", "note"), [
    # a family name with the size: the default where it has that much memory, with the family's note
    ("H100 80GB", "h100-sxm", "H100 80GB -> h100-sxm (the most common variant; say --set hardware=h100-pcie"),
    ("V100 32GB", "v100-sxm2", "V100 32GB -> v100-sxm2 ("),
    ("NVIDIA A100 80GB HBM2e", "a100-sxm-80gb", "NVIDIA A100 80GB HBM2e -> a100-sxm-80gb ("),
    # else the family's one part that has it
    ("A100 40GB PCIe", "a100-40gb", "A100 40GB PCIe -> a100-40gb (the 40 GB part of the a100-pcie family)"),
    ("H100 94GB", "h100-nvl", "H100 94GB -> h100-nvl (the 94 GB part of the h100 family)"),
    # a headline size within a tenth of the catalog's, which the note gives
    ("B200 192GB", "b200", "B200 192GB -> b200 (the catalog lists 180 GB)"),
    # an id or alias with its own size is no assumption
    ("A100 80 GB", "a100-sxm-80gb", None),
    ("MI300X 192GB", "mi300x", None),
])
def test_a_name_with_its_memory_size_resolves_to_the_part_with_that_memory(name: str, expected: str,
                                                                             note: str | None) -> None:
    found = KB.hardware_resolution(name)
    assert found is not None and found.id == expected
    assert found.note is None if note is None else (found.note or "").startswith(note)


@pytest.mark.parametrize("name", ["h1000", "nvidia", "", "   ", "RTX 2080 Ti", "H100 SXM 94GB", "gaudi",
                                  "V100 16GB", "H100 40GB", "RTX 2080 Ti 11GB"])
def test_names_the_catalog_lacks_do_not_resolve(name: str) -> None:
    assert KB.hardware_resolution(name) is None  # never the nearest-looking entry


def test_hardware_key_drops_case_separators_and_a_leading_vendor_word() -> None:
    prefixes = KB.hardware_prefixes
    assert hardware_key("NVIDIA H100-SXM_80GB", prefixes) == hardware_key("h100 sxm 80gb", prefixes) == "h100sxm80gb"
    assert hardware_key("AMD Instinct MI300X", prefixes) == "mi300x"
    assert hardware_key("NVIDIA", prefixes) == "nvidia"  # a name that is only a vendor word is kept


def test_every_family_maps_to_catalog_entries() -> None:
    assert {"h100", "a100", "mi250x"} <= set(KB.hardware_families)
    for name, family in KB.hardware_families.items():
        assert family.default in KB.hardware, name
        assert set(family.variants) <= set(KB.hardware), name
        assert family.default not in family.variants, name


@pytest.mark.parametrize(("old", "new", "needle"), [
    ("h100: {default: h100-sxm,", "h100: {default: h100-sxm9,", "families.h100: 'h100-sxm9' is not a catalog id"),
    ("variants: [h100-pcie, h100-nvl]", "variants: [h100-pcie, h100-nvx]", "'h100-nvx' is not a catalog id"),
    ("  v100: {default: v100-sxm2,", "  t4: {default: v100-sxm2,", "families.t4: the family name"),
    ('aliases: ["NVIDIA L40"]', 'aliases: ["NVIDIA L40", "L40-S"]', "also names"),
    # the MIG table (tests/test_hardware_mig.py): a profile's memory in whole memory slices, parts the catalog has
    ("a30: {compute_slices: 4, memory_slices: 4, profiles: [1g.6gb,", "a30: {compute_slices: 4, memory_slices: 4, "
     "profiles: [1g.7gb,", "7 GB is not a whole number of the part's 4 memory slices"),
    ("    b200: {compute_slices: 7,", "    b201: {compute_slices: 7,", "'b201' is not a catalog part"),
    ("profiles: [1g.6gb, 2g.12gb, 4g.24gb]", "profiles: [1g.6gb, 2g.12gb, 5g.24gb]", "more than the part's 4 compute"),
    ("profiles: [1g.6gb, 2g.12gb, 4g.24gb]", "profiles: [1g.6gb, 2g.12gb, 4g]", "not a MIG profile name"),
])
def test_a_bad_family_alias_or_mig_table_stops_the_load_naming_it(kb_copy: Path, old: str, new: str,
                                                                  needle: str) -> None:
    path = kb_copy / "hardware.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(KnowledgeBaseError, match=needle.replace("[", r"\[").replace("(", r"\(")):
        KnowledgeBase.load(kb_copy)


# ---- the entries ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("hw_id", NEW_ENTRIES)
def test_every_new_entry_loads_with_a_source_and_dense_peaks(hw_id: str) -> None:
    hw = KB.hardware[hw_id]
    assert set(hw.peak_tflops) <= set(KB.units.dtypes)
    if hw_id in UNPUBLISHED:
        assert all(v is None for v in hw.peak_tflops.values()) and hw.memory_bandwidth_gbs is None
        assert "no public NVIDIA datasheet" in hw.source and hw.notes
        return
    assert hw.source.startswith("https://"), hw.source
    assert hw.notes or all(v is not None for v in hw.peak_tflops.values())  # what was left out is explained


def test_dense_peaks_are_half_the_sparse_headlines() -> None:
    assert KB.hardware["h100-nvl"].peak("bf16") == pytest.approx(1671 / 2, abs=0.5)  # "1,671*" on the datasheet
    assert KB.hardware["h200-nvl"].peak("fp8") == pytest.approx(3341 / 2, abs=0.5)  # "3,341*" on the datasheet
    assert KB.hardware["l40"].peak("fp8") == pytest.approx(724 / 2, abs=1)
    assert KB.hardware["a10"].peak("bf16") == 125.0  # "125 | 250*"
    assert KB.hardware["rtx-6000-ada"].peak("fp8") == pytest.approx(1457 / 2)
    assert KB.hardware["b300"].peak("fp8") == pytest.approx(72_000 / 8 / 2)  # HGX B300: 72 PF for 8 GPUs, sparse
    assert KB.hardware["gb200"].peak("bf16") == pytest.approx(10_000 / 2 / 2)  # superchip: 10 PF, 2 GPUs, sparse
    assert KB.hardware["rtx-4090"].peak("bf16") == 165.2  # fp32 accumulate, as frameworks multiply
    assert KB.hardware["rtx-3090"].peak("bf16") == 71.0  # GeForce: fp32 accumulate at half the fp16-accumulate rate
    assert KB.hardware["a40"].peak("bf16") == 149.7  # a data-center part: fp32 accumulate at the full rate
    assert KB.hardware["rtx-3090"].peak("fp8") is None and KB.hardware["a40"].peak("fp8") is None  # Ampere


def test_mi250x_gcd_is_half_the_package() -> None:
    gcd, package = KB.hardware["mi250x-gcd"], KB.hardware["mi250x-oam"]
    for dtype in package.peak_tflops:
        assert gcd.peak(dtype) == pytest.approx((package.peak(dtype) or 0) / 2, rel=1e-3), dtype
    assert gcd.memory_gb == (package.memory_gb or 0) / 2
    assert gcd.memory_bandwidth_gbs == pytest.approx((package.memory_bandwidth_gbs or 0) / 2)
    assert "tf32" not in package.peak_tflops and "fp8" not in package.peak_tflops  # CDNA 2 has neither


def test_v100_has_no_bf16_and_its_fp16_tensor_peak_is_125() -> None:
    v100 = KB.hardware["v100-sxm2"]
    assert "bf16" not in v100.peak_tflops and "tf32" not in v100.peak_tflops and "fp8" not in v100.peak_tflops
    assert v100.peak("fp16") == 125.0


def test_tpu_v5p_has_int8_and_no_fp8() -> None:
    v5p = KB.hardware["tpu-v5p"]
    assert "fp8" not in v5p.peak_tflops
    assert v5p.peak("int8") == 918.0 and v5p.peak("bf16") == 459.0


def test_other_corrections() -> None:
    assert "fp8" not in KB.hardware["a100-sxm-80gb"].peak_tflops  # Ampere has no fp8
    assert KB.hardware["b200"].peak("tf32") == 1125.0  # HGX B200: TF32 18 PF for 8 GPUs with sparsity
    assert "tf32" not in KB.hardware["mi355x"].peak_tflops  # CDNA 4 has no TF32 matrix hardware


# ---- the report says which variant it picked ------------------------------------------------------------------------

FACTS = {"hardware": "h100", "dtype": "bf16", "gpu_util": "45%", "data_wait_s": 0.12, "step_time_s": 0.3}


def test_the_report_records_the_family_default_on_the_observation() -> None:
    report = EXPERT.diagnose(FACTS)
    obs = report.observations["hardware"]
    assert obs.value == "h100-sxm"
    assert obs.detail["resolved_from"] == "h100"
    assert "h100 -> h100-sxm (the most common variant; say --set hardware=h100-pcie" in str(obs.detail["note"])
    how = report.how("hardware").text()
    assert "resolved_from: h100" in how and "h100 -> h100-sxm" in how
    assert "assumed h100 -> h100-sxm" in export(report, "markdown")
    console = Console(file=io.StringIO(), width=200, record=True)
    print_report(report, console)
    assert "Assumed h100 -> h100-sxm" in console.export_text()


def test_an_exact_id_adds_no_note() -> None:
    report = EXPERT.diagnose({**FACTS, "hardware": "h100-sxm"})
    assert "resolved_from" not in report.observations["hardware"].detail
    console = Console(file=io.StringIO(), width=200, record=True)
    print_report(report, console)
    assert "Assumed" not in console.export_text()


def test_a_family_name_from_telemetry_is_recorded_too(tmp_path: Path) -> None:
    log = tmp_path / "smi.csv"
    log.write_text("timestamp, index, name, utilization.gpu [%]\n"
                   "2024/03/05 13:48:11.412, 0, NVIDIA H100, 60 %\n2024/03/05 13:48:12.412, 0, NVIDIA H100, 62 %\n")
    obs = ingest(log, kb=KB).facts["hardware"]
    assert obs.value == "h100-sxm" and obs.detail["resolved_from"] == "NVIDIA H100"
    assert "h100-pcie" in str(obs.detail["note"])


# ---- a pair the catalog lacks is a finding ----------------------------------------------------------------------

@pytest.mark.parametrize(("hardware", "dtype"), [("a100-sxm-80gb", "fp8"), ("v100-sxm2", "bf16"), ("t4", "bf16"),
                                                  ("a10g", "bf16"), ("h20", "fp8"), ("tpu-v5p", "fp8")])
def test_a_hardware_dtype_pair_without_a_peak_is_a_finding(hardware: str, dtype: str) -> None:
    report = EXPERT.diagnose({"hardware": hardware, "dtype": dtype, "flops": 1e14, "step_time_s": 0.5})
    finding = next(f for f in report.findings if f.id == "peak_unknown")
    assert f"no dense {dtype} peak for {hardware}" in finding.message
    assert "mfu" not in report.derived and "peak_tflops" not in report.derived


def test_a_pair_with_a_peak_is_no_finding() -> None:
    report = EXPERT.diagnose({"hardware": "l40", "dtype": "fp8", "flops": 1e14, "step_time_s": 0.5})
    assert "peak_unknown" not in {f.id for f in report.findings}
    assert report.derived["peak_tflops"].value == 362.0


def test_no_published_bandwidth_leaves_the_roofline_unknown() -> None:
    report = EXPERT.diagnose({"hardware": "a10g", "dtype": "fp16", "gpu_util": 0.9})
    assert "peak_bandwidth" not in report.derived and "ridge_point" not in report.derived


# ---- hardware a user brings -------------------------------------------------------------------------------------

MY_GPU = {"id": "my-gpu", "name": "Lab accelerator", "vendor": "lab", "peak_tflops": {"bf16": 400.0, "fp32": 50.0},
          "sparse_headline": False, "memory_gb": 64, "memory_type": "HBM3", "memory_bandwidth_gbs": 2000,
          "source": "https://example.org/my-gpu", "aliases": ["Lab Accel X1"]}


def test_extra_hardware_extends_one_expert_only() -> None:
    other = {**MY_GPU, "id": "other-gpu", "aliases": ["Other X2"]}
    first = Expert(engine="pure", extra_hardware=[MY_GPU])
    second = Expert(engine="pure", extra_hardware=[HardwareSpec.model_validate(other)])
    assert "my-gpu" in first.kb.hardware and "other-gpu" not in first.kb.hardware
    assert "other-gpu" in second.kb.hardware and "my-gpu" not in second.kb.hardware
    assert "my-gpu" not in EXPERT.kb.hardware and "other-gpu" not in EXPERT.kb.hardware
    assert first.kb.resolve_hardware("lab-accel-x1") == "my-gpu" and second.kb.resolve_hardware("Lab Accel X1") is None
    report = first.diagnose({"hardware": "Lab Accel X1", "dtype": "bf16", "flops": 1e14, "step_time_s": 0.5})
    assert report.derived["peak_tflops"].value == 400.0
    assert report.derived["peak_tflops"].constants["source"] == "https://example.org/my-gpu"
    with pytest.raises(ObservationError, match="unknown hardware"):
        second.diagnose({"hardware": "my-gpu"})
    with pytest.raises(ObservationError, match="unknown hardware"):
        EXPERT.diagnose({"hardware": "my-gpu"})


def test_extra_hardware_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text("hardware:\n  - id: my-gpu\n    name: Lab accelerator\n    vendor: lab\n"
                    "    peak_tflops: {bf16: 400}\n    sparse_headline: false\n    memory_gb: 64\n"
                    "    memory_type: HBM3\n    memory_bandwidth_gbs: 2000\n    source: lab measurements\n")
    ex = Expert(engine="pure", extra_hardware=path)
    assert ex.kb.hardware["my-gpu"].peak("bf16") == 400.0
    assert ex.kb.resolve_hardware("h100") == "h100-sxm"  # the catalog's names and families still work


@pytest.mark.parametrize(("extra", "needle"), [
    ([{**MY_GPU, "id": "h100-sxm"}], "h100-sxm: the id is already used by the catalog"),
    ([MY_GPU, MY_GPU], "already used by another entry"),
    ([{**MY_GPU, "aliases": ["NVIDIA H100 80GB HBM3"]}], "also names h100-sxm"),
    ([{**MY_GPU, "peak_tflops": {"fp4": 800.0}}], "unknown dtype 'fp4'"),
    ([{**MY_GPU, "memory_bandwidth_gbs": -1}], r"extra_hardware\[0\] \(my-gpu\): memory_bandwidth_gbs"),
    ([{k: v for k, v in MY_GPU.items() if k != "name"}], r"extra_hardware\[0\] \(my-gpu\): name"),
    ([{**MY_GPU, "colour": "red"}], "colour"),
    (["my-gpu"], "is a str"),
    (MY_GPU, "is one mapping"),
])
def test_bad_extra_hardware_names_entry_and_field(extra: object, needle: str) -> None:
    with pytest.raises(KnowledgeBaseError, match=needle):
        Expert(engine="pure", extra_hardware=extra)  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "needle"), [
    ("hardware:\n  - id: my-gpu\n    vendor: lab\n", "gpus.yaml: hardware.0 (my-gpu).name"),
    ("- id: Bad_Id\n  name: x\n", "hardware.0 (Bad_Id).id"),
    ("hardware: [\n", "gpus.yaml:"),
    ("just text\n", "holds a str"),
    ("hardware: []\n", "holds no hardware entries"),
])
def test_a_bad_hardware_file_names_file_entry_and_field(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(text)
    with pytest.raises(KnowledgeBaseError) as info:
        Expert(engine="pure", extra_hardware=path)
    assert needle in str(info.value)


def test_a_missing_hardware_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(KnowledgeBaseError, match="no such file"):
        Expert(engine="pure", extra_hardware=tmp_path / "nope.yaml")


@pytest.mark.parametrize("hw_id", sorted(KB.hardware))
def test_hardware_show_renders_every_entry(hw_id: str) -> None:
    from expert.commands.hardware import entry_table

    console = Console(file=io.StringIO(), width=120, record=True)
    console.print(entry_table(KB, KB.hardware[hw_id]))
    text = console.export_text()
    assert hw_id in text and "dense bf16 peak" in text
    assert KB.hardware[hw_id].source.replace(" ", "")[:60] in text.replace(" ", "").replace("│", "").replace("\n", "")


def test_a_consultation_keeps_the_family_note() -> None:
    from expert import Consultation

    c = Consultation(EXPERT)
    c.answer("job", "training")
    c.answer("roof", "h100 bf16")  # the combined hardware-and-precision question
    assert c.report().observations["hardware"].detail["resolved_from"] == "h100"
    c.answer("hardware", "h100-pcie")  # an id as typed: no assumption any more
    assert "resolved_from" not in c.report().observations["hardware"].detail
