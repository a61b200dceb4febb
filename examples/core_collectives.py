"""Collectives through ccl_core on NumPy arrays, without torch.

    python -m ccl_core.launch -n 2 examples/core_collectives.py
    mpiexec -n 2 python examples/core_collectives.py
"""
import os

import numpy as np

import ccl_core

comm = ccl_core.init_from_env(timeout=60)
rank, size = comm.rank, comm.size
lines = []

x = np.arange(4, dtype=np.float32) + rank
comm.allreduce(x)
lines.append(f"allreduce sum      {x}")

y = np.full(3, float(rank + 1))
comm.allreduce(y, op="avg")
lines.append(f"allreduce avg      {y}")

gathered = np.zeros(2 * size, np.int64)
comm.allgather(np.array([rank, 10 * rank]), gathered)
lines.append(f"allgather          {gathered}")

b = np.array([42, 43], np.int32) if rank == 0 else np.zeros(2, np.int32)
comm.broadcast(b, root=0)
lines.append(f"broadcast from 0   {b}")

send = np.arange(size, dtype=np.float64) + 100 * rank
recv = np.zeros(size)
comm.alltoall(send, recv)
lines.append(f"alltoall           {recv}")

peer = (rank + 1) % size
got = np.zeros(1, np.int32)
reqs = [comm.recv(got, (rank - 1) % size, async_op=True), comm.send(np.array([rank], np.int32), peer, async_op=True)]
for r in reqs:
    r.wait()
lines.append(f"ring send/recv     got {got[0]} from rank {(rank - 1) % size}")

comm.barrier()
header = f"rank {rank}/{size} (oneCCL {ccl_core.oneccl_version().split()[0]})"
os.write(1, ("\n".join([header] + ["  " + l for l in lines]) + "\n").encode())
