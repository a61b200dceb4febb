"""Per-rank bodies of the torch-level background-progress tests (test_overlap.py)."""
import time

import torch
import torch.distributed as dist


def busy(seconds):
    """Computation that never calls into the backend."""
    a = torch.randn(64, 64)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        torch.mm(a, a)


def isend_while_the_sender_computes(rank, size):
    """Rank 0 posts an isend of 4 MiB and computes for 1 s before it waits; rank 1's blocking recv should return
    long before that. Returns rank 1's recv time and whether the data arrived intact."""
    t = torch.arange(1 << 20, dtype=torch.float32)
    dist.barrier()
    if rank == 0:
        work = dist.isend(t, 1)
        busy(1.0)
        work.wait()
        return None
    got = torch.zeros_like(t)
    start = time.perf_counter()
    dist.recv(got, 0)
    return time.perf_counter() - start, bool(torch.equal(got, t))


def pipeline_exchange(rank, size):
    """Every rank isends to its right neighbour, then receives from its left one (blocking), several rounds and
    sizes: the pattern of pipeline parallelism, which deadlocks when sends only move inside their own wait."""
    right, left = (rank + 1) % size, (rank - 1) % size
    ok = True
    for n in (1 << 10, 1 << 18, 1 << 22):
        for step in range(3):
            out = torch.full((n // 4,), float(100 * rank + step))
            work = dist.isend(out, right)
            got = torch.empty_like(out)
            dist.recv(got, left)
            work.wait()
            ok = ok and bool((got == float(100 * left + step)).all())
    return ok
