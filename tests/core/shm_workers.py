"""Per-rank bodies of the shared-memory allreduce tests (test_shm_allreduce.py)."""
import hashlib

import numpy as np

import ccl_core
from dtypes import FLOATING, close, decode, encode, kw, reduce_reference

# element counts around the path boundaries: empty, tiny, odd, just past one segment, several segments
# (the tests shrink the segment to 4 KiB and the one-synchronisation limit to 256 bytes)
COUNTS = [0, 1, 37, 1025, 3 * 1024 + 17, 20_000]


def _values(rank, n, dtype, seed):
    rng = np.random.default_rng(seed * 101 + rank)
    if dtype in FLOATING:  # small integers: exact in every float type, so results compare exactly
        return rng.integers(-4, 5, n).astype(np.float64)
    return rng.integers(1, 4, n).astype(np.float64)


def sizes_dtypes_ops(comm):
    """Every count x a dtype per family x every op, out of place and in place, against NumPy."""
    bad = []
    if not comm.shared_memory:
        return ["the shared-memory path is off although every rank is on this host"]
    for i, n in enumerate(COUNTS):
        for dtype in ["int8", "uint16", "int64", "float16", "bfloat16", "float32", "float64"]:
            ops = ["sum", "prod", "min", "max"] + (["avg"] if dtype in FLOATING else [])
            for op in ops:
                inputs = [_values(r, n, dtype, i) for r in range(comm.size)]
                if op == "prod":  # |product| <= 2**4 fits int8 over up to 4 ranks; beyond, factors of +-1
                    limit = 2 if comm.size <= 4 else 1
                    inputs = [np.where(x == 0, 1, np.clip(x, -limit, limit)) for x in inputs]
                want = reduce_reference(inputs, op)
                send = encode(inputs[comm.rank], dtype)
                recv = np.full_like(send, 7)
                comm.allreduce(send, recv, op=op, **kw(dtype))
                if not close(decode(recv, dtype), want, dtype, op):
                    bad.append(f"n={n} {dtype} {op}: {decode(recv, dtype)[:4]} != {want[:4]}")
                if not np.array_equal(send, encode(inputs[comm.rank], dtype)):
                    bad.append(f"n={n} {dtype} {op}: the send buffer was modified")
                buf = encode(inputs[comm.rank], dtype)
                comm.allreduce(buf, op=op, **kw(dtype))
                if not close(decode(buf, dtype), want, dtype, op):
                    bad.append(f"n={n} {dtype} {op} in place: {decode(buf, dtype)[:4]} != {want[:4]}")
    return bad


def same_bits_everywhere(comm):
    """Random floats (rounding depends on the order of the sum): every rank must hold the same bits."""
    digests = []
    for n in COUNTS:
        for dtype in [np.float32, np.float16]:
            x = np.random.default_rng(comm.rank + 10 * n).standard_normal(n).astype(dtype)
            comm.allreduce(x)
            digests.append(hashlib.sha256(x.tobytes()).hexdigest())
    return digests


def waits_out_of_order(comm):
    """Async allreduces interleaved with oneCCL collectives, waited for in reverse order."""
    bad = []
    reduced = [np.full(5000, comm.rank + i, np.float32) for i in range(3)]
    gathered = [np.zeros(comm.size, np.int32) for _ in range(3)]
    reqs = []
    for i in range(3):
        reqs.append(comm.allreduce(reduced[i], async_op=True))
        reqs.append(comm.allgather(np.array([comm.rank + i], np.int32), gathered[i], async_op=True))
    for req in reversed(reqs):
        req.wait(timeout=30)
    for i in range(3):
        if not np.all(reduced[i] == sum(r + i for r in range(comm.size))):
            bad.append(f"allreduce {i}: {reduced[i][0]}")
        if list(gathered[i]) != [r + i for r in range(comm.size)]:
            bad.append(f"allgather {i}: {list(gathered[i])}")
    return bad


