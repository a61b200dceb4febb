"""ccl-bench: time collectives on the ccl backend, gloo and raw ccl-core in one run, check every result.

    ccl-bench -n 2                                   # starts 2 local ranks itself
    torchrun --nproc-per-node 2 -m ccl_bench ...     # or under torchrun / mpiexec
    ccl-bench -n 2 --ops all_reduce -b 1K -e 64M --floor --csv r.csv --json r.json --plot r.png

Each iteration is timed on every rank; a row reports the median / p10 / p90 over iterations of the slowest
rank's time. --floor adds three rows per case, measured right before it (this VM has slow phases): "floor", every
rank streaming through its message once in place (x.mul_(1)); "copy", every rank copying its message into another
buffer (what all_gather and reduce_scatter on registered memory move at least); and "fake", the op on torch's fake
process group, which moves nothing (torch's own dispatch cost); each row gets its ratio to the floor. --registered
adds "ccl-registered" rows: the same ops on tensors from the group's registered memory (allocate_tensor). A wrong result makes the
run exit with status 1. --overlap adds a row per case: the op issued with async_op=True, then matrix products
for twice its blocking time, then wait(); "wait" is what is left, "hidden" the share of the op that overlapped.
--late-peer S measures what waiting costs instead: the last rank arrives S seconds late at a barrier, an
all_reduce and a future-driven all_reduce, and the others report the CPU seconds their process spent meanwhile
(on the shared-memory path, on oneCCL, and on gloo for reference, each in processes of its own; --rounds times
each). Under a launcher it measures the one path CCL_BENCH_LATE_PEER_PATH names (default: the shared-memory path).
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import subprocess
import sys
import time

OPS_HELP = "all_reduce, all_gather, reduce_scatter, all_to_all, broadcast"


def _scaled(t: str, unit: int) -> int:
    """A number with an optional suffix K, M or G: unit, unit ** 2, unit ** 3 times it."""
    mult = {"K": unit, "M": unit**2, "G": unit**3}.get(t[-1:], 1)
    return int(float(t[:-1] if t[-1:] in "KMG" else t) * mult)


def parse_size(text: str) -> int:
    """Bytes with a binary suffix: 64K, 64KB and 64KiB are 65536."""
    return _scaled(text.strip().upper().removesuffix("B").removesuffix("I"), 1 << 10)


def parse_count(text: str) -> int:
    """A count with an optional decimal suffix: 50M = 50,000,000."""
    return _scaled(text.strip().upper(), 1000)


def sizes(lo: int, hi: int) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= 2
    return out


def default_iters(nbytes: int) -> int:
    if nbytes <= 64 << 10:
        return 200
    if nbytes <= 1 << 20:
        return 100
    if nbytes <= 16 << 20:
        return 20
    return 10


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ccl-bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--nproc", type=int, default=2, help="ranks to start when not under a launcher (default 2)")
    p.add_argument("--ops", default="all_reduce,all_gather,reduce_scatter,all_to_all,broadcast", help=OPS_HELP)
    p.add_argument("--backends", default=None,
                   help="default ccl,gloo,raw (with --tp-decode: every path that runs here); "
                        "any of ccl, gloo, raw (ccl-core without torch), ccl-flat (ccl with CCL_CORE_HIERARCHY=0: "
                        "oneCCL's flat algorithms across hosts), ccl-nofr (ccl without torch's flight recorder, which "
                        "torch 2.15 attaches to every group), deepspeed and deepspeed-inference (DeepSpeed's "
                        "own oneCCL op: its all_reduce and inference_all_reduce; with --ops all_reduce); ccl-op, "
                        "ccl-funcol and ccl-async call the ccl group through the registered op torch.ops.ccl, "
                        "torch's functional collectives, or async_op=True with an immediate wait() (all_reduce and "
                        "all_gather)")
    # not --min/--max: torchrun would take --max for an abbreviation of its --max-restarts
    p.add_argument("-b", "--min-bytes", dest="min_size", default="1K", help="smallest message (default 1K)")
    p.add_argument("-e", "--max-bytes", dest="max_size", default="64M", help="largest message (default 64M)")
    p.add_argument("--dtype", default="float32", help="float32 (default), float64, float16, bfloat16, int32")
    p.add_argument("--iters", type=int, default=0, help="timed iterations per case (default: by size)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--floor", action="store_true",
                   help="also measure the in-place memory floor, the copy floor and torch's dispatch floor per case, "
                        "and show ratios")
    p.add_argument("--registered", action="store_true",
                   help="also run every case on tensors from the group's registered memory (backend 'ccl-registered': "
                        "allocate_tensor, as FSDP2 asks for with set_allocate_memory_from_process_group_for_comm)")
    p.add_argument("--ddp", action="store_true", help="also time a DDP training step of a small MLP per backend")
    p.add_argument("--fsdp", action="store_true",
                   help="also time an FSDP2 (fully_shard) training step per backend, with its default prefetching")
    p.add_argument("--train-params", default="", metavar="N",
                   help="with --ddp/--fsdp: train an MLP of about N parameters (e.g. 50M: 2048-wide layers) instead "
                        "of the small default, where communication matters; every backend trains it from the same "
                        "start on the same data, and the rows fail unless their losses agree")
    p.add_argument("--overlap", action="store_true",
                   help="also issue each case async, compute for twice its time, then wait: rows '<op> overlap' give "
                        "the wait left after the computation and the share of the op hidden behind it")
    p.add_argument("--overlap-ms", type=float, default=0.0,
                   help="with --overlap: compute for this long instead of twice the op's time")
    p.add_argument("--tp-decode", action="store_true",
                   help="only time greedy decoding of a Llama-shaped stack (random weights) split by tensor parallelism "
                        "with parallelize_module, per path: ccl, ccl-op (the registered ops), gloo, deepspeed-inference "
                        "(on the split's plain shards), dtensor-ccl, dtensor-gloo (the DTensor model itself); "
                        "--backends picks (default: all that run here); each against the compute alone; "
                        "--dtype, and the model options below")
    p.add_argument("--hidden", type=int, default=512, help="with --tp-decode: hidden size (default 512)")
    p.add_argument("--layers", type=int, default=8, help="with --tp-decode: blocks (default 8)")
    p.add_argument("--ffn", type=int, default=0, help="with --tp-decode: MLP width (default ~8/3 hidden, Llama's)")
    p.add_argument("--head-dim", type=int, default=64, help="with --tp-decode: attention head size (default 64)")
    p.add_argument("--vocab", type=int, default=4096, help="with --tp-decode: vocabulary (default 4096)")
    p.add_argument("--batch", type=int, default=1, help="with --tp-decode: sequences decoded at once (default 1)")
    p.add_argument("--tokens", type=int, default=32, help="with --tp-decode: tokens generated per round (default 32)")
    p.add_argument("--late-peer", type=float, default=0.0, metavar="S",
                   help="only measure the CPU seconds ranks spend while the last rank is S seconds late")
    p.add_argument("--rounds", type=int, default=3, help="with --late-peer or --tp-decode: rounds per case (default 3)")
    p.add_argument("--csv")
    p.add_argument("--json")
    p.add_argument("--plot", help="PNG file: time and bus bandwidth vs size (needs matplotlib)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.plot and importlib.util.find_spec("matplotlib") is None:  # said before the run, not after it
        raise SystemExit("ccl-bench: --plot needs matplotlib (not installed); pip install matplotlib")
    from ccl_core import detect_launch

    if detect_launch() is None:
        argv = sys.argv[1:] if argv is None else argv
        return _spawn_late_peer(args, argv) if args.late_peer > 0 else spawn(args, argv)
    return worker(args)


def spawn(args, argv, extra_env: dict | None = None) -> int:
    from ccl_core import free_port

    port = str(free_port())
    # as torchrun does: share the cores among the ranks instead of oversubscribing them with intra-op threads
    threads = str(max(1, (os.cpu_count() or 1) // args.nproc))
    procs = []
    for rank in range(args.nproc):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.nproc), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port, **(extra_env or {}))
        env.setdefault("OMP_NUM_THREADS", threads)
        procs.append(subprocess.Popen([sys.executable, "-m", "ccl_bench", *argv], env=env))
    codes = [p.wait() for p in procs]
    return next((c for c in codes if c != 0), 0)


def worker(args) -> int:
    import torch
    import torch.distributed as dist

    from . import deepspeed_op, report, runners, stats
    from .floor import copy_us, fake_group, floor_us

    if args.dtype not in runners.DTYPES:
        raise SystemExit(f"ccl-bench: unknown dtype {args.dtype!r}; choose from {', '.join(runners.DTYPES)}")
    if args.tp_decode:
        return _tp_decode(args, runners.DTYPES[args.dtype])
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    backends = [b.strip() for b in (args.backends or "ccl,gloo,raw").split(",") if b.strip()]
    for o in ops:
        if o not in runners.OPS:
            raise SystemExit(f"ccl-bench: unknown op {o!r}; choose from {OPS_HELP}")
    if args.registered and "ccl-registered" not in backends:
        backends.insert(backends.index("ccl") + 1 if "ccl" in backends else 0, "ccl-registered")
    known = ("ccl", "gloo", "raw", "ccl-flat", "ccl-nofr", "ccl-registered") + runners.CALL_STYLES + deepspeed_op.BACKENDS
    for b in backends:
        if b not in known:
            raise SystemExit(f"ccl-bench: unknown backend {b!r}; choose from {', '.join(known)}")
        if b in deepspeed_op.BACKENDS and ops != ["all_reduce"]:
            raise SystemExit(f"ccl-bench: backend {b!r} has all_reduce only: add --ops all_reduce")
        if b in runners.CALL_STYLES and not set(ops) <= {"all_reduce", "all_gather"}:
            raise SystemExit(f"ccl-bench: backend {b!r} has all_reduce and all_gather only: add --ops all_reduce,all_gather")
    dtype = runners.DTYPES[args.dtype]
    if args.late_peer > 0:
        return _late_peer(args.late_peer, args.rounds, args.json)

    # gloo always: it carries the bench's own barriers and result gathering, never timed
    dist.init_process_group("ccl" if "ccl" in backends else "gloo", timeout=datetime.timedelta(minutes=10))
    rank, size = dist.get_rank(), dist.get_world_size()
    control = dist.new_group(backend="gloo")
    groups = {"ccl": dist.group.WORLD, "gloo": dist.new_group(backend="gloo") if "gloo" in backends else None,
              "fake": fake_group() if args.floor else None}
    if "ccl-flat" in backends:
        groups["ccl-flat"] = flat_ccl_group()
    if "ccl-registered" in backends:
        groups["ccl-registered"] = dist.group.WORLD
    for style in runners.CALL_STYLES:
        groups[style] = dist.group.WORLD
    if "ccl-nofr" in backends:
        groups["ccl-nofr"] = _ccl_group_where(TORCH_FR_BUFFER_SIZE="0")
    comm = _raw_communicator(rank, size) if "raw" in backends else None
    ds_op = deepspeed_op.build(rank, size) if set(backends) & set(deepspeed_op.BACKENDS) else None
    fault = os.environ.get("CCL_BENCH_FAULT", "") == str(rank)

    def barrier():
        dist.barrier(group=control)

    def slowest(samples: list[float]) -> list[float]:
        t = torch.tensor(samples, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=control)
        return t.tolist()

    def progress(text: str) -> None:
        if rank == 0 and not args.quiet:
            print(f"[ccl-bench] {text}", file=sys.stderr, flush=True)

    sweep = sizes(parse_size(args.min_size), parse_size(args.max_size))
    total = len(ops) * len(sweep) * len(backends)
    rows, failures, done = [], 0, 0
    floors: dict[tuple[str, int], float] = {}

    def timed(run, iters: int) -> dict:
        return _timed(run, max(1, args.warmup), iters, barrier, slowest)

    for op in ops:
        for nbytes in sweep:
            iters = args.iters or default_iters(nbytes)
            if args.floor:  # next to the case it bounds, so that both see the same phase of the machine
                summary = stats.summarize(slowest(floor_us(nbytes, iters, barrier)))
                floors[(op, nbytes)] = summary["median_us"]
                rows.append({"op": op, "bytes": nbytes, "backend": "floor", "ranks": size, **summary,
                             "algbw_GBps": 0.0, "busbw_GBps": 0.0, "check": "-"})
                copied = stats.summarize(slowest(copy_us(nbytes, iters, barrier)))
                rows.append({"op": op, "bytes": nbytes, "backend": "copy", "ranks": size, **copied,
                             "algbw_GBps": 0.0, "busbw_GBps": 0.0, "check": "-"})
                fake = runners.make_case(op, "fake", nbytes, dtype, rank, size, group=groups["fake"])
                rows.append({"op": op, "bytes": nbytes, "backend": "fake", "ranks": size, **timed(fake.run, iters),
                             "algbw_GBps": 0.0, "busbw_GBps": 0.0, "check": "-"})
            for backend in backends:
                done += 1
                progress(f"[{done}/{total}] {op} {report.human(nbytes)} {backend}")
                zeros = runners.registered_zeros(groups[backend]) if backend == "ccl-registered" else None
                case = runners.make_case(op, backend, nbytes, dtype, rank, size, group=groups.get(backend),
                                         comm=ds_op if backend in deepspeed_op.BACKENDS else comm, fault=fault,
                                         zeros=zeros)
                summary = timed(case.run, iters)
                problem = case.check()
                bad = torch.tensor([1 if problem else 0])
                dist.all_reduce(bad, group=control)
                failures += int(bad.item() > 0)
                alg, bus = stats.bandwidths(op, nbytes, size, summary["median_us"])
                rows.append({"op": op, "bytes": nbytes, "backend": backend, "ranks": size, **summary,
                             "algbw_GBps": alg, "busbw_GBps": bus,
                             "check": "ok" if not bad.item() else f"FAIL on {int(bad.item())} rank(s)" + (f": {problem}" if problem else "")})
                if args.overlap and case.start is not None:
                    rows.append(_overlap_row(case, op, nbytes, backend, size, summary["median_us"], iters, barrier,
                                             slowest, args.overlap_ms * 1000))
    params = parse_count(args.train_params) if args.train_params else 0
    if args.ddp:
        rows += _ddp_rows(backends, groups, barrier, slowest, size, params)
    if args.fsdp:
        rows += _fsdp_rows(backends, groups, barrier, slowest, size, params)
    failures += _check_losses_agree(rows)
    comm = None  # destroy the raw communicator now, while torch's store (which its teardown writes to) lives
    _add_ratios(rows, floors)
    if rank == 0:
        import ccl_core

        title = f"{size} ranks, {args.dtype}, torch {torch.__version__}, progress {ccl_core.progress_mode()}"
        print(f"ccl-bench: {title}")
        print(report.table(rows))
        if failures:
            print(f"ccl-bench: {failures} case(s) FAILED their correctness check", file=sys.stderr)
        meta = {"ranks": size, "dtype": args.dtype, "torch": torch.__version__, "argv": sys.argv[1:]}
        if args.csv:
            report.write_csv(rows, args.csv)
        if args.json:
            report.write_json(rows, meta, args.json)
        if args.plot:
            report.plot(rows, args.plot, f"ccl-bench: {title}")
    _finish(barrier, rank, ds_op)
    return 1 if failures else 0


def _finish(barrier, rank: int, ds_op) -> None:
    """The end of a run on every rank: the process group, and DeepSpeed's shared-memory buffers if its op was built."""
    import torch.distributed as dist

    from . import deepspeed_op

    barrier()
    time.sleep(0.2)  # let gloo's threads release their last work while Python is alive (torch gloo race)
    dist.destroy_process_group()
    if ds_op is not None:
        deepspeed_op.remove_buffers(rank)


