"""DeepSpeed's own oneCCL op (CCLCommBuilder, JIT-built on first use), called as DeepSpeed's CCLBackend calls it:
backend `deepspeed` is its all_reduce, `deepspeed-inference` its inference_all_reduce (its shared-memory path, taken
when LOCAL_SIZE is the world size, as DeepSpeed's launcher sets it). They are here to be compared with the ccl
backend, since oneccl_bindings_for_pytorch routes DeepSpeed to torch.distributed instead (_deepspeed_compat.py)."""
from __future__ import annotations

import os
from typing import Callable

import torch
import torch.distributed as dist

BACKENDS = ("deepspeed", "deepspeed-inference")


def why_not(dtype) -> str:
    """Why DeepSpeed's op cannot run `dtype` on this CPU ("" when it can): its 16-bit kernels need AVX-512 (BW), its
    fp32 one AVX2, and without them the process dies of SIGILL."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next((line for line in f if line.startswith("flags")), "").split())
    except OSError:
        flags = set()
    need = "avx2" if dtype == torch.float32 else "avx512bw"
    return "" if need in flags else f"its {str(dtype).removeprefix('torch.')} kernel needs {need}, which this CPU lacks"


def runs_in(dtype) -> bool:
    return not why_not(dtype)


def build(rank: int, size: int):
    """The op, initialised on every rank (its oneCCL address travels by a broadcast on the world group)."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ["LOCAL_SIZE"] = str(size)  # every rank on this host, as ccl-bench starts them
    try:
        from deepspeed.comm.ccl import build_ccl_op
    except ImportError as e:
        raise SystemExit(f"ccl-bench: the deepspeed backends need DeepSpeed ({e})") from None
    op = build_ccl_op()
    if op is None:
        raise SystemExit("ccl-bench: DeepSpeed's CCLCommBuilder cannot be built on this machine")
    address = torch.tensor(op.get_kvs_addr(rank)).to(torch.uint8)
    dist.broadcast(address, 0)
    op.initialize(size, rank, address)
    return op


def remove_buffers(rank: int) -> None:
    """DeepSpeed's op leaves its shared-memory buffers (/dev/shm/deepspeed_allreduce_buffer_<i>_<addr>_<port>_<rank>,
    66 MiB each) behind when its process ends: this rank's go once the run is over."""
    import glob

    addr, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    for path in glob.glob(f"/dev/shm/deepspeed_allreduce_buffer_*_{addr}_{port}_{rank}"):
        try:
            os.unlink(path)
        except OSError:
            pass


def all_reduce(op, backend: str, tensor: torch.Tensor, size: int) -> Callable[[], None]:
    """One blocking sum over every rank, through the op."""
    from deepspeed.comm.reduce_op import ReduceOp

    if backend == "deepspeed":
        ranks = list(range(size))
        return lambda: op.all_reduce(tensor, ReduceOp.SUM, ranks, False)
    return lambda: op.inference_all_reduce(tensor, ReduceOp.SUM)
