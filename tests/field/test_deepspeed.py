"""DeepSpeed (the pinned deepspeed, DS_ACCELERATOR=cpu) on ccl with nothing sourced: ZeRO stages 0-3 train on 2
ranks under torchrun and give gloo's losses exactly, tensor-parallel inference (deepspeed.init_inference, fp32 and
bf16) gives gloo's outputs exactly, and peak RSS stays within gloo's + 10%."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ranks import clean_env

pytest.importorskip("deepspeed")
pytest.importorskip("transformers")  # DeepSpeed's AutoTP imports it

JOB = Path(__file__).with_name("deepspeed_job.py")
ROOT = Path(__file__).resolve().parents[2]


def run_job(backend, out_dir, port):
    env = clean_env()
    for name in ("CCL_ROOT", "CPATH", "LIBRARY_PATH"):  # what users of the original had to source
        env.pop(name, None)
    # DeepSpeed JIT-builds its oneCCL ops once; keep them beside our own build output between runs
    env["TORCH_EXTENSIONS_DIR"] = str(ROOT / "build" / "torch_extensions")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(port),
           str(JOB), "--backend", backend, "--inference", "--out", str(out_dir / backend)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{backend} job failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return [json.loads((out_dir / f"{backend}.{r}").read_text()) for r in range(2)]


def test_zero_stages_0_to_3_and_tensor_parallel_inference_match_gloo(tmp_path):
    from ccl_core import free_port

    ccl = run_job("ccl", tmp_path, free_port())
    gloo = run_job("gloo", tmp_path, free_port())
    for rank in range(2):
        assert ccl[rank]["backend"] == "ccl" and gloo[rank]["backend"] == "gloo"
        assert sorted(ccl[rank]["stages"]) == ["0", "1", "2", "3", "3-fetch-by-all-reduce"]
        # DeepSpeed's own torch.distributed wrapper on both (_deepspeed_compat), not its JIT-built oneCCL op
        assert ccl[rank]["deepspeed backend"] == gloo[rank]["deepspeed backend"] == "TorchBackend"
        assert ccl[rank]["async all_reduce"] == gloo[rank]["async all_reduce"] == [3.0] * 8
        for stage, losses in ccl[rank]["stages"].items():
            assert losses == gloo[rank]["stages"][stage], f"rank {rank} ZeRO-{stage}: {losses} vs gloo"
        for dtype in ("torch.float32", "torch.bfloat16"):
            assert ccl[rank][f"inference {dtype}"] == gloo[rank][f"inference {dtype}"], (rank, dtype)
            # tensor parallelism splits the sums, so only closeness to the single-rank model is expected
            assert ccl[rank][f"inference {dtype}"] == pytest.approx(ccl[rank][f"reference {dtype}"],
                                                                    rel=0.05, abs=0.02), (rank, dtype)
        print(f"rank {rank} peak RSS: ccl {ccl[rank]['peak_rss_bytes'] >> 20} MiB, "
              f"gloo {gloo[rank]['peak_rss_bytes'] >> 20} MiB")
        # before the fix ZeRO-3 grew to 12 GB and was OOM-killed
        assert ccl[rank]["peak_rss_bytes"] <= 1.10 * gloo[rank]["peak_rss_bytes"]


def test_import_sets_build_defaults_without_overriding():
    code = ("import os, oneccl_bindings_for_pytorch as o; "
            "print(os.environ.get('CCL_ROOT'), os.environ.get('CPATH'), sep='|')")
    env = clean_env()
    env.pop("CPATH", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    root, cpath = out.stdout.strip().split("|")
    assert (Path(root) / "include" / "oneapi" / "ccl.hpp").is_file()
    assert cpath.endswith(os.path.join(root, "include"))
    env.update(CCL_ROOT="/opt/my-oneccl", CPATH="/mine")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "/opt/my-oneccl|/mine"


def test_the_deepspeed_fix_applies_on_import_and_switches_off():
    code = ("import sys, torch, oneccl_bindings_for_pytorch; import deepspeed.comm.ccl as m; "
            "print(getattr(m.CCLBackend, '_ccl_torch_fixed', False) "
            "and getattr(m.TorchBackend.__init__, '_ccl_torch_fixed', False))")
    env = dict(clean_env(), DS_ACCELERATOR="cpu")
    fixed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert fixed.stdout.strip().splitlines()[-1] == "True"
    off = subprocess.run([sys.executable, "-c", code], env=dict(env, CCL_DEEPSPEED_COMPAT="0"),
                         capture_output=True, text=True, check=True)
    assert off.stdout.strip().splitlines()[-1] == "False"
