"""Starting ranks the ways users do: mpiexec (impi-rt), our launcher, and a shell with nothing sourced."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from ccl_core import detect_launch, free_port
from ranks import clean_env

SCRIPT = textwrap.dedent("""
    import os, numpy as np, ccl_core
    comm = ccl_core.init_from_env(timeout=60)
    x = np.full(4, comm.rank + 1.0, np.float32)
    comm.allreduce(x)
    # one write() per line: the ranks share one pipe
    os.write(1, f"rank {comm.rank}/{comm.size} {ccl_core.detect_launch().launcher} sum={x[0]:g}\\n".encode())
""")


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "job.py"
    path.write_text(SCRIPT)
    return str(path)


def test_mpiexec_from_impi_rt(script):
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable))
    assert mpiexec, "impi-rt's mpiexec is a pinned dependency and must be installed beside python"
    env = clean_env()
    env["MASTER_PORT"] = str(free_port())
    out = subprocess.run([mpiexec, "-n", "2", sys.executable, script], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = sorted(l for l in out.stdout.splitlines() if l.startswith("rank"))
    assert lines == ["rank 0/2 mpi (PMI) sum=3", "rank 1/2 mpi (PMI) sum=3"], out.stdout


def test_our_launcher_starts_three_ranks(script):
    out = subprocess.run([sys.executable, "-m", "ccl_core.launch", "-n", "3", script], env=clean_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = sorted(l for l in out.stdout.splitlines() if l.startswith("rank"))
    assert lines == [f"rank {r}/3 env sum=6" for r in range(3)], out.stdout


def test_import_and_info_with_nothing_sourced(tmp_path):
    """No LD_LIBRARY_PATH, no oneCCL variables, run from an unrelated directory."""
    out = subprocess.run([sys.executable, "-m", "ccl_core.info", "--json"], env=clean_env(), cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    import json

    info = json.loads(out.stdout)  # nothing else on stdout: oneCCL's start-up chatter is silenced
    assert info["oneccl"].startswith("Gold-2021.16.2")
    assert info["libccl"].endswith("libccl.so.1")
    env = {e["name"]: e for e in info["environment"]}
    assert env["CCL_WORKER_OFFLOAD"]["value"] == "0" and env["CCL_WORKER_OFFLOAD"]["source"] == "ccl-core default"
    # a real 2-rank group made by info: what it agreed, beside what the environment asks for
    assert info["group"]["ranks"] == 2 and info["group"]["shared_memory"] == "on", info["group"]


def test_info_reports_the_groups_decision_not_only_the_variable(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ccl_core.info", "--ranks", "3"], env=dict(clean_env(), CCL_CORE_SHM="0"),
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    group = next(line for line in out.stdout.splitlines() if line.startswith("group"))
    assert group.startswith("group         3 local ranks agreed: shared-memory path off: rank "), group
    assert "has CCL_CORE_SHM=0, 3 on this host, oversubscribed" in group, group


def test_user_setting_wins_over_our_default(tmp_path):
    env = dict(clean_env(), CCL_ATL_SHM="0")
    out = subprocess.run([sys.executable, "-m", "ccl_core.info", "--json"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    import json

    shm = {e["name"]: e for e in json.loads(out.stdout)["environment"]}["CCL_ATL_SHM"]
    assert (shm["value"], shm["source"]) == ("0", "user")


@pytest.mark.parametrize("environ,expected", [
    ({"RANK": "1", "WORLD_SIZE": "2"}, (1, 2, "env")),
    ({"PMI_RANK": "0", "PMI_SIZE": "4"}, (0, 4, "mpi (PMI)")),
    ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3"}, (2, 3, "open-mpi")),
    ({"RANK": "0", "WORLD_SIZE": "2", "PMI_RANK": "1", "PMI_SIZE": "2"}, (0, 2, "env")),
    ({"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1"}, (1, 4, "slurm")),
    # mpiexec inside a Slurm allocation: the batch step's SLURM_PROCID=0 must not win over mpiexec's ranks
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "PMI_RANK": "1", "PMI_SIZE": "2"}, (1, 2, "mpi (PMI)")),
    ({}, None),
])
def test_detect_launch(environ, expected):
    info = detect_launch(environ)
    assert (None if info is None else (info.rank, info.size, info.launcher)) == expected


def test_detect_launch_rejects_out_of_range_rank():
    with pytest.raises(ValueError, match="RANK=3 is out of range for WORLD_SIZE=2"):
        detect_launch({"RANK": "3", "WORLD_SIZE": "2"})
