"""A real Slurm (slurm-wlm 22.05 and munge, started here): two hosts in network namespaces, one slurmd each.
`srun -N 2 --ntasks-per-node 2` runs the DDP example on ccl with nothing set but what Slurm gives each task, and
its output equals a single-host torchrun run; Intel MPI's mpiexec inside `salloc` works as well. Everything is
stopped and removed afterwards."""
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import slurm_cluster
from ranks import clean_env
from test_core_launch import SCRIPT as CORE_SCRIPT  # init_from_env, then one allreduce

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ddp_train.py"
why_not = slurm_cluster.why_not()
pytestmark = pytest.mark.skipif(bool(why_not), reason=why_not)

TORCH_SCRIPT = textwrap.dedent("""
    import os, socket, torch, torch.distributed as dist
    dist.init_process_group("ccl")
    x = torch.full((4,), dist.get_rank() + 1.0)
    dist.all_reduce(x)
    print(f"rank {dist.get_rank()}/{dist.get_world_size()} local {os.environ['LOCAL_RANK']} "
          f"on {socket.gethostname()} master {os.environ['MASTER_ADDR']} sum={x[0].item():g}", flush=True)
    dist.destroy_process_group()
""")
EXPECTED = [f"rank {r}/4 local {r % 2} on cclhost{r // 2} master cclhost0 sum=10" for r in range(4)]


@pytest.fixture(scope="module")
def cluster():
    with slurm_cluster.SlurmCluster(str(os.getpid() % 10000)) as c:
        yield c


def task_env(cluster):
    env = clean_env()
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return cluster.env(dict(env, OMP_NUM_THREADS="1"))


def srun(cluster, *argv, timeout=300):
    proc = cluster.run(["srun", "-N", "2", "--ntasks-per-node", "2", "--kill-on-bad-exit=1", *argv],
                       task_env(cluster), timeout=timeout)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}\n{cluster.logs()}"
    return proc.stdout


def training_lines(output):
    return [line.strip() for line in output.splitlines() if re.search(r"step +\d+|replicas identical|DDP on", line)]


def test_srun_runs_the_ddp_example_as_a_single_host_run_does(cluster):
    on_slurm = srun(cluster, sys.executable, str(EXAMPLE))
    print(on_slurm)
    single = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4", str(EXAMPLE)],
                            env=dict(clean_env(), OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=300)
    assert single.returncode == 0, single.stderr[-3000:]
    assert "DDP on backend 'ccl' with 4 ranks" in on_slurm and "replicas identical: True" in on_slurm
    assert training_lines(on_slurm) == training_lines(single.stdout)


def test_srun_tasks_rendezvous_from_slurms_variables(cluster):
    assert sorted(srun(cluster, sys.executable, "-c", TORCH_SCRIPT).splitlines()) == EXPECTED
    assert sorted(srun(cluster, sys.executable, "-c", CORE_SCRIPT).splitlines()) == [
        f"rank {r}/4 slurm sum=10" for r in range(4)]


def test_mpiexec_inside_salloc(cluster):
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    # Both simulated hosts share this machine's two cores, and Intel MPI pins each host's two ranks to cores 0
    # and 1: two busy ranks per core, which stalls oneCCL's start for minutes. On real hosts each has its own.
    proc = cluster.run(["salloc", "-N", "2", "--ntasks-per-node", "2", mpiexec, "-genv", "I_MPI_PIN", "0",
                        "-n", "4", "-ppn", "2", sys.executable, "-c", TORCH_SCRIPT], task_env(cluster), timeout=300)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}\n{cluster.logs()}"
    # mpiexec forwards the ranks' output in pieces: lines may run together
    assert sorted(re.findall(r"rank \d+/\d+ local \d+ on \S+ master \S+ sum=\d+", proc.stdout)) == EXPECTED


def test_ccl_doctor_under_srun_finds_a_healthy_job(cluster):
    report = srun(cluster, sys.executable, "-m", "ccl_doctor", "--timeout", "30")  # srun() asserts exit 0
    print(report)
    assert "ccl-doctor: 4 ranks on 2 hosts, started by slurm" in report
    assert "reaches    cclhost1 yes" in report and "hierarchy on: 2 hosts x 2 ranks" in report
    assert report.rstrip().endswith("ccl-doctor: no problems found")
