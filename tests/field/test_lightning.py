"""Lightning (the pinned pytorch-lightning) trains on ccl with DDPStrategy(process_group_backend="ccl") under
torchrun, with nothing sourced, and gives gloo's losses and weights."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ranks import clean_env

pytest.importorskip("pytorch_lightning")

JOB = Path(__file__).with_name("lightning_job.py")


def run_job(backend, out_dir):
    from ccl_core import free_port

    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           str(JOB), "--backend", backend, "--out", str(out_dir / backend)]
    proc = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{backend} job failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return [json.loads((out_dir / f"{backend}.{r}").read_text()) for r in range(2)]


def test_ddp_strategy_on_ccl_matches_gloo(tmp_path):
    ccl = run_job("ccl", tmp_path)
    gloo = run_job("gloo", tmp_path)
    for rank in range(2):
        assert ccl[rank]["backend"] == "ccl" and gloo[rank]["backend"] == "gloo"
        assert len(ccl[rank]["losses"]) == 16  # 2 epochs x 8 batches per rank
        # a sum of two ranks' gradients is exact in any order: the runs agree to the bit
        assert ccl[rank]["losses"] == gloo[rank]["losses"]
        assert ccl[rank]["weights"] == gloo[rank]["weights"]
    assert ccl[0]["weights"] == ccl[1]["weights"]  # DDP kept the replicas equal
