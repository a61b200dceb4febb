"""Rank and size from whatever started this process, and a communicator bootstrapped from them.

Recognised launchers, first match wins:
  RANK / WORLD_SIZE               torchrun, by hand, `python -m ccl_core.launch`
  PMI_RANK / PMI_SIZE             mpiexec of Intel MPI (impi-rt) and MPICH (Hydra)
  OMPI_COMM_WORLD_RANK / _SIZE    Open MPI's mpirun
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass

_LAUNCHER_VARIABLES = [
    ("env", "RANK", "WORLD_SIZE"),
    ("mpi (PMI)", "PMI_RANK", "PMI_SIZE"),
    ("open-mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
]


@dataclass(frozen=True)
class LaunchInfo:
    rank: int
    size: int
    launcher: str


def detect_launch(environ=os.environ) -> LaunchInfo | None:
    """Rank and size from the launcher's variables, or None when none is set."""
    for launcher, rank_var, size_var in _LAUNCHER_VARIABLES:
        if rank_var in environ and size_var in environ:
            try:
                rank, size = int(environ[rank_var]), int(environ[size_var])
            except ValueError:
                raise ValueError(f"{rank_var}={environ[rank_var]!r} / {size_var}={environ[size_var]!r} "
                                 "are not integers") from None
            if not 0 <= rank < size:
                raise ValueError(f"{rank_var}={rank} is out of range for {size_var}={size}")
            return LaunchInfo(rank, size, launcher)
    return None


def init_from_env(timeout: float = 1800.0, name: str = "default"):
    """Communicator for this process, bootstrapped through a TCP store on MASTER_ADDR:MASTER_PORT
    (default 127.0.0.1:29500; rank 0 serves it, bound to MASTER_ADDR only)."""
    from . import Communicator, PrefixStore, TcpStore

    info = detect_launch()
    if info is None:
        raise RuntimeError("init_from_env: no launcher variables found; set RANK and WORLD_SIZE, or start "
                           "under torchrun, mpiexec or `python -m ccl_core.launch -n N`")
    host = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = int(os.environ.get("MASTER_PORT", "29500"))
    store = TcpStore(host, port, is_server=info.rank == 0, connect_timeout=timeout)
    return Communicator(PrefixStore(name, store), info.rank, info.size, timeout=timeout, name=name)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
