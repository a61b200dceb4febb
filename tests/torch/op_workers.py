"""Per-rank bodies of the op tests: every op x dtype x reduce op, checked against values computed here."""
import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

FLOATS = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
COMPLEX = [torch.complex64, torch.complex128]
ALL = FLOATS + INTS + [torch.bool] + COMPLEX
N = 11


def values(rank, dtype, n=N):
    base = torch.arange(n, dtype=torch.float64) % 3 + 1 + rank
    if dtype == torch.bool:
        return (torch.arange(n) + rank) % 2 == 0
    if dtype.is_complex:
        return torch.complex(base, -base).to(dtype)
    return base.to(dtype)


def reduce_ref(size, dtype, op, n=N, factor=None):
    vals = [values(r, dtype, n) for r in range(size)]
    if dtype == torch.bool:
        stack = torch.stack(vals)
        if op in (ReduceOp.SUM, ReduceOp.MAX, ReduceOp.BOR):
            return stack.any(0)
        if op in (ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.BAND):
            return stack.all(0)
        return stack.sum(0) % 2 == 1  # BXOR
    wide = torch.complex128 if dtype.is_complex else (torch.float64 if dtype.is_floating_point else torch.int64)
    stack = torch.stack([v.to(wide) for v in vals])
    if op == ReduceOp.SUM:
        out = stack.sum(0)
    elif op == ReduceOp.AVG:
        out = stack.sum(0) / size
    elif op == ReduceOp.PRODUCT:
        out = stack.prod(0)
    elif op == ReduceOp.MIN:
        out = stack.min(0).values
    elif op == ReduceOp.MAX:
        out = stack.max(0).values
    elif op == "premul":
        out = (stack * factor).sum(0)
    else:
        acc = stack[0].clone()
        for s in stack[1:]:
            acc = {ReduceOp.BAND: acc & s, ReduceOp.BOR: acc | s, ReduceOp.BXOR: acc ^ s}[op]
        out = acc
    return out.to(dtype)


def ops_for(dtype):
    if dtype == torch.bool:
        return [ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR]
    if dtype.is_complex:
        return [ReduceOp.SUM, ReduceOp.AVG, "premul"]
    if dtype.is_floating_point:
        return [ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.AVG, "premul"]
    return [ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR]


def torch_op(op, factor=2.0):
    return dist._make_nccl_premul_sum(factor) if op == "premul" else op


def same(got, want):
    if got.dtype in (torch.float16, torch.bfloat16) or got.is_complex() or got.is_floating_point():
        return torch.allclose(got.to(torch.complex128 if got.is_complex() else torch.float64),
                              want.to(torch.complex128 if want.is_complex() else torch.float64), rtol=1e-2, atol=1e-2)
    return torch.equal(got, want)


def all_reduce(rank, size):
    bad = []
    for dtype in ALL:
        for op in ops_for(dtype):
            t = values(rank, dtype)
            dist.all_reduce(t, op=torch_op(op))
            want = reduce_ref(size, dtype, op, factor=2.0)
            if not same(t, want):
                bad.append(f"all_reduce {dtype} {op}: {t[:4].tolist()} != {want[:4].tolist()}")
    return bad


def reduce(rank, size):
    bad = []
    root = size - 1
    for dtype in ALL:
        for op in ops_for(dtype):
            t = values(rank, dtype)
            dist.reduce(t, dst=root, op=torch_op(op))
            if rank == root and not same(t, reduce_ref(size, dtype, op, factor=2.0)):
                bad.append(f"reduce {dtype} {op}")
    return bad


def reduce_scatter(rank, size):
    bad = []
    for dtype in ALL:
        for op in ops_for(dtype):
            full = [reduce_ref(size, dtype, op, n=N * size, factor=2.0)]
            want = full[0][rank * N:(rank + 1) * N]
            out = torch.zeros(N, dtype=dtype)
            dist.reduce_scatter_tensor(out, values(rank, dtype, N * size), op=torch_op(op))
            if not same(out, want):
                bad.append(f"reduce_scatter_tensor {dtype} {op}")
            outs = torch.zeros(N, dtype=dtype)
            chunks = list(values(rank, dtype, N * size).chunk(size))
            dist.reduce_scatter(outs, chunks, op=torch_op(op))
            if not same(outs, want):
                bad.append(f"reduce_scatter (list) {dtype} {op}")
    return bad


