"""Collectives that differ across ranks are reported on every rank under TORCH_DISTRIBUTED_DEBUG=DETAIL."""
import subprocess
import sys
import textwrap

import pytest

from ccl_core import free_port
from ranks import clean_env

SCRIPT = textwrap.dedent("""
    import os, sys, datetime, torch, torch.distributed as dist
    dist.init_process_group("ccl", timeout=datetime.timedelta(seconds=20))
    r, case = dist.get_rank(), sys.argv[1]
    try:
        if case == "sizes":
            dist.all_reduce(torch.ones(4 if r == 0 else 8))
        elif case == "ops":
            dist.all_reduce(torch.ones(4)) if r == 0 else dist.broadcast(torch.ones(4), src=0)
        else:  # dtypes
            dist.all_reduce(torch.ones(4, dtype=torch.float32 if r == 0 else torch.float64))
        os.write(1, f"rank {r}: no error\\n".encode())
    except RuntimeError as e:
        os.write(1, f"rank {r}: {type(e).__name__}: {str(e).splitlines()[0][:120]}\\n".encode())
""")


@pytest.mark.parametrize("case", ["sizes", "ops", "dtypes"])
def test_detail_debug_reports_mismatches_on_every_rank(tmp_path, case):
    script = tmp_path / "mismatch.py"
    script.write_text(SCRIPT)
    env = dict(clean_env(), TORCH_DISTRIBUTED_DEBUG="DETAIL", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                          str(free_port()), str(script), case], env=env, capture_output=True, text=True, timeout=120)
    lines = sorted(l for l in out.stdout.splitlines() if l.startswith("rank "))
    assert len(lines) == 2, out.stdout + out.stderr[-3000:]
    for line in lines:
        assert "Detected mismatch between collectives on ranks" in line, line
