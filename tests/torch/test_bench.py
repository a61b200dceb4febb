"""ccl-bench: a full small sweep with every output, its correctness check failing a run, and torchrun."""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

from ccl_bench import stats
from ccl_bench.cli import parse_size, sizes
from ccl_core import free_port
from ranks import clean_env

BIN = Path(sys.executable).parent
OPS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"]


def bench(*args, env=None, timeout=300):
    return subprocess.run([str(BIN / "ccl-bench"), *args], env=env or clean_env(), capture_output=True, text=True,
                          timeout=timeout)


def test_sweep_writes_table_csv_json_and_plot(tmp_path):
    out = bench("-n", "2", "--min-bytes", "1K", "--max-bytes", "4K", "--iters", "5", "--floor", "--registered", "--ddp",
                "--csv", str(tmp_path / "r.csv"), "--json", str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.png"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[ccl-bench] [60/60] broadcast 4 KiB raw" in out.stderr  # progress
    rows = list(csv.DictReader(open(tmp_path / "r.csv")))
    # ops x sizes x (4 backends + the floor, copy and fake rows of --floor), plus a DDP step per torch backend
    assert len(rows) == len(OPS) * 3 * 7 + 2
    assert {r["check"] for r in rows if r["backend"] in ("ccl", "ccl-registered", "gloo", "raw")} == {"ok"}
    assert {(r["op"], r["backend"]) for r in rows} >= {(op, b) for op in OPS
                                                        for b in ("ccl", "ccl-registered", "gloo", "raw", "floor",
                                                                  "copy", "fake")}
    for r in rows:
        assert float(r["p10_us"]) <= float(r["median_us"]) <= float(r["p90_us"])
        if r["backend"] in ("ccl", "raw") and r["op"] != "ddp_step":
            assert float(r["x_gloo"]) > 0 and float(r["x_floor"]) > 0
        if r["backend"] == "fake":  # torch's dispatch alone: a ratio to the floor, never one to gloo
            assert float(r["x_floor"]) > 0 and not r["x_gloo"]
    data = json.load(open(tmp_path / "r.json"))
    assert data["meta"]["ranks"] == 2 and len(data["results"]) == len(rows)
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
    assert "all_reduce" in out.stdout and "x gloo" in out.stdout


def test_a_wrong_result_fails_the_run():
    env = dict(clean_env(), CCL_BENCH_FAULT="1")  # rank 1 corrupts what it checks
    out = bench("-n", "2", "--ops", "all_reduce", "--backends", "ccl", "--min-bytes", "1K", "--max-bytes", "1K", "--iters", "3",
                env=env)
    assert out.returncode == 1
    assert "FAIL on 1 rank(s)" in out.stdout and "FAILED their correctness check" in out.stderr


def test_training_rows_train_alike_on_every_backend_and_a_wrong_gradient_sum_fails(tmp_path):
    args = ["-n", "2", "--ops", "all_reduce", "--backends", "ccl,gloo", "-b", "1K", "-e", "1K", "--iters", "3", "--ddp",
            "--quiet"]
    out = bench(*args, "--fsdp", "--train-params", "4M", "--json", str(tmp_path / "t.json"))
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {(r["op"], r["backend"]): r for r in json.load(open(tmp_path / "t.json"))["results"]}
    for op in ("ddp_step", "fsdp2_step"):
        # --train-params: about 4 M float32 parameters (one 2048-wide layer), unsharded also for FSDP2
        assert 4_000_000 * 4 <= rows[(op, "ccl")]["bytes"] < 4_500_000 * 4
        assert rows[(op, "ccl")]["loss"] == rows[(op, "gloo")]["loss"] > 0
        assert rows[(op, "ccl")]["check"] == rows[(op, "gloo")]["check"] == "ok"
    wrong = bench(*args, env=dict(clean_env(), CCL_BENCH_FAULT="1"))  # gloo's DDP gradients summed, not averaged
    assert wrong.returncode == 1
    assert "DIFFER: loss" in wrong.stdout, wrong.stdout


def test_runs_under_torchrun():
    out = subprocess.run([str(BIN / "torchrun"), "--nproc-per-node", "2", "--master-port", str(free_port()), "-m",
                          "ccl_bench", "--ops", "all_reduce", "--backends", "ccl,raw", "--min-bytes", "1K", "--max-bytes", "2K",
                          "--iters", "3", "--quiet"], env=clean_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count(" ok") == 4


def test_sizes_stats_and_bus_factors():
    assert parse_size("1K") == 1024 and parse_size("64MiB") == 64 << 20 and parse_size("512") == 512
    assert sizes(1024, 8192) == [1024, 2048, 4096, 8192]
    s = stats.summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s["median_us"], s["p10_us"], s["p90_us"]) == (3.0, 1.4, 4.6)
    assert stats.bandwidths("all_reduce", 10**9, 2, 1e6) == (1.0, 1.0)
    assert stats.bandwidths("all_gather", 10**9, 4, 1e6)[1] == 0.75


def test_deepspeed_backends_are_all_reduce_only_and_say_so():
    out = bench("-n", "2", "--backends", "ccl,deepspeed", "--ops", "all_reduce,broadcast", timeout=120)
    assert out.returncode != 0
    assert "backend 'deepspeed' has all_reduce only: add --ops all_reduce" in out.stderr + out.stdout, out.stderr


def test_the_ccl_group_called_as_registered_op_functional_collective_and_async(tmp_path):
    out = bench("-n", "2", "--ops", "all_reduce,all_gather", "--backends", "ccl,ccl-op,ccl-funcol,ccl-async",
                "--min-bytes", "1K", "--max-bytes", "4K", "--iters", "5", "--json", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stdout + out.stderr
    rows = json.load(open(tmp_path / "r.json"))["results"]
    assert {(r["op"], r["backend"]) for r in rows} == {(op, b) for op in ("all_reduce", "all_gather")
                                                        for b in ("ccl", "ccl-op", "ccl-funcol", "ccl-async")}
    assert {r["check"] for r in rows} == {"ok"}
    refused = bench("-n", "2", "--ops", "broadcast", "--backends", "ccl-op")
    assert refused.returncode != 0 and "all_reduce and all_gather only" in refused.stderr


def test_tp_decode_gives_every_path_the_same_tokens(tmp_path):
    out = bench("-n", "2", "--tp-decode", "--hidden", "128", "--layers", "2", "--vocab", "256", "--tokens", "4",
                "--rounds", "2", "--dtype", "bfloat16", "--backends", "ccl,ccl-op,gloo,dtensor-ccl",
                "--json", str(tmp_path / "d.json"))
    assert out.returncode == 0, out.stdout + out.stderr
    rows = json.load(open(tmp_path / "d.json"))["results"]
    assert [r["path"] for r in rows] == ["fake", "ccl", "ccl-op", "gloo", "dtensor-ccl"]
    assert all(r["tokens_check"] == "same" and r["tokens_per_s"] > 0 for r in rows)
    assert all(r["comm_us_per_token"] > 0 for r in rows if r["path"] in ("ccl", "ccl-op", "gloo"))
    assert "tokens/s" in out.stdout
    bad = bench("-n", "2", "--tp-decode", "--hidden", "100", "--layers", "1")
    assert bad.returncode != 0 and "whole heads" in bad.stderr


def test_tp_decode_fails_when_a_path_sums_wrongly():
    env = dict(clean_env(), CCL_BENCH_FAULT="1")  # the last path leaves half of each sum unreduced
    out = bench("-n", "2", "--tp-decode", "--hidden", "128", "--layers", "2", "--vocab", "256", "--tokens", "8",
                "--rounds", "1", "--dtype", "bfloat16", "--backends", "ccl,ccl-op", env=env)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "DIFFER" in out.stdout and "different tokens" in out.stderr


def test_a_flip_at_a_near_tie_is_rounding_and_a_wrong_sum_is_not():
    import torch

    from ccl_bench.tp_decode import near_tie

    reference = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    top2 = reference.topk(2).indices
    reference[top2[1]] = reference[top2[0]] - 0.01  # a near tie
    rounded = reference + 1e-3 * torch.randn(1000, generator=torch.Generator().manual_seed(1))
    rounded[top2[1]] += 0.02  # the runner-up wins by a rounding-sized step
    assert near_tie(reference, rounded, torch.bfloat16)
    wrong = reference.clone()
    wrong[top2[1]] += 1.0  # a flip no rounding explains
    assert not near_tie(reference, wrong, torch.bfloat16)


def test_plot_without_matplotlib_is_refused_before_any_rank_runs(tmp_path):
    """--plot without matplotlib used to fail on rank 0 after the whole sweep, leaving the others in a barrier."""
    code = ("import sys; sys.modules['matplotlib'] = None\n"  # as if not installed
            "from ccl_bench.cli import main; main(['-n', '2', '--ops', 'all_reduce', '--plot', 'out.png'])")
    out = subprocess.run([sys.executable, "-c", code], env=clean_env(), cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode != 0 and "--plot needs matplotlib" in out.stderr, out.stderr
    assert "[ccl-bench] [" not in out.stderr and not (tmp_path / "out.png").exists(), out.stderr  # no rank ran
