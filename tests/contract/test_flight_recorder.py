"""torch's flight recorder on ccl (torch 2.15): the backend reports completion (so a dump tells finished ops from stuck
ones) and runs the recorder's abort hook on failure (so every failing rank dumps by itself); torch's own analyzer then
names the rank and the collective that did not match. gloo, side by side, has neither."""
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ccl_core import free_port
from ranks import clean_env

TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
pytestmark = pytest.mark.skipif(TORCH < (2, 15), reason="torch 2.15's contract: the torch-2.15.0 stage of ci/test")
JOB = Path(__file__).with_name("fr_job.py")


def run_job(backend, dump_dir):
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, str(JOB), backend, str(r), port, str(dump_dir)], env=clean_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out
    return outs, [pickle.loads((dump_dir / f"fr_rank_{r}").read_bytes()) for r in range(2)]


def states(dump):
    return [(e["profiling_name"].split(":")[1], e["state"]) for e in dump["entries"]]


def analyze(dump_dir):
    out = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(dump_dir),
                          "-p", "fr_rank_"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout + out.stderr


def test_dumps_of_a_skipped_collective_name_the_culprit_and_tell_finished_ops_from_stuck_ones(tmp_path):
    outs, dumps = run_job("ccl", tmp_path)
    assert "timed out" in outs[0] or "did not complete" in outs[0], outs[0]
    # every rank dumped by itself, from the abort hook the recorder registered on the failing group
    assert states(dumps[0]) == [("all_reduce", "completed"), ("broadcast", "completed"), ("all_reduce", "scheduled")]
    assert states(dumps[1]) == [("all_reduce", "completed"), ("broadcast", "completed"), ("barrier", "scheduled")]
    report = analyze(tmp_path)
    print(report)
    assert "Culprit rank 1" in report and "COLLECTIVE_TYPE_MISMATCH" in report, report
    assert "'all_reduce' does not match found collective type: 'barrier'" in report, report


def test_on_gloo_the_same_job_needs_a_dump_by_hand_and_every_op_reads_scheduled(tmp_path):
    _, dumps = run_job("gloo", tmp_path)
    # gloo reports no completion: the recorder retires each op at issue, and cannot tell finished from stuck
    assert [state for _, state in states(dumps[0])] == ["scheduled"] * 3, states(dumps[0])
