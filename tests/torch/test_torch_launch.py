"""Every way users start ranks: torchrun, mpiexec (impi-rt), by hand, file:// and tcp:// init, and
ProcessGroupCCL used directly; the original-API example and profiling scripts run unchanged."""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ccl_core import free_port
from ranks import clean_env

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "original_api" / "example.py"
PROFILING = ROOT / "examples" / "original_api" / "profiling.py"
BIN = Path(sys.executable).parent


def run(cmd, env=None, timeout=180):
    out = subprocess.run(cmd, env=env or clean_env(), capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{cmd} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def torchrun(script, *args, n=2):
    return run([str(BIN / "torchrun"), "--nproc-per-node", str(n), "--master-port", str(free_port()), str(script), *args])


def mpiexec(script, n=2, extra=()):
    env = clean_env()
    env["MASTER_PORT"] = str(free_port())
    return run([str(BIN / "mpiexec"), "-n", str(n), *extra, sys.executable, str(script)], env=env)


def test_original_example_under_torchrun():
    out = torchrun(EXAMPLE)
    for r in range(2):
        assert f"my rank = {r}  my size = 2" in out
        assert f"rank {r}: trained 3 steps, replicas identical: True" in out


def test_original_example_under_mpiexec():
    out = mpiexec(EXAMPLE)
    for r in range(2):
        assert f"my rank = {r}  my size = 2" in out
        assert f"rank {r}: trained 3 steps, replicas identical: True" in out


@pytest.mark.parametrize("launcher", ["torchrun", "mpiexec"])
def test_original_profiling_shows_op_names(launcher):
    out = torchrun(PROFILING) if launcher == "torchrun" else mpiexec(PROFILING, extra=("-l",))
    assert out.count("oneccl_bindings_for_pytorch::allreduce") >= 4  # two shapes on each of two ranks
    assert "oneccl_bindings_for_pytorch::broadcast" in out
    assert "[[2, 2]]" in out and "[[4, 4]]" in out


HAND_SCRIPT = textwrap.dedent("""
    import os, sys, datetime, torch, torch.distributed as dist
    mode = sys.argv[1]
    kwargs = dict(timeout=datetime.timedelta(seconds=60))
    if mode != "env":
        kwargs.update(init_method=sys.argv[2], rank=int(sys.argv[3]), world_size=2)
    dist.init_process_group("ccl", **kwargs)      # no import of the bindings: torch's autoload registers 'ccl'
    t = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(t)
    os.write(1, f"{mode} rank {dist.get_rank()} sum {t.item():g}\\n".encode())
    dist.destroy_process_group()
""")


def start_pair(tmp_path, argv_for_rank, env_for_rank=lambda r: {}):
    script = tmp_path / "job.py"
    script.write_text(HAND_SCRIPT)
    procs = [subprocess.Popen([sys.executable, str(script), *argv_for_rank(r)], env={**clean_env(), **env_for_rank(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0, o + e
    return "".join(o for o, _ in outs)


def test_by_hand_with_env_variables(tmp_path):
    port = str(free_port())
    out = start_pair(tmp_path, lambda r: ["env"], lambda r: {"RANK": str(r), "WORLD_SIZE": "2",
                                                              "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
    assert "env rank 0 sum 3" in out and "env rank 1 sum 3" in out


def test_init_method_file(tmp_path):
    url = f"file://{tmp_path}/rendezvous"
    out = start_pair(tmp_path, lambda r: ["file", url, str(r)])
    assert "file rank 0 sum 3" in out and "file rank 1 sum 3" in out


def test_init_method_tcp(tmp_path):
    url = f"tcp://127.0.0.1:{free_port()}"
    out = start_pair(tmp_path, lambda r: ["tcp", url, str(r)])
    assert "tcp rank 0 sum 3" in out and "tcp rank 1 sum 3" in out


DIRECT_SCRIPT = textwrap.dedent("""
    import os, sys, datetime, torch, torch.distributed as dist
    import torch_ccl                                   # the original's old module name
    rank, port = int(sys.argv[1]), int(sys.argv[2])
    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, timeout=datetime.timedelta(seconds=60))
    pg = dist.ProcessGroupCCL(store, rank, 2, datetime.timedelta(seconds=60))
    t = torch.tensor([rank + 1.0])
    pg.allreduce([t]).wait()
    os.write(1, f"direct rank {rank} sum {t.item():g} backend {pg.name()} version {torch_ccl.__version__}\\n".encode())
""")


def test_process_group_ccl_used_directly_via_torch_ccl(tmp_path):
    script = tmp_path / "direct.py"
    script.write_text(DIRECT_SCRIPT)
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, str(script), str(r), port], env=clean_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0, o + e
    text = "".join(o for o, _ in outs)
    assert "direct rank 0 sum 3 backend ccl version 3.0.0" in text and "direct rank 1 sum 3" in text
