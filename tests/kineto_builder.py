"""A small builder of Kineto (PyTorch profiler) Chrome traces for tests: steps, operators with shapes, runtime calls,
kernels linked by correlation id, python functions and DataLoader spans, written in libkineto's own layout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936, "computeMajor": 9,
        "computeMinor": 0, "numSms": 132}


class Trace:
    def __init__(self, device: dict[str, Any] | None = H100) -> None:
        self.events: list[dict[str, Any]] = []
        self.device = device
        self._corr = 0
        self._ext = 0

    def _x(self, cat: str, name: str, ts: float, dur: float, tid: int = 1, pid: int = 100,
           **args: Any) -> dict[str, Any]:
        ev: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
        if args:
            ev["args"] = args
        self.events.append(ev)
        return ev

    def step(self, number: int, ts: float, dur: float) -> None:
        self._x("user_annotation", f"ProfilerStep#{number}", ts, dur)

    def loader(self, ts: float, dur: float) -> None:
        self._x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", ts, dur)

    def python(self, name: str, ts: float, dur: float, tid: int = 1) -> None:
        self._x("python_function", name, ts, dur, tid=tid)

    def op(self, name: str, ts: float, dur: float, *, dims: list[Any] | None = None, types: list[str] | None = None,
           concrete: list[str] | None = None, tid: int = 1) -> int:
        self._ext += 1
        args: dict[str, Any] = {"External id": self._ext}
        if dims is not None:
            args["Input Dims"] = dims
            args["Input type"] = types or ["float"] * len(dims)
            if concrete is not None:
                args["Concrete Inputs"] = concrete
        self._x("cpu_op", name, ts, dur, tid=tid, **args)
        return self._ext

    def runtime(self, name: str, ts: float, dur: float, *, ext: int | None = None, tid: int = 1) -> int:
        self._corr += 1
        args: dict[str, Any] = {"correlation": self._corr}
        if ext is not None:
            args["External id"] = ext
        self._x("cuda_runtime", name, ts, dur, tid=tid, **args)
        return self._corr

    def kernel(self, name: str, ts: float, dur: float, corr: int, *, device: int = 0, stream: int = 7,
               cat: str = "kernel") -> None:
        self._x(cat, name, ts, dur, tid=stream, pid=device, device=device, stream=stream, correlation=corr)

    def launch(self, name: str, kernel: str, host_ts: float, gpu_ts: float, gpu_dur: float, *,
               op_dur: float = 0.0, dims: list[Any] | None = None, types: list[str] | None = None,
               concrete: list[str] | None = None, launch_dur: float = 4.0) -> None:
        """An operator at host_ts that launches one kernel (cudaLaunchKernel inside it) running at gpu_ts."""
        ext = self.op(name, host_ts, max(op_dur, launch_dur + 2), dims=dims, types=types, concrete=concrete)
        corr = self.runtime("cudaLaunchKernel", host_ts + 1, launch_dur, ext=ext)
        self.kernel(kernel, gpu_ts, gpu_dur, corr)

    def write(self, path: Path) -> Path:
        """libkineto's layout: one event per indented block, metadata around the events."""
        blocks = ",\n".join("  " + json.dumps(ev) for ev in self.events)
        head: dict[str, Any] = {"schemaVersion": 1}
        if self.device is not None:
            head["deviceProperties"] = [self.device]
        text = json.dumps(head)[:-1] + ', "traceEvents": [\n' + blocks + "\n  ]}\n"
        path.write_text(text)
        return path
