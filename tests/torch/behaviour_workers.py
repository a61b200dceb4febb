"""Per-rank bodies: async semantics, timeouts, sub-groups, bad input."""
import datetime
import time

import torch
import torch.distributed as dist


def is_completed_never_blocks(rank, size):
    if rank == 1:
        time.sleep(1.5)  # late to the collective
        dist.all_reduce(torch.ones(8))
        return None
    work = dist.all_reduce(torch.ones(8), async_op=True)
    slowest, polls, early = 0.0, 0, 0
    while True:
        t0 = time.monotonic()
        done = work.is_completed()
        slowest = max(slowest, time.monotonic() - t0)
        polls += 1
        if done:
            break
        early += 1
    work.wait()
    return slowest, polls, early


def wait_timeout_raises(rank, size):
    """rank 1 never calls: rank 0's wait(timeout=1 s) must raise in about a second."""
    if rank == 1:
        time.sleep(2.5)
        return None
    work = dist.all_reduce(torch.ones(4), async_op=True)
    start = time.monotonic()
    try:
        work.wait(timeout=datetime.timedelta(seconds=1))
        return "no error", 0.0
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}", time.monotonic() - start


def group_timeout_honoured(rank, size):
    """A blocking collective whose peer never arrives fails at the group's timeout (pg.py passes 2 s)."""
    if rank == 1:
        time.sleep(3)
        return None
    start = time.monotonic()
    try:
        dist.broadcast(torch.ones(4), src=1)
        return "no error", 0.0
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}", time.monotonic() - start


def futures(rank, size):
    bad = []
    t = torch.full((4,), float(rank + 1))
    fut = dist.all_reduce(t, async_op=True).get_future()
    chained = fut.then(lambda f: f.value()[0] * 10)
    total = sum(r + 1 for r in range(size))
    if not torch.all(chained.wait() == 10 * total):
        bad.append(f"future chain {chained.wait()}")
    if not torch.all(t == total):
        bad.append("future result tensor")
    # a future completed while nobody waits on the work itself (DDP's pattern)
    futs = [dist.all_reduce(torch.ones(1000) * i, async_op=True).get_future() for i in range(5)]
    vals = torch.futures.collect_all(futs).wait()
    if [v.value()[0][0].item() for v in vals] != [i * size for i in range(5)]:
        bad.append("collect_all")
    return bad


def sub_groups(rank, size):
    """3 ranks: every pair as a group (everyone calls new_group), used in turn and mixed with the world."""
    bad = []
    pairs = [[0, 1], [1, 2], [0, 2]]
    groups = [dist.new_group(p, backend="ccl") for p in pairs]
    for _ in range(2):
        for p, g in zip(pairs, groups):
            if rank in p:
                t = torch.tensor([float(rank)])
                dist.all_reduce(t, group=g)
                if t.item() != sum(p):
                    bad.append(f"group {p}: {t.item()}")
                lst = [torch.zeros(1) for _ in p]
                dist.all_gather(lst, torch.tensor([rank * 1.0]), group=g)
                if [x.item() for x in lst] != [float(r) for r in p]:
                    bad.append(f"group {p} all_gather {lst}")
            elif dist.get_rank(g) != -1:
                bad.append(f"non-member {rank} has a rank in {p}")
        w = torch.ones(1)
        dist.all_reduce(w)
        if w.item() != size:
            bad.append("world after groups")
    for g in groups:
        dist.destroy_process_group(g)
    return bad


def groups_in_a_loop(rank, size):
    bad = []
    for i in range(20):
        g = dist.new_group(list(range(size)), backend="ccl")
        t = torch.tensor([float(i + rank)])
        dist.all_reduce(t, group=g)
        if t.item() != sum(i + r for r in range(size)):
            bad.append(f"iteration {i}: {t.item()}")
        dist.destroy_process_group(g)
    return bad


def destroy_after_point_to_point(rank, size, store_dir):
    """A group whose last op is a send and a recv, destroyed at once: how long the destroy took on this rank (s)."""
    dist.init_process_group("ccl", init_method=f"file://{store_dir}/rendezvous", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=60))
    if rank == 0:
        dist.send(torch.tensor([5, 6]), 1)
    elif rank == 1:
        got = torch.zeros(2, dtype=torch.int64)
        dist.recv(got, 0)
        assert got.tolist() == [5, 6], got
    t0 = time.monotonic()
    dist.destroy_process_group()
    return time.monotonic() - t0


def device_mesh(rank, size):
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (size,), mesh_dim_names=("dp",))
    g = mesh.get_group("dp")
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t, group=g)
    return t.item(), dist.get_backend(g)


def split_group_on_cpu(rank, size):
    try:
        dist.split_group(split_ranks=[[0], [1]])
        return "no error"
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"