def broadcast_gather_scatter(rank, size):
    bad = []
    for dtype in ALL:
        for root in range(size):
            t = values(rank, dtype)
            dist.broadcast(t, src=root)
            if not same(t, values(root, dtype)):
                bad.append(f"broadcast {dtype} root {root}")
        root = size - 1
        gl = [torch.zeros(N, dtype=dtype) for _ in range(size)] if rank == root else None
        dist.gather(values(rank, dtype), gl, dst=root)
        if rank == root and not all(same(gl[r], values(r, dtype)) for r in range(size)):
            bad.append(f"gather {dtype}")
        out = torch.zeros(N, dtype=dtype)
        dist.scatter(out, [values(r + 5, dtype) for r in range(size)] if rank == 0 else None, src=0)
        if not same(out, values(rank + 5, dtype)):
            bad.append(f"scatter {dtype}")
    return bad


def all_gather(rank, size):
    bad = []
    for dtype in ALL:
        lst = [torch.zeros(N, dtype=dtype) for _ in range(size)]
        dist.all_gather(lst, values(rank, dtype))
        if not all(same(lst[r], values(r, dtype)) for r in range(size)):
            bad.append(f"all_gather {dtype}")
        flat = torch.zeros(N * size, dtype=dtype)
        dist.all_gather_into_tensor(flat, values(rank, dtype))
        if not same(flat, torch.cat([values(r, dtype) for r in range(size)])):
            bad.append(f"all_gather_into_tensor {dtype}")
    objs = [None] * size
    dist.all_gather_object(objs, {"rank": rank, "text": "x" * rank})
    if objs != [{"rank": r, "text": "x" * r} for r in range(size)]:
        bad.append(f"all_gather_object {objs}")
    obj = [{"from": rank}]
    dist.broadcast_object_list(obj, src=size - 1)
    if obj != [{"from": size - 1}]:
        bad.append(f"broadcast_object_list {obj}")
    return bad


def all_to_all(rank, size):
    bad = []
    for dtype in ALL:
        # equal splits: block j of rank r holds values(10r + j)
        inp = torch.cat([values(10 * rank + j, dtype, 2) for j in range(size)])
        out = torch.zeros_like(inp)
        dist.all_to_all_single(out, inp)
        if not same(out, torch.cat([values(10 * r + rank, dtype, 2) for r in range(size)])):
            bad.append(f"all_to_all_single equal {dtype}")
        # uneven splits: rank r sends (r + j + 1) rows of 3 to rank j
        rows = lambda src, dst: src + dst + 1  # noqa: E731
        inp = torch.cat([values(10 * rank + j, dtype, rows(rank, j) * 3).view(-1, 3) for j in range(size)])
        out = torch.zeros(sum(rows(s, rank) for s in range(size)), 3, dtype=dtype)
        dist.all_to_all_single(out, inp, [rows(s, rank) for s in range(size)], [rows(rank, j) for j in range(size)])
        want = torch.cat([values(10 * s + rank, dtype, rows(s, rank) * 3).view(-1, 3) for s in range(size)])
        if not same(out, want):
            bad.append(f"all_to_all_single uneven {dtype}")
        outs = [torch.zeros(rows(s, rank), dtype=dtype) for s in range(size)]
        dist.all_to_all(outs, [values(10 * rank + j, dtype, rows(rank, j)) for j in range(size)])
        if not all(same(outs[s], values(10 * s + rank, dtype, rows(s, rank))) for s in range(size)):
            bad.append(f"all_to_all (lists) {dtype}")
    return bad


def point_to_point(rank, size):
    bad = []
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    for dtype in ALL:
        got = torch.zeros(N, dtype=dtype)
        reqs = [dist.isend(values(rank, dtype), nxt), dist.irecv(got, prv)]
        for r in reqs:
            r.wait()
        if not same(got, values(prv, dtype)):
            bad.append(f"isend/irecv {dtype}")
    got = torch.zeros(N)
    ops = [dist.P2POp(dist.isend, values(rank, torch.float32), nxt), dist.P2POp(dist.irecv, got, prv)]
    for r in dist.batch_isend_irecv(ops):
        r.wait()
    if not same(got, values(prv, torch.float32)):
        bad.append("batch_isend_irecv")
    if rank == 0:
        dist.send(torch.tensor([5, 6]), 1)
    elif rank == 1:
        t = torch.zeros(2, dtype=torch.int64)
        dist.recv(t, 0)
        if t.tolist() != [5, 6]:
            bad.append(f"send/recv {t.tolist()}")
    return bad


