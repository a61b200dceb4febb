"""One collective on one backend: buffers, a call to time, and a check of its result.

Backends: "ccl" and "gloo" through torch.distributed, "raw" through ccl_core on the same memory (NumPy views)
to show what the torch layer costs, "fake" through torch's fake process group (moves nothing: its results are not
checked), "deepspeed" and "deepspeed-inference" (all_reduce only) through DeepSpeed's own oneCCL op. Three more ways to call the
ccl backend, for all_reduce and all_gather: "ccl-op", the registered op (torch.ops.ccl.all_reduce_ and
all_gather_into_tensor_, what compiled and inference code calls); "ccl-funcol", torch's functional collective ops (what
DTensor and compiled graphs call) waited at once; "ccl-async", async_op=True and an immediate wait(). Sizes follow
nccl-tests: all_gather's size is its output, reduce_scatter's its input, all_to_all's each buffer; counts are rounded
to a multiple of the group size."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist

from . import deepspeed_op

OPS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"]
CALL_STYLES = ("ccl-op", "ccl-funcol", "ccl-async")  # the ccl group called another way: all_reduce, all_gather
DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16, "int32": torch.int32}


@dataclass
class Case:
    run: Callable[[], None]      # one timed call, complete on return
    check: Callable[[], str]     # "" when the result is right, else what is wrong
    start: Callable[[], object] | None  # the same call issued async: returns something with wait(); None: no async form


def _numpy(t: torch.Tensor):
    """A NumPy view of t's memory, and the dtype name ccl_core needs for it."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16), "bfloat16"
    return t.numpy(), None


def _values(rank: int, n: int, dtype) -> torch.Tensor:
    return ((torch.arange(n) % 7) + rank + 1).to(dtype)  # small integers: exact in every dtype


def registered_zeros(group):
    """Allocation from the group's registered memory (the ccl backend's allocate_tensor: what FSDP2 uses with
    set_allocate_memory_from_process_group_for_comm), for the "ccl-registered" rows."""
    backend = group._get_backend(torch.device("cpu"))

    def zeros(n: int, dtype) -> torch.Tensor:
        return backend.allocate_tensor(n, dtype=dtype, device=torch.device("cpu")).zero_()

    return zeros


