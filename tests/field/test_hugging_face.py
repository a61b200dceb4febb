"""Hugging Face Accelerate and Trainer (the pinned accelerate and transformers) train on ccl with nothing sourced:
a default group created with `dist.init_process_group("ccl")` before Accelerate starts is the one they use, and the
losses and weights equal gloo's. Also pins down why that line is needed: Accelerate refuses backend="ccl"."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ranks import clean_env

pytest.importorskip("accelerate")
pytest.importorskip("transformers")

JOB = Path(__file__).with_name("hf_job.py")


def torchrun(args, **kw):
    from ccl_core import free_port

    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           *args]
    return subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=600, **kw)


def run_job(api, backend, out_dir):
    proc = torchrun([str(JOB), "--backend", backend, "--api", api, "--out", str(out_dir / f"{api}-{backend}")])
    assert proc.returncode == 0, f"{api} on {backend} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return [json.loads((out_dir / f"{api}-{backend}.{r}").read_text()) for r in range(2)]


@pytest.mark.parametrize("api", ["accelerate", "trainer"])
def test_a_ccl_group_made_before_accelerate_trains_as_gloo_does(api, tmp_path):
    ccl = run_job(api, "ccl", tmp_path)
    gloo = run_job(api, "gloo", tmp_path)
    for rank in range(2):
        assert ccl[rank]["backend"] == "ccl" and gloo[rank]["backend"] == "gloo"
        assert len(ccl[rank]["losses"]) == 8
        assert ccl[rank]["losses"] == gloo[rank]["losses"]
        assert ccl[rank]["weights"] == gloo[rank]["weights"]


def test_accelerate_itself_refuses_backend_ccl(tmp_path):
    script = tmp_path / "ask.py"
    script.write_text("from accelerate.state import PartialState\nPartialState(cpu=True, backend='ccl')\n")
    proc = torchrun([str(script)])
    assert proc.returncode != 0 and "Your assigned backend ccl is not available" in proc.stderr, proc.stderr[-3000:]
