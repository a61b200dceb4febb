"""A rank that leaves in the middle of a hierarchical job: the last rank exits after the first allreduce; every other
rank's next (hierarchical) allreduce must end in an error within the group's timeout, not hang."""
import datetime
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

import oneccl_bindings_for_pytorch  # noqa: F401

TIMEOUT_S = 10
dist.init_process_group("ccl", timeout=datetime.timedelta(seconds=TIMEOUT_S))
rank, size = dist.get_rank(), dist.get_world_size()
t = torch.ones(1 << 20)  # 4 MiB: hierarchical
dist.all_reduce(t)
result = {"hierarchy": dist.group.WORLD._get_backend(torch.device("cpu")).hierarchy, "first": t[0].item()}
if rank == size - 1:
    os._exit(0)  # gone without a word, as a killed rank
start = time.monotonic()
try:
    dist.all_reduce(t)
    result["error"] = None
except Exception as e:  # noqa: BLE001 - the test reads the type and the message
    result["error"] = f"{type(e).__name__}: {e}"
result["seconds"] = time.monotonic() - start
Path(os.environ["CCL_TEST_OUT"], f"rank{rank}.json").write_text(json.dumps(result))