def make_case(op: str, backend: str, nbytes: int, dtype, rank: int, size: int, group=None, comm=None,
              fault: bool = False, zeros=None) -> Case:
    zeros = zeros or (lambda n, dt: torch.zeros(n, dtype=dt))
    elem = torch.tensor([], dtype=dtype).element_size()
    count = max(size, (nbytes // elem) // size * size)
    chunk = count // size

    if op == "all_reduce":
        buf = zeros(count, dtype)
        if backend == "raw":
            arr, dt = _numpy(buf)
            run = lambda: comm.allreduce(arr, dtype=dt)  # noqa: E731
            start = lambda: comm.allreduce(arr, dtype=dt, async_op=True)  # noqa: E731
        elif backend in deepspeed_op.BACKENDS:  # comm is DeepSpeed's op; it has no async form
            run = deepspeed_op.all_reduce(comm, backend, buf, size)
            start = None
        elif backend in CALL_STYLES:
            run, start = _called_as(backend, "all_reduce", group, buf)
        else:
            run = lambda: dist.all_reduce(buf, group=group)  # noqa: E731
            start = lambda: dist.all_reduce(buf, group=group, async_op=True)  # noqa: E731

        def check():
            buf.copy_(_values(rank, count, dtype))
            run()
            want = sum(_values(r, count, torch.float64) for r in range(size))
            return _compare(buf, want, fault)
    elif op == "broadcast":
        buf = zeros(count, dtype)
        if backend == "raw":
            arr, dt = _numpy(buf)
            run = lambda: comm.broadcast(arr, root=0, dtype=dt)  # noqa: E731
            start = lambda: comm.broadcast(arr, root=0, dtype=dt, async_op=True)  # noqa: E731
        else:
            run = lambda: dist.broadcast(buf, src=0, group=group)  # noqa: E731
            start = lambda: dist.broadcast(buf, src=0, group=group, async_op=True)  # noqa: E731

        def check():
            buf.copy_(_values(rank, count, dtype))
            run()
            return _compare(buf, _values(0, count, torch.float64), fault)
    elif op == "all_gather":
        out = zeros(count, dtype)
        inp = out[rank * chunk:(rank + 1) * chunk] if backend == "ccl-registered" else zeros(chunk, dtype)  # FSDP's way
        if backend == "raw":
            (a, dt), (b, _) = _numpy(inp), _numpy(out)
            run = lambda: comm.allgather(a, b, dtype=dt)  # noqa: E731
            start = lambda: comm.allgather(a, b, dtype=dt, async_op=True)  # noqa: E731
        elif backend in CALL_STYLES:
            run, start = _called_as(backend, "all_gather", group, out, inp)
        else:
            run = lambda: dist.all_gather_into_tensor(out, inp, group=group)  # noqa: E731
            start = lambda: dist.all_gather_into_tensor(out, inp, group=group, async_op=True)  # noqa: E731

        def check():
            inp.copy_(_values(rank, chunk, dtype))
            run()
            return _compare(out, torch.cat([_values(r, chunk, torch.float64) for r in range(size)]), fault)
    elif op == "reduce_scatter":
        inp, out = zeros(count, dtype), zeros(chunk, dtype)
        if backend == "raw":
            (a, dt), (b, _) = _numpy(inp), _numpy(out)
            run = lambda: comm.reduce_scatter(a, b, dtype=dt)  # noqa: E731
            start = lambda: comm.reduce_scatter(a, b, dtype=dt, async_op=True)  # noqa: E731
        else:
            run = lambda: dist.reduce_scatter_tensor(out, inp, group=group)  # noqa: E731
            start = lambda: dist.reduce_scatter_tensor(out, inp, group=group, async_op=True)  # noqa: E731

        def check():
            inp.copy_(_values(rank, count, dtype))
            run()
            total = sum(_values(r, count, torch.float64) for r in range(size))
            return _compare(out, total[rank * chunk:(rank + 1) * chunk], fault)
    elif op == "all_to_all":
        inp, out = zeros(count, dtype), zeros(count, dtype)
        if backend == "raw":
            (a, dt), (b, _) = _numpy(inp), _numpy(out)
            run = lambda: comm.alltoall(a, b, dtype=dt)  # noqa: E731
            start = lambda: comm.alltoall(a, b, dtype=dt, async_op=True)  # noqa: E731
        else:
            run = lambda: dist.all_to_all_single(out, inp, group=group)  # noqa: E731
            start = lambda: dist.all_to_all_single(out, inp, group=group, async_op=True)  # noqa: E731

        def check():
            inp.copy_(torch.cat([torch.full((chunk,), 10 * rank + j, dtype=torch.float64) for j in range(size)]).to(dtype))
            run()
            want = torch.cat([torch.full((chunk,), 10 * r + rank, dtype=torch.float64) for r in range(size)])
            return _compare(out, want, fault)
    else:
        raise ValueError(f"unknown op {op!r}; choose from {', '.join(OPS)}")
    return Case(run, check, start)


def _called_as(style: str, op: str, group, buf: torch.Tensor, inp: torch.Tensor | None = None):
    """(run, start) for `op` on the ccl group called in `style` (CALL_STYLES); results land in `buf`."""
    if style == "ccl-op":
        name = group.group_name
        if op == "all_reduce":
            call = torch.ops.ccl.all_reduce_.default
            return (lambda: call(buf, name, "sum")), None
        call = torch.ops.ccl.all_gather_into_tensor_.default
        return (lambda: call(buf, inp, name)), None
    if style == "ccl-funcol":
        # torch's functional collective ops as a compiled graph calls them (all_reduce in its re-inplaced form);
        # the eager Python wrappers of torch.distributed._functional_collectives add their own cost, whatever the
        # backend (docs/performance.md)
        functional, name = torch.ops._c10d_functional, group.group_name
        wait = functional.wait_tensor.default
        if op == "all_reduce":
            reduce_ = functional.all_reduce_.default
            return (lambda: wait(reduce_(buf, "sum", name))), None
        gather, size = functional.all_gather_into_tensor.default, dist.get_world_size(group)
        return (lambda: buf.copy_(wait(gather(inp, size, name)))), None
    if op == "all_reduce":
        return (lambda: dist.all_reduce(buf, group=group, async_op=True).wait()), None
    return (lambda: dist.all_gather_into_tensor(buf, inp, group=group, async_op=True).wait()), None


def _compare(got: torch.Tensor, want: torch.Tensor, fault: bool) -> str:
    got = got.to(torch.float64)
    if fault:  # CCL_BENCH_FAULT: prove that a wrong result fails the run
        got = got.clone()
        got[0] += 1
    bad = (got - want).abs() > 1e-2 * want.abs().clamp(min=1)
    if bad.any():
        i = int(bad.nonzero()[0])
        return f"element {i}: got {got[i].item():g}, expected {want[i].item():g}"
    return ""
