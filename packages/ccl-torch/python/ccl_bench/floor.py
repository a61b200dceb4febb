"""This machine's memory-bound floor for a reduction of `nbytes`: every rank at once adds two local buffers
of that size into a third (what any allreduce must at least do once), timed like a collective."""
from __future__ import annotations

import time

import torch


def floor_us(nbytes: int, iters: int, barrier) -> list[float]:
    n = max(1, nbytes // 4)
    a, b, out = torch.ones(n), torch.ones(n), torch.empty(n)
    for _ in range(3):
        torch.add(a, b, out=out)
    samples = []
    barrier()  # all ranks load memory at the same time, as during a collective
    for _ in range(iters):
        start = time.perf_counter()
        torch.add(a, b, out=out)
        samples.append((time.perf_counter() - start) * 1e6)
    return samples
