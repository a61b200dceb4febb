"""Per-rank bodies of the bad-input and fault tests."""
import os
import time

import numpy as np

import ccl_core


def expect(errors, exc_type, fragment, fn, *args, **kwargs):
    """Record a problem unless fn raises exc_type with `fragment` in its message."""
    try:
        fn(*args, **kwargs)
    except exc_type as e:
        if fragment not in str(e):
            errors.append(f"{fn.__name__}: message {str(e)!r} lacks {fragment!r}")
        return
    except Exception as e:  # wrong type
        errors.append(f"{fn.__name__}: raised {type(e).__name__}: {e}, expected {exc_type.__name__}")
        return
    errors.append(f"{fn.__name__}: no error, expected {exc_type.__name__} ({fragment})")


def bad_arguments(comm):
    """Every rank makes the same mistakes (so each detects them locally), then proves the communicator
    still works: caller-side errors must not poison it."""
    E = ccl_core.InvalidArgumentError
    U = ccl_core.UnsupportedError
    errs = []
    x = np.ones(8, np.float32)
    expect(errs, E, "recv has 7 elements, expected 8", comm.allreduce, x, np.zeros(7, np.float32))
    expect(errs, E, "send is float32 but recv is float64", comm.allreduce, x, np.zeros(8, np.float64))
    expect(errs, E, "recv has 8 elements, expected 16", comm.allgather, x, np.zeros(8, np.float32))
    expect(errs, E, "send has 8 elements, expected 16", comm.reduce_scatter, x, np.zeros(8, np.float32))
    expect(errs, E, "not a multiple of the group size", comm.alltoall, np.ones(7, np.float32), np.zeros(7, np.float32))
    expect(errs, E, "recv_counts has 3 entries; expected one per rank (2)", comm.allgatherv, x, np.zeros(24, np.float32), [8, 8, 8])
    expect(errs, E, "send has 8 elements, expected 5 (sum of send_counts)", comm.alltoallv, x, [2, 3], np.zeros(5, np.float32), [2, 3])
    expect(errs, E, "root 5 is out of range for a group of 2 rank(s) (0..1)", comm.broadcast, x, root=5)
    expect(errs, E, "root -1 is out of range", comm.reduce, x, np.zeros(8, np.float32), root=-1)
    expect(errs, E, "peer 9 is out of range", comm.send, x, 9)
    expect(errs, E, "is this rank", comm.recv, x, comm.rank)
    expect(errs, E, "must be C-contiguous", comm.allreduce, np.ones((4, 4), np.float32)[:, 0].copy().reshape(4)[::2])
    ro = np.ones(4, np.float32)
    ro.flags.writeable = False
    expect(errs, E, "must be a writable buffer", comm.allreduce, ro)
    expect(errs, E, "must support the buffer protocol", comm.allreduce, [1.0, 2.0])
    expect(errs, E, "unknown reduce op 'xor'", comm.allreduce, x, op="xor")
    expect(errs, E, "unknown dtype 'complex64'", comm.allreduce, x, dtype="complex64")
    expect(errs, E, "4-byte elements but dtype bfloat16 has 2", comm.allreduce, x, dtype="bfloat16")
    expect(errs, U, "avg needs a floating dtype, got int32", comm.allreduce, np.ones(4, np.int32), op="avg")
    expect(errs, U, "element format '?'", comm.allreduce, np.ones(4, bool))
    expect(errs, E, "rank 7 is out of range", comm.subgroup, [0, 7])
    expect(errs, E, "rank 0 is listed twice", comm.subgroup, [0, 0])
    y = np.full(8, comm.rank + 1.0, np.float32)
    comm.allreduce(y)
    if not np.all(y == sum(r + 1 for r in range(comm.size))):
        errs.append(f"communicator broken after caller errors: {y}")
    return errs


def peer_dies(comm, timeout):
    """Rank 1 exits abruptly after one collective; rank 0's next collective must fail (rank 1 shares its host:
    at once, naming the dead rank; else at the timeout), the one after must report the aborted communicator.
    Returns rank 0's (elapsed, first error, second error, aborted, leftovers in /dev/shm)."""
    x = np.ones(1024, np.float32)
    comm.allreduce(x)
    pids = np.zeros(comm.size, np.int64)
    comm.allgather(np.array([os.getpid()], np.int64), pids)
    if comm.rank == 1:
        os._exit(0)  # dies without cleaning up, like a killed process
    start = time.monotonic()
    try:
        comm.allreduce(x, async_op=True).wait(timeout=timeout)
        first = "no error"
    except (ccl_core.CclTimeoutError, ccl_core.BackendError) as e:
        first = f"{type(e).__name__}: {e}"
    elapsed = time.monotonic() - start
    try:
        comm.allreduce(x)
        second = "no error"
    except ccl_core.CommunicatorAbortedError as e:
        second = str(e)
    dead = int(pids[1])
    leftovers = [f for f in os.listdir("/dev/shm") if f.startswith(f"{dead}:")]
    return elapsed, first, second, comm.aborted, leftovers


