"""Generate real PyTorch profiler traces on the CPU: a tiny training loop fed by a slow Dataset, and by a fast one.

    python tests/gen_traces/make_traces.py OUT_DIR [--steps 5]

writes OUT_DIR/slow_loader.json (each sample sleeps, so the loop waits for data: input-bound) and
OUT_DIR/fast_loader.json (samples are ready, the step is spent in the model: not input-bound). Both are recorded with
torch.profiler (CPU activity, a wait/warmup/active schedule, with_flops=True) and exported as Chrome traces, exactly
as a user would. Needs torch (`pip install -e .[traces]`); the CPU wheel is enough.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Random features and labels; `delay_s` per sample imitates slow decoding or storage."""

    def __init__(self, n: int, features: int, delay_s: float) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, features, generator=generator)
        self.y = torch.randint(0, 10, (n,), generator=generator)
        self.delay_s = delay_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.x[i], self.y[i]


def record(path: Path, *, delay_s: float, width: int, steps: int, batch: int = 16) -> None:
    """Profile `steps` training steps (after one warm-up step) and export the Chrome trace to `path`."""
    torch.manual_seed(0)
    features = 64
    model = nn.Sequential(nn.Linear(features, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                          nn.Linear(width, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(Samples(batch * (steps + 3), features, delay_s), batch_size=batch, num_workers=0)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=steps),
                 with_flops=True, on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for x, y in loader:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            prof.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    record(args.out / "slow_loader.json", delay_s=0.002, width=128, steps=args.steps)
    record(args.out / "fast_loader.json", delay_s=0.0, width=1024, steps=args.steps)


if __name__ == "__main__":
    main()