def disagreeing_counts(comm):
    """Rank 0 reduces 10 elements, the others 20: every rank must say so, and the communicator is unusable."""
    x = np.ones(10 if comm.rank == 0 else 20, np.float32)
    try:
        comm.allreduce(x)
        return "no error"
    except ccl_core.InvalidArgumentError as e:
        message = str(e)
    try:
        comm.allreduce(np.ones(4, np.float32))
        return "communicator still usable after the disagreement"
    except ccl_core.CommunicatorAbortedError:
        pass
    return message


def path_in_use(comm):
    x = np.ones(100, np.float64)
    comm.allreduce(x)
    return comm.shared_memory, float(x[0])


def subgroup_paths(comm):
    """Sub-groups on one host take the shared-memory path too, each with its own segment."""
    out = []
    for ranks in ([0, 1], [comm.size - 1, 0], list(range(comm.size))):
        sub = comm.subgroup(ranks)
        if sub is None:
            continue
        x = np.full(70_000, comm.rank, np.int64)  # past the one-synchronisation limit
        sub.allreduce(x)
        out.append((ranks, sub.shared_memory, bool(np.all(x == sum(ranks)))))
    return out


def uneven_settings(rank, size, store_dir, settings):
    """Communicator made after this rank sets its own environment (settings[rank]); returns whether allreduce
    took the shared-memory path and whether a multi-segment allreduce came out right."""
    import os

    os.environ.update(settings[rank])
    comm = ccl_core.Communicator(ccl_core.FileStore(store_dir), rank, size, timeout=30)
    x = np.arange(300_000, dtype=np.float64) + rank
    comm.allreduce(x)
    want = size * np.arange(300_000, dtype=np.float64) + sum(range(size))
    return comm.shared_memory, bool(np.array_equal(x, want))


def what_the_group_agreed(rank, size, store_dir, settings):
    """comm.agreed and the deprecated name of comm.shared_memory, after this rank sets its own environment."""
    import os
    import warnings

    os.environ.update(settings[rank])
    comm = ccl_core.Communicator(ccl_core.FileStore(store_dir), rank, size, timeout=30)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old_name = comm.shared_memory_allreduce
    return comm.agreed, old_name, [str(w.message) for w in caught if w.category is DeprecationWarning]


def placed_ops(comm):
    """allgather, reduce_scatter and broadcast on the shared-memory path across segment boundaries, against NumPy."""
    bad = []
    if not comm.shared_memory:
        return ["the shared-memory path is off although every rank is on this host"]
    size, rank = comm.size, comm.rank
    for i, n in enumerate(COUNTS):
        for dtype in ["int8", "int64", "bfloat16", "float32", "float64"]:
            inputs = [_values(r, n, dtype, i) for r in range(size)]
            # allgather, out of place and with the input inside the output (torch's in-place all_gather_into_tensor)
            out = np.full_like(encode(np.zeros(n * size), dtype), 9)
            comm.allgather(encode(inputs[rank], dtype), out, **kw(dtype))
            if not np.array_equal(decode(out, dtype), np.concatenate(inputs)):
                bad.append(f"allgather n={n} {dtype}")
            inplace = encode(np.concatenate([inputs[r] if r == rank else np.zeros(n) for r in range(size)]), dtype)
            comm.allgather(inplace[rank * n:(rank + 1) * n].copy(), inplace, **kw(dtype))
            if not np.array_equal(decode(inplace, dtype), np.concatenate(inputs)):
                bad.append(f"allgather in place n={n} {dtype}")
            # reduce_scatter: rank r gets the reduction of block r
            blocks = [np.concatenate([_values(r * 7 + b, n, dtype, i) for b in range(size)]) for r in range(size)]
            for op in ["sum", "max"] + (["avg"] if dtype in FLOATING else []):
                recv = np.full_like(encode(np.zeros(n), dtype), 9)
                comm.reduce_scatter(encode(blocks[rank], dtype), recv, op=op, **kw(dtype))
                want = reduce_reference([blk[rank * n:(rank + 1) * n] for blk in blocks], op)
                if not close(decode(recv, dtype), want, dtype, op):
                    bad.append(f"reduce_scatter n={n} {dtype} {op}: {decode(recv, dtype)[:4]} != {want[:4]}")
            # broadcast from every root
            for root in range(size):
                buf = encode(inputs[rank], dtype)
                comm.broadcast(buf, root=root, **kw(dtype))
                if not np.array_equal(decode(buf, dtype), inputs[root]):
                    bad.append(f"broadcast n={n} {dtype} root={root}")
    return bad