def peer_never_calls(comm, timeout):
    """Rank 1 stays alive but skips the collective."""
    if comm.rank == 1:
        time.sleep(timeout + 1)
        return None
    start = time.monotonic()
    try:
        comm.broadcast(np.ones(4, np.float32), root=1)
        return "no error", 0.0
    except ccl_core.CclTimeoutError as e:
        return str(e), time.monotonic() - start


def lone_rank(rank, _processes, store_dir, timeout, group_size=2):
    """Bootstrap of a `group_size` group in which only this process starts."""
    start = time.monotonic()
    try:
        ccl_core.Communicator(ccl_core.FileStore(store_dir), rank, group_size, timeout=timeout)
        return "no error", 0.0
    except ccl_core.CclTimeoutError as e:
        return str(e), time.monotonic() - start


def dropped_requests(comm, late_rank):
    """Async ops whose Request (and whose buffers) Python drops at once, on the shared-memory path and on oneCCL,
    while one rank is late so that they are still in flight: later ops must give right results, nothing may crash."""
    import gc

    if comm.rank == late_rank:
        time.sleep(0.5)
    comm.allreduce(np.ones(1 << 22, np.float32), async_op=True)  # Request and array dropped here
    comm.allgather(np.full(1 << 20, comm.rank, np.float32), np.empty((comm.size << 20,), np.float32), async_op=True)
    comm.broadcast(np.full(1 << 20, float(comm.rank), np.float32), root=0, async_op=True)  # oneCCL
    gc.collect()
    x = np.full(1 << 20, comm.rank + 1.0, np.float32)
    comm.allreduce(x)
    y = np.full(8, comm.rank + 1.0, np.float32)
    comm.broadcast(y, root=1)
    return float(x.min()), float(x.max()), y.tolist()


def dropped_request_at_exit(comm):
    """The interpreter exits while an op whose Request was dropped is still in flight on a late peer."""
    if comm.rank == 1:
        time.sleep(1.0)
    comm.allreduce(np.ones(1 << 22, np.float32), async_op=True)
    return "exiting"


def dropped_communicator(rank, size, store_dir):
    """Python drops a communicator, its Request and the array of an op still in flight (rank 1 is late); a new
    communicator on the same host then works, and nothing crashes."""
    import gc

    comm = ccl_core.Communicator(ccl_core.PrefixStore("first", ccl_core.FileStore(store_dir)), rank, size, timeout=30)
    if rank == 1:
        time.sleep(0.5)
    comm.allreduce(np.ones(1 << 22, np.float32), async_op=True)
    del comm
    gc.collect()
    again = ccl_core.Communicator(ccl_core.PrefixStore("second", ccl_core.FileStore(store_dir)), rank, size, timeout=30)
    x = np.full(1000, rank + 1.0, np.float32)
    again.allreduce(x)
    return float(x[0])


def tampered_segment_name(rank, size, store_dir):
    """A store that hands rank 1 the name of a segment rank 0 never made: world-readable, too small, and with the
    right token in it. Rank 1 must refuse to map it (before, it mapped it: any access past 4 KiB would SIGBUS), and
    the group must agree to use oneCCL."""

    class Tampering(ccl_core.Store):
        def __init__(self, inner, planted):
            super().__init__()
            self.inner, self.planted = inner, planted

        def set(self, key, value):
            self.inner.set(key, value)

        def get(self, key, timeout):
            value = self.inner.get(key, timeout)
            if self.planted and key.endswith("ccl_core/shm/name") and value:
                lines = value.split(b"\n")
                lines[0] = self.planted.encode()
                # the planted segment even carries the right token, which the store gave away
                with open("/dev/shm" + self.planted, "r+b") as f:
                    f.write(int(lines[1]).to_bytes(8, "little"))
                value = b"\n".join(lines)
            return value

    planted = None
    if rank == 1:
        planted = f"/{os.getpid()}:ccl_core:1"
        fd = os.open("/dev/shm" + planted, os.O_CREAT | os.O_RDWR, 0o644)
        os.fchmod(fd, 0o644)
        os.ftruncate(fd, 4096)  # far smaller than the layout: touching past it would SIGBUS
        os.close(fd)
    try:
        comm = ccl_core.Communicator(Tampering(ccl_core.FileStore(store_dir), planted), rank, size, timeout=30)
        x = np.full(1 << 16, rank + 1.0, np.float32)
        comm.allreduce(x)
        return comm.shared_memory, float(x.min()), float(x.max())
    finally:
        if planted:
            os.unlink("/dev/shm" + planted)


def atl_shm_differs(rank, size, store_dir):
    """Rank 1 runs oneCCL without its shm transport (as ccl-core sets it where /dev/shm is small), rank 0 with it."""
    os.environ["CCL_ATL_SHM"] = "0" if rank == 1 else "1"
    try:
        ccl_core.Communicator(ccl_core.FileStore(store_dir), rank, size, timeout=30)
        return "no error"
    except ccl_core.InvalidArgumentError as e:
        return str(e)