def _tp_decode(args, dtype) -> int:
    """--tp-decode: tokens/s and communication per token of a tensor-parallel decode, per path (tp_decode.py)."""
    import torch
    import torch.distributed as dist

    from . import deepspeed_op, report, tp_decode

    args.ffn = args.ffn or (args.hidden * 8 // 3 + 255) // 256 * 256
    asked = args.backends.split(",") if args.backends else list(tp_decode.PATHS)
    paths = [p.strip() for p in asked if p.strip() in tp_decode.PATHS]
    if not paths:
        raise SystemExit(f"ccl-bench --tp-decode: choose paths from {', '.join(tp_decode.PATHS)}")
    skipped = ""
    if "deepspeed-inference" in paths and not deepspeed_op.runs_in(dtype):
        paths.remove("deepspeed-inference")
        skipped = f"deepspeed-inference skipped: {deepspeed_op.why_not(dtype)}"
    dist.init_process_group("ccl", timeout=datetime.timedelta(minutes=10))
    rank, size = dist.get_rank(), dist.get_world_size()
    tp_decode.check_split(args, size)
    control = dist.new_group(backend="gloo")
    groups = {p: dist.group.WORLD for p in ["fake", *paths]}
    if {"gloo", "dtensor-gloo"} & set(paths):
        groups["gloo"] = groups["dtensor-gloo"] = dist.new_group(backend="gloo")
    ds_op = deepspeed_op.build(rank, size) if "deepspeed-inference" in paths else None

    def barrier():
        dist.barrier(group=control)

    def slowest(samples):
        t = torch.tensor(samples, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=control)
        return t.tolist()

    rows, same = tp_decode.run(args, dtype, groups, paths, rank, size, barrier, slowest, ds_op)
    if rank == 0:
        print(f"ccl-bench --tp-decode: {size} ranks, {args.dtype}, batch {args.batch}, hidden {args.hidden}, "
              f"{args.layers} layers, ffn {args.ffn}, vocab {args.vocab}, {args.tokens} tokens x {args.rounds} rounds, "
              f"torch {torch.__version__}; communication: time inside the collectives (dtensor: time less fake's)")
        print(tp_decode.table(rows))
        if skipped:
            print(f"ccl-bench: {skipped}")
        if not same:
            print("ccl-bench: the paths produced different tokens", file=sys.stderr)
        if args.json:
            report.write_json(rows, {"ranks": size, "dtype": args.dtype, "torch": torch.__version__,
                                     "argv": sys.argv[1:]}, args.json)
    _finish(barrier, rank, ds_op)
    return 0 if same else 1


def flat_ccl_group():
    """A ccl group of every rank whose ops across hosts take oneCCL's flat algorithms (the switch is read, and agreed
    by every rank, when the group is created)."""
    return _ccl_group_where(CCL_CORE_HIERARCHY="0")


def _ccl_group_where(**variables):
    """A ccl group of every rank, created while the environment has `variables` (read when a group is made: ccl-core's
    switches, torch's TORCH_FR_BUFFER_SIZE)."""
    import torch.distributed as dist

    before = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        return dist.new_group(backend="ccl")
    finally:
        for name, value in before.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


LATE_PEER_PATHS = {"ccl shared memory": ("ccl", "1"), "ccl oneCCL": ("ccl", "0"), "gloo": ("gloo", "")}


def _spawn_late_peer(args, argv) -> int:
    """--late-peer: one set of ranks per path, each with that path's group as its only one, so that no other
    backend's threads (gloo's transport loop costs ~0.04 CPU-s per 10 s idle) count."""
    code = 0
    for path, (backend, shm) in LATE_PEER_PATHS.items():
        env = {"CCL_BENCH_LATE_PEER_PATH": path}
        if shm:
            env["CCL_CORE_SHM"] = shm
        code = code or spawn(args, argv, env)
    return code


def _late_peer(late_s: float, rounds: int, json_path: str | None) -> int:
    """CPU seconds (user + system, the whole process) that the ranks spend waiting while the last one is late_s
    late; min / median / max over rounds of the busiest waiting rank. One path per run (_spawn_late_peer)."""
    import json
    import resource

    import torch
    import torch.distributed as dist

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    path = os.environ.get("CCL_BENCH_LATE_PEER_PATH", "ccl shared memory")
    backend = LATE_PEER_PATHS[path][0]
    dist.init_process_group(backend, timeout=datetime.timedelta(minutes=10))
    rank, size = dist.get_rank(), dist.get_world_size()
    results = []
    for op in ("barrier", "all_reduce", "future"):
        spent = []
        for _ in range(rounds):
            dist.barrier()
            if rank == size - 1:
                time.sleep(late_s)
            start = cpu()
            if op == "barrier":
                dist.barrier()
            elif op == "all_reduce":
                dist.all_reduce(torch.ones(1024))
            else:
                # the backend completes the future; this thread only blocks on it
                dist.all_reduce(torch.ones(1024), async_op=True).get_future().wait()
            mine = torch.tensor([cpu() - start if rank != size - 1 else 0.0], dtype=torch.float64)
            dist.all_reduce(mine, op=dist.ReduceOp.MAX)
            spent.append(mine.item())
        spent.sort()
        results.append({"path": path, "op": op, "late_s": late_s, "rounds": rounds, "ranks": size,
                        "min_cpu_s": spent[0], "median_cpu_s": spent[len(spent) // 2], "max_cpu_s": spent[-1]})
    if rank == 0:
        print(f"ccl-bench: CPU seconds of the waiting ranks while rank {size - 1} is {late_s:g} s late: {path} "
              f"({size} ranks, {rounds} rounds, torch {torch.__version__})")
        print(f"{'path':<20}{'op':<12}{'min':>8}{'median':>8}{'max':>8}")
        for r in results:
            print(f"{r['path']:<20}{r['op']:<12}{r['min_cpu_s']:>8.3f}{r['median_cpu_s']:>8.3f}{r['max_cpu_s']:>8.3f}")
        if json_path:  # one file for all paths: each run appends its rows
            previous = []
            if os.path.exists(json_path) and path != next(iter(LATE_PEER_PATHS)):
                with open(json_path) as f:
                    previous = json.load(f)
            with open(json_path, "w") as f:
                json.dump(previous + results, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def _timed(run, warmup: int, iters: int, barrier, slowest) -> dict:
    """Median / p10 / p90 of the slowest rank's time per call, after `warmup` calls; all ranks start together."""
    from . import stats

    for _ in range(warmup):
        run()
    samples = []
    barrier()
    for _ in range(iters):
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) * 1e6)
    return stats.summarize(slowest(samples))


def _raw_communicator(rank: int, size: int):
    """ccl-core communicator over the same rendezvous store torch uses (keys under a prefix of their own)."""
    import ccl_core
    import torch.distributed as dist

    store = dist.distributed_c10d._get_default_store()

    class TorchStore(ccl_core.Store):
        def set(self, key, value):
            store.set(key, value)

        def get(self, key, timeout):
            if timeout <= 0:  # ccl_core's "answer now" read; torch's wait() cannot express it
                if not store.check([key]):
                    raise ccl_core.CclTimeoutError(key)
                return store.get(key)
            store.wait([key], datetime.timedelta(seconds=timeout))
            return store.get(key)

    return ccl_core.Communicator(ccl_core.PrefixStore("ccl-bench-raw", TorchStore()), rank, size, timeout=600,
                                 name="ccl-bench raw")


# --train-params: layers of this width, as many as make the count
TRAIN_WIDTH = 2048


def _train_layers(params: int, width: int) -> int:
    return max(1, round(params / (width * (width + 1))))


def _mlp(width: int, layers: int):
    import torch.nn as nn

    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(layers)])


def _train_data(rank: int, inputs: int, outputs: int, batch: int):
    """This rank's batch, the same for every backend."""
    import torch

    g = torch.Generator().manual_seed(1 + rank)
    return torch.randn(batch, inputs, generator=g), torch.randn(batch, outputs, generator=g)


def _ddp_rows(backends, groups, barrier, slowest, size, params=0) -> list[dict]:
    """A DDP step of a small MLP, or with `params` of an MLP of about that many parameters."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    rows = []
    trained = [b for b in backends if b in ("ccl", "gloo")]
    for backend in trained:
        torch.manual_seed(0)
        if params:
            net = _mlp(TRAIN_WIDTH, _train_layers(params, TRAIN_WIDTH))
            (x, y), warmup, iters = _train_data(dist.get_rank(), TRAIN_WIDTH, TRAIN_WIDTH, 8), 2, 5
        else:
            net = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
            (x, y), warmup, iters = _train_data(dist.get_rank(), 256, 10, 64), 5, 30
        model = DDP(net, process_group=groups[backend])
        if os.environ.get("CCL_BENCH_FAULT") and backend == trained[-1]:
            # prove that the loss check fails a run: this backend's gradients are summed, not averaged
            def summed(_, bucket, group=groups[backend]):
                work = dist.all_reduce(bucket.buffer(), group=group, async_op=True)
                return work.get_future().then(lambda f: f.value()[0])

            model.register_comm_hook(None, summed)
        nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
        rows.append(_step_row("ddp_step", backend, model, x, y, nbytes, warmup, iters, barrier, slowest, size,
                              groups[backend]))
    return rows


def _fsdp_rows(backends, groups, barrier, slowest, size, params=0) -> list[dict]:
    """An FSDP2 step of 8 sharded 1024x1024 layers (4 MiB of float32 parameters each), or with `params` of as many
    2048-wide layers as make that count, with FSDP2's defaults (on CPU its all-gathers are blocking: it overlaps them
    through CUDA streams); "ccl-registered" turns on set_allocate_memory_from_process_group_for_comm."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    rows = []
    for backend in [b for b in backends if b in ("ccl", "gloo", "ccl-registered")]:
        torch.manual_seed(0)
        mesh = DeviceMesh.from_group(groups[backend], "cpu")
        w, layers = (TRAIN_WIDTH, _train_layers(params, TRAIN_WIDTH)) if params else (1024, 8)
        x, y = _train_data(dist.get_rank(), w, w, 8 if params else 64)
        warmup, iters = (2, 5) if params else (3, 10)
        model = _mlp(w, layers)
        for layer in model:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        if backend == "ccl-registered":  # FSDP2's all-gather and reduce-scatter buffers from the group
            for module in model.modules():  # each FSDP module sets it for its own parameter group
                if hasattr(module, "set_allocate_memory_from_process_group_for_comm"):
                    module.set_allocate_memory_from_process_group_for_comm(True)
        nbytes = sum(p.numel() * p.element_size() for p in model.parameters())  # unsharded: a DTensor's numel is global
        rows.append(_step_row("fsdp2_step", backend, model, x, y, nbytes, warmup, iters, barrier, slowest, size,
                              groups[backend]))
    return rows


