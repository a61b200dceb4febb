"""Fault tolerance on torch 2.15, side by side with gloo: three members train, one is SIGKILLed, the survivors rebuild
the group in place (reconfigure) or shrink it, finish with the weights gloo's survivors reach, and (reconfigure) a
replacement joins back. See ft_job.py for the job."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
pytestmark = pytest.mark.skipif(TORCH < (2, 15), reason="torch 2.15's contract: the torch-2.15.0 stage of ci/test")
JOB = Path(__file__).with_name("ft_job.py")


def run_job(backend, mode, out):
    import datetime

    import torch.distributed as dist
    from ranks import clean_env

    # the rendezvous store lives in this process, as torchrun's agent keeps it: it outlives any member
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=60))
    members = [0, 1, 2, 3] if mode == "reconfigure" else [0, 1, 2]
    procs = {m: subprocess.Popen([sys.executable, str(JOB), backend, mode, str(m), str(store.port), str(out)],
                                 env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for m in members}
    outputs = {m: p.communicate(timeout=240)[0] for m, p in procs.items()}
    for m, p in procs.items():
        expected = -9 if m == 2 else 0
        assert p.returncode == expected, f"{backend} {mode} member {m} exited {p.returncode}:\n{outputs[m][-4000:]}"
    logs = {m: json.loads((out / f"{m}.json").read_text()) for m in members if m != 2}
    for log in logs.values():
        log["steps"] = [tuple(s) for s in log["steps"]]
    return logs


@pytest.fixture(scope="module")
def gloo_reconfigured(tmp_path_factory):
    return run_job("gloo", "reconfigure", tmp_path_factory.mktemp("gloo"))


def test_survivors_reconfigure_in_place_and_a_replacement_joins_with_gloos_weights(tmp_path, gloo_reconfigured):
    ccl = run_job("ccl", "reconfigure", tmp_path)
    for logs in (ccl, gloo_reconfigured):
        # the survivors redo the step that failed, as two; the replacement joins for the last steps
        assert logs[0]["steps"] == [(s, 3) for s in range(4)] + [(s, 2) for s in range(4, 8)] + [(8, 3), (9, 3)]
        assert logs[3]["steps"] == [(8, 3), (9, 3)]
        assert logs[0]["weights"] == logs[1]["weights"] == logs[3]["weights"]
    assert ccl[0]["weights"] == gloo_reconfigured[0]["weights"]
    assert "died" in ccl[0]["error"], ccl[0]["error"]
    for m in (0, 1):  # target: training resumes within 5 s of the death (group timeout 30 s)
        resumed = ccl[m]["timeline"]["resumed"] - ccl[m]["died"]
        print(f"ccl member {m}: error {ccl[m]['timeline']['error'] - ccl[m]['died']:.2f} s after the death, "
              f"group rebuilt {ccl[m]['timeline']['rebuilt'] - ccl[m]['died']:.2f} s, failed step done "
              f"{resumed:.2f} s")
        assert resumed < 5.0, ccl[m]


def test_survivors_shrink_the_group_and_reach_the_weights_of_gloos_survivors(tmp_path, gloo_reconfigured):
    # gloo cannot shrink (supports_shrinking is False): its reconfigured survivors are the reference up to the rejoin
    ccl = run_job("ccl", "shrink", tmp_path)
    assert ccl[0]["steps"] == [(s, 3) for s in range(4)] + [(s, 2) for s in range(4, 8)]
    assert ccl[0]["weights"] == ccl[1]["weights"] == gloo_reconfigured[0]["weights before rejoin"]
    for m in (0, 1):
        assert ccl[m]["timeline"]["resumed"] - ccl[m]["died"] < 5.0, ccl[m]
