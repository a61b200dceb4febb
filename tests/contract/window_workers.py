"""Per-rank bodies of the one-sided window tests (test_windows.py): torch 2.15's new_window, put, signal /
wait_signal and map_remote_tensor on the ccl backend's registered memory; gloo for the side-by-side."""
import time

import torch
import torch.distributed as dist


def _backend():
    return dist.group.WORLD._get_backend(torch.device("cpu"))


def _registered(n, dtype):
    return _backend().allocate_tensor(n, dtype=dtype, device=torch.device("cpu")).zero_()


def ring(rank, size, dtype_name):
    """Each rank puts its stamp into the next rank's window (at an offset of its own), signals it, waits for the
    previous rank's signal, and reads what arrived; then reads the next rank's window through map_remote_tensor.
    Rounds repeat with new values: what was put before a signal is there once the signal is seen."""
    dtype = getattr(torch, dtype_name)
    n = 1000
    buf = _registered(size * n, dtype)
    win = dist._new_window(buf)
    nxt, prev = (rank + 1) % size, (rank - 1) % size
    seen = []
    for round_ in range(5):
        stamp = torch.full((n,), float(rank * 10 + round_), dtype=dtype)
        win.put(stamp, nxt, rank * n, False)
        win.signal(nxt, False)
        win.wait_signal(prev, False)
        seen.append(buf[prev * n:(prev + 1) * n].unique().tolist())
        dist.barrier()  # everyone read this round before the next overwrites it
    remote = win.map_remote_tensor(nxt)
    view = (remote.numel(), remote[rank * n:(rank + 1) * n].unique().tolist(), remote.dtype == dtype)
    attr = str(win.get_attr(nxt).access_type)
    dist.barrier()
    win.tensor_deregister()
    return {"seen": seen, "remote": view, "attr": attr, "supports": dist.distributed_c10d._supports_window()}


def async_waits_then_signals(rank, size):
    """Every rank issues an async wait_signal for each peer before it signals them (a blocking wait would deadlock
    here); isCompleted() turns true only once the peer's signal arrived."""
    buf = _registered(8, torch.float32)
    win = dist._new_window(buf)
    peers = [p for p in range(size) if p != rank]
    waits = {p: win.wait_signal(p, True) for p in peers}
    before = [waits[p].is_completed() for p in peers]
    dist.barrier()  # every wait issued, none can be complete: nobody has signalled
    for p in peers:
        win.signal(p, False)
    for p in peers:
        waits[p].wait()
    return before, [waits[p].is_completed() for p in peers]


def late_writes_after_the_owner_let_go(rank, size):
    """Rank 0 drops its window and tensor without tensor_deregister, then allocates tensors of the same sizes as the
    window's tensor and signal counters (the pool would hand those blocks back); rank 1, whose window still maps
    them, then puts and signals into rank 0. Returns what rank 0's new tensors hold afterwards."""
    n = 1 << 16
    buf = _registered(n, torch.float32)
    win = dist._new_window(buf)
    dist.barrier()
    if rank == 0:
        del win, buf
        fresh = [_registered(n, torch.float32) for _ in range(4)]
        fresh_small = [_registered(4, torch.int64) for _ in range(4)]  # a page, as the counters' block
    dist.barrier()
    if rank == 1:
        win.put(torch.full((n,), 7.0), 0, 0, False)
        win.signal(0, False)
    dist.barrier()
    if rank == 0:
        return [t.abs().sum().item() for t in fresh], [t.abs().sum().item() for t in fresh_small]
    return None


def bad_calls(rank, size):
    """Errors by name on the caller, for what only the caller can see; on every rank, for what a collective call
    learns from all (a rank registering ordinary memory; a dtype that differs)."""
    errors = {}

    def expect(name, fn):
        try:
            fn()
            errors[name] = "no error"
        except Exception as e:  # noqa: BLE001 - the test reads the type and the message
            kinds = "/".join(c.__name__ for c in type(e).__mro__[:-2])  # e.g. ArgumentError/ValueError
            errors[name] = f"{kinds}: {e}"

    expect("ordinary tensor", lambda: dist._new_window(torch.zeros(16) if rank == 1 else _registered(16, torch.float32)))
    expect("dtypes differ", lambda: dist._new_window(_registered(16, torch.float32 if rank == 0 else torch.float64)))
    win = dist._new_window(_registered(16, torch.float32))
    expect("rank out of range", lambda: win.put(torch.ones(2), size + 3, 0, False))
    expect("past the end", lambda: win.put(torch.ones(4), (rank + 1) % size, 14, False))
    expect("negative offset", lambda: win.put(torch.ones(1), 0, -1, False))
    expect("wrong dtype", lambda: win.put(torch.ones(2, dtype=torch.int32), 0, 0, False))
    expect("map out of range", lambda: win.map_remote_tensor(-1))
    start = time.monotonic()
    expect("never signalled", lambda: win.wait_signal((rank + 1) % size, False).wait())
    took = time.monotonic() - start
    empty = dist._new_window()
    expect("put before register", lambda: empty.put(torch.ones(1), 0, 0, False))
    dist.barrier()
    return errors, took


def gloo_side(rank, size):
    try:
        dist._new_window(torch.zeros(4))
        made = "made"
    except Exception as e:  # noqa: BLE001
        made = f"{type(e).__name__}: {e}"
    return dist.distributed_c10d._supports_window(), made
