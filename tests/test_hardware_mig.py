"""MIG slices (hardware.yaml `mig`, expert/kb/mig.py): each Multi-Instance GPU profile is an entry of its own, named
as nvidia-smi and torch print it, with its share of the part's peaks and bandwidth, and a job on a slice is measured
against the slice, not the whole GPU."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from expert import Expert
from expert.commands.hardware import catalog_table
from expert.errors import ObservationError

EXPERT = Expert(engine="pure")
KB = EXPERT.kb


@pytest.mark.parametrize(("name", "expected"), [
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "a100-40gb-mig-1g-5gb"),  # torch.cuda.get_device_name, nvidia-smi -L
    ("A100-SXM4-40GB-MIG-1g.5gb", "a100-40gb-mig-1g-5gb"),  # GPU feature discovery's nvidia.com/gpu.product label
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb+me", "a100-40gb-mig-1g-5gb"),  # with the media engines: the same slice
    ("a100-40gb-mig-3g-20gb", "a100-40gb-mig-3g-20gb"),
    ("NVIDIA A100-SXM4-80GB MIG 1g.10gb", "a100-sxm-80gb-mig-1g-10gb"),
    ("NVIDIA A100 80GB PCIe MIG 2g.20gb", "a100-pcie-80gb-mig-2g-20gb"),
    ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "h100-sxm-mig-3g-40gb"),
    ("NVIDIA H100 NVL MIG 1g.12gb", "h100-nvl-mig-1g-12gb"),
    ("NVIDIA H200 MIG 1g.18gb", "h200-sxm-mig-1g-18gb"),
    ("NVIDIA A30 MIG 2g.12gb", "a30-mig-2g-12gb"),
    ("NVIDIA B200 MIG 7g.180gb", "b200-mig-7g-180gb"),
])
def test_mig_device_names_resolve_to_their_slice(name: str, expected: str) -> None:
    assert KB.resolve_hardware(name) == expected


def test_a_slice_has_its_share_of_the_peaks_and_the_bandwidth() -> None:
    part = KB.hardware["a100-40gb"]
    small, half = KB.hardware["a100-40gb-mig-1g-5gb"], KB.hardware["a100-40gb-mig-3g-20gb"]
    assert small.peak("bf16") == pytest.approx(312 / 7, abs=0.01)
    assert half.peak("bf16") == pytest.approx(312 * 3 / 7, abs=0.01)
    assert small.memory_bandwidth_gbs == pytest.approx(1555 / 8, abs=0.1)  # one memory slice of eight
    assert half.memory_bandwidth_gbs == pytest.approx(1555 / 2, abs=0.1)  # 3g.20gb holds four memory slices
    assert small.memory_gb == 5 and half.memory_gb == 20
    assert "fp8" not in small.peak_tflops  # the part's formats, no more
    assert small.scale_up_link is None and small.host_link == part.host_link  # no NVLink peer-to-peer between slices
    assert small.mig_of == "a100-40gb" and "1 of its 7 compute slices" in (small.notes or "")
    assert KB.hardware["a100-40gb-mig-1g-10gb"].memory_bandwidth_gbs == pytest.approx(1555 / 4, abs=0.1)
    whole = KB.hardware["a30-mig-4g-24gb"]  # the A30 has four compute and four memory slices
    assert whole.peak("bf16") == KB.hardware["a30"].peak("bf16") and whole.memory_bandwidth_gbs == 933


def test_a_slice_upgrades_to_its_whole_gpu() -> None:
    upgrade = KB.hardware_upgrades["h100-sxm-mig-1g-10gb"]
    assert upgrade.to == "h100-sxm" and "MIG 1g.10gb" in upgrade.why
    assert KB.hardware_upgrades["h100-sxm"].to == "b200"  # the parts keep their own


def test_decode_on_a_slice_is_measured_against_the_slice() -> None:
    # TinyLlama (1.1B, fp16) at batch 1, 40 tokens/s on a 1g.5gb slice: 2.2 GB a token over 194 GB/s is a roof of
    # 88 tokens/s, 45 % of it; against the whole A100 (1,555 GB/s) it would read 6 %
    facts = {"workload": "inference", "phase": "decode", "hardware": "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
             "dtype": "fp16", "batch_size": 1, "model_params": 1.1e9, "tokens_per_s": 40}
    on_slice = EXPERT.diagnose(facts).derived["mem_bw_util"].value
    on_part = EXPERT.diagnose({**facts, "hardware": "a100-40gb"}).derived["mem_bw_util"].value
    assert on_slice == pytest.approx(40 * 2.2e9 / (1555e9 / 8), rel=1e-3)
    assert on_slice == pytest.approx(on_part * 8, rel=1e-3)  # the slice's bandwidth is rounded to 0.1 GB/s


def test_an_unknown_profile_is_refused_with_the_parts_own_slices_suggested() -> None:
    with pytest.raises(ObservationError) as raised:
        EXPERT.diagnose({"hardware": "NVIDIA A100-SXM4-40GB MIG 5g.25gb"})
    message = str(raised.value)
    assert "unknown hardware" in message and "a100-40gb-mig-" in message and "a100-sxm-80gb" not in message


def test_the_list_shows_parts_and_points_to_the_slices() -> None:
    def text(mig: bool) -> str:
        out = io.StringIO()
        Console(file=out, width=200).print(catalog_table(KB, mig=mig))
        return out.getvalue()

    parts, slices = text(False), text(True)
    count = sum(hw.mig_of is not None for hw in KB.hardware.values())
    assert "a100-40gb " in parts and "a100-40gb-mig-1g-5gb" not in parts and f"{count} MIG slices" in parts
    assert any(line.split()[:2] == ["a100-40gb", "1g.5gb"] for line in slices.replace("│", " ").splitlines())
    assert not any(line.split()[:1] == ["h100-sxm"] and "MIG" not in line for line in slices.splitlines())
    assert "a100-40gb-mig" not in json.dumps(KB.part_ids())
