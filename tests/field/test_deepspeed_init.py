"""deepspeed.init_distributed behaves on ccl as on gloo (tests/field/deepspeed_init_job.py): without a group and with
dist_init_required=False it raises at once instead of creating one and waiting for peers; with a group the user
made first it uses that group instead of going on to MPI discovery (which needs mpi4py)."""
import subprocess
import sys
from pathlib import Path

import pytest

from ranks import clean_env

pytest.importorskip("deepspeed")

JOB = Path(__file__).with_name("deepspeed_init_job.py")
ROOT = Path(__file__).resolve().parents[2]


def run_job(backend: str, case: str) -> str:
    from ccl_core import free_port

    port = free_port()
    env = dict(clean_env(), RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), TORCH_EXTENSIONS_DIR=str(ROOT / "build" / "torch_extensions"))
    if case == "group-made-first":
        for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(name)
    out = subprocess.run([sys.executable, JOB, "--backend", backend, "--case", case, "--port", str(port)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{backend} {case}:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("backend", ["ccl", "gloo"])
def test_init_distributed_not_required_without_a_group_raises(backend):
    assert run_job(backend, "no-group-not-required") == "raised AssertionError; group initialised: False"


@pytest.mark.parametrize("backend", ["ccl", "gloo"])
def test_init_distributed_uses_a_group_the_user_made_first(backend):
    assert run_job(backend, "group-made-first") == f"TorchBackend on {backend}"
