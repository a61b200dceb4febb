"""Per-rank bodies of the store tests."""
import os
import time

import numpy as np

import ccl_core


class DirectoryStore(ccl_core.Store):
    """A store written in Python (one file per key), to prove that user stores plug in."""

    def __init__(self, path):
        super().__init__()
        self.path = path

    def set(self, key, value):
        name = os.path.join(self.path, key.replace("/", "%"))
        with open(name + ".tmp", "wb") as f:
            f.write(value)
        os.replace(name + ".tmp", name)

    def get(self, key, timeout):
        name = os.path.join(self.path, key.replace("/", "%"))
        deadline = time.monotonic() + timeout
        while not os.path.exists(name):
            if time.monotonic() > deadline:
                raise TimeoutError(key)
            time.sleep(0.005)
        with open(name, "rb") as f:
            return f.read()


def allreduce_sum(comm):
    x = np.full(16, comm.rank + 1, np.int32)
    comm.allreduce(x)
    return int(x[0])


def via_tcp_store(rank, size, _store_dir, port):
    store = ccl_core.TcpStore("127.0.0.1", port, is_server=rank == 0, connect_timeout=20)
    comm = ccl_core.Communicator(store, rank, size, timeout=30)
    return allreduce_sum(comm)


def via_python_store(rank, size, store_dir):
    # the Python store is created inline and wrapped: only the C++ side holds it afterwards
    comm = ccl_core.Communicator(ccl_core.PrefixStore("p", DirectoryStore(store_dir)), rank, size, timeout=30)
    import gc

    gc.collect()
    sub = comm.subgroup(list(range(size)))  # bootstraps through the Python store again, later
    return allreduce_sum(sub)


def two_groups_on_one_store(rank, size, store_dir):
    """Two communicators on one store, kept apart by PrefixStore, used in turn."""
    base = ccl_core.FileStore(store_dir)
    a = ccl_core.Communicator(ccl_core.PrefixStore("a", base), rank, size, timeout=30, name="a")
    b = ccl_core.Communicator(ccl_core.PrefixStore("b", base), rank, size, timeout=30, name="b")
    return [allreduce_sum(a), allreduce_sum(b), allreduce_sum(a)]


def host_census(comm):
    """What the bootstrap learnt about co-located ranks, for the group and for a one-rank sub-group."""
    sub = comm.subgroup([0])
    return comm.local_ranks, comm.oversubscribed, None if sub is None else (sub.local_ranks, sub.oversubscribed)
