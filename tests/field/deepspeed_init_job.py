"""deepspeed.init_distributed in the two situations where DeepSpeed's eager CCLBackend made ccl differ from gloo
(docs/deepspeed-ccl-eager-init.md); one process, started by tests/field/test_deepspeed_init.py:

    deepspeed_init_job.py --backend ccl|gloo --case no-group-not-required|group-made-first [--port PORT]

Prints what DeepSpeed did: the exception it raised, or the type of its communication backend and the process
group's backend. --backend gloo hides oneccl_bindings_for_pytorch, so DeepSpeed's CPU accelerator picks gloo.
"""
import argparse
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--backend", choices=["ccl", "gloo"], required=True)
parser.add_argument("--case", choices=["no-group-not-required", "group-made-first"], required=True)
parser.add_argument("--port", type=int, default=0)
args = parser.parse_args()

if args.backend == "gloo":
    sys.modules["oneccl_bindings_for_pytorch"] = None
os.environ.setdefault("DS_ACCELERATOR", "cpu")

import deepspeed  # noqa: E402
import torch.distributed as dist  # noqa: E402
from deepspeed.accelerator import get_accelerator  # noqa: E402

backend = get_accelerator().communication_backend_name()
if args.case == "no-group-not-required":
    # the launcher's variables are there (a second rank never comes), but the user says not to create a group
    try:
        deepspeed.init_distributed(backend, dist_init_required=False)
        print("nothing raised")
    except Exception as e:  # noqa: BLE001 - the test checks what was raised
        print(f"raised {type(e).__name__}; group initialised: {dist.is_initialized()}")
else:
    # the user made a 1-rank group without the launcher's variables; DeepSpeed must use it as it is
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{args.port}", world_size=1, rank=0)
    deepspeed.init_distributed(backend, auto_mpi_discovery=True)
    print(f"{type(deepspeed.comm.comm.cdb).__name__} on {dist.get_backend()}")
    dist.destroy_process_group()
