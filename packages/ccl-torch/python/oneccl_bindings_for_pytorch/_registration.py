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


PLUGIN_GROUP = "oneccl_bindings_for_pytorch.device_plugins"


def load_device_plugins() -> list:
    """Let installed device plugins (entry points in PLUGIN_GROUP, e.g. ccl-xpu's `xpu`) register their device.
    A broken plugin only warns: CPU collectives must keep working. Returns the device types now served."""
    import warnings
    from importlib.metadata import entry_points

    from ._C import _device_plugins

    for ep in entry_points(group=PLUGIN_GROUP):
        try:
            ep.load()()
        except Exception as e:  # noqa: BLE001 - any failure of a plugin is reported, never raised
            warnings.warn(f"ccl: device plugin {ep.name!r} ({ep.value}) failed to load and is skipped: "
                          f"{type(e).__name__}: {e}", RuntimeWarning, stacklevel=2)
    return sorted(_device_plugins())


def register():
    """Register backend 'ccl' for CPU tensors (and the devices of installed plugins) and expose
    torch.distributed.ProcessGroupCCL."""
    global _registered
    if _registered:
        return
    import torch.distributed as dist

    from ._C import ProcessGroupCCL

    import atexit

    from ._C import _shutdown_completers

    devices = ["cpu"] + load_device_plugins()
    dist.Backend.register_backend("ccl", _create_backend, devices=devices)
    atexit.register(_shutdown_completers)
    dist.ProcessGroupCCL = ProcessGroupCCL
    export_launcher_rank()
    _registered = True
