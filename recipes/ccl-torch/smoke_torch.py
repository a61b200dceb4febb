"""2-rank smoke test of the conda package: init 'ccl' without importing the bindings, then an all_reduce."""
import torch
import torch.distributed as dist

dist.init_process_group("ccl")
t = torch.full((4,), dist.get_rank() + 1.0)
dist.all_reduce(t)
assert torch.all(t == sum(r + 1 for r in range(dist.get_world_size()))), t
print(f"ccl-torch smoke test: rank {dist.get_rank()} ok")
dist.destroy_process_group()
