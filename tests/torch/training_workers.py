"""Per-rank bodies of the training tests: the same job on a ccl group and on a gloo group, results compared."""
import torch
import torch.distributed as dist
import torch.nn as nn

from pg import gloo_reduce_scatter_ignores_op


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def _batches(rank, steps=4):
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)) for _ in range(steps)]


def _train_ddp(group, rank, hook):
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(_model(), process_group=group)
    if hook is not None:
        model.register_comm_hook(state=group, hook=hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in _batches(rank):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def ddp_matches_gloo(rank, size, with_hook):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    hook = default_hooks.allreduce_hook if with_hook else None
    gloo = dist.new_group(backend="gloo")
    ccl_params = _train_ddp(dist.group.WORLD, rank, hook)
    gloo_params = _train_ddp(gloo, rank, hook)
    diffs = [float((a - b).abs().max()) for a, b in zip(ccl_params, gloo_params)]
    # every rank must also hold identical parameters
    gathered = [torch.zeros_like(ccl_params[0]) for _ in range(size)]
    dist.all_gather(gathered, ccl_params[0])
    return max(diffs), all(torch.equal(gathered[0], g) for g in gathered)


def fsdp2_matches_gloo(rank, size, prefetch=False):
    """prefetch: all-gathers issued async and one layer ahead (FSDP2's explicit prefetching), which on CPU is what
    lets them overlap the previous layer's computation (background progress)."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    def train(group):
        mesh = DeviceMesh.from_group(group, "cpu")
        model = _model()
        layers = [layer for layer in model if isinstance(layer, nn.Linear)]
        for layer in layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        if gloo_reduce_scatter_ignores_op():  # SUM, not AVG, on both backends: gloo got AVG wrong
            for module in layers + [model]:
                module.set_force_sum_reduction_for_comms(True)
        if prefetch:
            for module in layers + [model]:
                module._set_unshard_async_op(True)
            for before, after in zip(layers, layers[1:]):
                before.set_modules_to_forward_prefetch([after])
                after.set_modules_to_backward_prefetch([before])
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in _batches(rank):
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        return [p.full_tensor().detach().clone() for p in model.parameters()]

    gloo = dist.new_group(backend="gloo")
    a = train(dist.group.WORLD)
    b = train(gloo)
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def compiled_functional_collectives(rank, size):
    import torch.distributed._functional_collectives as funcol

    def step(x, group):
        y = funcol.all_reduce(x * 2, "sum", group)
        z = funcol.all_gather_tensor(y + 1, 0, group)
        return funcol.reduce_scatter_tensor(z, "sum", 0, group) * 0.5

    gloo = dist.new_group(backend="gloo")
    x = torch.arange(8.0) + rank
    eager = step(x, dist.group.WORLD)
    compiled_ccl = torch.compile(step, backend="inductor", fullgraph=True)(x, dist.group.WORLD)
    compiled_gloo = torch.compile(step, backend="inductor", fullgraph=True)(x, gloo)
    return float((compiled_ccl - compiled_gloo).abs().max()), float((compiled_ccl - eager).abs().max())
