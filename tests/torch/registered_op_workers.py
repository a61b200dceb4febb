"""Per-rank bodies of the registered-op tests (test_registered_ops.py): torch.ops.ccl.all_reduce_ and
all_gather_into_tensor_, eager, compiled, through DeepSpeed, on bad input and with a missing peer."""
import datetime
import time

import torch
import torch.distributed as dist

import oneccl_bindings_for_pytorch  # noqa: F401  (registers torch.ops.ccl)

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32, torch.int64, torch.int8,
          torch.uint8, torch.bool, torch.complex64, torch.complex128]


def _values(rank, n, dtype):
    """Small integers (exact in every dtype); complex ones with an imaginary part of their own."""
    base = ((torch.arange(n) % 5) + rank + 1).to(torch.float64)
    if dtype.is_complex:
        return torch.complex(base, 2 * base + 1).to(dtype)
    return base.to(dtype)


def _expected(values, op, dtype):
    """The reduction of the ranks' values (stacked, in float64 or complex128), as `dtype` holds it."""
    want = {"sum": values.sum(0), "max": values.max(0).values if not values.is_complex() else None,
            "avg": values.mean(0)}[op]
    if dtype == torch.bool:  # sum of bools is a logical or, max too
        want = (want != 0).to(torch.float64)
    return want


def all_reduce_every_dtype_and_op(rank, size):
    """Sum, max and avg on sizes from one element to 256 KiB, each dtype, in place; checked against float64 sums.
    Returns the failures, and the group's sequence number before and after (each op counts once)."""
    name = dist.group.WORLD.group_name
    pg = dist.group.WORLD._get_backend(torch.device("cpu"))
    seq_before = pg._get_sequence_number_for_group()
    calls, bad = 0, []
    for dtype in DTYPES:
        wide = torch.complex128 if dtype.is_complex else torch.float64
        for n in (1, 1000, 65536):
            for op in ("sum", "max", "avg"):
                if (op == "avg" and not (dtype.is_floating_point or dtype.is_complex)) or (op == "max" and dtype.is_complex):
                    continue
                t = _values(rank, n, dtype)
                ptr = t.data_ptr()
                torch.ops.ccl.all_reduce_(t, name, op)
                calls += 1
                want = _expected(torch.stack([_values(r, n, wide) for r in range(size)]), op, dtype)
                if ptr != t.data_ptr():
                    bad.append(f"{op} {dtype} {n}: the tensor moved")
                if not torch.allclose(t.to(wide), want.to(wide), rtol=1e-2):
                    bad.append(f"{op} {dtype} {n}: got {t[-4:].tolist()}, expected {want[-4:].tolist()}")
    return bad, calls, pg._get_sequence_number_for_group() - seq_before


def all_reduce_on_a_subgroup_and_on_gloo(rank, size):
    """The op on a ccl subgroup of ranks 0 and 1 (rank 2 is not in it) and on a gloo group (the general path)."""
    sub = dist.new_group([0, 1], backend="ccl")
    gloo = dist.new_group(backend="gloo")
    out = {}
    if rank in (0, 1):
        t = torch.full((100,), float(rank + 1))
        torch.ops.ccl.all_reduce_(t, sub.group_name)
        out["sub"] = t[0].item()
    t = torch.full((100,), float(rank + 1))
    torch.ops.ccl.all_reduce_(t, gloo.group_name, "max")
    out["gloo"] = t[0].item()
    return out


def all_gather_into_tensor(rank, size):
    """Each dtype, into a contiguous output and into a strided view (which takes c10d's path). Returns the failures
    and how far the group's sequence number moved (each call counts once)."""
    name = dist.group.WORLD.group_name
    pg = dist.group.WORLD._get_backend(torch.device("cpu"))
    seq_before = pg._get_sequence_number_for_group()
    bad, calls = [], 0
    for dtype in DTYPES:
        for n in (1, 15, 20000):
            inp = _values(rank, n, dtype)
            want = torch.cat([_values(r, n, dtype) for r in range(size)])
            out = torch.empty(size * n, dtype=dtype)
            torch.ops.ccl.all_gather_into_tensor_(out, inp, name)
            strided = torch.zeros(size * n, 2, dtype=dtype)[:, 0]
            torch.ops.ccl.all_gather_into_tensor_(strided, inp, name)
            calls += 2
            in_place = torch.zeros(size * n, dtype=dtype)  # the input is this rank's block of the output
            in_place[rank * n:(rank + 1) * n] = inp
            torch.ops.ccl.all_gather_into_tensor_(in_place, in_place[rank * n:(rank + 1) * n], name)
            calls += 1
            for how, got in (("contiguous", out), ("strided", strided), ("in place", in_place)):
                if not torch.equal(got, want):
                    bad.append(f"{dtype} {n} {how}: got {got[-3:].tolist()}, expected {want[-3:].tolist()}")
    return bad, calls, pg._get_sequence_number_for_group() - seq_before


