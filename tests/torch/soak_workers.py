"""Per-rank bodies of the soak tests: long runs of mixed collectives, many groups, two threads at once.
Each reports resident memory and open file descriptors before and after."""
import os
import threading

import torch
import torch.distributed as dist


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def mixed_collectives(rank, size, count):
    """`count` collectives of mixed kinds and sizes; every 1000th result is checked."""
    def one_round(i):
        n = 1 << (i % 12)  # 1 .. 2048 elements
        t = torch.full((n,), float(rank + 1))
        kind = i % 5
        if kind == 0:
            dist.all_reduce(t)
            return torch.all(t == sum(r + 1 for r in range(size))).item()
        if kind == 1:
            out = torch.empty(n * size)
            dist.all_gather_into_tensor(out, t)
            return out[-1].item() == size
        if kind == 2:
            out = torch.empty(n)
            dist.reduce_scatter_tensor(out, torch.full((n * size,), 1.0))
            return torch.all(out == size).item()
        if kind == 3:
            dist.broadcast(t, src=i % size)
            return t[0].item() == i % size + 1
        out = torch.empty(n * size)
        dist.all_to_all_single(out, torch.full((n * size,), float(rank)))
        return out[-1].item() == size - 1

    # warm-up: allocator pools and oneCCL caches fill first. oneCCL's alltoall interleaved with ccl-core's
    # shared-memory ops fills for longer: +1.1 MiB per 10,000 rounds for the first ~40,000, then flat (measured
    # over 30,000 more; without alltoall in the mix nothing grows at all)
    for i in range(45000):
        one_round(i)
    marks = [(rss_kib(), open_fds())]
    bad = 0
    for window in range(2):  # two windows: a per-op leak grows both, a one-time fill only the first
        for i in range(count):
            bad += 0 if one_round(i) else 1
        marks.append((rss_kib(), open_fds()))
    return {"bad": bad, "rss_growth_kib": [marks[1][0] - marks[0][0], marks[2][0] - marks[1][0]],
            "fd_growth": [marks[1][1] - marks[0][1], marks[2][1] - marks[1][1]], "rss_kib": marks[2][0]}


def many_groups(rank, size, count):
    def cycle(i):
        g = dist.new_group(list(range(size)), backend="ccl")
        t = torch.tensor([float(i)])
        dist.all_reduce(t, group=g)
        dist.destroy_process_group(g)
        return t.item() == i * size

    for i in range(10):
        cycle(i)
    before = (rss_kib(), open_fds())
    bad = sum(0 if cycle(i) else 1 for i in range(count))
    after = (rss_kib(), open_fds())
    return {"bad": bad, "rss_growth_kib": after[0] - before[0], "fd_growth": after[1] - before[1]}


def two_groups_two_threads(rank, size, count):
    """Two groups, each driven by its own thread at the same time, with different sizes and ops."""
    groups = [dist.new_group(list(range(size)), backend="ccl") for _ in range(2)]
    errors = []

    def drive(which):
        try:
            for i in range(count):
                t = torch.full((64 if which == 0 else 4096,), float(rank + which + i))
                dist.all_reduce(t, group=groups[which])
                want = sum(r + which + i for r in range(size))
                if not torch.all(t == want):
                    errors.append(f"group {which} iteration {i}: {t[0].item()} != {want}")
                    return
        except Exception as e:  # noqa: BLE001
            errors.append(f"group {which}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=drive, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    errors += [f"thread {i} still running" for i, t in enumerate(threads) if t.is_alive()]
    for g in groups:
        dist.destroy_process_group(g)
    return errors