def disagreeing_roots(comm):
    """A broadcast whose root differs between ranks raises on every rank instead of copying the wrong data."""
    try:
        comm.broadcast(np.ones(8, np.float32), root=comm.rank)
        return "no error"
    except ccl_core.InvalidArgumentError as e:
        return str(e)


def large_ops_digests(comm, registered=False):
    """Large messages on every path of the shared-memory path (the copying allreduce, allgather, reduce_scatter,
    broadcast; with `registered`, the in-place ones), up to outputs stored past the caches: the bits each rank got,
    after checking what can be checked exactly against NumPy. Helper threads (CCL_CORE_THREADS) must not change them."""
    size, rank = comm.size, comm.rank
    rng = np.random.default_rng(1000 + rank)

    def array(count, dtype):
        if registered:
            a = comm.allocate(count, "uint16" if dtype == "bfloat16" else dtype)
        else:
            a = np.empty(count, np.uint16 if dtype == "bfloat16" else dtype)
        return a

    digests, bad = [], []
    for count in (1 << 16, 1 << 20, 3 << 20):  # 256 KiB-12 MiB of float32: parts for helpers, streaming stores
        for dtype in ("float32", "bfloat16", "float16"):
            x = array(count, dtype)
            values = rng.standard_normal(count).astype(np.float32)
            if dtype == "bfloat16":
                x[:] = (values.view(np.uint32) >> 16).astype(np.uint16)
            else:
                x[:] = values.astype(dtype)
            comm.allreduce(x, x, **({"dtype": "bfloat16"} if dtype == "bfloat16" else {}))
            digests.append(hashlib.sha256(x.tobytes()).hexdigest())
        ints = array(count, "int32")
        ints[:] = rank + 1
        gathered = array(count * size, "int32")
        comm.allgather(ints, gathered)
        if not np.array_equal(gathered.reshape(size, -1), np.repeat(np.arange(1, size + 1), count).reshape(size, -1)):
            bad.append(f"allgather {count}")
        blocks = array(count * size, "int32")
        blocks[:] = np.arange(count * size) % 1000 + rank
        part = array(count, "int32")
        comm.reduce_scatter(blocks, part)
        want = (np.arange(rank * count, (rank + 1) * count) % 1000) * size + size * (size - 1) // 2
        if not np.array_equal(part, want):
            bad.append(f"reduce_scatter {count}")
        ints[:] = rank * 10 + 1
        comm.broadcast(ints, root=size - 1)
        if not np.all(ints == (size - 1) * 10 + 1):
            bad.append(f"broadcast {count}")
    return digests, bad, comm.in_place_ops


def one_shot_limit_by_rank_count(comm):
    """Allreduces around the default one-synchronisation limit of this rank count, in every dtype family, against
    NumPy (both variants reduce the same sources in the same order)."""
    bad = []
    limit = min(64 << 10, (64 << 10) // (comm.size - 1))
    for nbytes in (limit - 64, limit, limit + 64, 4 * limit):
        for dtype in ("int32", "bfloat16", "float32"):
            n = nbytes // (2 if dtype == "bfloat16" else 4)
            inputs = [_values(r, n, dtype, nbytes) for r in range(comm.size)]
            buf = encode(inputs[comm.rank], dtype)
            comm.allreduce(buf, **kw(dtype))
            if not close(decode(buf, dtype), reduce_reference(inputs, "sum"), dtype, "sum"):
                bad.append(f"{nbytes} bytes {dtype}")
    return bad
