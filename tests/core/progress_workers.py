"""Per-rank bodies of the background-progress tests (test_progress.py)."""
import time

import numpy as np


def moves_while_caller_computes(comm, nbytes, seconds):
    """Issue an async allreduce and never call into ccl_core again until the result is visible in the output
    buffer (or `seconds` passed). Returns (seconds until visible or None, whether wait() then agrees)."""
    n = nbytes // 4
    send = np.full(n, comm.rank + 1, np.float32)
    recv = np.zeros(n, np.float32)
    want = float(sum(r + 1 for r in range(comm.size)))
    start = time.perf_counter()
    req = comm.allreduce(send, recv, async_op=True)
    seen = None
    while time.perf_counter() - start < seconds:
        # the last element is written last on every path; the first on the oneCCL paths
        if recv[-1] == want and recv[0] == want:
            seen = time.perf_counter() - start
            break
        time.sleep(0.005)  # Python "computation": no call into ccl_core
    req.wait()
    return seen, bool((recv == want).all())


def pending_op_of_a_dead_peer(comm, seconds):
    """Rank 1 exits at once; rank 0's async allreduce is never waited on until `seconds` later. The progress
    thread must have failed it by then: test() raises at once, naming the dead peer."""
    if comm.rank == 1:
        import os

        os._exit(0)
    req = comm.allreduce(np.ones(1 << 16, np.float32), async_op=True)
    time.sleep(seconds)
    start = time.perf_counter()
    try:
        req.test()
        return "test() did not raise", 0.0
    except Exception as e:  # noqa: BLE001 - the test checks type and message
        return f"{type(e).__name__}: {e}", time.perf_counter() - start


def pending_op_times_out(comm, seconds):
    """Rank 1 joins but never calls the allreduce: rank 0's pending op fails after the communicator's timeout
    from the progress thread, before anyone waits."""
    if comm.rank == 1:
        time.sleep(seconds + 2)
        return None
    req = comm.allreduce(np.ones(16, np.float32), async_op=True)
    time.sleep(seconds)
    start = time.perf_counter()
    try:
        req.test()
        return "test() did not raise", 0.0
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}", time.perf_counter() - start


def exits_with_ops_pending(comm):
    """Both ranks issue large async ops and leave without waiting: the process must end cleanly."""
    keep = []
    for _ in range(3):
        x = np.ones(1 << 22, np.float32)
        keep.append((x, comm.allreduce(x, async_op=True)))
    keep.append(comm.broadcast(np.ones(1 << 20, np.float32), root=0, async_op=True))
    return "issued"


def idle_cost(comm, seconds):
    """CPU seconds this process uses over `seconds` with nothing pending (after some async ops completed)."""
    import resource

    for _ in range(3):
        comm.allreduce(np.ones(1 << 20, np.float32), async_op=True).wait()
    comm.barrier()

    def cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    before = cpu()
    time.sleep(seconds)
    return cpu() - before


def forked_child_exits(comm):
    """A child forked after async ops (as a DataLoader worker is) must exit normally: the progress thread is not
    its own. Returns the child's exit status and how long it took."""
    import os

    for _ in range(2):
        comm.allreduce(np.ones(1 << 20, np.float32), async_op=True).wait()
    pending = comm.allreduce(np.ones(1 << 20, np.float32), async_op=True)
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        import ctypes

        ctypes.CDLL(None).exit(3)  # the C library's exit: C++ static destructors run, as at any process end
    deadline = time.perf_counter() + 20
    while time.perf_counter() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            pending.wait()
            return os.waitstatus_to_exitcode(status), time.perf_counter() - start
        time.sleep(0.05)
    os.kill(pid, 9)
    pending.wait()
    return "hung", time.perf_counter() - start
