"""Per-rank bodies of the registered-tensor tests (test_registered_tensors.py): the backend's allocate_tensor, every
op x dtype on registered, mixed and ordinary tensors against gloo, and FSDP2 with its buffers from the backend."""
import torch
import torch.distributed as dist

from pg import gloo_reduce_scatter_ignores_op

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32, torch.int64, torch.uint8]
SIZES = [1, 37, 70_000]  # 70_000 fp32: several of the copying path's 1 MiB segments


def _backend(group=None):
    return (group or dist.group.WORLD)._get_backend(torch.device("cpu"))


def _tensor(values, registered):
    """`values` copied into a registered tensor (from the ccl backend) or an ordinary one."""
    if not registered:
        return values.clone()
    t = _backend().allocate_tensor(values.numel(), dtype=values.dtype, device=torch.device("cpu"))
    assert _backend().is_registered(t), "allocate_tensor gave a tensor outside registered memory"
    t.copy_(values.flatten())
    return t.view(values.shape)


def _values(rank, n, dtype, seed):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    if dtype.is_floating_point:
        return torch.randn(n, generator=g, dtype=torch.float64).to(dtype)  # rounding depends on the order of sums
    return torch.randint(1, 4, (n,), generator=g).to(dtype)


def every_op(rank, size, mode):
    """Each op x dtype x size on ccl with tensors `mode` ('registered', or 'mixed': rank 0's only) must give the bits
    that ordinary tensors give on ccl (the path it took before registered memory), and what gloo gives where gloo's
    arithmetic is the same (gathers, broadcasts, integer sums and maxima)."""
    gloo = dist.new_group(backend="gloo")
    mine = {"registered": True, "mixed": rank == 0}[mode]
    differ, in_place = [], set()

    def on_registered(name, fn, *args, **kwargs):
        """The call on `mine` tensors, noting whether it read the peers' tensors in place."""
        before = _backend().in_place_ops
        fn(*args, **kwargs)
        if _backend().in_place_ops != before:
            in_place.add(name)

    def check(name, got, plain, reference=None):
        if not torch.equal(got, plain):
            differ.append(f"{name}: differs from ordinary tensors")
        if reference is not None and not torch.equal(got, reference):
            differ.append(f"{name}: differs from gloo")

    for i, n in enumerate(SIZES):
        for dtype in DTYPES:
            exact = not dtype.is_floating_point
            ops = [dist.ReduceOp.SUM, dist.ReduceOp.MAX] + ([dist.ReduceOp.AVG] if dtype.is_floating_point else [])
            for op in ops:
                x = _values(rank, n, dtype, i)
                got, plain, ref = _tensor(x, mine), x.clone(), x.clone()
                on_registered(f"all_reduce {n} {dtype} {op}", dist.all_reduce, got, op=op)
                dist.all_reduce(plain, op=op)
                dist.all_reduce(ref, op=op, group=gloo)
                check(f"all_reduce {n} {dtype} {op}", got, plain, ref if exact or op == dist.ReduceOp.MAX else None)
                big = _values(rank, n * size, dtype, i + 5)
                got, plain, ref = (_tensor(torch.zeros(n, dtype=dtype), mine), torch.zeros(n, dtype=dtype),
                                   torch.zeros(n, dtype=dtype))
                on_registered(f"reduce_scatter_tensor {n} {dtype} {op}", dist.reduce_scatter_tensor, got,
                              _tensor(big, mine), op=op)
                dist.reduce_scatter_tensor(plain, big.clone(), op=op)
                if gloo_reduce_scatter_ignores_op():  # gloo's all_reduce, then this rank's part
                    whole = big.clone()
                    dist.all_reduce(whole, op=op, group=gloo)
                    ref = whole[rank * n:(rank + 1) * n].clone()
                else:
                    dist.reduce_scatter_tensor(ref, big.clone(), op=op, group=gloo)
                check(f"reduce_scatter_tensor {n} {dtype} {op}", got, plain,
                      ref if exact or op == dist.ReduceOp.MAX else None)
            x = _values(rank, n, dtype, i)
            got = _tensor(torch.zeros(n * size, dtype=dtype), mine)
            plain, ref = torch.zeros(n * size, dtype=dtype), torch.zeros(n * size, dtype=dtype)
            on_registered(f"all_gather_into_tensor {n} {dtype}", dist.all_gather_into_tensor, got, _tensor(x, mine))
            dist.all_gather_into_tensor(plain, x.clone())
            dist.all_gather_into_tensor(ref, x.clone(), group=gloo)
            check(f"all_gather_into_tensor {n} {dtype}", got, plain, ref)
            for root in range(size):
                start = _values(root, n, dtype, i) if rank == root else torch.zeros(n, dtype=dtype)
                got, plain = _tensor(start, mine), start.clone()
                on_registered(f"broadcast {n} {dtype} from {root}", dist.broadcast, got, src=root)
                dist.broadcast(plain, src=root)
                check(f"broadcast {n} {dtype} from {root}", got, plain, _values(root, n, dtype, i))
    return differ, in_place


def fsdp_steps(rank, size, backend, from_group):
    """FSDP2 (fully_shard) on a small MLP for a few steps; with from_group, its all-gather and reduce-scatter
    buffers come from the process group (set_allocate_memory_from_process_group_for_comm)."""
    from torch.distributed.fsdp import fully_shard

    group = dist.group.WORLD if backend == "ccl" else dist.new_group(backend="gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
    from torch.distributed.device_mesh import DeviceMesh

    mesh = DeviceMesh.from_group(group, "cpu")
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    for module in model.modules():
        if from_group and hasattr(module, "set_allocate_memory_from_process_group_for_comm"):
            module.set_allocate_memory_from_process_group_for_comm(True)  # per FSDP module: its own parameter group
        if gloo_reduce_scatter_ignores_op() and hasattr(module, "set_force_sum_reduction_for_comms"):
            module.set_force_sum_reduction_for_comms(True)  # SUM, not AVG, on both backends: gloo got AVG wrong
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    for step in range(4):
        g = torch.Generator().manual_seed(step * 10 + rank)
        x, y = torch.randn(16, 64, generator=g), torch.randn(16, 64, generator=g)
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    weights = [p.full_tensor().flatten().tolist() for p in model.parameters()]
    in_place = _backend(group).in_place_ops if backend == "ccl" else None
    return losses, weights, in_place


def fallback_on_a_small_dev_shm(rank, size):
    """allocate_tensor beyond what /dev/shm holds: an ordinary tensor (and a warning), and the op is right."""
    t = _backend().allocate_tensor(1 << 24, dtype=torch.float32, device=torch.device("cpu"))  # 64 MiB
    t.fill_(rank + 1)
    dist.all_reduce(t)
    return _backend().is_registered(t), t.min().item(), t.max().item()
