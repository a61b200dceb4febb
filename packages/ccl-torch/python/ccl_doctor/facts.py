"""What one rank finds about itself and its host, before any collective: all of it plain data (JSON) that rank 0
gathers through the store and judges in checks.py."""
from __future__ import annotations

import os
import platform
import socket
import time
from importlib import metadata
from pathlib import Path


def cpu_list(text: str) -> list[int]:
    """'0-3,8,10-11' (the kernel's cpulist format) -> [0, 1, 2, 3, 8, 10, 11]."""
    cpus = []
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def numa_nodes() -> dict[str, list[int]]:
    """NUMA node -> its CPUs, from sysfs; one node holding every CPU where sysfs has none (containers, VMs)."""
    nodes = {}
    for node in sorted(Path("/sys/devices/system/node").glob("node[0-9]*")):
        try:
            nodes[node.name.removeprefix("node")] = cpu_list((node / "cpulist").read_text())
        except OSError:
            continue
    return nodes or {"0": list(range(os.cpu_count() or 1))}


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def dev_shm() -> dict | None:
    try:
        fs = os.statvfs("/dev/shm")
    except OSError:
        return None
    return {"total": fs.f_blocks * fs.f_frsize, "free": fs.f_bavail * fs.f_frsize}


def memory_copy_rate(nbytes: int = 64 << 20, repeats: int = 5) -> float:
    """Bytes per second this rank copies one buffer into another (best of a few): what a host's memory suggests for
    a collective inside it."""
    import torch

    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t)
    return nbytes / best


def versions() -> dict[str, str]:
    import ccl_core
    import torch

    def installed(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "(not installed)"

    import oneccl_bindings_for_pytorch

    return {"python": platform.python_version(), "torch": torch.__version__,
            "ccl-torch": oneccl_bindings_for_pytorch.__version__, "ccl-core": ccl_core.__version__,
            "oneCCL": ccl_core.oneccl_version(), "impi-rt (libfabric)": installed("impi-rt")}


def transport() -> dict[str, str]:
    """What oneCCL is told to use: ours are the values a communicator would apply (effective_environment)."""
    import ccl_core

    ccl_core.initialize_runtime()
    effective = dict(ccl_core.effective_environment())
    return {"atl": effective.get("CCL_ATL_TRANSPORT", "ofi"), "atl_shm": effective.get("CCL_ATL_SHM", "0"),
            "fi_provider": os.environ.get("FI_PROVIDER", ""), "fi_tcp_iface": os.environ.get("FI_TCP_IFACE", "")}


def collect(rank: int, local_rank: int | None) -> dict:
    import torch

    return {
        "rank": rank,
        "local_rank": local_rank,
        "hostname": socket.gethostname(),
        "boot_id": boot_id(),
        "pid": os.getpid(),
        "affinity": sorted(os.sched_getaffinity(0)),
        "host_cpus": os.cpu_count() or 1,
        "numa": numa_nodes(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "torch_threads": torch.get_num_threads(),
        "dev_shm": dev_shm(),
        "ccl_core_shm": os.environ.get("CCL_CORE_SHM", "1") != "0",
        "versions": versions(),
        "transport": transport(),
        "memory_copy_rate": memory_copy_rate(),
    }