def compiled_layer(rank, size, backend):
    """A row-parallel layer's tail compiled with fullgraph=True (a graph break raises): matmul, the op, a bias;
    and the same with torch's functional collective. Returns whether both match eager."""
    import torch.distributed._functional_collectives as funcol

    torch.manual_seed(0)
    w = torch.randn(16, 16)
    x = torch.randn(4, 16) + rank
    name = dist.group.WORLD.group_name

    def with_op(x):
        y = x @ w
        torch.ops.ccl.all_reduce_(y, name, "sum")
        return y + 1

    def with_funcol(x):
        return funcol.all_reduce(x @ w, "sum", dist.group.WORLD) + 1

    eager = with_op(x.clone())
    torch._dynamo.reset()
    compiled_op = torch.compile(with_op, fullgraph=True, backend=backend)(x.clone())
    compiled_funcol = torch.compile(with_funcol, fullgraph=True, backend=backend)(x.clone())
    return bool(torch.allclose(compiled_op, eager, atol=1e-5)), bool(torch.allclose(compiled_funcol, eager, atol=1e-5))


def explain_counts_no_break(rank, size):
    """torch._dynamo.explain: how many graphs and breaks a function with the op makes (one graph, no break)."""
    name = dist.group.WORLD.group_name

    def f(x):
        y = x * 2
        torch.ops.ccl.all_reduce_(y, name)
        return y - 1

    explanation = torch._dynamo.explain(f)(torch.ones(8))
    return explanation.graph_count, explanation.graph_break_count


def bad_input(rank, size):
    """What each bad call raises, as (type name, message): every rank sees the same."""
    name = dist.group.WORLD.group_name
    cases = {
        "op": lambda: torch.ops.ccl.all_reduce_(torch.ones(4), name, "median"),
        "group": lambda: torch.ops.ccl.all_reduce_(torch.ones(4), "no-such-group"),
        "avg of ints": lambda: torch.ops.ccl.all_reduce_(torch.ones(4, dtype=torch.int32), name, "avg"),
        "gather size": lambda: torch.ops.ccl.all_gather_into_tensor_(torch.empty(3), torch.ones(2), name),
    }
    out = {}
    for case, call in cases.items():
        try:
            call()
            out[case] = None
        except Exception as e:  # noqa: BLE001
            out[case] = (type(e).__name__, str(e).splitlines()[0])
    t = torch.full((8,), float(rank))  # the group still works after them
    torch.ops.ccl.all_reduce_(t, name)
    out["after"] = t[0].item()
    return out


def missing_peer(rank, size):
    """A group with a 3 s timeout; rank 1 never calls the op. Rank 0's call must raise within the timeout."""
    group = dist.new_group(backend="ccl", timeout=datetime.timedelta(seconds=3))
    dist.barrier()
    if rank == 1:
        time.sleep(8)
        return None
    start = time.perf_counter()
    try:
        torch.ops.ccl.all_reduce_(torch.ones(1024), group.group_name)
        return ("returned", time.perf_counter() - start)
    except Exception as e:  # noqa: BLE001
        return (type(e).__name__, time.perf_counter() - start, str(e).splitlines()[0])


def deepspeed_inference_all_reduce(rank, size):
    """DeepSpeed on the ccl group: its inference_all_reduce (what AutoTP's layers call) in fp32 and bf16, under
    torch's profiler. Returns the sums and whether the profile shows our registered op."""
    import os

    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed
    import deepspeed.comm as ds_dist
    from torch.profiler import ProfilerActivity, profile

    deepspeed.init_distributed(dist_backend="ccl", dist_init_required=False)
    sums = []
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for dtype in (torch.float32, torch.bfloat16):
            t = torch.full((1000,), float(rank + 1), dtype=dtype)
            ds_dist.inference_all_reduce(t)
            sums.append(t[0].item())
    names = {e.key for e in prof.key_averages()}
    # the way AutoTP also calls it: on a group of its own, another reduction, a group of one rank
    from deepspeed.comm import ReduceOp

    pair = dist.new_group([0, 1], backend="ccl")
    t = torch.full((10,), float(rank + 1))
    ds_dist.inference_all_reduce(t, op=ReduceOp.AVG, group=pair)
    sums.append(t[0].item())
    t = torch.full((10,), float(rank + 1))
    ds_dist.inference_all_reduce(t, op=ReduceOp.MAX)
    sums.append(t[0].item())
    alone, _ = dist.new_subgroups(group_size=1, backend="ccl")
    t = torch.full((10,), float(rank + 1))
    ds_dist.inference_all_reduce(t, group=alone)
    sums.append(t[0].item())
    return sums, "ccl::all_reduce_" in names


def flight_recorder_entries(rank, size):
    """torch 2.15's flight recorder, which it attaches to every group: three ops through torch.ops.ccl. Returns the
    states of the recorder's all_reduce entries."""
    import pickle

    name = dist.group.WORLD.group_name
    for _ in range(3):
        torch.ops.ccl.all_reduce_(torch.ones(64), name)
    dump = pickle.loads(torch._C._distributed_c10d._dump_fr_trace(backend="ccl"))
    return [e.get("state") for e in dump.get("entries", []) if str(e.get("profiling_name", "")).endswith(":all_reduce")]