def _step_row(op, backend, model, x, y, nbytes, warmup, iters, barrier, slowest, size, group) -> dict:
    """A training step (SGD on an MSE loss) of `model`, timed like a collective; "loss": the last step's, averaged
    over the ranks (in `group`), for _check_losses_agree."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []

    def step():
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())

    timing = _timed(step, warmup, iters, barrier, slowest)
    mean = losses[-1].clone()
    dist.all_reduce(mean, group=group)
    return {"op": op, "bytes": nbytes, "backend": backend, "ranks": size, **timing, "algbw_GBps": 0.0,
            "busbw_GBps": 0.0, "check": "ok", "loss": mean.item() / size}


def _check_losses_agree(rows: list[dict]) -> int:
    """Training rows of one kind trained the same model on the same data with every backend: their last losses must
    agree up to the reductions' rounding. Marks the rows that do not (on every rank alike) and counts them."""
    bad = 0
    for op in ("ddp_step", "fsdp2_step"):
        trained = [r for r in rows if r["op"] == op]
        for r in trained[1:]:
            first = trained[0]
            if abs(r["loss"] - first["loss"]) > 1e-4 * abs(first["loss"]) + 1e-7:
                r["check"] = f"DIFFER: loss {r['loss']:.6g}, {first['backend']} {first['loss']:.6g}"
                bad += 1
    return bad


