"""The main job of ci/demo: DDP training of a small MLP on the `ccl` backend, then a short timing of
all_reduce on ccl and on gloo in the same processes.

    torchrun --nproc-per-node 2 examples/ddp_train.py
"""
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("ccl")  # registered when torch was imported: no extra import needed
rank, size = dist.get_rank(), dist.get_world_size()


def say(text):
    if rank == 0:
        os.write(1, (text + "\n").encode())


# A regression task every rank can check: y = x @ w_true, data sharded by rank.
torch.manual_seed(0)
w_true = torch.randn(32, 1)
model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
gen = torch.Generator().manual_seed(1 + rank)
say(f"DDP on backend '{dist.get_backend()}' with {size} ranks")
for step in range(1, 201):
    x = torch.randn(64, 32, generator=gen)
    loss = nn.functional.mse_loss(model(x), x @ w_true)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 50 == 0:
        avg = loss.detach().clone()
        dist.all_reduce(avg, op=dist.ReduceOp.AVG)
        say(f"  step {step:3d}  mean loss over ranks {avg.item():.4f}")

# Replicas must be identical after training.
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
lo, hi = flat.clone(), flat.clone()
dist.all_reduce(lo, op=dist.ReduceOp.MIN)
dist.all_reduce(hi, op=dist.ReduceOp.MAX)
say(f"  replicas identical: {torch.equal(lo, hi)}")


def median_us(group, nbytes, iters):
    t = torch.ones(nbytes // 4)
    for _ in range(5):
        dist.all_reduce(t, group=group)
    times = []
    for _ in range(iters):
        dist.barrier(group=group)
        start = time.perf_counter()
        dist.all_reduce(t, group=group)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e6


gloo = dist.new_group(backend="gloo")
say("\nall_reduce float32, median of timed runs (ccl-bench measures properly):")
say(f"  {'size':>8}  {'ccl µs':>10}  {'gloo µs':>10}  {'gloo/ccl':>8}")
for nbytes, iters in [(1 << 10, 200), (1 << 16, 200), (1 << 20, 50), (16 << 20, 10)]:
    c, g = median_us(dist.group.WORLD, nbytes, iters), median_us(gloo, nbytes, iters)
    label = f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"
    say(f"  {label:>8}  {c:10.1f}  {g:10.1f}  {g / c:7.1f}x")
# gloo's worker threads drop their last work asynchronously; if that happens while Python shuts down, the
# process aborts (a race inside torch's gloo backend). Give them a moment while Python is still alive.
dist.barrier(group=gloo)
time.sleep(0.2)
dist.destroy_process_group()
