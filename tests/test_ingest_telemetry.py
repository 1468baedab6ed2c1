"""nvidia-smi, dcgmi dmon and dcgm-exporter text: fixtures written from the documented formats, plus malformed ones."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import cli
from expert.errors import ObservationError
from expert.ingest import ingest, ingest_result

FIXTURES = Path(__file__).parent / "fixtures" / "telemetry"
MALFORMED = FIXTURES / "malformed"


def test_nvidia_smi_csv_with_units_na_and_repeated_samples() -> None:
    result = ingest_result(FIXTURES / "nvidia_smi_query.csv")
    assert result.files[0].format == "nvidia-smi"
    values = result.observations.values()
    assert values["gpu_util"] == pytest.approx((99 + 97 + 45 + 40 + 43) / 5 / 100)  # [N/A] is skipped
    assert values["hardware"] == "h100-sxm"
    detail = result.observations.facts["gpu_util"].detail
    assert (detail["samples"], detail["min"], detail["max"]) == (5, 0.4, 0.99)
    assert detail["devices"] == "GPU 0,GPU 1"
    assert "power.draw" in str(result.files[0].stats["ignored_columns"])


def test_nvidia_smi_csv_nounits_repeated_header_noheader_and_selection() -> None:
    assert ingest(FIXTURES / "nvidia_smi_nounits.csv").values() == {"gpu_util": pytest.approx(0.6),
                                                                     "hardware": "a100-sxm-80gb"}
    with pytest.raises(ObservationError, match=r"nvidia_smi_noheader.csv:1: no header row.*--columns"):
        ingest(FIXTURES / "nvidia_smi_noheader.csv")
    values = ingest(FIXTURES / "nvidia_smi_noheader.csv", columns=["timestamp", "index", "name", "utilization.gpu"])
    assert values.values() == {"gpu_util": pytest.approx(0.32), "hardware": "l4"}
    gpu1 = ingest(FIXTURES / "nvidia_smi_query.csv", gpus=[1]).values()
    assert gpu1["gpu_util"] == pytest.approx((97 + 43) / 200)
    late = ingest_result(FIXTURES / "nvidia_smi_query.csv", window="1:")  # seconds 1.. of the log
    assert late.observations.values()["gpu_util"] == pytest.approx((45 + 40 + 43) / 300)
    first = ingest(FIXTURES / "nvidia_smi_query.csv", samples="1").values()
    assert first["gpu_util"] == pytest.approx(0.98)


def test_nvidia_smi_dmon_with_repeated_headers_dashes_and_time_columns() -> None:
    result = ingest_result(FIXTURES / "nvidia_smi_dmon.txt")
    assert result.observations.values() == {"gpu_util": pytest.approx((95 + 93 + 40 + 42 + 44) / 500)}
    assert "device name" in result.not_derived["hardware"]
    timed = ingest_result(FIXTURES / "nvidia_smi_dmon_time.txt", window="1:2")
    assert timed.observations.values()["gpu_util"] == pytest.approx(0.25)


def test_dcgmi_dmon_fields_by_tag_with_na_and_repeated_headers() -> None:
    result = ingest_result(FIXTURES / "dcgmi_dmon.txt")
    values = result.observations.values()
    assert values["gpu_util"] == pytest.approx((98 + 97 + 99 + 97 + 98) / 500)  # 203 GPUTL wins over 1001 GRACT
    assert values["sm_active"] == pytest.approx((0.812 + 0.790 + 0.830 + 0.800 + 0.820 + 0.795) / 6)
    assert values["tensor_active"] == pytest.approx((0.928 + 0.910 + 0.930 + 0.915 + 0.925 + 0.912) / 6)
    assert values["mem_bw_util"] == pytest.approx((0.310 + 0.300 + 0.320 + 0.305 + 0.315 + 0.302) / 6)
    assert result.observations.facts["sm_active"].detail["field_id"] == 1002
    assert result.files[0].stats["field 1003 SMOCC"] == pytest.approx(0.408667, abs=1e-6)
    assert "device name" in result.not_derived["hardware"]


def test_dcgmi_dmon_mig_rows_and_missing_fields() -> None:
    result = ingest_result(FIXTURES / "dcgmi_dmon_mig.txt")
    values = result.observations.values()
    assert values["sm_active"] == pytest.approx(0.4)
    assert values["tensor_active"] == pytest.approx(0.3)  # N/A rows are skipped
    assert "203" in result.not_derived["gpu_util"]


def test_dcgm_exporter_text_old_and_new_names_labels_and_sentinels() -> None:
    result = ingest_result(FIXTURES / "dcgm_exporter.prom")
    values = result.observations.values()
    assert values["gpu_util"] == pytest.approx(0.98)
    assert values["sm_active"] == pytest.approx(0.72)  # DCGM_FI_PROF_SM_UTIL_RATIO, the 4.x name of field 1002
    assert values["tensor_active"] == pytest.approx(0.40)
    assert values["mem_bw_util"] == pytest.approx(0.55)  # GPU 1's 9223372036854775794 means "no data"
    assert values["hardware"] == "h100-sxm"
    blank = ingest_result(FIXTURES / "dcgm_exporter_sentinel.prom")
    assert "blank" in blank.not_derived["sm_active"]
    assert blank.observations.values()["gpu_util"] == pytest.approx(0.5)
    assert ingest(FIXTURES / "dcgm_exporter_sentinel.prom", window="10:").values()["gpu_util"] == pytest.approx(0.6)


def test_a_trace_and_a_dcgm_log_merge() -> None:
    result = ingest_result([FIXTURES / "kineto_two_steps.json", FIXTURES / "dcgmi_dmon.txt"])
    values = result.observations.values()
    assert values["gpu_util"] == pytest.approx(1130 / 2100)  # the trace wins for what both measure
    assert values["sm_active"] == pytest.approx(0.8078333)
    assert result.observations.facts["sm_active"].source == "dcgmi:dcgmi_dmon.txt"
    assert any(n.startswith("gpu_util: used") for n in result.notes)
    assert "hardware" not in result.not_derived  # the trace named it


@pytest.mark.parametrize(("name", "where", "message"), [
    ("nvidia_smi_truncated.csv", ":3", "expected 4 columns"),
    ("nvidia_smi_wrong_header.csv", ":1", "none of the columns"),
    ("nvidia_smi_non_numeric.csv", ":3", "'busy' is not a number"),
    ("dmon_non_numeric.txt", ":4", "'5O' is not a number"),
    ("dcgmi_non_numeric.txt", ":4", "'0.8x2' is not a number"),
    ("dcgmi_truncated.txt", ":4", "expected 2 values"),
    ("prometheus_bad_labels.prom", ":2", "malformed labels"),
    ("prometheus_non_numeric.prom", ":2", "'lots' is not a number"),
    ("empty.csv", "", "the file is empty"),
    ("binary.bin", "", "binary data"),
])
def test_malformed_logs_name_file_and_line(name: str, where: str, message: str) -> None:
    with pytest.raises(ObservationError) as info:
        ingest(MALFORMED / name)
    assert f"{name}{where}:" in str(info.value)
    assert message in str(info.value)


def test_malformed_input_exits_2_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("nvidia_smi_non_numeric.csv", "binary.bin", "trace_truncated.json"):
        assert cli.main(["ingest", str(MALFORMED / name)]) == 2
        err = capsys.readouterr().err
        assert name in err and "Traceback" not in err
    assert cli.main(["ingest", str(FIXTURES / "nvidia_smi_query.csv"), "--steps", "5:2"]) == 2
    assert "end is before the start" in capsys.readouterr().err
    assert cli.main(["ingest", "no/such/file.json"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_streams_and_explicit_formats() -> None:
    text = (FIXTURES / "dcgmi_dmon.txt").read_text()
    assert ingest(io.StringIO(text)).values()["sm_active"] == pytest.approx(0.8078333)
    with pytest.raises(ObservationError, match="a data row before"):
        ingest(FIXTURES / "dcgmi_dmon.txt", format="nvidia-smi-dmon")


# -- hbm_used_frac: nvidia-smi memory.used / memory.total, DCGM's frame buffer fields -------------------------------

SMI_MEMORY = """timestamp, index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB]
2024/03/05 13:48:11.412, 0, NVIDIA H100 80GB HBM3, 99 %, 20000 MiB, 80000 MiB
2024/03/05 13:48:11.412, 1, NVIDIA H100 80GB HBM3, 97 %, 30000 MiB, 80000 MiB
2024/03/05 13:48:12.413, 0, NVIDIA H100 80GB HBM3, 45 %, 72000 MiB, 80000 MiB
2024/03/05 13:48:12.413, 1, NVIDIA H100 80GB HBM3, 40 %, [N/A], 80000 MiB
2024/03/05 13:48:13.414, 0, NVIDIA H100 80GB HBM3, 40 %, 40000 MiB, 80000 MiB
"""


def test_nvidia_smi_memory_columns_give_the_peak_share_of_device_memory(tmp_path: Path) -> None:
    path = tmp_path / "smi.csv"
    path.write_text(SMI_MEMORY)
    result = ingest_result(path)
    assert result.observations.values()["hbm_used_frac"] == pytest.approx(0.9)  # the high-water mark, not the mean
    detail = result.observations.facts["hbm_used_frac"].detail
    assert (detail["samples"], detail["min"], detail["max"]) == (4, 0.25, 0.9)
    assert detail["mean"] == pytest.approx((0.25 + 0.375 + 0.9 + 0.5) / 4)
    assert "peak" in str(detail["method"]) and "high-water mark" in str(detail["aggregate"])
    assert "memory.used" not in str(result.files[0].stats.get("ignored_columns", ""))
    first = ingest_result(path, samples="1:1").observations.values()["hbm_used_frac"]
    assert first == pytest.approx(0.375)  # --samples selects the window the peak is taken over
    fixture = ingest_result(FIXTURES / "nvidia_smi_query.csv").observations.values()
    assert fixture["hbm_used_frac"] == pytest.approx(30994 / 81559)
    no_memory = ingest_result(FIXTURES / "nvidia_smi_nounits.csv")
    if "hbm_used_frac" in no_memory.not_derived:
        assert "--query-gpu" in no_memory.not_derived["hbm_used_frac"]


def test_dcgm_frame_buffer_fields_give_the_peak_share_of_device_memory(tmp_path: Path) -> None:
    prom = tmp_path / "fb.prom"
    lines = []
    for used0, free0, used1, free1 in ((20000, 60000, 10000, 70000), (64000, 16000, 12000, 68000)):
        lines += [f'DCGM_FI_DEV_FB_USED{{gpu="0",modelName="NVIDIA H100 80GB HBM3"}} {used0}',
                  f'DCGM_FI_DEV_FB_USED{{gpu="1",modelName="NVIDIA H100 80GB HBM3"}} {used1}',
                  f'DCGM_FI_DEV_FB_FREE{{gpu="0",modelName="NVIDIA H100 80GB HBM3"}} {free0}',
                  f'DCGM_FI_DEV_FB_FREE{{gpu="1",modelName="NVIDIA H100 80GB HBM3"}} {free1}']
    prom.write_text("\n".join(lines) + "\n")
    result = ingest_result(prom)
    assert result.observations.values()["hbm_used_frac"] == pytest.approx(0.8)  # 64000 / (64000 + 16000)
    detail = result.observations.facts["hbm_used_frac"].detail
    assert detail["samples"] == 4 and detail["min"] == pytest.approx(0.125)
    assert "FBUSD / (252 FBUSD + 251 FBFRE)" in str(detail["metric"])
    assert "other_metrics" not in result.files[0].stats  # the frame buffer metrics are read, not counted aside
    only_used = ingest_result(FIXTURES / "dcgm_exporter.prom")
    assert "251 FBFRE is not in" in only_used.not_derived["hbm_used_frac"]
    dmon = tmp_path / "dmon.txt"
    dmon.write_text("#Entity   GPUTL  FBUSD  FBFRE\n      ID\n    GPU 0     98  30000  50000\n"
                    "    GPU 1     97    N/A    N/A\n    GPU 0     99  40000  40000\n    GPU 1     96  10000  70000\n")
    values = ingest_result(dmon).observations.values()
    assert values["hbm_used_frac"] == pytest.approx(0.5) and values["gpu_util"] == pytest.approx(0.975)
    why = ingest_result(FIXTURES / "dcgmi_dmon.txt").not_derived["hbm_used_frac"]
    assert why.startswith("fields 252 FBUSD and 251 FBFRE are not in the log")
