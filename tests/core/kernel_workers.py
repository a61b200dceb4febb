"""Per-rank bodies of the reduction-kernel tests (test_kernels.py): every dtype x op x length through the
shared-memory allreduce, whose reductions run on ccl-core's kernels at the level CCL_CORE_KERNEL picks."""
import numpy as np

import ccl_core
from dtypes import DTYPES, FLOATING, OPS, kw, storage

# around the vector widths (8 and 16 lanes) and the kernels' 2048-element blocks; 70001 float32 elements pass
# the one-synchronisation limit, so the large path (own input plus peers' slots) runs too
LENGTHS = [1, 15, 16, 17, 33, 2047, 2049, 70001]


def inputs(rank, n, dtype, op, seed):
    """Rank `rank`'s values: random normals (floats, with NaN and infinities at fixed places on some ranks) or
    random integers over the whole range (sums and products wrap)."""
    rng = np.random.default_rng([seed, rank, n, DTYPES.index(dtype), OPS.index(op)])
    if dtype in FLOATING:
        x = rng.standard_normal(n).astype(np.float32) * (1.0 if op == "prod" else 100.0)
        i = np.arange(n)
        x[(i % 7 == 3) & (rank == 1)] = np.nan
        x[(i % 11 == 5) & (rank == 0)] = np.inf
        x[(i % 13 == 6) & (rank == 2)] = -np.inf
        if dtype == "bfloat16":  # float32 bits, truncated to their upper half
            return (x.view(np.uint32) >> 16).astype(np.uint16)
        return x.astype(dtype)
    info = np.iinfo(storage(dtype))
    return rng.integers(info.min, info.max, n, dtype=storage(dtype), endpoint=True)


def every_dtype_op_and_length(comm, seed):
    """Returns the kernel level in use and, per case, the result bytes (in place and out of place, both from
    buffers one element off their allocation's alignment)."""
    if not comm.shared_memory:
        raise AssertionError("the shared-memory path is off although every rank is on this host")
    out = {"level": ccl_core.kernel_level(), "results": {}}
    for dtype in DTYPES:
        for op in OPS:
            if op == "avg" and dtype not in FLOATING:
                continue
            for n in LENGTHS:
                x = inputs(comm.rank, n, dtype, op, seed)
                send = np.empty(n + 1, x.dtype)[1:]
                send[:] = x
                recv = np.empty(n + 1, x.dtype)[1:]
                comm.allreduce(send, recv, op=op, **kw(dtype))
                comm.allreduce(send, op=op, **kw(dtype))  # in place: the output is also a source
                out["results"][f"{dtype} {op} {n}"] = (recv.tobytes(), send.tobytes())
    return out
