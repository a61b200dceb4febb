"""Per-rank bodies of the registered-memory tests (test_registered.py): ccl_core's Communicator.allocate, and
collectives that read their peers' arrays in place when every rank's arrays are registered."""
import gc
import os

import numpy as np

from dtypes import FLOATING, decode, encode, kw

# element counts: tiny, odd, several of the copying path's segments (the tests shrink them to 4 KiB)
COUNTS = [1, 37, 3 * 1024 + 17, 20_000]
DTYPES = ["int8", "uint16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


def _values(rank, n, dtype, seed):
    rng = np.random.default_rng(seed * 101 + rank)
    if dtype in FLOATING:
        return rng.standard_normal(n)  # rounding depends on the order of the sums: bits must still match
    return rng.integers(1, 4, n).astype(np.float64)


def _buffer(comm, n, dtype, registered):
    """A zeroed array of n elements of dtype, registered or not."""
    np_dtype = encode(np.zeros(1), dtype).dtype
    if registered:
        a = comm.allocate(n, np_dtype.name)
        assert comm.registered(a), "allocate() gave memory that is not registered"
        a[:] = 0
        return a
    return np.zeros(n, np_dtype)


def _filled(comm, values, dtype, registered):
    data = encode(values, dtype)
    a = _buffer(comm, len(data), dtype, registered)
    a[:] = data
    return a


def every_op(comm, mode):
    """Each op x dtype x count with buffers `mode`: 'registered' on every rank, 'mixed' (registered on even ranks
    only), or 'ordinary'. Returns the raw bytes of every result, for the test to compare across modes, and the cases
    that read their peers' arrays in place (in_place_ops counted around each call)."""
    out, in_place = {}, set()
    mine = {"registered": True, "ordinary": False, "mixed": comm.rank % 2 == 0}[mode]

    def call(case, fn, *args, **kwargs):
        before = comm.in_place_ops
        fn(*args, **kwargs)
        if comm.in_place_ops != before:
            in_place.add(case)

    for i, n in enumerate(COUNTS):
        for dtype in DTYPES:
            ops = ["sum", "max"] + (["avg"] if dtype in FLOATING else ["prod"])
            for op in ops:
                x = _filled(comm, _values(comm.rank, n, dtype, i), dtype, mine)
                y = _buffer(comm, n, dtype, mine)
                call(case := f"allreduce {n} {dtype} {op}", comm.allreduce, x, y, op=op, **kw(dtype))
                out[case] = y.tobytes()
                call(case := f"allreduce in place {n} {dtype} {op}", comm.allreduce, x, op=op, **kw(dtype))
                out[case] = x.tobytes()
                big = _filled(comm, _values(comm.rank, n * comm.size, dtype, i + 7), dtype, mine)
                part = _buffer(comm, n, dtype, mine)
                call(case := f"reduce_scatter {n} {dtype} {op}", comm.reduce_scatter, big, part, op=op, **kw(dtype))
                out[case] = part.tobytes()
            x = _filled(comm, _values(comm.rank, n, dtype, i), dtype, mine)
            gathered = _buffer(comm, n * comm.size, dtype, mine)
            call(case := f"allgather {n} {dtype}", comm.allgather, x, gathered, **kw(dtype))
            out[case] = gathered.tobytes()
            for root in range(comm.size):
                b = _filled(comm, _values(root, n, dtype, i + 3), dtype, mine) if comm.rank == root else \
                    _buffer(comm, n, dtype, mine)
                call(case := f"broadcast {n} {dtype} from {root}", comm.broadcast, b, root=root, **kw(dtype))
                out[case] = b.tobytes()
    return out, in_place


def freed_mid_op(comm):
    """Async ops on registered arrays whose arrays Python drops before the op completes (the last rank is late, so
    the others' ops are in flight): every rank's result is right, and the blocks are reused afterwards."""
    import time

    n = 1 << 16
    results = []
    for round_ in range(3):
        x = comm.allocate(n, "float32")
        x[:] = comm.rank + 1 + round_
        y = comm.allocate(n, "float32")
        keep = y  # the result is read after the op; the input is dropped at once
        if comm.rank == comm.size - 1:
            time.sleep(0.3)
        req = comm.allreduce(x, y, async_op=True)
        del x
        gc.collect()
        req.wait()
        results.append(float(keep[0]) == sum(r + 1 + round_ for r in range(comm.size)))
    return results


def allocate_free_cycles(comm, cycles):
    """`cycles` allocations freed at once (a few sizes, as FSDP asks), an allreduce on them now and then: the process's
    RSS and /dev/shm's use must end where they started."""
    def rss_kib():
        with open("/proc/self/status") as f:
            return int(next(line for line in f if line.startswith("VmRSS:")).split()[1])

    def dev_shm_used():
        st = os.statvfs("/dev/shm")
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    sizes = [1 << 10, 1 << 14, 1 << 18]
    for n in sizes:  # warm: one of each size in the cache, and the peers' mappings made
        a = comm.allocate(n, "float32")
        comm.allreduce(a)
        del a
    gc.collect()
    before = (rss_kib(), dev_shm_used())
    for i in range(cycles):
        a = comm.allocate(sizes[i % len(sizes)], "float32")
        if i % 100 == 0:
            a[:] = 1
            comm.allreduce(a)
        del a
    gc.collect()
    after = (rss_kib(), dev_shm_used())
    return before, after


def peer_dies_mid_op(comm, timeout):
    """Rank 1 starts an allreduce on registered arrays (with more blocks of its own in use and cached) and dies
    while it is in flight; rank 0 comes late, so it reads rank 1's arrays after the death. Returns rank 0's (elapsed,
    error, rank 1's names left in /dev/shm)."""
    import time

    import ccl_core

    n = 1 << 18
    x, y = comm.allocate(n, "float32"), comm.allocate(n, "float32")
    x[:] = 1
    held = comm.allocate(1 << 12, "float32")  # in use when the rank dies
    cached = comm.allocate(1 << 14, "float32")
    del cached  # in the cache when the rank dies
    comm.allreduce(x, y)  # the peers' blocks are mapped now
    pids = np.zeros(comm.size, np.int64)
    comm.allgather(np.array([os.getpid()], np.int64), pids)
    if comm.rank == 1:
        comm.allreduce(x, y, async_op=True)
        time.sleep(0.2)
        os._exit(0)  # no clean-up, like a killed process
    time.sleep(0.5)
    start = time.monotonic()
    try:
        comm.allreduce(x, y, async_op=True).wait(timeout=timeout)
        error = "no error"
    except (ccl_core.CclTimeoutError, ccl_core.BackendError) as e:
        error = f"{type(e).__name__}: {e}"
    elapsed = time.monotonic() - start
    del held
    leftovers = [f for f in os.listdir("/dev/shm") if f.startswith(f"{int(pids[1])}:")]
    return elapsed, error, leftovers
