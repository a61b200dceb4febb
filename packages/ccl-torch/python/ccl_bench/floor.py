"""What no collective on this machine can beat, measured next to it:
- the memory floor: every rank at once streams through its own message once, in place (`x.mul_(1)`: each byte
  read and written once, as the cheapest allreduce must at least do);
- torch's dispatch floor: the same op on torch's fake process group, which moves nothing (what
  `torch.distributed` itself costs per call);
- the copy floor: every rank at once copies its message into another buffer (all_gather and reduce_scatter on
  registered memory move that much)."""
from __future__ import annotations

import time

import torch


def floor_us(nbytes: int, iters: int, barrier) -> list[float]:
    x = torch.ones(max(1, nbytes // 4))
    for _ in range(3):
        x.mul_(1)
    samples = []
    barrier()  # all ranks load memory at the same time, as during a collective
    for _ in range(iters):
        start = time.perf_counter()
        x.mul_(1)
        samples.append((time.perf_counter() - start) * 1e6)
    return samples


def copy_us(nbytes: int, iters: int, barrier) -> list[float]:
    """A plain copy of `nbytes` into another buffer, every rank at once: what an all_gather or a reduce_scatter that
    reads its peers' registered buffers in place moves at least (each byte read once and written once)."""
    src, dst = torch.ones(max(1, nbytes // 4)), torch.empty(max(1, nbytes // 4))
    for _ in range(3):
        dst.copy_(src)
    samples = []
    barrier()
    for _ in range(iters):
        start = time.perf_counter()
        dst.copy_(src)
        samples.append((time.perf_counter() - start) * 1e6)
    return samples


def fake_group():
    """A group of torch's fake process group (registered by importing its module; part of torch's tests)."""
    import torch.distributed as dist
    import torch.testing._internal.distributed.fake_pg  # noqa: F401

    return dist.new_group(backend="fake")