def _overlap_row(case, op, nbytes, backend, size, alone_us, iters, barrier, slowest, compute_us=0.0) -> dict:
    """The op issued async, then computation (twice its blocking time unless given), then wait(): what is left."""
    import torch

    from . import stats

    compute_us = compute_us or max(200.0, 2 * alone_us)
    a = torch.randn(64, 64)
    waits = []
    for _ in range(max(3, iters // 2) if compute_us < 100_000 else 3):
        barrier()
        handle = case.start()
        end = time.perf_counter() + compute_us / 1e6
        while time.perf_counter() < end:  # compute: the caller never calls into the backend meanwhile
            torch.mm(a, a)
        start = time.perf_counter()
        handle.wait()
        waits.append((time.perf_counter() - start) * 1e6)
    summary = stats.summarize(slowest(waits))
    hidden = max(0.0, min(1.0, 1 - summary["median_us"] / alone_us)) if alone_us > 0 else 0.0
    return {"op": f"{op} overlap", "bytes": nbytes, "backend": backend, "ranks": size, **summary,
            "algbw_GBps": 0.0, "busbw_GBps": 0.0, "compute_us": compute_us, "hidden_pct": round(100 * hidden, 1),
            "check": f"{100 * hidden:.0f}% hidden"}


def _add_ratios(rows: list[dict], floors: dict[tuple[str, int], float]) -> None:
    gloo = {(r["op"], r["bytes"]): r["median_us"] for r in rows if r["backend"] == "gloo"}
    for r in rows:
        key = (r["op"], r["bytes"])
        if r["backend"] in ("ccl", "raw") and key in gloo and not r["op"].endswith("overlap"):
            r["x_gloo"] = gloo[key] / r["median_us"]
        if r["backend"] != "floor" and key in floors:  # overlap rows have keys of their own
            r["x_floor"] = r["median_us"] / floors[key]


if __name__ == "__main__":
    sys.exit(main())
