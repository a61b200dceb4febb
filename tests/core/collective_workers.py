"""Per-rank bodies of the collective tests: each runs one collective over every dtype (and reduce op) and
returns the list of mismatches against NumPy. Kept in a module of their own so spawned ranks import them."""
import numpy as np

import ccl_core
from dtypes import DTYPES, FLOATING, OPS, close, decode, encode, kw, rank_values, reduce_reference

N = 37  # not a multiple of anything, to catch off-by-block errors


def _ops_for(dtype):
    return OPS if dtype in FLOATING else [op for op in OPS if op != "avg"]


def allreduce(comm):
    bad = []
    for dtype in DTYPES:
        for op in _ops_for(dtype):
            send = encode(rank_values(comm.rank, N), dtype)
            recv = np.zeros_like(send)
            comm.allreduce(send, recv, op=op, **kw(dtype))
            want = reduce_reference([rank_values(r, N) for r in range(comm.size)], op)
            if not close(decode(recv, dtype), want, dtype, op):
                bad.append(f"allreduce {dtype} {op}: {decode(recv, dtype)[:5]} != {want[:5]}")
        # in place
        buf = encode(rank_values(comm.rank, N), dtype)
        comm.allreduce(buf, **kw(dtype))
        want = reduce_reference([rank_values(r, N) for r in range(comm.size)], "sum")
        if not close(decode(buf, dtype), want, dtype):
            bad.append(f"allreduce in-place {dtype}")
    return bad


def reduce(comm):
    bad = []
    root = comm.size - 1
    for dtype in DTYPES:
        for op in _ops_for(dtype):
            send = encode(rank_values(comm.rank, N), dtype)
            recv = np.zeros_like(send)
            comm.reduce(send, recv, root=root, op=op, **kw(dtype))
            if comm.rank == root:
                want = reduce_reference([rank_values(r, N) for r in range(comm.size)], op)
                if not close(decode(recv, dtype), want, dtype, op):
                    bad.append(f"reduce {dtype} {op}")
    return bad


def reduce_scatter(comm):
    bad = []
    for dtype in DTYPES:
        for op in _ops_for(dtype):
            send = encode(rank_values(comm.rank, N * comm.size), dtype)
            recv = np.zeros(N, send.dtype)
            comm.reduce_scatter(send, recv, op=op, **kw(dtype))
            full = reduce_reference([rank_values(r, N * comm.size) for r in range(comm.size)], op)
            want = full[comm.rank * N:(comm.rank + 1) * N]
            if not close(decode(recv, dtype), want, dtype, op):
                bad.append(f"reduce_scatter {dtype} {op}")
    return bad


def broadcast(comm):
    bad = []
    for root in range(comm.size):
        for dtype in DTYPES:
            buf = encode(rank_values(comm.rank, N), dtype)
            comm.broadcast(buf, root=root, **kw(dtype))
            if not close(decode(buf, dtype), rank_values(root, N), dtype):
                bad.append(f"broadcast {dtype} root {root}")
    return bad


def allgather(comm):
    bad = []
    for dtype in DTYPES:
        send = encode(rank_values(comm.rank, N), dtype)
        recv = np.zeros(N * comm.size, send.dtype)
        comm.allgather(send, recv, **kw(dtype))
        want = np.concatenate([rank_values(r, N) for r in range(comm.size)])
        if not close(decode(recv, dtype), want, dtype):
            bad.append(f"allgather {dtype}")
    return bad


def allgatherv(comm):
    bad = []
    counts = [r + 2 for r in range(comm.size)]
    for dtype in DTYPES:
        send = encode(rank_values(comm.rank, counts[comm.rank]), dtype)
        recv = np.zeros(sum(counts), send.dtype)
        comm.allgatherv(send, recv, counts, **kw(dtype))
        want = np.concatenate([rank_values(r, counts[r]) for r in range(comm.size)])
        if not close(decode(recv, dtype), want, dtype):
            bad.append(f"allgatherv {dtype}")
    return bad


def alltoall(comm):
    bad = []
    for dtype in DTYPES:
        # block j of rank r holds 100*r + j (+ offsets), so every block is identifiable
        send_vals = np.concatenate([np.full(N, 10 * comm.rank + j, np.float64) for j in range(comm.size)])
        send = encode(send_vals, dtype)
        recv = np.zeros_like(send)
        comm.alltoall(send, recv, **kw(dtype))
        want = np.concatenate([np.full(N, 10 * r + comm.rank, np.float64) for r in range(comm.size)])
        if not close(decode(recv, dtype), want, dtype):
            bad.append(f"alltoall {dtype}")
    return bad


