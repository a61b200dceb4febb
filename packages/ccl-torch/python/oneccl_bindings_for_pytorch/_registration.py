"""Registering the `ccl` backend with torch.distributed (idempotent)."""
import os

_registered = False


def _create_backend(opts, pg_options=None):
    """torch's extended creator: `opts` carries the store, rank, size and timeout, and from torch 2.14
    enable_reconfigure (the group then has no members until reconfigure())."""
    from ._C import ProcessGroupCCL

    reconfigurable = bool(getattr(opts, "enable_reconfigure", False))
    if reconfigurable:
        _transport_for_fault_tolerance()
    return ProcessGroupCCL(opts.store, opts.group_rank, opts.group_size, opts.timeout,
                           enable_reconfigure=reconfigurable)


def _transport_for_fault_tolerance():
    """libfabric's shared-memory transport (CCL_ATL_SHM=1, ccl-core's default) cannot outlive a rank that died on
    its host: the survivors' next oneCCL transfers and a replacement rank's join hang in it. A group that is to
    survive lost ranks therefore runs oneCCL over tcp between ranks of one host (ccl-core's own shared-memory path,
    which carries all_reduce, all_gather, reduce_scatter and broadcast, is not affected). Only possible before
    oneCCL starts; afterwards, say so."""
    import warnings

    from ccl_core import effective_environment

    if "CCL_ATL_SHM" in os.environ:
        return  # the user's choice
    if dict(effective_environment()).get("CCL_ATL_SHM", "") == "":
        os.environ["CCL_ATL_SHM"] = "0"
        return
    warnings.warn("ccl: enable_reconfigure=True, but oneCCL already runs with its shared-memory transport in this "
                  "process (CCL_ATL_SHM=1): after a rank on this host dies, transfers through oneCCL may hang until "
                  "their timeout. Set CCL_ATL_SHM=0 before the first process group for fault tolerance.",
                  RuntimeWarning, stacklevel=3)


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

    from ._C import _stop_completions, _stop_publishing

    devices = ["cpu"] + load_device_plugins()
    dist.Backend.register_backend("ccl", _create_backend, extended_api=True, devices=devices)
    atexit.register(_stop_completions)
    atexit.register(_stop_publishing)
    dist.ProcessGroupCCL = ProcessGroupCCL
    export_launcher_rank()
    _registered = True
