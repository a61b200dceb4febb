"""Rank bodies of the interrupt tests. Rank 1 never calls rank 0's second allreduce; rank 0's blocking call ends by a
Ctrl-C that arrives in the phase the test names (ccl_core's `_raise_sigint_at`: 'issue' or 'wait'), or, with
`phase=None`, by the op's timeout. The same body serves ccl-core's face (NumPy) and the torch face (`dist.all_reduce`
on the ccl backend)."""
import datetime
import os
import signal
import time

import numpy as np

import ccl_core
from ccl_core import _ccl_core

OP_TIMEOUT_S = 60.0  # what an interrupt must beat by far


def interrupted_allreduce(rank, size, store_dir, face, phase, sigint=signal.default_int_handler,
                          op_timeout_s=OP_TIMEOUT_S):
    # Set explicitly, as an interactive Python has it: a process started in the background of a non-interactive shell
    # inherits SIGINT ignored, and Python then installs no handler for it (how a CI run once waited 60 s here).
    signal.signal(signal.SIGINT, sigint)
    sync = ccl_core.FileStore(os.path.join(store_dir, "sync"))
    if face == "torch":
        import torch
        import torch.distributed as dist

        dist.init_process_group("ccl", init_method=f"file://{store_dir}/rendezvous", rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=op_timeout_s))
        x = torch.ones(1000)
        allreduce, barrier, aborted = (lambda: dist.all_reduce(x)), dist.barrier, None
    else:
        comm = ccl_core.Communicator(ccl_core.FileStore(store_dir), rank, size, timeout=op_timeout_s)
        x = np.ones(1000, np.float32)
        allreduce, barrier, aborted = (lambda: comm.allreduce(x, x)), comm.barrier, (lambda: comm.aborted)
    allreduce()  # both ranks: the group works
    if rank != 0:
        sync.get("rank 0 is through", timeout=op_timeout_s + 60)
        return {}
    if phase is not None:
        _ccl_core._raise_sigint_at(phase)
    out = {}
    start = time.monotonic()
    try:
        allreduce()
        out["error"] = "no error"
    except KeyboardInterrupt:
        out["error"] = "KeyboardInterrupt"
    except Exception as e:  # noqa: BLE001 - the test compares the kind and the message
        out["error"] = f"{type(e).__name__}: {e}"
    out["waited"] = time.monotonic() - start
    if aborted is not None:
        out["aborted"] = aborted()
    try:
        barrier()
        out["after"] = "no error"
    except Exception as e:  # noqa: BLE001
        out["after"] = f"{type(e).__name__}: {e}"
    sync.set("rank 0 is through", b"1")
    return out
