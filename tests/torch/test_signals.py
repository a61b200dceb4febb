"""Signals during collectives: a rank killed outright, and SIGTERM / SIGINT to a job."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ccl_core import free_port
from ranks import clean_env

LOOP = textwrap.dedent("""
    import os, sys, time, datetime, torch, torch.distributed as dist
    dist.init_process_group("ccl", timeout=datetime.timedelta(seconds=float(os.environ["T"])))
    rank = dist.get_rank()
    t = torch.ones(1 << 16)
    dist.all_reduce(t)
    os.write(1, f"rank {rank} running pid {os.getpid()}\\n".encode())
    start = time.monotonic()
    try:
        while True:
            start = time.monotonic()
            dist.all_reduce(t)
    except Exception as e:
        os.write(1, f"rank {rank} raised after {time.monotonic() - start:.3f} s: {type(e).__name__}: {e}\\n".encode())
        sys.exit(3)
""")


def start_ranks(tmp_path, n, timeout_s):
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    port = str(free_port())
    procs = []
    for r in range(n):
        env = dict(clean_env(), RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   T=str(timeout_s), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    for p in procs:  # wait until every rank is inside the loop
        line = p.stdout.readline()
        assert "running" in line, line + p.stderr.read()
    return procs


def test_rank_killed_mid_collective_survivors_raise_within_two_seconds(tmp_path):
    timeout_s = 30.0
    procs = start_ranks(tmp_path, 3, timeout_s)
    time.sleep(0.5)
    procs[2].send_signal(signal.SIGKILL)
    for p in procs[:2]:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 3, out + err  # raised, then exited through sys.exit: clean exit
        line = [l for l in out.splitlines() if "raised after" in l][0]
        waited = float(line.split("raised after ")[1].split(" s")[0])
        # the dead rank shares this host: survivors notice its pid is gone, long before the group's timeout
        assert "DistBackendError" in line and "allreduce" in line and "rank 2 (pid" in line, line
        assert "on this host died" in line, line
        print(f"detection after SIGKILL: {waited:.3f} s (timeout {timeout_s} s)")
        assert waited < 2.0, line
    procs[2].wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_to_a_job_ends_it_cleanly(tmp_path, sig):
    """torchrun forwards the signal to its ranks: they end, nothing of theirs keeps running."""
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    env = dict(clean_env(), T="30", OMP_NUM_THREADS="1")
    agent = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                              str(free_port()), str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    pids = []
    while len(pids) < 2:
        line = agent.stdout.readline()
        assert line, agent.stderr.read()
        if "running pid" in line:
            pids.append(int(line.split("pid ")[1]))
    time.sleep(0.5)
    agent.send_signal(sig)
    agent.communicate(timeout=60)
    time.sleep(0.5)
    alive = [p for p in pids if os.path.exists(f"/proc/{p}") and open(f"/proc/{p}/stat").read().split()[2] != "Z"]
    assert alive == [], f"ranks still running after {sig.name}: {alive}"
    assert not [f for f in os.listdir("/dev/shm") if f.split(":")[0] in {str(p) for p in pids}]
