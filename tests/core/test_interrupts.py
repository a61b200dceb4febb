"""Ctrl-C during a blocking collective, on ccl-core's face and the torch face, through the shared-memory path and
through oneCCL: a Ctrl-C that arrives while the op is being issued or while the caller waits ends the call with
KeyboardInterrupt well within a second of the first check (never the op's 60 s timeout), and aborts the group, so the
next op is refused by name. The Ctrl-C is raised in the named phase on purpose (interrupt_workers.py), not by a timer.
The device face has the same tests in tests/xpu."""
import signal

import pytest

from interrupt_workers import OP_TIMEOUT_S, interrupted_allreduce
from ranks import run_ranks

PATHS = {"shm": "1", "oneccl": "0"}  # CCL_CORE_SHM


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("phase", ["issue", "wait"])
@pytest.mark.parametrize("face", ["core", "torch"])
def test_ctrl_c_ends_a_blocking_collective_and_aborts_the_group(monkeypatch, face, phase, path):
    monkeypatch.setenv("CCL_CORE_SHM", PATHS[path])
    rank0, rank1 = run_ranks(interrupted_allreduce, 2, face, phase, make_comm=False, timeout=OP_TIMEOUT_S + 120)
    assert rank0["error"] == "KeyboardInterrupt", rank0
    assert rank0["waited"] < 5, rank0  # the first check comes 50 ms into the wait; the op's timeout is 60 s
    # torch's face checks a blocking call once more before it returns to Python, which would raise at once and never
    # wait (ccl-core's face waits inside the call)
    why = "while being issued" if face == "torch" and phase == "issue" else "while waiting"
    if face == "core":
        assert rank0["aborted"], rank0
        assert rank0["after"].startswith("CommunicatorAbortedError: barrier: communicator 'default' (rank 0 of 2) "
                                         "was aborted"), rank0
    else:
        assert rank0["after"].startswith("DistBackendError: ccl: barrier: communicator 'default' (rank 0 of 2) was "
                                         "aborted"), rank0
    assert f"(allreduce was interrupted {why})" in rank0["after"], rank0
    assert rank1 == {}


def test_a_process_that_ignores_sigint_keeps_waiting_until_the_timeout():
    """What a Ctrl-C does is the process's choice: one started with SIGINT ignored (a background job of a
    non-interactive shell, nohup) is not interrupted; its op ends with the group's timeout, as any op whose peer never
    comes. This is how the interrupt test of the device face once waited its 60 s in CI."""
    rank0, rank1 = run_ranks(interrupted_allreduce, 2, "core", "wait", signal.SIG_IGN, 3.0, make_comm=False,
                             timeout=120)
    assert rank0["error"].startswith("CclTimeoutError: allreduce on communicator 'default' (rank 0 of 2) did not "
                                     "complete within 3000 ms"), rank0
    assert rank0["waited"] >= 3.0 and rank0["aborted"], rank0
    assert rank1 == {}
