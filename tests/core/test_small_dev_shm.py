"""A small /dev/shm, as in a container started without --shm-size: no rank dies of SIGBUS. With 1 MiB, ccl-core's
shared-memory path reserves its segment up front, fails, and every rank falls back to oneCCL together; oneCCL's own
shared-memory transport is left off. With 16 MiB the path fits, but registered memory (allocate_tensor) beyond it falls
back to ordinary tensors. Each says so, naming /dev/shm's size, and every result is right."""
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from ccl_core import free_port
from ranks import clean_env

JOB = textwrap.dedent("""
    import torch, torch.distributed as dist
    dist.init_process_group("ccl")
    rank, size = dist.get_rank(), dist.get_world_size()
    x = torch.full((1 << 20,), rank + 1.0)          # 4 MiB, more than all of /dev/shm
    dist.all_reduce(x)
    out = torch.empty(size * 1000)
    dist.all_gather_into_tensor(out, torch.full((1000,), float(rank)))
    dist.barrier()
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    print(f"rank {rank} sum {x.min().item():g}-{x.max().item():g} gathered {out[::1000].tolist()} "
          f"shm {backend.shared_memory}", flush=True)
    dist.destroy_process_group()
""")


NEEDS_PRIVATE_DEV_SHM = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                           reason="needs root and unshare (a private /dev/shm)")


def torchrun_with_dev_shm(size: str, job_text: str, tmp_path, **env) -> subprocess.CompletedProcess:
    """Two ranks of `job_text` under torchrun, in a mount namespace whose /dev/shm is a tmpfs of `size`."""
    job = tmp_path / "job.py"
    job.write_text(job_text)
    inner = f'mount -t tmpfs -o size={size} tmpfs /dev/shm && exec "$@"'
    cmd = ["unshare", "--mount", "--propagation", "private", "bash", "-c", inner, "bash",
           sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           str(job)]
    proc = subprocess.run(cmd, env=dict(clean_env(), **env), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


@NEEDS_PRIVATE_DEV_SHM
def test_a_one_mib_dev_shm_falls_back_to_oneccl_without_dying(tmp_path):
    proc = torchrun_with_dev_shm("1m", JOB, tmp_path)
    lines = sorted(re.findall(r"rank \d sum [^\n]*?shm (?:True|False)", proc.stdout))  # torchrun may join lines
    assert lines == ["rank 0 sum 3-3 gathered [0.0, 1.0] shm False", "rank 1 sum 3-3 gathered [0.0, 1.0] shm False"]
    assert "shared-memory path off for this group: rank 0 could not reserve" in proc.stderr, proc.stderr[-3000:]
    assert "/dev/shm has" in proc.stderr and "free of 1024 KiB" in proc.stderr
    assert "oneCCL uses tcp between ranks on this host (CCL_ATL_SHM=0)" in proc.stderr


@NEEDS_PRIVATE_DEV_SHM
def test_a_rank_whose_part_of_the_segment_does_not_fit_turns_the_path_off_for_all(tmp_path):
    # each rank reserves the pages it writes (NUMA-local): 1 MiB slots give each about 3 MiB, so in 4 MiB rank 0's
    # part fits and rank 1's, reserved after it, does not
    proc = torchrun_with_dev_shm("4m", JOB, tmp_path, CCL_CORE_SHM_SEGMENT_BYTES=str(1 << 20))
    lines = sorted(re.findall(r"rank \d sum [^\n]*?shm (?:True|False)", proc.stdout))
    assert lines == ["rank 0 sum 3-3 gathered [0.0, 1.0] shm False", "rank 1 sum 3-3 gathered [0.0, 1.0] shm False"]
    assert "shared-memory path off for this group: rank 1 could not reserve its part" in proc.stderr, \
        proc.stderr[-3000:]


REGISTERED_JOB = textwrap.dedent("""
    import torch, torch.distributed as dist
    dist.init_process_group("ccl")
    rank = dist.get_rank()
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    small = backend.allocate_tensor(1024, dtype=torch.float32, device=torch.device("cpu"))
    big = backend.allocate_tensor(1 << 24, dtype=torch.float32, device=torch.device("cpu"))  # 64 MiB
    big.fill_(rank + 1)
    dist.all_reduce(big)
    small.fill_(rank + 1)
    dist.all_reduce(small)
    print(f"rank {rank} shm {backend.shared_memory} small {backend.is_registered(small)} {small.max().item():g} "
          f"big {backend.is_registered(big)} {big.min().item():g}-{big.max().item():g}", flush=True)
    dist.destroy_process_group()
""")


@NEEDS_PRIVATE_DEV_SHM
def test_registered_memory_beyond_dev_shm_falls_back_to_ordinary_tensors(tmp_path):
    proc = torchrun_with_dev_shm("16m", REGISTERED_JOB, tmp_path)
    lines = sorted(re.findall(r"rank \d shm [^\n]*?big (?:True|False) [0-9.-]+", proc.stdout))
    assert lines == ["rank 0 shm True small True 3 big False 3-3", "rank 1 shm True small True 3 big False 3-3"], proc.stdout
    assert proc.stderr.count("registered memory: /dev/shm cannot hold") == 2, proc.stderr[-3000:]  # once per rank
    assert "MiB free of 16 MiB" in proc.stderr, proc.stderr[-3000:]
