"""Rank and size from whatever started this process, and a communicator bootstrapped from them.

Recognised launchers, first match wins:
  RANK / WORLD_SIZE               torchrun, by hand, `python -m ccl_core.launch`
  PMI_RANK / PMI_SIZE             mpiexec of Intel MPI (impi-rt) and MPICH (Hydra)
  OMPI_COMM_WORLD_RANK / _SIZE    Open MPI's mpirun
  SLURM_PROCID / SLURM_NTASKS     Slurm's srun (after the MPI launchers: mpiexec inside an allocation still wins)

Under Slurm, MASTER_ADDR defaults to the first host of the job's node list and MASTER_PORT to a port derived from
the job id, so every task of a job finds the same rendezvous without anyone exporting it.
"""
from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass

_LAUNCHER_VARIABLES = [
    ("env", "RANK", "WORLD_SIZE"),
    ("mpi (PMI)", "PMI_RANK", "PMI_SIZE"),
    ("open-mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("slurm", "SLURM_PROCID", "SLURM_NTASKS"),
]
_LOCAL_RANK_VARIABLES = {"env": "LOCAL_RANK", "mpi (PMI)": "MPI_LOCALRANKID",
                         "open-mpi": "OMPI_COMM_WORLD_LOCAL_RANK", "slurm": "SLURM_LOCALID"}
DEFAULT_PORT = 29500


@dataclass(frozen=True)
class LaunchInfo:
    rank: int
    size: int
    launcher: str
    local_rank: int | None = None


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
            local = environ.get(_LOCAL_RANK_VARIABLES[launcher], "")
            return LaunchInfo(rank, size, launcher, int(local) if local.isdigit() else None)
    return None


def first_slurm_host(nodelist: str) -> str:
    """The first host of a Slurm node list: 'node[07-09,12],gpu1' -> 'node07'."""
    match = re.match(r"\s*([^,\[]+)(?:\[([^\]]*)\])?", nodelist)
    if match is None:
        raise ValueError(f"cannot read the Slurm node list {nodelist!r}")
    prefix, ranges = match.groups()
    return prefix + (ranges.split(",")[0].split("-")[0] if ranges else "")


def rendezvous_address(environ=os.environ) -> tuple[str, int]:
    """MASTER_ADDR / MASTER_PORT, or under Slurm (when they are unset) the job's first host and a port from the
    job id (in 20000-39999, so concurrent jobs on one host rarely collide); 127.0.0.1:29500 otherwise."""
    host, port = environ.get("MASTER_ADDR"), environ.get("MASTER_PORT")
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    job = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    if host is None and nodelist:
        host = first_slurm_host(nodelist)
    if port is None and job and job.isdigit():
        port = str(20000 + int(job) % 20000)
    return host or "127.0.0.1", int(port or DEFAULT_PORT)


def init_from_env(timeout: float = 1800.0, name: str = "default"):
    """Communicator for this process, bootstrapped through a TCP store on MASTER_ADDR:MASTER_PORT
    (default 127.0.0.1:29500, or Slurm's first host; rank 0 serves it, bound to MASTER_ADDR only)."""
    from . import Communicator, PrefixStore, TcpStore

    info = detect_launch()
    if info is None:
        raise RuntimeError("init_from_env: no launcher variables found; set RANK and WORLD_SIZE, or start "
                           "under torchrun, mpiexec or `python -m ccl_core.launch -n N`")
    host, port = rendezvous_address()
    store = TcpStore(host, port, is_server=info.rank == 0, connect_timeout=timeout)
    return Communicator(PrefixStore(name, store), info.rank, info.size, timeout=timeout, name=name)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
