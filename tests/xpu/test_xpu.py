"""ccl-xpu on this machine: the SYCL device path as far as the machine allows, and the torch plugin on a CPU torch.
What runs where is said on the Intel GPU page (docs/xpu.md)."""
import subprocess
import sys
import textwrap

import pytest

# The Intel GPU stage's tests run where ccl-xpu is installed (.venv-xpu, set up by ci/test with CCL_TEST_XPU=1).
ccl_xpu = pytest.importorskip("ccl_xpu", reason="ccl-xpu is not installed here: its tests run in the Intel GPU "
                                                "stage (CCL_TEST_XPU=1 ci/test)")
import xpu_workers
from xpu_workers import opencl_cpu_env
from ranks import clean_env, run_ranks



def device_path_problem() -> str:
    """What keeps the device path from running in the tests' environment (which may name the stage's loader)."""
    import os

    saved = dict(os.environ)
    os.environ.update(opencl_cpu_env())
    try:
        return ccl_xpu.device_path_problem()
    finally:
        os.environ.clear()
        os.environ.update(saved)


PROBLEM = device_path_problem()


def run_python(code: str, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(clean_env(), **opencl_cpu_env(), **(extra_env or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=300)


def test_sycl_queue_and_usm_memory_on_a_real_device():
    out = run_python("""
        import numpy as np, ccl_xpu
        q = ccl_xpu.Queue()
        print(q.device_kind, q.backend, q.sycl_queue != 0)
        shared = q.usm(1000)
        np.asarray(shared)[:] = np.arange(1000)
        dev = q.usm(1000, kind="device")
        dev.copy_from(np.asarray(shared))
        back = np.zeros(1000, np.float32)
        dev.copy_to(back)
        print(bool((back == np.arange(1000)).all()))
        try:
            memoryview(dev)
        except Exception as e:
            print(type(e).__name__, e)
    """)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0].endswith("True") and lines[1] == "True", out.stdout
    assert lines[2].startswith("BufferError"), out.stdout  # device memory has no host view: copy_to()


@pytest.mark.skipif(PROBLEM != "", reason=f"oneCCL's device path cannot run here: {PROBLEM}")
def test_device_collectives_on_two_ranks():
    assert run_ranks(xpu_workers.device_collectives, 2, make_comm=False, timeout=300) == [[], []]


@pytest.mark.skipif(PROBLEM != "", reason=f"oneCCL's device path cannot run here: {PROBLEM}")
def test_a_dropped_device_communicator_is_destroyed_before_the_next_one_is_made():
    results = run_ranks(xpu_workers.device_then_host_communicators, 2, make_comm=False, timeout=300)
    assert results == [[(True, True, True)] * 3] * 2, results


@pytest.mark.skipif(PROBLEM != "", reason=f"oneCCL's device path cannot run here: {PROBLEM}")
@pytest.mark.parametrize("how", ["timeout", "issue", "wait"])
def test_a_failed_device_wait_aborts_the_device_communicator(how):
    """Ended by its own timeout, or by a Ctrl-C that arrives while the op is issued or as its wait begins (raised in
    that phase on purpose: see tests/core/test_interrupts.py for the host faces)."""
    rank0, rank1 = run_ranks(xpu_workers.device_wait_that_fails, 2, how, make_comm=False, timeout=300)
    if how == "timeout":
        assert rank0["error"].startswith("Timeout: allreduce on device communicator 'default' (rank 0 of 2) did not "
                                         "complete within 2000 ms"), rank0
        assert rank0["waited"] < 30, rank0
    else:
        assert rank0["error"] == "KeyboardInterrupt", rank0
        assert rank0["waited"] < 5, rank0  # the first check comes 50 ms into the wait; the op's timeout is 60 s
    assert rank0["aborted"], rank0
    assert "barrier: device communicator 'default' (rank 0 of 2) was aborted" in rank0["after"], rank0
    assert rank1 == {}


def test_the_device_path_runs_here_when_the_stage_has_a_new_enough_loader():
    """The Intel GPU stage brings a Level Zero loader with zesInit where the system lacks one (ci/level_zero): the
    device tests above must then run, not skip."""
    loader = opencl_cpu_env().get("CCL_XPU_ZE_LOADER")
    if loader is None:
        pytest.skip("this environment has no loader of the stage's own (the system's is used)")
    assert PROBLEM == "", PROBLEM


@pytest.mark.skipif(PROBLEM == "", reason="oneCCL's device path can run here (tested above)")
def test_device_communicator_raises_on_every_rank_where_the_device_path_cannot_run():
    messages = run_ranks(xpu_workers.device_communicator_refused, 2, make_comm=False, timeout=120)
    for message in messages:
        assert "Level Zero loader" in message and message.endswith(PROBLEM), message


def test_plugin_gives_the_ccl_backend_the_xpu_device():
    out = run_python("""
        import torch, torch.distributed as dist, oneccl_bindings_for_pytorch as ccl
        print(ccl.device_plugins())
        print(dist.Backend.backend_capability["ccl"])
    """)
    assert out.returncode == 0, out.stderr[-3000:]
    plugins, devices = out.stdout.splitlines()
    assert plugins == f"{{'xpu': 'ccl-xpu {ccl_xpu.__version__}'}}" and devices == "['cpu', 'xpu']", out.stdout


def test_plugin_says_no_xpu_is_available_on_a_cpu_torch():
    out = run_python("""
        import torch
        from ccl_xpu import torch_plugin
        try:
            torch_plugin.check_usable(0)
            print("usable")
        except RuntimeError as e:
            print(e)
    """)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "no XPU is available" in out.stdout and "torch.xpu.is_available() is False" in out.stdout, out.stdout


def cpu_ops_with_the_plugin_loaded(rank, size):
    import torch
    import torch.distributed as dist

    t = torch.full((1000,), float(rank + 1))
    dist.all_reduce(t)
    parts = [torch.empty(2) for _ in range(size)]
    dist.all_gather(parts, torch.full((2,), float(rank)))
    return t[0].item(), [p[0].item() for p in parts]


def test_cpu_collectives_run_on_the_sycl_enabled_oneccl():
    from pg import run_in_group

    assert run_in_group(cpu_ops_with_the_plugin_loaded, 2) == [(3.0, [0.0, 1.0])] * 2


def test_launch_options_the_plugin_does_not_follow_say_so():
    out = run_python("import torch, oneccl_bindings_for_pytorch; print('imported')",
                     {"CCL_SAME_STREAM": "0", "TORCH_LLM_ALLREDUCE": "1"})
    assert out.returncode == 0 and out.stdout.strip() == "imported", out.stderr[-3000:]
    assert "CCL_SAME_STREAM=0 is not supported" in out.stderr and "TORCH_LLM_ALLREDUCE is ignored" in out.stderr, out.stderr
