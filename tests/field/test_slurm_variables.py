"""Ranks started with the variables Slurm's srun gives each task (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
SLURM_JOB_NODELIST, SLURM_JOB_ID) and nothing else: no RANK, no MASTER_ADDR/PORT. Both torch's env:// rendezvous
on `ccl` and ccl_core.init_from_env find each other. (These processes are started by the test itself, which is quick and
needs no root; test_slurm.py runs the same under a real Slurm.)"""
import socket
import subprocess
import sys
import textwrap

import pytest

from ccl_core import first_slurm_host, rendezvous_address
from ranks import clean_env
from test_core_launch import SCRIPT as CORE_SCRIPT  # init_from_env, then one allreduce

TORCH_SCRIPT = textwrap.dedent("""
    import os, torch, torch.distributed as dist
    dist.init_process_group("ccl")
    x = torch.full((4,), dist.get_rank() + 1.0)
    dist.all_reduce(x)
    print(f"rank {dist.get_rank()}/{dist.get_world_size()} local {os.environ['LOCAL_RANK']} "
          f"master {os.environ['MASTER_ADDR']} sum={x[0].item():g}")
    dist.destroy_process_group()
""")



def job_id_with_free_port() -> int:
    """A job id whose derived port (20000 + id % 20000) is free on loopback now."""
    for job in range(20000):
        port = 20000 + job
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return job
    raise RuntimeError("no free port in 20000-39999")


def run_as_srun_tasks(script: str, ntasks: int = 2):
    job = job_id_with_free_port()
    procs = []
    for rank in range(ntasks):
        env = clean_env()
        for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(name, None)
        env.update(SLURM_PROCID=str(rank), SLURM_NTASKS=str(ntasks), SLURM_LOCALID=str(rank),
                   SLURM_JOB_NODELIST="localhost", SLURM_NODELIST="localhost", SLURM_JOB_ID=str(job))
        procs.append(subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    return [o.strip().splitlines()[-1] for o, _ in outs]


def test_torch_env_rendezvous_from_slurm_variables():
    assert run_as_srun_tasks(TORCH_SCRIPT) == ["rank 0/2 local 0 master localhost sum=3",
                                               "rank 1/2 local 1 master localhost sum=3"]


def test_ccl_core_init_from_slurm_variables():
    assert run_as_srun_tasks(CORE_SCRIPT) == ["rank 0/2 slurm sum=3", "rank 1/2 slurm sum=3"]


@pytest.mark.parametrize("nodelist,first", [
    ("node07", "node07"), ("node[07-09,12],gpu1", "node07"), ("gpu1,node[2-3]", "gpu1"),
    ("rack1-n[003,005]", "rack1-n003"), ("cclhost[0-1]", "cclhost0"),
])
def test_first_host_of_a_node_list(nodelist, first):
    assert first_slurm_host(nodelist) == first


def test_rendezvous_address_keeps_what_the_user_set():
    slurm = {"SLURM_JOB_NODELIST": "n[4-5]", "SLURM_JOB_ID": "123456"}
    assert rendezvous_address(slurm) == ("n4", 20000 + 123456 % 20000)
    assert rendezvous_address(dict(slurm, MASTER_ADDR="10.0.0.9", MASTER_PORT="1234")) == ("10.0.0.9", 1234)
    assert rendezvous_address({}) == ("127.0.0.1", 29500)
