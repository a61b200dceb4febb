"""Workers for torch 2.15's backend contract, each run on ccl and on gloo by the tests: groups made from groups, the
group's error state, timeouts, abort and shutdown, monitored_barrier, torch's hooks."""
import datetime
import time

import torch
import torch.distributed as dist


def _backend(group=None):
    return (group or dist.group.WORLD)._get_backend(torch.device("cpu"))


def _sum(group, value):
    t = torch.tensor([float(value)])
    dist.all_reduce(t, group=group)
    return t.item()


def _raises(fn):
    """(exception type name, first line of its message, seconds it took), or None when fn returned."""
    start = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the tests compare type and message
        return type(e).__name__, str(e).split("\n")[0], round(time.monotonic() - start, 2)
    return None


def groups_from_groups(rank, size):
    """split_group (with a rank left out), new_subgroups, DeviceMesh slicing, merge_remote_group."""
    from torch.distributed.device_mesh import init_device_mesh

    out = {}
    pair = dist.split_group(split_ranks=[[0, 2]])  # rank 1 is in no list
    member = pair is not None and dist.get_rank(pair) >= 0
    out["split"] = (dist.get_rank(pair), dist.get_world_size(pair), _sum(pair, rank + 1)) if member else None
    cur, _ = dist.new_subgroups(group_size=1)
    out["subgroups"] = _sum(cur, rank + 1)
    mesh = init_device_mesh("cpu", (size, 1), mesh_dim_names=("dp", "tp"))
    out["mesh dp"] = _sum(mesh["dp"].get_group(), rank + 1)
    out["mesh tp"] = _sum(mesh["tp"].get_group(), rank + 1)
    # ranks 0 and 1, each alone in a group, merge through a store of their own
    solo = dist.split_group(split_ranks=[[0], [1]])
    if rank < 2:
        store = dist.PrefixStore("merge", dist.distributed_c10d._get_default_store())
        merged = solo.merge_remote_group(store, 2, datetime.timedelta(seconds=30))
        t = torch.tensor([float(rank + 1)])
        merged.allreduce(t).wait()
        out["merge"] = (merged.size(), t.item())
    b = _backend()
    out["supports splitting"] = b.supports_splitting
    return out


def timeouts(rank, size):
    """set_timeout shortens the group's ops; an op's own timeout wins over the group's; the group's error state."""
    out = {"error before": str(_backend().get_error())}
    dist.set_timeout(datetime.timedelta(seconds=1))
    if rank == 0:  # rank 1 skips this all_reduce: rank 0's times out after the new 1 s, not the group's 60 s
        out["set_timeout"] = _raises(lambda: dist.all_reduce(torch.ones(4)))
        out["error after"] = str(_backend().get_error())
    dist.distributed_c10d._get_default_store().set(f"timeouts/{rank}", "done")
    dist.distributed_c10d._get_default_store().wait([f"timeouts/{1 - rank}"])
    return out


def op_timeout(rank, size):
    """A work's own wait(timeout) bounds that wait, whatever the group's timeout."""
    out = {}
    if rank == 0:
        work = dist.all_reduce(torch.ones(4), async_op=True)
        out["wait"] = _raises(lambda: work.wait(datetime.timedelta(seconds=1)))
    dist.distributed_c10d._get_default_store().set(f"op_timeout/{rank}", "done")
    dist.distributed_c10d._get_default_store().wait([f"op_timeout/{1 - rank}"])
    return out


def abort_unblocks(rank, size):
    """abort() from another thread ends a collective stuck on a missing peer; every later op raises, naming itself."""
    import threading

    out = {}
    if rank == 0:
        result = {}
        started = time.monotonic()

        def stuck():
            result["error"] = _raises(lambda: dist.all_reduce(torch.ones(4)))
            result["after"] = round(time.monotonic() - aborted_at[0], 2)

        aborted_at = [0.0]
        thread = threading.Thread(target=stuck)
        thread.start()
        time.sleep(1.0)
        aborted_at[0] = time.monotonic()
        _backend().abort()
        thread.join(timeout=30)
        out["stuck"] = result.get("error")
        out["unblocked after"] = result.get("after")
        out["waited"] = round(aborted_at[0] - started, 2)
        out["later"] = _raises(lambda: dist.broadcast(torch.ones(2), src=0))
        out["error"] = str(_backend().get_error())
    dist.distributed_c10d._get_default_store().set(f"abort/{rank}", "done")
    dist.distributed_c10d._get_default_store().wait([f"abort/{1 - rank}"])
    return out


def shutdown_then_use(rank, size):
    """shutdown() lets the group go; a later op raises instead of hanging."""
    _sum(None, 1)
    b = _backend()
    b.shutdown()
    return {"later": _raises(lambda: dist.all_reduce(torch.ones(2)))}


def monitored_barrier(rank, size, late_rank):
    """Rank `late_rank` never arrives (first round), then every rank arrives (second round)."""
    store = dist.distributed_c10d._get_default_store()
    out = {}
    if rank != late_rank:
        out["missing one"] = _raises(lambda: dist.monitored_barrier(timeout=datetime.timedelta(seconds=1)))
    store.set(f"mb/first/{rank}", "done")
    store.wait([f"mb/first/{r}" for r in range(size)])
    # gloo's pairs do not survive a failed round: the passing round runs on a fresh group
    group = dist.new_group(backend=dist.get_backend())
    out["all there"] = _raises(lambda: dist.monitored_barrier(group, timeout=datetime.timedelta(seconds=20)))
    return out


def monitored_barrier_names_all(rank, size):
    """wait_all_ranks=True: rank 0 names every rank that did not arrive."""
    store = dist.distributed_c10d._get_default_store()
    out = {}
    if rank == 0:
        out["missing"] = _raises(lambda: dist.monitored_barrier(timeout=datetime.timedelta(seconds=1),
                                                                wait_all_ranks=True))
    store.set(f"mba/{rank}", "done")
    store.wait([f"mba/{r}" for r in range(size)])
    return out


def hooks_and_timing(rank, size):
    """What the backend tells torch's hooks: capabilities, completed ops (through the flight recorder's own entries)."""
    b = _backend()
    out = {"abort hooks": b.supports_abort_hooks, "completion hooks": b.supports_completion_hooks,
           "shrinking": b.supports_shrinking, "reconfigure": b.supports_reconfigure}
    dist.all_reduce(torch.ones(8))
    work = dist.all_reduce(torch.ones(8), async_op=True)
    work.wait()
    return out
