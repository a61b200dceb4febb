"""ccl_core: oneCCL collectives without torch.

    import numpy as np, ccl_core
    comm = ccl_core.init_from_env()          # RANK/WORLD_SIZE (or mpiexec's PMI_*) + MASTER_ADDR/MASTER_PORT
    x = np.ones(4, np.float32)
    comm.allreduce(x)                        # in place, sum over ranks
"""
from ._errors import (
    BackendError,
    CclError,
    CclTimeoutError,
    CommunicatorAbortedError,
    InvalidArgumentError,
    UnsupportedError,
)
from ._version import __version__

try:
    from . import _ccl_core
except ImportError:
    # RPATH did not reach oneCCL (unusual install layout, or the SYCL-enabled oneCCL, whose own dependencies only
    # the loader finds): load it by full path, then retry.
    from ._loader import preload_oneccl

    if preload_oneccl() is None:
        raise
    from . import _ccl_core

from ._ccl_core import (
    Communicator,
    FileStore,
    PrefixStore,
    Request,
    Store,
    TcpStore,
    effective_environment,
    env_defaults,
    initialize_runtime,
    kernel_level,
    oneccl_library_path,
    oneccl_version,
    progress_mode,
    settings,
    supported_kernel_levels,
)
from ._bootstrap import detect_launch, first_slurm_host, free_port, init_from_env, rendezvous_address

# The progress thread completes dropped requests and futures, which may touch Python objects: it stops doing so
# while the interpreter is still alive.
import atexit as _atexit

_atexit.register(_ccl_core._stop_completions)


def get_include() -> str:
    """Directory of ccl-core's C++ headers (for packages that build on ccl-core)."""
    from pathlib import Path

    return str(Path(__file__).parent / "include")


def get_library_dir() -> str:
    """Directory holding libccl_core.so."""
    from pathlib import Path

    return str(Path(__file__).parent)


__all__ = [
    "BackendError",
    "CclError",
    "CclTimeoutError",
    "Communicator",
    "CommunicatorAbortedError",
    "FileStore",
    "InvalidArgumentError",
    "PrefixStore",
    "Request",
    "Store",
    "TcpStore",
    "UnsupportedError",
    "__version__",
    "detect_launch",
    "first_slurm_host",
    "free_port",
    "effective_environment",
    "env_defaults",
    "get_include",
    "get_library_dir",
    "init_from_env",
    "initialize_runtime",
    "kernel_level",
    "oneccl_library_path",
    "oneccl_version",
    "progress_mode",
    "rendezvous_address",
    "supported_kernel_levels",
]
