"""Run a function on N real ranks inside an initialised torch process group (file:// rendezvous)."""
import datetime
import os
import time

from ranks import run_ranks


def gloo_reduce_scatter_ignores_op() -> bool:
    """torch 2.8's gloo sums in reduce_scatter_tensor whatever op it is given (MAX, AVG: fixed in 2.9). Tests that
    take gloo as the reference check those ops another way there."""
    import torch

    return tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) < (2, 9)


def _in_group(rank, size, store_dir, fn, backend, timeout, args):
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD", "1")
    import torch.distributed as dist

    dist.init_process_group(backend, init_method=f"file://{store_dir}/rendezvous", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=timeout))
    try:
        return fn(rank, size, *args)
    finally:
        dist.destroy_process_group()
        # Tests that compare with gloo: its worker threads release their last work asynchronously, and a
        # release during interpreter shutdown aborts the process (a race in torch's gloo backend, not ours).
        time.sleep(0.2)


def run_in_group(fn, size=2, *args, backend="ccl", timeout=60.0, test_timeout=90.0):
    """fn(rank, size, *args) on every rank of an initialised group; returns per-rank results."""
    return run_ranks(_in_group, size, fn, backend, timeout, args, make_comm=False, timeout=test_timeout,
                     preload_torch=True)