def alltoallv(comm):
    bad = []
    size, me = comm.size, comm.rank

    def count(src, dst):  # uneven, and zero for one pair
        return 0 if (src, dst) == (0, size - 1) else src + 2 * dst + 1

    for dtype in DTYPES:
        send_counts = [count(me, d) for d in range(size)]
        recv_counts = [count(s, me) for s in range(size)]
        send_vals = np.concatenate([np.full(count(me, d), 10 * me + d, np.float64) for d in range(size)])
        send = encode(send_vals, dtype)
        recv = np.zeros(sum(recv_counts), send.dtype)
        comm.alltoallv(send, send_counts, recv, recv_counts, **kw(dtype))
        want = np.concatenate([np.full(count(s, me), 10 * s + me, np.float64) for s in range(size)])
        if not close(decode(recv, dtype), want, dtype):
            bad.append(f"alltoallv {dtype}")
    return bad


def gather(comm):
    bad = []
    for root in range(comm.size):
        for dtype in DTYPES:
            send = encode(rank_values(comm.rank, N), dtype)
            recv = np.zeros(N * comm.size, send.dtype) if comm.rank == root else None
            comm.gather(send, recv, root=root, **kw(dtype))
            if comm.rank == root:
                want = np.concatenate([rank_values(r, N) for r in range(comm.size)])
                if not close(decode(recv, dtype), want, dtype):
                    bad.append(f"gather {dtype} root {root}")
    return bad


def scatter(comm):
    bad = []
    for root in range(comm.size):
        for dtype in DTYPES:
            send = None
            if comm.rank == root:
                send = encode(np.concatenate([np.full(N, 7 * r + 1, np.float64) for r in range(comm.size)]), dtype)
            recv = np.zeros(N, np.uint16 if dtype == "bfloat16" else dtype)
            comm.scatter(send, recv, root=root, **kw(dtype))
            if not close(decode(recv, dtype), np.full(N, 7 * comm.rank + 1, np.float64), dtype):
                bad.append(f"scatter {dtype} root {root}")
    return bad


def send_recv(comm):
    """A ring: every rank sends to the next and receives from the previous, sync and async."""
    bad = []
    nxt, prv = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    for dtype in DTYPES:
        out = encode(rank_values(comm.rank, N), dtype)
        inc = np.zeros_like(out)
        # even ranks send first, odd ranks receive first: blocking calls cannot deadlock
        if comm.rank % 2 == 0:
            comm.send(out, nxt, **kw(dtype))
            comm.recv(inc, prv, **kw(dtype))
        else:
            comm.recv(inc, prv, **kw(dtype))
            comm.send(out, nxt, **kw(dtype))
        if not close(decode(inc, dtype), rank_values(prv, N), dtype):
            bad.append(f"send/recv {dtype}")
        inc[:] = 0
        reqs = [comm.recv(inc, prv, async_op=True, **kw(dtype)), comm.send(out, nxt, async_op=True, **kw(dtype))]
        for r in reqs:
            r.wait()
        if not close(decode(inc, dtype), rank_values(prv, N), dtype):
            bad.append(f"isend/irecv {dtype}")
    return bad


def barrier_and_async(comm):
    bad = []
    comm.barrier()
    req = comm.barrier(async_op=True)
    req.wait(timeout=30)
    if not req.completed or not req.test():
        bad.append("barrier request not completed after wait")
    bufs = [np.full(1000, comm.rank + i, np.float32) for i in range(4)]
    reqs = [comm.allreduce(b, async_op=True) for b in bufs]
    while not all(r.test() for r in reqs):
        pass
    for i, b in enumerate(bufs):
        want = sum(r + i for r in range(comm.size))
        if not np.all(b == want):
            bad.append(f"async allreduce {i}: {b[0]} != {want}")
    if reqs[0].op != "allreduce":
        bad.append(f"request op name {reqs[0].op!r}")
    return bad


def subgroups(comm):
    """Every subset shape: all but rank 0, reversed order, a single rank; used in turn with the parent."""
    bad = []
    size = comm.size
    layouts = [list(range(1, size)), list(reversed(range(size))), [size - 1]]
    for ranks in layouts:
        sub = comm.subgroup(ranks)
        if comm.rank not in ranks:
            if sub is not None:
                bad.append(f"non-member got a communicator for {ranks}")
            continue
        if sub.rank != ranks.index(comm.rank) or sub.size != len(ranks):
            bad.append(f"subgroup {ranks}: rank/size {sub.rank}/{sub.size}")
        x = np.full(5, comm.rank, np.int64)
        sub.allreduce(x)
        if not np.all(x == sum(ranks)):
            bad.append(f"subgroup {ranks}: allreduce {x[0]} != {sum(ranks)}")
    # the parent still works after its subgroups
    z = np.ones(3, np.float32)
    comm.allreduce(z)
    if not np.all(z == size):
        bad.append("parent allreduce after subgroups")
    return bad


ALL = [allreduce, reduce, reduce_scatter, broadcast, allgather, allgatherv, alltoall, alltoallv, gather, scatter,
       send_recv, barrier_and_async, subgroups]