def bad_input(rank, size):
    """Every rank makes the same mistakes; each must raise a clear error, and the group must keep working."""
    from torch.distributed import ReduceOp

    results = {}

    def attempt(name, fn):
        try:
            fn()
            results[name] = "no error"
        except Exception as e:  # noqa: BLE001
            results[name] = f"{type(e).__name__}: {e}"

    # torch routes meta tensors to its own shape-only kernels; our device check is reached through the backend
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    attempt("meta", lambda: backend.allreduce([torch.ones(2, device="meta")]).wait())
    attempt("all_gather list", lambda: dist.all_gather([torch.zeros(2)] * (size + 1), torch.ones(2)))
    attempt("all_gather numel", lambda: dist.all_gather([torch.zeros(3) for _ in range(size)], torch.ones(2)))
    attempt("splits sum", lambda: dist.all_to_all_single(torch.zeros(4), torch.ones(4), [1] * size, [3] * size))
    attempt("splits length", lambda: dist.all_to_all_single(torch.zeros(4), torch.ones(4), [2, 2, 0][:size + 1], [2, 2, 0][:size + 1]))
    attempt("indivisible", lambda: dist.all_to_all_single(torch.zeros(3), torch.ones(3)))
    attempt("peer", lambda: dist.send(torch.ones(1), size + 3))
    attempt("float8", lambda: dist.all_reduce(torch.ones(2).to(torch.float8_e4m3fn)))
    attempt("max complex", lambda: dist.all_reduce(torch.ones(2, dtype=torch.complex64), op=ReduceOp.MAX))
    attempt("avg int", lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32), op=ReduceOp.AVG))
    attempt("band float", lambda: dist.all_reduce(torch.ones(2), op=ReduceOp.BAND))
    attempt("reduce_scatter_tensor numel", lambda: dist.reduce_scatter_tensor(torch.zeros(3), torch.ones(4)))
    attempt("dtype mix", lambda: dist.all_gather_into_tensor(torch.zeros(2 * size, dtype=torch.float64), torch.ones(2)))
    attempt("sparse", lambda: dist.all_reduce(torch.ones(2).to_sparse()))
    t = torch.ones(2)
    dist.all_reduce(t)
    results["still works"] = t.tolist()
    return results


def allreduce_path(rank, size):
    """Which path the ccl backend's allreduce took, and its result (large enough for the segmented path)."""
    import torch
    import torch.distributed as dist

    t = torch.full((3_000_000,), float(rank + 1))
    dist.all_reduce(t)
    avg = torch.full((1000,), float(rank))
    dist.all_reduce(avg, op=dist.ReduceOp.AVG)
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    return backend.shared_memory, bool((t == sum(range(1, size + 1))).all()), avg[0].item()


def mismatched_allreduce_sizes(rank, size):
    import torch
    import torch.distributed as dist

    try:
        dist.all_reduce(torch.ones(4 if rank == 0 else 8))
        return "no error"
    except Exception as e:  # noqa: BLE001 - the test checks type and message
        return f"{type(e).__name__}: {e}"


def bad_tensor_last_in_multi_tensor_ops(rank, size):
    """Each multi-tensor op gets good tensors first and one bad tensor last: it must raise before issuing anything,
    leave the good tensors untouched and the sequence number where it was, and the group must stay in step."""
    group = dist.distributed_c10d._get_default_group()
    backend = group._get_backend(torch.device("cpu"))
    seq = backend._get_sequence_number_for_group()
    results = {}

    def attempt(name, fn, watched):
        before = [t.clone() for t in watched]
        try:
            fn()
            results[name] = "no error"
        except Exception as e:  # noqa: BLE001 - the test checks type and message
            results[name] = f"{type(e).__name__}: {e}"
        results[name + " untouched"] = all(torch.equal(a, b) for a, b in zip(before, watched))

    good = [torch.full((4,), rank + 1.0), torch.full((3,), rank + 2.0)]
    attempt("allreduce_coalesced",
            lambda: backend.allreduce_coalesced(good + [torch.ones(2).to(torch.float8_e4m3fn)]).wait(), good)
    outs = [torch.zeros(4 * size), torch.zeros(3)]  # the second output is too small
    attempt("allgather_into_tensor_coalesced",
            lambda: backend.allgather_into_tensor_coalesced(outs, [torch.ones(4), torch.ones(2)]).wait(), outs)
    rs_outs = [torch.zeros(2), torch.zeros(2)]
    attempt("reduce_scatter_tensor_coalesced",
            lambda: backend.reduce_scatter_tensor_coalesced(rs_outs, [torch.ones(2 * size), torch.ones(3)]).wait(),
            rs_outs)
    lists = [[torch.zeros(2), torch.zeros(5)] for _ in range(size)]
    attempt("allgather_coalesced",
            lambda: backend.allgather_coalesced(lists, [torch.ones(2), torch.ones(3)]).wait(), [t for l in lists for t in l])
    attempt("send to self", lambda: backend.send([torch.ones(1)], rank, 0).wait(), [])  # torch checks dist.send itself
    results["sequence unchanged"] = backend._get_sequence_number_for_group() == seq
    t = torch.full((5,), float(rank))
    dist.all_reduce(t)
    results["still in step"] = t.tolist()
    return results


