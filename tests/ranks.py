"""Run a function on N real ranks (separate processes) and collect what each returns.

Each rank gets a ccl_core.Communicator bootstrapped through a FileStore in a fresh directory (or no
communicator, with make_comm=False, for tests of bootstrap itself). A rank's exception comes back with its
traceback; a rank that hangs past `timeout` is killed and fails the test, so no test can hang the suite.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import traceback
from typing import Any, Callable


class RankFailed(AssertionError):
    pass


def _child(fn, rank, size, store_dir, make_comm, comm_timeout, args, queue):
    try:
        if make_comm:
            import ccl_core

            comm = ccl_core.Communicator(ccl_core.FileStore(store_dir), rank, size, timeout=comm_timeout)
            result = fn(comm, *args)
        else:
            result = fn(rank, size, store_dir, *args)
        queue.put((rank, True, result))
    except BaseException as e:  # report everything, including KeyboardInterrupt-like exits
        queue.put((rank, False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def run_ranks(fn: Callable[..., Any], size: int = 2, *args, timeout: float = 120.0, comm_timeout: float = 60.0,
              make_comm: bool = True, allow_missing: tuple[int, ...] = ()) -> list[Any]:
    """fn(comm, *args) on every rank (fn(rank, size, store_dir, *args) with make_comm=False).
    Returns the per-rank results in rank order; ranks in allow_missing may exit without reporting."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="ccl-test-") as store_dir:
        procs = [ctx.Process(target=_child, args=(fn, r, size, store_dir, make_comm, comm_timeout, args, queue))
                 for r in range(size)]
        for p in procs:
            p.start()
        results: dict[int, tuple[bool, Any]] = {}
        expected = size - len(allow_missing)
        try:
            while len(results) < expected or any(r not in results for r in range(size) if r not in allow_missing):
                rank, ok, value = queue.get(timeout=timeout)
                results[rank] = (ok, value)
        except Exception:
            missing = [r for r in range(size) if r not in results and r not in allow_missing]
            raise RankFailed(f"rank(s) {missing} reported nothing within {timeout} s (hang?)") from None
        finally:
            for p in procs:
                p.join(timeout=15)
                if p.is_alive():
                    p.kill()
                    p.join()
        hung = [r for r, p in enumerate(procs) if p.exitcode not in (0, None) and r not in allow_missing
                and results.get(r, (True,))[0]]
        failures = {r: v for r, (ok, v) in results.items() if not ok}
        if failures:
            text = "\n".join(f"--- rank {r} ---\n{v}" for r, v in sorted(failures.items()))
            raise RankFailed(text)
        if hung:
            raise RankFailed(f"rank(s) {hung} returned a result but exited with codes "
                             f"{[procs[r].exitcode for r in hung]}")
        return [results[r][1] if r in results else None for r in range(size)]


def clean_env() -> dict:
    """The environment of a user who sourced nothing: no LD_LIBRARY_PATH, no CCL_/FI_/I_MPI_ variables."""
    return {k: v for k, v in os.environ.items()
            if k != "LD_LIBRARY_PATH" and not k.startswith(("CCL_", "FI_", "I_MPI_"))}
