"""Real multi-process traces: a tiny DistributedDataParallel job on the CPU (gloo backend), one rank slowed down.

    python tests/gen_traces/make_rank_traces.py OUT_DIR [--ranks 3] [--slow-rank 2] [--slow-ms 40] [--steps 4]

Starts --ranks processes (torch.multiprocessing, spawn) that join one gloo process group (a FileStore in OUT_DIR, so
no port is needed) and train the same small MLP under DDP; each profiles --steps steps (torch.profiler, CPU activity,
record_shapes=True so the gloo all-reduce spans carry their sizes) and exports OUT_DIR/rank{r}.json, as a user would
with one trace per rank. Rank --slow-rank does --slow-ms of extra matrix products (inside a `slow_compute` record
function) after backward in every step, so it reaches each all-reduce late and the other ranks wait for it inside
`gloo:all_reduce`. --slow-rank -1 slows no rank. Needs torch (`pip install -e .[traces]`); the CPU wheel is enough.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule


def _busy(ms: float) -> None:
    """Matrix products for about `ms` milliseconds of CPU time."""
    a = torch.randn(384, 384) / 20
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        a = torch.tanh(a @ a)


def worker(rank: int, world: int, out: str, slow_rank: int, slow_ms: float, steps: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out}/.store", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = nn.parallel.DistributedDataParallel(
            nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
        with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=steps),
                     record_shapes=True,
                     on_trace_ready=lambda p: p.export_chrome_trace(os.path.join(out, f"rank{rank}.json"))) as prof:
            for _ in range(steps + 2):
                loss = nn.functional.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                if rank == slow_rank:
                    with torch.profiler.record_function("slow_compute"):
                        _busy(slow_ms)
                optimizer.step()
                prof.step()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--slow-rank", type=int, default=2)
    parser.add_argument("--slow-ms", type=float, default=40.0)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / ".store"
    if store.exists():
        store.unlink()
    mp.spawn(worker, args=(args.ranks, str(args.out.resolve()), args.slow_rank, args.slow_ms, args.steps),
             nprocs=args.ranks, join=True)
    if store.exists():
        store.unlink()


if __name__ == "__main__":
    main()
