"""Per-rank bodies of the ccl-xpu tests: oneCCL's device path on a SYCL device, checked against NumPy."""
import os
import sys

import numpy as np

import ccl_core
import ccl_xpu


def opencl_cpu_env() -> dict:
    """Select the OpenCL CPU device of intel-opencl-rt: the one real SYCL device on machines without an Intel GPU.
    Its wheel's ICD file names a wrong path, so the runtime is named directly. Where the stage brought its own Level
    Zero loader (ci/level_zero/install.sh: the system's lacks zesInit), ccl-xpu is pointed at it."""
    env = {}
    lib = os.path.join(sys.prefix, "lib", "libintelocl.so")
    if os.path.exists(lib):
        env.update(ONEAPI_DEVICE_SELECTOR="opencl:cpu", OCL_ICD_FILENAMES=lib)
    loader = os.path.join(sys.prefix, "lib", "level-zero", "libze_loader.so.1")
    if os.path.exists(loader):
        env["CCL_XPU_ZE_LOADER"] = loader
    return env


def device_collectives(rank, size, store_dir):
    """Every op of the Python face on shared and device USM memory of the default SYCL device."""
    q = ccl_xpu.Queue()
    comm = ccl_xpu.DeviceCommunicator(ccl_core.FileStore(store_dir), rank, size, q, timeout=60)
    bad = []
    for n in (1, 1000, 1 << 18):
        x = q.usm(n)
        np.asarray(x)[:] = np.arange(n) % 7 + rank
        comm.allreduce(x, x)
        want = sum(np.arange(n) % 7 + r for r in range(size))
        if not np.array_equal(np.asarray(x), want):
            bad.append(f"allreduce shared n={n}")
        d_in, d_out = q.usm(n, kind="device"), q.usm(n, kind="device")
        d_in.copy_from((np.arange(n) % 5 + rank).astype(np.float32))
        comm.allreduce(d_in, d_out, op="max")
        got = np.zeros(n, np.float32)
        d_out.copy_to(got)
        if not np.array_equal(got, np.arange(n) % 5 + size - 1):
            bad.append(f"allreduce device max n={n}")
    s, g = q.usm(4, "int32"), q.usm(4 * size, "int32")
    np.asarray(s)[:] = rank
    comm.allgather(s, g)
    if not np.array_equal(np.asarray(g), np.repeat(np.arange(size), 4)):
        bad.append(f"allgather {np.asarray(g)}")
    b = q.usm(16, "float64")
    np.asarray(b)[:] = rank + 5
    comm.broadcast(b, root=size - 1)
    if not np.all(np.asarray(b) == size + 4):
        bad.append("broadcast")
    rs_in, rs_out = q.usm(3 * size), q.usm(3)
    np.asarray(rs_in)[:] = np.arange(3 * size)
    comm.reduce_scatter(rs_in, rs_out)
    if not np.array_equal(np.asarray(rs_out), size * np.arange(3 * rank, 3 * rank + 3)):
        bad.append(f"reduce_scatter {np.asarray(rs_out)}")
    a_in, a_out = q.usm(2 * size, "int64"), q.usm(2 * size, "int64")
    np.asarray(a_in)[:] = 100 * rank + np.arange(2 * size)
    comm.alltoall(a_in, a_out)
    want = np.concatenate([100 * r + np.arange(2 * rank, 2 * rank + 2) for r in range(size)])
    if not np.array_equal(np.asarray(a_out), want):
        bad.append(f"alltoall {np.asarray(a_out)} != {want}")
    comm.barrier()
    req = comm.allreduce(x, x, async_op=True)
    req.wait(timeout=30)
    return bad


def device_then_host_communicators(rank, size, store_dir):
    """A device communicator used and dropped, then at once a host one, three times over, with the blocking-call
    thread holding each device call 0.3 s after it ended (ccl_core._hold_blocking_calls): dropping the device
    communicator must destroy it there and then (its departure is recorded in the store when `del` returns), not
    later on that thread beside the host communicator's creation, where both ranks once hung in oneCCL."""
    from ccl_core import _ccl_core

    _ccl_core._hold_blocking_calls(0.3)
    store = ccl_core.FileStore(store_dir)
    q = ccl_xpu.Queue()
    out = []
    for round_ in range(3):
        comm = ccl_xpu.DeviceCommunicator(ccl_core.PrefixStore(f"round{round_}", store), rank, size, q, timeout=60)
        x = q.usm(1000)
        np.asarray(x)[:] = rank + 1
        comm.allreduce(x, x)
        device_right = bool(np.all(np.asarray(x) == sum(range(1, size + 1))))
        del comm
        try:
            departed = ccl_core.PrefixStore(f"round{round_}", store).get(f"ccl_xpu/departed/{rank}", timeout=0) == b"1"
        except Exception:  # noqa: BLE001  (not there yet: the destruction was left to the blocking-call thread)
            departed = False
        host = ccl_core.Communicator(ccl_core.PrefixStore(f"host{round_}", store), rank, size, timeout=60)
        y = np.full(1000, rank + 1, np.float32)
        host.allreduce(y, y)
        out.append((device_right, departed, bool(np.all(y == sum(range(1, size + 1))))))
        del host
    return out


def device_communicator_refused(rank, size, store_dir):
    """Where oneCCL's device path cannot run, making a communicator raises (never crashes) on every rank."""
    q = ccl_xpu.Queue()
    try:
        ccl_xpu.DeviceCommunicator(ccl_core.FileStore(store_dir), rank, size, q, timeout=20)
        return "no error"
    except ccl_core.UnsupportedError as e:
        return str(e)



def device_wait_that_fails(rank, size, store_dir, how):
    """Rank 1 never joins rank 0's second allreduce (it waits in the store until rank 0 is through). Rank 0's wait ends
    by `how`: its timeout, or a Ctrl-C raised on purpose while the op is issued ('issue') or as its wait begins
    ('wait'; ccl_core's _raise_sigint_at). Either way the device communicator is aborted, and the next op is refused
    by name."""
    import signal
    import time

    from ccl_core import _ccl_core

    # as an interactive Python has it: a background job of a non-interactive shell inherits SIGINT ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    store = ccl_core.FileStore(store_dir)
    q = ccl_xpu.Queue()
    comm = ccl_xpu.DeviceCommunicator(store, rank, size, q, timeout=60)
    x = q.usm(1000, kind="device")
    x.copy_from(np.ones(1000, np.float32))
    comm.allreduce(x, x)  # both ranks: the communicator works
    if rank != 0:
        store.get("rank 0 is through", timeout=120)
        return {}
    out = {}
    start = time.monotonic()
    try:
        if how == "timeout":
            comm.allreduce(x, x, async_op=True).wait(timeout=2)
        else:
            _ccl_core._raise_sigint_at(how)
            comm.allreduce(x, x)
        out["error"] = "no error"
    except ccl_core.CclTimeoutError as e:
        out["error"] = f"Timeout: {e}"
    except KeyboardInterrupt:
        out["error"] = "KeyboardInterrupt"
    out["waited"] = time.monotonic() - start
    out["aborted"] = comm.aborted
    try:
        comm.barrier()
        out["after"] = "no error"
    except ccl_core.CommunicatorAbortedError as e:
        out["after"] = str(e)
    store.set("rank 0 is through", b"1")
    return out
