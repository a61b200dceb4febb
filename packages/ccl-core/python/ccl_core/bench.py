"""python -m ccl_core.bench: ccl-core's collectives on one host across rank counts, sizes and dtypes, without torch.

    python -m ccl_core.bench --ranks 2,4,8,16 --pin                 # one rank per core, the scaling tables
    python -m ccl_core.bench --ranks 2 --cores-per-rank 8 --pin     # 2 ranks owning 8 cores each
    python -m ccl_core.bench --ranks 8 --sizes 64K --flat --gloo    # beside oneCCL's own algorithms and torch's gloo

Each rank is a process of its own (pinned with --pin to --cores-per-rank cores of its own, in order); each case is
timed with a barrier before every iteration, and a row reports the median, p10 and p90 over iterations of the slowest
rank's time. Every result is checked (a wrong one fails the run). The barrier releases ranks microseconds apart and
every such row carries that skew (the floor row shows it); --back-to-back adds rows timed as nccl-tests and
DeepSpeed's benchmarks time them: calls one after another, the mean per call over a block, the slowest rank's, five
blocks. --floor adds, per rank count and size, what the
memory gives: every rank streaming its buffer once in place at the same time (`x *= 1`, with torch and as many
threads as the rank owns when torch is importable, else NumPy on one thread). --registered adds the ops on arrays in
the group's registered memory (Communicator.allocate). --flat adds the same ops with CCL_CORE_SHM=0 (oneCCL's own
algorithms); --gloo adds torch's gloo (unpinned: pinned to one core its own threads queue behind the rank).
docs/performance.md ("Scaling on one host") holds what it measured, with the machine it ran on.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time

import numpy as np

OPS = ("allreduce", "allgather", "reduce_scatter")
BF16_ONE = 0x3F80  # bfloat16 bits of 1.0


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def human(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def iterations(nbytes: int) -> int:
    return 2000 if nbytes <= 4 << 10 else 500 if nbytes <= 256 << 10 else 100 if nbytes <= 4 << 20 else 20


def bf16(value: float) -> int:
    """bfloat16 bits of a small whole number (exact)."""
    return int(np.array([value], np.float32).view(np.uint32)[0] >> 16)


# ---- one rank ---------------------------------------------------------------------------------------------------

def _cores(rank: int, per_rank: int) -> set[int]:
    return set(range(rank * per_rank, (rank + 1) * per_rank))


def _arrays(comm, op: str, nbytes: int, dtype: str, registered: bool):
    """(send, recv) for `op` moving `nbytes` per rank (allreduce: the buffer, allgather: each rank's input,
    reduce_scatter: each rank's output), filled so that the result is known."""
    size = comm.size
    item = 2 if dtype == "bfloat16" else 4
    n = nbytes // item
    send_n, recv_n = {"allreduce": (n, n), "allgather": (n, n * size), "reduce_scatter": (n * size, n)}[op]
    np_dtype = np.uint16 if dtype == "bfloat16" else np.float32

    def make(count):
        if registered:  # NumPy has no bfloat16: its bits live in uint16, the op names the dtype
            return comm.allocate(count, "uint16" if dtype == "bfloat16" else dtype)
        return np.empty(count, np_dtype)

    send = make(send_n)
    recv = send if op == "allreduce" else make(recv_n)
    return send, recv


def _fill(send, dtype: str, rank: int):
    send[:] = bf16(rank + 1) if dtype == "bfloat16" else rank + 1


def _check(op: str, recv, dtype: str, size: int, rank: int) -> str:
    if op in ("allreduce", "reduce_scatter"):
        want = size * (size + 1) // 2
        ok = np.all(recv == (bf16(want) if dtype == "bfloat16" else want))
    else:  # allgather: block r holds rank r's value
        blocks = recv.reshape(size, -1)
        ok = all(np.all(blocks[r] == (bf16(r + 1) if dtype == "bfloat16" else r + 1)) for r in range(size))
    return "ok" if ok else f"WRONG on rank {rank}"


def _run_op(comm, op: str, send, recv, dtype: str):
    if op == "allreduce":
        comm.allreduce(send, recv, dtype=dtype)
    elif op == "allgather":
        comm.allgather(send, recv, dtype=dtype)
    else:
        comm.reduce_scatter(send, recv, dtype=dtype)


def _slowest(comm, times: np.ndarray) -> np.ndarray:
    everyone = np.empty(times.size * comm.size, np.float64)
    comm.allgather(times, everyone)
    return everyone.reshape(comm.size, -1).max(axis=0)


def _summary(per_iteration: np.ndarray) -> dict:
    us = per_iteration * 1e6
    return {"median_us": float(np.median(us)), "p10_us": float(np.percentile(us, 10)),
            "p90_us": float(np.percentile(us, 90))}


def _floor(comm, nbytes: int, threads: int) -> dict:
    """Every rank streams `nbytes` once in place at the same time: what the memory gives these ranks."""
    try:
        import torch

        torch.set_num_threads(threads)
        x = torch.ones(nbytes // 4)
        step = lambda: x.mul_(1)  # noqa: E731
    except ImportError:
        a = np.ones(nbytes // 4, np.float32)
        step = lambda: np.multiply(a, 1, out=a)  # noqa: E731
    for _ in range(2):
        step()
    times = np.empty(iterations(nbytes))
    for i in range(times.size):
        comm.barrier()
        t0 = time.perf_counter()
        step()
        times[i] = time.perf_counter() - t0
    return _summary(_slowest(comm, times))


def _back_to_back(comm, op, send, recv, dtype, calls: int) -> np.ndarray:
    """Seconds per call over five blocks of calls issued one after another (a barrier before each block only)."""
    per_block = max(1, calls // 5)
    blocks = np.empty(5)
    for b in range(blocks.size):
        comm.barrier()
        t0 = time.perf_counter()
        for _ in range(per_block):
            _run_op(comm, op, send, recv, dtype)
        blocks[b] = (time.perf_counter() - t0) / per_block
    return blocks


def _rank(rank: int, size: int, store_dir: str, config: dict, queue) -> None:
    try:
        if config["pin"]:
            os.sched_setaffinity(0, _cores(rank, config["cores_per_rank"]))
        import ccl_core

        comm = ccl_core.Communicator(ccl_core.FileStore(store_dir), rank, size, timeout=120.0)
        rows = []
        for op in config["ops"]:
            for registered in (False, True) if config["registered"] else (False,):
                for dtype in config["dtypes"]:
                    for nbytes in config["sizes"]:
                        send, recv = _arrays(comm, op, nbytes, dtype, registered)
                        _fill(send, dtype, rank)
                        for _ in range(3):
                            _run_op(comm, op, send, recv, dtype)
                            _fill(send, dtype, rank)
                        times = np.empty(iterations(nbytes))
                        for i in range(times.size):
                            comm.barrier()
                            t0 = time.perf_counter()
                            _run_op(comm, op, send, recv, dtype)
                            times[i] = time.perf_counter() - t0
                            if op == "allreduce":
                                _fill(send, dtype, rank)  # in place: the next iteration reduces fresh inputs
                        name = op + (" registered" if registered else "")
                        # in place, sums grow (to inf at worst): the check below, after a refill, covers these calls
                        chained = (_back_to_back(comm, op, send, recv, dtype, times.size)
                                   if config.get("back_to_back") else None)
                        _fill(send, dtype, rank)
                        _run_op(comm, op, send, recv, dtype)
                        check = _check(op, recv, dtype, size, rank)
                        row = {"op": name, "dtype": dtype, "bytes": nbytes,
                               "ranks": size, "path": config["path"], "check": check, **_summary(_slowest(comm, times))}
                        rows.append(row)
                        if chained is not None:
                            rows.append({**row, "op": name + " back-to-back", **_summary(_slowest(comm, chained))})
        if config["floor"]:
            for nbytes in config["sizes"]:
                rows.append({"op": "floor", "dtype": "float32", "bytes": nbytes, "ranks": size, "path": "memory",
                             "check": "ok", **_floor(comm, nbytes, config["cores_per_rank"])})
        queue.put((rank, rows if rank == 0 else None, None))
    except BaseException as e:  # report it; the parent fails the run
        queue.put((rank, None, f"{type(e).__name__}: {e}"))


def _gloo_rank(rank: int, size: int, store_dir: str, config: dict, queue) -> None:
    try:
        import datetime

        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"file://{store_dir}/gloo", rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=120))
        rows = []
        for nbytes in config["sizes"]:
            x = torch.ones(nbytes // 4)
            for _ in range(3):
                dist.all_reduce(x)
            times = np.empty(max(10, iterations(nbytes) // 10))
            for i in range(times.size):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(x)
                times[i] = time.perf_counter() - t0
            everyone = [torch.zeros(times.size, dtype=torch.float64) for _ in range(size)]
            dist.all_gather(everyone, torch.from_numpy(times))
            slowest = torch.stack(everyone).max(dim=0).values.numpy()
            rows.append({"op": "allreduce", "dtype": "float32", "bytes": nbytes, "ranks": size, "path": "gloo",
                         "check": "ok", **_summary(slowest)})
        dist.destroy_process_group()
        queue.put((rank, rows if rank == 0 else None, None))
    except BaseException as e:
        queue.put((rank, None, f"{type(e).__name__}: {e}"))


# ---- the run ----------------------------------------------------------------------------------------------------

def _launch(target, size: int, config: dict, env: dict) -> list[dict]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with tempfile.TemporaryDirectory(prefix="ccl-core-bench-") as store_dir:
            procs = [ctx.Process(target=target, args=(r, size, store_dir, config, queue)) for r in range(size)]
            for p in procs:
                p.start()
            rows, errors = [], []
            for _ in range(size):
                rank, got, error = queue.get(timeout=1800)
                if error:
                    errors.append(f"rank {rank}: {error}")
                if got:
                    rows = got
            for p in procs:
                p.join(timeout=60)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if errors:
        raise SystemExit("ccl_core.bench: " + "; ".join(errors))
    return rows


def table(rows: list[dict]) -> str:
    ranks = sorted({r["ranks"] for r in rows})
    keys = []
    for r in rows:
        key = (r["op"], r["path"], r["dtype"], r["bytes"])
        if key not in keys:
            keys.append(key)
    head = f"{'op':<34}{'path':<9}{'dtype':<9}{'size':>8}" + "".join(f"{'P=' + str(p):>22}" for p in ranks)
    lines = [head, "-" * len(head)]
    for op, path, dtype, nbytes in keys:
        cells = []
        for p in ranks:
            match = [r for r in rows if (r["op"], r["path"], r["dtype"], r["bytes"], r["ranks"]) ==
                     (op, path, dtype, nbytes, p)]
            cells.append(f"{match[0]['median_us']:.1f} ({match[0]['p10_us']:.0f}-{match[0]['p90_us']:.0f})"
                         if match else "-")
        lines.append(f"{op:<34}{path:<9}{dtype:<9}{human(nbytes):>8}" + "".join(f"{c:>22}" for c in cells))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ccl_core.bench", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--ranks", default="2", help="rank counts, comma-separated (default 2)")
    parser.add_argument("--sizes", default="1K,64K,1M,64M", help="bytes per rank, comma-separated")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--ops", default="allreduce", help=f"any of {', '.join(OPS)}")
    parser.add_argument("--pin", action="store_true", help="pin each rank to cores of its own")
    parser.add_argument("--cores-per-rank", type=int, default=1)
    parser.add_argument("--floor", action="store_true")
    parser.add_argument("--registered", action="store_true")
    parser.add_argument("--back-to-back", action="store_true",
                        help="also time calls one after another, without a barrier between them")
    parser.add_argument("--flat", action="store_true", help="also with CCL_CORE_SHM=0 (oneCCL's own algorithms)")
    parser.add_argument("--gloo", action="store_true", help="also torch's gloo (allreduce, float32, unpinned)")
    parser.add_argument("--json", help="write every row and the machine's description here")
    args = parser.parse_args(argv)
    ops = args.ops.split(",")
    bad = [o for o in ops if o not in OPS]
    if bad:
        parser.error(f"unknown op(s) {bad}; use {', '.join(OPS)}")
    config = {"sizes": [parse_size(s) for s in args.sizes.split(",")], "dtypes": args.dtypes.split(","), "ops": ops,
              "pin": args.pin, "cores_per_rank": args.cores_per_rank, "floor": args.floor,
              "registered": args.registered, "back_to_back": args.back_to_back}
    rows = []
    for size in (int(p) for p in args.ranks.split(",")):
        if args.pin and size * args.cores_per_rank > len(os.sched_getaffinity(0)):
            print(f"ccl_core.bench: P={size} x {args.cores_per_rank} cores needs more cores than this process may "
                  f"use ({len(os.sched_getaffinity(0))}); skipped", file=sys.stderr)
            continue
        rows += _launch(_rank, size, {**config, "path": "ccl"}, {})
        if args.flat:
            rows += _launch(_rank, size, {**config, "path": "flat", "floor": False, "registered": False},
                            {"CCL_CORE_SHM": "0"})
        if args.gloo:
            rows += _launch(_gloo_rank, size, config, {})
        print(f"ccl_core.bench: P={size} done", file=sys.stderr, flush=True)
    print(table(rows))
    machine = {"cpus": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)), "machine": platform.machine(),
               "processor": _cpu_model(), "python": platform.python_version()}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "args": vars(args), "rows": rows}, f, indent=2)
    wrong = [r for r in rows if r["check"] != "ok"]
    for r in wrong:
        print(f"ccl_core.bench: {r['op']} {r['dtype']} {human(r['bytes'])} P={r['ranks']} ({r['path']}): {r['check']}",
              file=sys.stderr)
    return 1 if wrong else 0


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