def cpu_while_waiting_for_a_late_peer(rank, size, late_s):
    """Rank 1 arrives late_s late at a barrier, then an all_reduce, then a future-driven all_reduce: the CPU seconds
    rank 0 spends waiting in each."""
    import resource

    def cpu():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    spent = {}
    for name in ("barrier", "all_reduce", "future"):
        dist.barrier()
        if rank == 1:
            time.sleep(late_s)
        start = cpu()
        if name == "barrier":
            dist.barrier()
        elif name == "all_reduce":
            dist.all_reduce(torch.ones(1024))
        else:
            fut = dist.all_reduce(torch.ones(1024), async_op=True).get_future()
            while not fut.done():  # ccl-core's progress thread completes the future; this thread just sleeps
                time.sleep(0.05)
        spent[name] = cpu() - start
    return spent


def nan_in_min_max(rank, size):
    """A NaN on the last rank only: all_reduce, reduce (to rank 1) and reduce_scatter_tensor with MIN and MAX give
    NaN there, as torch's own min/max do, and the right value elsewhere. reduce_scatter's parts are reported per
    rank; the test joins them."""
    def listed(t):
        return [None if v != v else v for v in t.float().tolist()]

    out = {}
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        for op in (dist.ReduceOp.MIN, dist.ReduceOp.MAX):
            def values():
                t = torch.arange(6, dtype=torch.float32).add(rank).to(dtype)
                if rank == size - 1:
                    t[2] = float("nan")
                return t
            t = values()
            dist.all_reduce(t, op=op)
            out[f"all_reduce {dtype} {op}"] = listed(t)
            t = values()
            dist.reduce(t, dst=1, op=op)
            if rank == 1:
                out[f"reduce {dtype} {op}"] = listed(t)
            part = torch.empty(6 // size, dtype=dtype)
            dist.reduce_scatter_tensor(part, values(), op=op)
            out[f"reduce_scatter {dtype} {op}"] = listed(part)
    return out


def future_of_a_collective_a_peer_skips(rank, size):
    """Rank 1 never joins; rank 0 only holds the future, which the group's thread drives: its error must name the
    group's timeout, not the thread's poll slice."""
    if rank == 1:
        time.sleep(4.0)
        return None
    fut = dist.all_reduce(torch.ones(4), async_op=True).get_future()
    try:
        fut.wait()
        return "no error"
    except Exception as e:  # noqa: BLE001 - the test checks type and message
        return f"{type(e).__name__}: {e}"


def unwaited_works_complete(rank, size):
    """The last rank is a second late. Every other rank drops an async all_reduce's work at once and takes the future
    of another, then never waits: ccl-core's progress thread owns both and completes them (in every progress mode),
    and the dropped work's result still lands in its tensor."""
    dropped = torch.full((1 << 16,), float(rank + 1))
    watched = torch.full((1024,), float(rank + 1))
    if rank == size - 1:
        time.sleep(1.0)
    dist.all_reduce(dropped, async_op=True)  # the Work is dropped here
    fut = dist.all_reduce(watched, async_op=True).get_future()
    want = float(size * (size + 1) // 2)
    deadline = time.time() + 30
    # the whole tensor: oneCCL may finish the later op first, and the dropped one's elements in any order
    while (not fut.done() or not bool((dropped == want).all())) and time.time() < deadline:
        time.sleep(0.01)
    return {"future": fut.done() and fut.value()[0][0].item(), "dropped": dropped.unique().tolist(), "want": [want]}


def lone_rank_of_three(rank, size, store_dir):
    """Only rank 0 of a group of 3 starts, on torch's own store: bootstrap names both missing ranks at its timeout."""
    import time

    import oneccl_bindings_for_pytorch  # noqa: F401 - exposes dist.ProcessGroupCCL

    store = dist.FileStore(f"{store_dir}/lone", 3)
    start = time.monotonic()
    try:
        dist.ProcessGroupCCL(store, 0, 3, datetime.timedelta(seconds=2))
    except Exception as e:  # noqa: BLE001 - the test reads the message
        return str(e), time.monotonic() - start
    return "no error", time.monotonic() - start
