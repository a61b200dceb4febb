"""Registering the `ccl` backend with torch.distributed (idempotent)."""
import datetime
import os

_registered = False


def _create_backend(store, rank, size, timeout: datetime.timedelta):
    from ._C import ProcessGroupCCL

    return ProcessGroupCCL(store, rank, size, timeout)


def export_launcher_rank():
    """Under mpiexec (PMI_RANK/PMI_SIZE) or Open MPI, set RANK/WORLD_SIZE/LOCAL_RANK for torch's env://
    rendezvous when they are missing, so scripts written for the original run unchanged."""
    pairs = [("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
             ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK")]
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return
    for rank_var, size_var, local_var in pairs:
        if rank_var in os.environ and size_var in os.environ:
            os.environ.setdefault("RANK", os.environ[rank_var])
            os.environ.setdefault("WORLD_SIZE", os.environ[size_var])
            if local_var in os.environ:
                os.environ.setdefault("LOCAL_RANK", os.environ[local_var])
            return


def register():
    """Register backend 'ccl' for CPU tensors and expose torch.distributed.ProcessGroupCCL."""
    global _registered
    if _registered:
        return
    import torch.distributed as dist

    from ._C import ProcessGroupCCL

    import atexit

    from ._C import _shutdown_completers

    dist.Backend.register_backend("ccl", _create_backend, devices=["cpu"])
    atexit.register(_shutdown_completers)
    dist.ProcessGroupCCL = ProcessGroupCCL
    export_launcher_rank()
    _registered = True
