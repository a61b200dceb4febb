"""One rank per host: the cross-host stage alone, 32 MiB each rank sends across. As one op: allgather,
reduce_scatter, a send+recv exchange and an alltoall; with the argument "pieces": in 1, 8 or 16 pieces issued at once
(async) or one after another, as a hierarchical op's lanes issue them. run_alone.py runs it."""
import os, sys, time, json
import numpy as np, ccl_core
os.environ["MASTER_PORT"] = str(int(os.environ["MASTER_PORT"]) + 1)
comm = ccl_core.init_from_env()
r, P = comm.rank, comm.size
peer = 1 - r
N = (64 << 20) // 4
res = {}
def timed(name, fn, iters=4):
    ts = []
    for _ in range(iters):
        comm.barrier()
        t = time.perf_counter(); fn(); ts.append((time.perf_counter() - t) * 1000)
    res[name] = sorted(ts)

if sys.argv[1:] != ["pieces"]:
    x = np.full(N // P, r + 1, np.float32); out = np.empty(N, np.float32)
    timed("allgather", lambda: comm.allgather(x, out))
    assert out[0] == 1 and out[-1] == P
    big = np.full(N, r + 1, np.float32); part = np.empty(N // P, np.float32)
    timed("reduce_scatter", lambda: comm.reduce_scatter(big, part))
    assert part[0] == sum(range(1, P + 1))
    mine = np.full(N // P, r + 1, np.float32); theirs = np.empty(N // P, np.float32)
    def exchange():
        a = comm.send(mine, peer, async_op=True) if r == 0 else comm.recv(theirs, peer, async_op=True)
        b = comm.recv(theirs, peer, async_op=True) if r == 0 else comm.send(mine, peer, async_op=True)
        a.wait(); b.wait()
    timed("send+recv exchange", exchange)
    assert theirs[0] == peer + 1
    a2a_in = np.full(N, r + 1, np.float32); a2a_out = np.empty(N, np.float32)
    timed("alltoall exchange", lambda: comm.alltoall(a2a_in, a2a_out))
    assert a2a_out[-1] == P
else:
    TOTAL = 32 << 20  # bytes each rank sends across in all
    for pieces in (1, 8, 16):
        n = TOTAL // 4 // pieces
        xs = [np.full(n, r + 1, np.float32) for _ in range(pieces)]
        outs = [np.empty(n * P, np.float32) for _ in range(pieces)]
        timed(f"allgather x{pieces}", lambda: [q.wait() for q in [comm.allgather(x, o, async_op=True) for x, o in zip(xs, outs)]])
        a_in = [np.full(n * P, r + 1, np.float32) for _ in range(pieces)]
        timed(f"alltoall x{pieces}", lambda: [q.wait() for q in [comm.alltoall(x, o, async_op=True) for x, o in zip(a_in, outs)]])
        big = [np.full(n * P, r + 1, np.float32) for _ in range(pieces)]
        parts = [np.empty(n, np.float32) for _ in range(pieces)]
        timed(f"reduce_scatter x{pieces}", lambda: [q.wait() for q in [comm.reduce_scatter(b, p, async_op=True) for b, p in zip(big, parts)]])
        # one at a time, as a chain's lanes would if each waited
        timed(f"allgather x{pieces} serial", lambda: [comm.allgather(x, o) for x, o in zip(xs, outs)])
        timed(f"alltoall x{pieces} serial", lambda: [comm.alltoall(x, o) for x, o in zip(a_in, outs)])
if r == 0:
    print("RESULT", json.dumps(res), flush=True)
