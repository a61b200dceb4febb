"""One rank of tests/wheels' XPU-set check, started with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and STORE_DIR in
a clean venv that has only what `pip install ccl-xpu[torch]` gave it, for one part (argv[1]): "device", oneCCL's
device path on the SYCL device the environment selects (every op of the Python face, tests/xpu's checks); "torch",
the `ccl` backend of that torch with ccl-xpu's plugin, all_reducing CPU tensors through the SYCL-enabled oneCCL.
Prints one JSON line."""
import json
import os
import sys
from pathlib import Path

rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if sys.argv[1] == "device":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "xpu"))
    import xpu_workers  # noqa: E402  (the checks of the Intel GPU stage, against NumPy)

    print(json.dumps({"device ops wrong": xpu_workers.device_collectives(rank, size, os.environ["STORE_DIR"])}))
    sys.exit(0)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import oneccl_bindings_for_pytorch as ccl  # noqa: E402

dist.init_process_group("ccl")
t = torch.arange(1000, dtype=torch.float32) + rank
dist.all_reduce(t)
result = dict(plugins=ccl.device_plugins(), devices=dist.Backend.backend_capability["ccl"],
              cpu_all_reduce_right=bool(torch.equal(t, torch.arange(1000.0) * size + sum(range(size)))))
dist.destroy_process_group()
print(json.dumps(result))
