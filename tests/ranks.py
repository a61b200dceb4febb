"""Run a function on N real ranks (separate processes) and collect what each returns.

Each rank gets a ccl_core.Communicator bootstrapped through a FileStore in a fresh directory (or no
communicator, with make_comm=False, for tests of bootstrap itself). A rank's exception comes back with its
traceback; a rank that hangs past `timeout` is killed and fails the test, so no test can hang the suite.

Ranks of torch tests (preload_torch=True) are forked from a process that imported torch once (multiprocessing's
forkserver): importing torch takes ~1.8 s of this 2-core machine per test, most of a short test's time. Such a rank
takes the caller's environment and output back before anything of the test is unpickled (so ccl_core and the test's
modules load as in a fresh process); where the caller changed a variable that torch or the loader read at start-up,
its ranks are spawned afresh instead.
"""
from __future__ import annotations

import multiprocessing as mp
import multiprocessing.forkserver
import os
import pickle
import sys
import tempfile
import traceback
from typing import Any, Callable

# read when a process or torch starts: ranks forked from the torch server must see the values it started with
_READ_AT_START = ("TORCH_", "PYTORCH_", "OMP_", "KMP_", "MKL_", "GOMP_", "OPENBLAS_", "LD_", "PYTHON", "MALLOC_")
_server_env: dict | None = None  # those variables as the torch server was started with them


def _read_at_start(env) -> dict:
    return {k: v for k, v in env.items() if k.startswith(_READ_AT_START)}


def _context(preload_torch: bool):
    global _server_env
    if not preload_torch:
        return mp.get_context("spawn")
    if _server_env is None:
        _server_env = _read_at_start(os.environ)
        mp.set_forkserver_preload(["torch", "torch.distributed"])
        # device backends (ours included) load in each rank, with the rank's environment (_child)
        autoload = os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD")
        os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
        try:
            multiprocessing.forkserver.ensure_running()
        finally:
            if autoload is None:
                del os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"]
            else:
                os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = autoload
    if _read_at_start(os.environ) != _server_env:
        return mp.get_context("spawn")
    return mp.get_context("forkserver")


def _as_if_spawned(caller: int, env: dict) -> None:
    """In a rank forked from the torch server: the caller's environment, its stdout and stderr (pytest's capture),
    and the device backends torch would have loaded at import."""
    os.environ.clear()
    os.environ.update(env)
    for fd in (1, 2):
        try:
            target = os.open(f"/proc/{caller}/fd/{fd}", os.O_WRONLY | os.O_APPEND)
        except OSError:
            continue
        os.dup2(target, fd)
        os.close(target)
    torch = sys.modules.get("torch")
    if torch is not None and env.get("TORCH_DEVICE_BACKEND_AUTOLOAD", "1") == "1":
        torch._import_device_backends()
    # The forkserver ends its children with os._exit, which skips the exit handlers a spawned rank runs (Python's,
    # then C's: ccl-core removes the rank's /dev/shm regions there). Once the rank's work is done, that last
    # os._exit leaves through the interpreter's normal exit instead; the test's own os._exit calls stay what they are.
    immediate_exit = os._exit

    def exit_as_spawned(code):
        if _work_done:
            raise SystemExit(code)
        immediate_exit(code)

    os._exit = exit_as_spawned


_work_done = False  # set in a rank when its work returned (exit_as_spawned)


class RankFailed(AssertionError):
    pass


def _child(work, rank, size, store_dir, make_comm, comm_timeout, queue, forked_from):
    global _work_done
    try:
        if forked_from is not None:
            _as_if_spawned(*forked_from)
        fn, args = pickle.loads(work)  # only now: the test's modules import with the caller's environment
        if make_comm:
            import ccl_core

            comm = ccl_core.Communicator(ccl_core.FileStore(store_dir), rank, size, timeout=comm_timeout)
            result = fn(comm, *args)
        else:
            result = fn(rank, size, store_dir, *args)
        queue.put((rank, True, result))
    except BaseException as e:  # report everything, including KeyboardInterrupt-like exits
        queue.put((rank, False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
    finally:
        _work_done = True


def run_ranks(fn: Callable[..., Any], size: int = 2, *args, timeout: float = 120.0, comm_timeout: float = 60.0,
              make_comm: bool = True, allow_missing: tuple[int, ...] = (), preload_torch: bool = False) -> list[Any]:
    """fn(comm, *args) on every rank (fn(rank, size, store_dir, *args) with make_comm=False).
    Returns the per-rank results in rank order; ranks in allow_missing may exit without reporting."""
    ctx = _context(preload_torch)
    forked_from = (os.getpid(), dict(os.environ)) if ctx.get_start_method() == "forkserver" else None
    work = pickle.dumps((fn, args))
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="ccl-test-") as store_dir:
        procs = [ctx.Process(target=_child, args=(work, r, size, store_dir, make_comm, comm_timeout, queue,
                                                  forked_from))
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
