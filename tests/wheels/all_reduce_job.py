"""A 2-rank all_reduce on the `ccl` backend, started by tests/wheels with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT set (no launcher: the venv under test may be any Python and torch). Rank 0 prints what ran."""
import os
import time
from datetime import timedelta

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
# MAX through reduce_scatter (torch 2.8's gloo got it wrong: ours must not), and the registered op, whose
# registrations live in the backend library every torch's extension links whole
part = torch.empty(4)
dist.reduce_scatter_tensor(part, torch.arange(8.0) * (1 - 2 * rank), op=dist.ReduceOp.MAX)
assert part.tolist() == [4.0 * rank + i for i in range(4)], part  # rank 0's values are the larger
t = torch.full((3,), float(rank + 1))
torch.ops.ccl.all_reduce_(t, dist.group.WORLD.group_name, "max")
assert t.tolist() == [float(size)] * 3, t

# An error kept and raised again: the timeout travels as a std::exception_ptr, copied and released across threads
# (what the manylinux build's libstdc++ shim provides, ci/manylinux/libstdcxx_compat.cpp)
lonely = dist.new_group([0, 1], timeout=timedelta(seconds=2))
if rank == 0:
    work = dist.all_reduce(torch.ones(4), group=lonely, async_op=True)
    errors = []
    for _ in range(2):
        try:
            work.wait()
        except Exception as e:  # noqa: BLE001 - checked below
            errors.append(str(e))
    assert len(errors) == 2 and errors[0] == errors[1] and "did not complete within 2000 ms" in errors[0], errors
else:
    time.sleep(3)  # rank 1 never joins that all_reduce
import oneccl_bindings_for_pytorch as ccl  # noqa: E402

if rank == 0:
    print(f"torch {torch.__version__} (cuda {torch.version.cuda}) python {os.sys.version.split()[0]}: all_reduce ok "
          f"on {size} ranks; ccl-torch {ccl.__version__} extension {ccl._C.__name__} built against "
          f"{ccl.built_with_torch}")
dist.destroy_process_group()
