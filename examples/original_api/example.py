"""Written against the original oneccl_bindings_for_pytorch API, as its README's example used it:
import the bindings, take rank/size from MPI's PMI variables when launched by mpiexec, init 'ccl', train DDP.
Runs unchanged under `mpiexec -n 2 python example.py` and `torchrun --nproc-per-node 2 example.py`."""
import os

import torch
import torch.distributed as dist
import torch.nn.parallel

import oneccl_bindings_for_pytorch  # noqa: F401  (registers 'ccl', as the original did)

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29500")
os.environ.setdefault("RANK", os.environ.get("PMI_RANK", "0"))
os.environ.setdefault("WORLD_SIZE", os.environ.get("PMI_SIZE", "1"))

dist.init_process_group("ccl")
my_rank = dist.get_rank()
my_size = dist.get_world_size()
print("my rank = %d  my size = %d" % (my_rank, my_size), flush=True)

torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(3):
    x = torch.randn(4, 8) + my_rank
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
weights = model.module.weight.detach().clone()
dist.all_reduce(weights, op=dist.ReduceOp.MAX)
same = torch.equal(weights, model.module.weight.detach())
print("rank %d: trained 3 steps, replicas identical: %s" % (my_rank, same), flush=True)
dist.destroy_process_group()
