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
