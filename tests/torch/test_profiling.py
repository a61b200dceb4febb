"""The names torch's profilers record for ccl ops, with async ops of different kinds all in flight at once. torch's
RecordFunction keeps only a pointer to a work's profiling title until the op completes: the backend's titles are
literals (process_group_ccl.hpp, OpName), so every observer, including one that reads the name as the op ends, sees
each op's own name. (torch's two profilers copy the name as the op starts; they are what users run.)"""
import pytest

from pg import run_in_group

KINDS = ["allreduce", "broadcast", "allgather", "reduce_scatter", "allreduce", "broadcast", "allgather"]
TITLES = {"allreduce": "allreduce", "broadcast": "broadcast", "allgather": "allgather_into_tensor",
          "reduce_scatter": "reduce_scatter_tensor"}


def overlapping_ops_under_a_profiler(rank, size, which):
    import torch
    import torch.distributed as dist
    from torch.autograd import profiler_legacy

    x = torch.ones(1 << 12)
    gathered = torch.empty(size * x.numel())
    scattered = torch.empty(x.numel() // size)
    issue = {
        "allreduce": lambda: dist.all_reduce(x, async_op=True),
        "broadcast": lambda: dist.broadcast(x, 0, async_op=True),
        "allgather": lambda: dist.all_gather_into_tensor(gathered, x, async_op=True),
        "reduce_scatter": lambda: dist.reduce_scatter_tensor(scattered, x, async_op=True),
    }
    profiler = profiler_legacy.profile() if which == "legacy" else torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU])
    with profiler as prof:
        works = [issue[k]() for k in KINDS]  # none waited for until every one is issued
        for w in works:
            w.wait()
    events = prof.function_events if which == "legacy" else prof.events()
    return sorted(e.name for e in events if e.name.startswith("oneccl_bindings_for_pytorch::"))


@pytest.mark.parametrize("which", ["kineto", "legacy"])
def test_every_async_op_keeps_its_own_profiling_name(which):
    want = sorted("oneccl_bindings_for_pytorch::" + TITLES[k] for k in KINDS)
    for names in run_in_group(overlapping_ops_under_a_profiler, 2, which):
        assert names == want, names
