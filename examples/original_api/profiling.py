"""The original README's profiling recipe: the autograd profiler shows each ccl op as
`oneccl_bindings_for_pytorch::<op>` with its input shapes. `mpiexec -n 2 -l python profiling.py`."""
import os

import torch
import torch.distributed as dist

import oneccl_bindings_for_pytorch  # noqa: F401

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29500")
os.environ.setdefault("RANK", os.environ.get("PMI_RANK", "0"))
os.environ.setdefault("WORLD_SIZE", os.environ.get("PMI_SIZE", "1"))

dist.init_process_group("ccl")
print("rank = %d, size = %d" % (dist.get_rank(), dist.get_world_size()), flush=True)

x = torch.ones([2, 2])
y = torch.ones([4, 4])
with torch.autograd.profiler.profile(record_shapes=True) as prof:
    for _ in range(10):
        dist.all_reduce(x)
        dist.all_reduce(y)
    dist.broadcast(x, src=0)
dist.barrier()
print(prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total"), flush=True)
dist.destroy_process_group()
