"""The original bindings' contract that users' code and tests rely on: error types and wording, uneven
reduce_scatter, recv from any source. Each worker runs unchanged on ccl and on gloo where gloo has the feature."""
import datetime

import torch
import torch.distributed as dist


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the test checks type and message
        return {"value": isinstance(e, ValueError), "runtime": isinstance(e, RuntimeError),
                "type": isinstance(e, TypeError), "message": str(e)}
    return None


def original_argument_checks(rank, size, store_dir):
    """The original's own tests, as it wrote them: ProcessGroupCCL on a FileStore, called directly."""
    import oneccl_bindings_for_pytorch  # noqa: F401 - exposes dist.ProcessGroupCCL, as the original did

    store = dist.FileStore(f"{store_dir}/direct", size)
    pg = dist.ProcessGroupCCL(store, rank, size)
    results = {}

    def broadcast_bad_root():
        opts = dist.BroadcastOptions()
        opts.rootRank = -1
        opts.rootTensor = 0
        pg.broadcast([torch.zeros([1])], opts)

    results["root"] = _error(broadcast_bad_root)
    results["reduce root"] = _error(lambda: pg.reduce([torch.zeros([1])], _reduce_options(size)))
    results["size"] = _error(lambda: pg._allgather_base(torch.empty(size + 1, dtype=torch.long),
                                                        torch.tensor([rank])).wait())
    results["dtype"] = _error(lambda: pg._allgather_base(torch.empty(size + 1, dtype=torch.long),
                                                         torch.tensor([rank], dtype=torch.float)).wait())
    results["unsupported dtype"] = _error(lambda: pg.allreduce([torch.ones(2).to(torch.float8_e4m3fn)]).wait())
    # and the group still works
    t = torch.tensor([float(rank)])
    pg.allreduce([t]).wait()
    results["sum"] = t.item()
    return results


def _reduce_options(size):
    opts = dist.ReduceOptions()
    opts.rootRank = size
    return opts


def error_classes(rank, size):
    import oneccl_bindings_for_pytorch as ccl
    import torch_ccl

    return {
        "argument": [b.__name__ for b in ccl.ArgumentError.__mro__],
        "dtype": [b.__name__ for b in ccl.DTypeError.__mro__],
        "same in torch_ccl": torch_ccl.ArgumentError is ccl.ArgumentError,
        "module": ccl.ArgumentError.__module__,
    }


def uneven_reduce_scatter(rank, size):
    """Output r has r + 1 elements on rank r; every rank knows every input, so each checks against its own sums."""
    from torch.distributed import ReduceOp

    sizes = [r + 2 for r in range(size)]

    def inputs_of(r, dtype):
        return [(torch.arange(sizes[j], dtype=torch.float64) * (r + 1) + j - r).to(dtype) for j in range(size)]

    cases = [(torch.float32, ReduceOp.SUM, lambda xs: torch.stack(xs).sum(0)),
             (torch.float32, ReduceOp.MAX, lambda xs: torch.stack(xs).amax(0)),
             (torch.float32, ReduceOp.MIN, lambda xs: torch.stack(xs).amin(0)),
             (torch.float64, ReduceOp.PRODUCT, lambda xs: torch.stack(xs).prod(0)),
             (torch.bfloat16, ReduceOp.SUM, lambda xs: torch.stack([x.float() for x in xs]).sum(0)),
             (torch.int64, ReduceOp.SUM, lambda xs: torch.stack(xs).sum(0))]
    results = []
    for dtype, op, reference in cases:
        out = torch.full((sizes[rank],), -7, dtype=dtype)
        dist.reduce_scatter(out, inputs_of(rank, dtype), op=op)
        expected = reference([inputs_of(r, dtype)[rank] for r in range(size)]).to(dtype)
        results.append((str(dtype), str(op), out.tolist(), expected.tolist()))
    return results


def recv_any_source(rank, size):
    """Rank 0 receives without src from every other rank; then, with only rank 1 sending (after a barrier), it
    mixes named and unnamed recvs, which must take rank 1's messages in order."""
    got = []
    if rank == 0:
        for _ in range(size - 1):
            t = torch.zeros(3)
            src = dist.recv(t)
            got.append((src, t.tolist()))
    else:
        dist.send(torch.full((3,), float(rank)), 0)
    dist.barrier()
    if rank == 0:
        for how in ("named", "any", "named"):
            t = torch.zeros(3)
            got.append((how, dist.recv(t, src=1) if how == "named" else dist.recv(t), t.tolist()))
    elif rank == 1:
        for v in (10.0, 11.0, 12.0):
            dist.send(torch.full((3,), v), 0)
    dist.barrier()
    return sorted(got[:size - 1]) + got[size - 1:]


def pipeline_exchange_without_src(rank, size):
    """Every rank posts irecv() without src, then sends to its neighbour: nothing may wait for the other."""
    out = torch.zeros(2)
    work = dist.irecv(out)
    dist.send(torch.full((2,), float(rank)), (rank + 1) % size)
    work.wait()
    return work._source_rank(), out.tolist()


def recv_without_sender_times_out(rank, size):
    """Nobody sends to rank 0: its recv() raises within the group's timeout, using almost no CPU meanwhile."""
    import time

    result = None
    if rank == 0:
        start, cpu = time.monotonic(), time.process_time()
        try:
            dist.recv(torch.zeros(1))
            result = "no error"
        except Exception as e:  # noqa: BLE001 - the test checks type and message
            result = f"{type(e).__name__}: {e}"
        result = (result, time.monotonic() - start, time.process_time() - cpu)
    else:
        time.sleep(2.5)  # rank 0 spends the group's 3 s timeout in recv: do not start the all_reduce's clock early
    t = torch.ones(1)
    dist.all_reduce(t)  # the group still works
    return result, t.item()
