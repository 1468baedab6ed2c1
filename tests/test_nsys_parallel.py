"""An export's devices swept in worker processes (expert/ingest/nsys/parallel.py) give the one-process result: the
same facts, notes, stats and per-device analyses, in device order; when to use workers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import expert
from expert.ingest import nsys
from expert.ingest._source import Source
from expert.ingest.nsys import parallel
from expert.ingest.nsys.analysis import DeviceResult, _Analysis

KB = expert.default_expert().kb
SHARED = Path(os.environ.get("DAM_SHARED") or Path(__file__).resolve().parents[1].parent / "shared")
TWO_GPU = sorted((SHARED / "traces" / "nsys").glob("mfu_2gpu_*.sqlite")) if (SHARED / "traces" / "nsys").is_dir() \
    else []


@pytest.mark.skipif(not TWO_GPU, reason="../shared/traces/nsys/ (the real 2-GPU exports) is not here")
@pytest.mark.parametrize("path", TWO_GPU, ids=lambda p: p.name)
def test_devices_swept_in_workers_give_the_one_process_result(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one = nsys.analyse(Source(path), KB, workers=1)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_ROWS", 0)
    calls: list[int] = []
    sweep = parallel.sweep_devices

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return sweep(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(parallel, "sweep_devices", counted)
    here: list[int] = []
    sweep_device = _Analysis.sweep_device

    def counted_here(self: _Analysis, dev: int, *args: Any, **kwargs: Any) -> DeviceResult:
        here.append(dev)
        return sweep_device(self, dev, *args, **kwargs)

    monkeypatch.setattr(_Analysis, "sweep_device", counted_here)
    two = nsys.analyse(Source(path), KB, workers=2)
    assert calls, "the devices were not swept in workers"
    assert here == [min(one.devices)], "this process swept a device a worker should have (the pool broke?)"
    assert len(one.devices) == 2
    assert repr(two.result) == repr(one.result)
    assert sorted(two.devices) == sorted(one.devices)
    for dev, got in two.devices.items():
        want = one.devices[dev]
        assert (got.windows, got.label, got.n_steps, repr(got.analysis), repr(got.result), repr(got.rank)) == \
            (want.windows, want.label, want.n_steps, repr(want.analysis), repr(want.result), repr(want.rank))
    assert repr(two.job) == repr(one.job)


def test_lanes() -> None:
    big = parallel.PARALLEL_MIN_ROWS
    assert parallel.lanes(1, 10 * big, None) == 1  # one device: nothing to share out
    assert parallel.lanes(4, big - 1, None) == 1  # too small to pay for starting workers
    assert parallel.lanes(4, big, 1) == 1
    assert parallel.lanes(2, big, 8) == 2  # never more than the devices
    assert 1 <= parallel.lanes(8, big, None) <= 8
