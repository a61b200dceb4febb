"""Registering the `ccl` backend with torch.distributed (idempotent)."""
import datetime
import os

_registered = False


def _create_backend(store, rank, size, timeout: datetime.timedelta):
    from ._C import ProcessGroupCCL

    return ProcessGroupCCL(store, rank, size, timeout)


def export_launcher_rank(environ=os.environ):
    """Under mpiexec (PMI_*), Open MPI or Slurm's srun, set RANK/WORLD_SIZE/LOCAL_RANK for torch's env://
    rendezvous when they are missing, and MASTER_ADDR/MASTER_PORT under Slurm, so scripts written for the original
    run unchanged. Values the user or torchrun set are kept."""
    from ccl_core import detect_launch
    from ccl_core import rendezvous_address

    info = detect_launch(environ)
    if info is None or info.launcher == "env":
        return
    environ.setdefault("RANK", str(info.rank))
    environ.setdefault("WORLD_SIZE", str(info.size))
    if info.local_rank is not None:
        environ.setdefault("LOCAL_RANK", str(info.local_rank))
    if "SLURM_JOB_ID" in environ or "SLURM_JOBID" in environ:
        host, port = rendezvous_address(environ)
        environ.setdefault("MASTER_ADDR", host)
        environ.setdefault("MASTER_PORT", str(port))


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

    from ._C import _stop_completions

    devices = ["cpu"] + load_device_plugins()
    dist.Backend.register_backend("ccl", _create_backend, devices=devices)
    atexit.register(_stop_completions)
    dist.ProcessGroupCCL = ProcessGroupCCL
    export_launcher_rank()
    _registered = True