def shapes_and_layouts(rank, size):
    bad = []
    want = sum(r + 1 for r in range(size))
    t = torch.full((4, 6), float(rank + 1)).t()  # non-contiguous
    dist.all_reduce(t)
    if not torch.all(t == want):
        bad.append("non-contiguous all_reduce")
    cl = torch.full((2, 3, 4, 5), float(rank + 1)).to(memory_format=torch.channels_last)
    dist.all_reduce(cl)
    if not (torch.all(cl == want) and cl.is_contiguous(memory_format=torch.channels_last)):
        bad.append("channels_last all_reduce")
    e = torch.zeros(0)
    dist.all_reduce(e)
    dist.broadcast(e, 0)
    lst = [torch.zeros(0) for _ in range(size)]
    dist.all_gather(lst, e)
    s = torch.tensor(float(rank + 1))  # 0-dim
    dist.all_reduce(s)
    if s.item() != want or s.dim() != 0:
        bad.append("scalar all_reduce")
    # a temporary input, freed (and its memory reused) while the op is in flight
    flat = torch.zeros(N * size)
    work = dist.all_gather_into_tensor(flat, torch.full((N,), float(rank)) + 0, async_op=True)
    junk = [torch.full((N,), -1.0) for _ in range(64)]  # noqa: F841
    work.wait()
    if not torch.equal(flat, torch.cat([torch.full((N,), float(r)) for r in range(size)])):
        bad.append("all_gather_into_tensor from a temporary input")
    # an isend whose work and tensor are dropped at once
    if rank == 0:
        dist.isend(torch.full((N,), 7.0) + 0, 1)
        junk = [torch.full((N,), -1.0) for _ in range(64)]  # noqa: F841
    elif rank == 1:
        got = torch.zeros(N)
        dist.recv(got, 0)
        if not torch.all(got == 7.0):
            bad.append(f"dropped isend delivered {got[:3].tolist()}")
    # non-contiguous outputs of gathers and all_to_all
    out = torch.zeros(3, size).t()
    dist.all_gather_into_tensor(out, torch.full((3,), float(rank)))
    if not torch.equal(out.contiguous().view(-1), torch.cat([torch.full((3,), float(r)) for r in range(size)])):
        bad.append("non-contiguous all_gather_into_tensor output")
    return bad


def coalesced(rank, size):
    bad = []
    from torch.distributed.distributed_c10d import _coalescing_manager

    ts = [torch.full((3,), float(rank + i)) for i in range(3)]
    with _coalescing_manager(device=torch.device("cpu"), async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    for i, t in enumerate(ts):
        if not torch.all(t == sum(r + i for r in range(size))):
            bad.append(f"coalescing manager all_reduce {i}: {t.tolist()}")
    outs = [torch.zeros(2 * size) for _ in range(2)]
    with _coalescing_manager(device=torch.device("cpu")):
        for i, o in enumerate(outs):
            dist.all_gather_into_tensor(o, torch.full((2,), float(10 * i + rank)))
    for i, o in enumerate(outs):
        if not torch.equal(o, torch.cat([torch.full((2,), float(10 * i + r)) for r in range(size)])):
            bad.append(f"coalesced all_gather_into_tensor {i}")
    outs = [torch.zeros(2) for _ in range(2)]
    with _coalescing_manager(device=torch.device("cpu")):
        for i, o in enumerate(outs):
            dist.reduce_scatter_tensor(o, torch.arange(2.0 * size) + i)
    for i, o in enumerate(outs):
        want = (torch.arange(2.0 * size) + i)[2 * rank:2 * rank + 2] * size
        if not torch.equal(o, want):
            bad.append(f"coalesced reduce_scatter_tensor {i}: {o.tolist()} != {want.tolist()}")
    ts = [torch.ones(4) * (rank + 1), torch.ones(2)]
    dist.all_reduce_coalesced(ts)
    if not (torch.all(ts[0] == sum(range(1, size + 1))) and torch.all(ts[1] == size)):
        bad.append("all_reduce_coalesced")
    return bad


ALL_WORKERS = [all_reduce, reduce, reduce_scatter, broadcast_gather_scatter, all_gather, all_to_all,
               point_to_point, shapes_and_layouts, coalesced]
