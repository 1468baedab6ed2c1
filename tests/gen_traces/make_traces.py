"""Generate real PyTorch profiler traces on the CPU: a tiny training loop fed by a slow Dataset, and by a fast one.

    python tests/gen_traces/make_traces.py OUT_DIR [--steps 5]

writes OUT_DIR/slow_loader.json (each sample sleeps, so the loop waits for data: input-bound) and
OUT_DIR/fast_loader.json (samples are ready, the step is spent in the model: not input-bound). Both are recorded with
torch.profiler (CPU activity, a wait/warmup/active schedule, record_shapes=True, with_stack=True, with_flops=True) and
exported as Chrome traces, exactly as a user would. OUT_DIR/ops.json runs one call of every operator kind
expert/ingest/opflops.py counts (matmuls, convolutions, attention, norms, softmax, elementwise), and
OUT_DIR/ops.flops.json maps each operator's External id to the FLOPs PyTorch's own with_flops counted for it (the
exported trace no longer carries them). Needs torch (`pip install -e .[traces]`); the CPU wheel is enough.
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
                 record_shapes=True, with_stack=True, with_flops=True,
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for x, y in loader:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            prof.step()


def record_ops(path: Path) -> None:
    """One call of each operator kind, with shapes, stacks and with_flops; writes the trace and PyTorch's counts."""
    import json

    import torch.nn.functional as F

    torch.manual_seed(0)
    x, w, b = torch.randn(8, 16), torch.randn(32, 16), torch.randn(32)
    a3, b3, c3 = torch.randn(4, 8, 16), torch.randn(4, 16, 12), torch.randn(4, 8, 12)
    img, cw, cb = torch.randn(2, 3, 17, 19), torch.randn(6, 3, 3, 3), torch.randn(6)
    gimg, gw = torch.randn(2, 4, 9, 9), torch.randn(8, 2, 3, 3)
    q, k, v = torch.randn(2, 4, 10, 8), torch.randn(2, 4, 12, 8), torch.randn(2, 4, 12, 6)
    bn_x, bn_w, bn_b = torch.randn(4, 6, 5, 5), torch.ones(6), torch.zeros(6)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True, with_flops=True) as prof:
        torch.mm(x, w.t())
        torch.addmm(b, x, w.t())
        torch.bmm(a3, b3)
        torch.baddbmm(c3, a3, b3)
        torch.matmul(a3, b3)
        F.linear(x, w, b)
        F.conv2d(img, cw, cb, stride=2, padding=1)
        F.conv2d(gimg, gw, None, stride=1, padding=0, dilation=2, groups=2)
        F.conv_transpose2d(gimg, torch.randn(4, 3, 3, 3), stride=2, padding=1)
        F.scaled_dot_product_attention(q, k, v)
        F.scaled_dot_product_attention(q, k[:, :, :10], v[:, :, :10], is_causal=True)
        F.layer_norm(x, (16,), torch.ones(16), torch.zeros(16))
        F.rms_norm(x, (16,), torch.ones(16))
        F.batch_norm(bn_x, torch.zeros(6), torch.ones(6), bn_w, bn_b, training=True)
        F.softmax(x, dim=-1)
        y = x + x
        y = y * 2.0
        y = torch.relu(y)
        y = F.gelu(y)
        y.add_(1.0)
        y.mul_(x)
        torch.mul(x, x[:, :1])  # broadcast: the result has x's shape
    prof.export_chrome_trace(str(path))
    counts = {str(e.external_id): e.flops for e in prof.events() if e.flops}
    path.with_suffix(".flops.json").write_text(json.dumps(counts, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    record(args.out / "slow_loader.json", delay_s=0.002, width=128, steps=args.steps)
    record(args.out / "fast_loader.json", delay_s=0.0, width=2048, steps=args.steps)
    record_ops(args.out / "ops.json")


if __name__ == "__main__":
    main()
