"""A 2-rank all_reduce on the `ccl` backend, started by tests/wheels with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT set (no launcher: the venv under test may be any Python and torch). Rank 0 prints what ran."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("ccl")  # no import of the bindings: the torch.backends entry point registers 'ccl'
rank, size = dist.get_rank(), dist.get_world_size()
for dtype in (torch.float32, torch.bfloat16, torch.int64):
    base = torch.arange(1000) % 100  # sums stay integers below 256: exact in bfloat16
    t = (base + rank).to(dtype)
    dist.all_reduce(t)
    want = (base * size + sum(range(size))).to(dtype)
    assert torch.equal(t, want), f"{dtype}: {t[:5]} != {want[:5]}"
work = dist.all_reduce(torch.ones(1 << 20), async_op=True)
work.wait()
import oneccl_bindings_for_pytorch as ccl  # noqa: E402

if rank == 0:
    print(f"torch {torch.__version__} (cuda {torch.version.cuda}) python {os.sys.version.split()[0]}: all_reduce ok "
          f"on {size} ranks; ccl-torch {ccl.__version__} extension {ccl._C.__name__} built against "
          f"{ccl.built_with_torch}")
dist.destroy_process_group()
