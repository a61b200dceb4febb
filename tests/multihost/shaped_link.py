"""The rate-limited test bed: netns hosts (two on a veth pair, more on a bridge) whose links are shaped with tc's token
bucket, the link's rate measured with one TCP stream, then ccl-bench under torchrun on every host (ccl, ccl-flat =
oneCCL's flat algorithms, gloo), each op beside its link limit: the bytes the busiest host's link must carry one way,
divided by the measured rate.

    python tests/multihost/shaped_link.py --rate 2500mbit --ops all_reduce -b 16M -e 64M --dtype float32 --rounds 3
    python tests/multihost/shaped_link.py --hosts 4 --nproc 2 ...      # 4 hosts x 2 ranks
    python tests/multihost/shaped_link.py --nproc 1,3 ...              # 2 hosts of 1 and 3 ranks

Needs root (network namespaces). Prints a table; --json keeps every round's rows."""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import netns_hosts  # noqa: E402
from ranks import clean_env  # noqa: E402

def crossing(op: str, ranks_per_host: list[int]) -> float:
    """The share of an op's message (ccl-bench's size: all_reduce's and broadcast's buffer, all_gather's output,
    reduce_scatter's input) that the busiest host's link must carry one way. all_gather and reduce_scatter: a host
    receives (sends) every block its ranks do not hold, 1 - (its ranks / all ranks). all_reduce: a reduce_scatter and
    an all_gather between hosts, each of (H - 1) / H (H hosts of equal ranks: 2 (H - 1) / H; 1.0 for two hosts).
    broadcast: the whole buffer into every other host. Training steps (--train-params; their size is the model's
    parameter bytes): DDP all-reduces the gradients once; FSDP2 all-gathers the parameters in the forward and again
    in the backward pass and reduce-scatters the gradients."""
    hosts, ranks = len(ranks_per_host), sum(ranks_per_host)
    blocks_elsewhere = max(1 - n / ranks for n in ranks_per_host)
    if op in ("all_reduce", "ddp_step"):
        return 2 * (hosts - 1) / hosts
    if op in ("all_gather", "reduce_scatter"):
        return blocks_elsewhere
    if op == "fsdp2_step":
        return 3 * blocks_elsewhere
    return 1.0

SINK = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); n = 0
while True:
    b = c.recv(1 << 20)
    if not b: break
    n += len(b)
c.sendall(str(n).encode()); c.close()
"""

SOURCE = """
import socket, sys, time
n = int(sys.argv[3]); chunk = b"x" * (1 << 20)
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
t = time.perf_counter(); sent = 0
while sent < n:
    c.sendall(chunk); sent += len(chunk)
c.shutdown(socket.SHUT_WR); got = int(c.recv(64)); dt = time.perf_counter() - t
print(got / dt)
"""


def link_rate(hosts, nbytes: int = 256 << 20, port: int = 29999) -> float:
    """Bytes per second of one TCP stream from host 0 to host 1 (the second host's receipt of every byte)."""
    sink = netns_hosts.start(hosts[1], [sys.executable, "-c", SINK, hosts[1].address, str(port)], dict(os.environ))
    assert sink.stdout.readline().strip() == "ready"
    source = netns_hosts.start(hosts[0], [sys.executable, "-c", SOURCE, hosts[1].address, str(port), str(nbytes)],
                               dict(os.environ))
    out, err = source.communicate(timeout=300)
    sink.communicate(timeout=60)
    if source.returncode != 0:
        raise RuntimeError(f"link measurement failed: {err}")
    return float(out.strip())


def bench_round(hosts, nproc: list[int], bench_args: list[str], out: Path, port: int,
                extra_env: dict | None = None) -> list[dict]:
    env = dict(clean_env(), OMP_NUM_THREADS="1", **(extra_env or {}))  # gloo finds the link by the hosts' names
    outs = netns_hosts.torchrun_on_hosts(hosts, "-m", nproc, env, port,
                                         args=["ccl_bench", *bench_args, "--json", str(out), "--quiet"])
    for code, o, e in outs:
        if code != 0:
            raise RuntimeError(f"ccl-bench failed ({code}):\n{o}\n{e[-4000:]}")
    return json.loads(out.read_text())["results"]


def summarize(rounds: list[list[dict]], rate: float, ranks_per_host: list[int]) -> list[dict]:
    """Per (op, bytes): each backend's medians over the rounds, and the link limit."""
    cases: dict[tuple[str, int], dict] = {}
    for rows in rounds:
        for r in rows:
            c = cases.setdefault((r["op"], r["bytes"]), {"op": r["op"], "bytes": r["bytes"], "checks": set()})
            c.setdefault(r["backend"], []).append(r["median_us"] / 1000)
            c["checks"].add(r["check"])
    for (op, nbytes), c in cases.items():
        c["link_limit_ms"] = crossing(op.split()[0], ranks_per_host) * nbytes / rate * 1000  # "all_reduce overlap" too
    return list(cases.values())


def table(cases: list[dict], backends: list[str]) -> str:
    def span(v):
        return f"{min(v):.1f}-{max(v):.1f}" if len(v) > 1 else f"{v[0]:.1f}"

    lines = ["op                  size" + "".join(f"{b + ' ms':>16}" for b in backends) +
             "  link limit ms  ccl/limit  flat/ccl  gloo/ccl  checks"]
    for c in cases:
        med = {b: statistics.median(c[b]) for b in backends if b in c}
        ratios = [f"{med['ccl'] / c['link_limit_ms']:9.2f}" if "ccl" in med else f"{'-':>9}",
                  f"{med['ccl-flat'] / med['ccl']:8.2f}" if {"ccl", "ccl-flat"} <= med.keys() else f"{'-':>8}",
                  f"{med['gloo'] / med['ccl']:8.2f}" if {"ccl", "gloo"} <= med.keys() else f"{'-':>8}"]
        size = f"{c['bytes'] >> 20} MiB" if c["bytes"] >= 1 << 20 else f"{c['bytes'] >> 10} KiB"
        lines.append(f"{c['op']:<15} {size:>8}" +
                     "".join(f"{span(c[b]) if b in c else '-':>16}" for b in backends) +
                     f"{c['link_limit_ms']:>15.3f}  " + "  ".join(ratios) + "  " + ",".join(sorted(c["checks"])))
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", default="2500mbit", help="tc tbf rate of the link (default 2500mbit)")
    p.add_argument("--hosts", type=int, help="hosts (default 2, or as many as --nproc names; more than 2 share a "
                                             "bridge)")
    p.add_argument("--nproc", default="2", help="ranks per host, or one count per host: 1,3 (default 2)")
    p.add_argument("--rounds", type=int, default=3, help="ccl-bench runs, each in fresh processes (default 3)")
    p.add_argument("--ops", default="all_reduce,all_gather,reduce_scatter,broadcast")
    p.add_argument("--backends", default="ccl,ccl-flat,gloo")
    p.add_argument("-b", "--min-bytes", default="16M")
    p.add_argument("-e", "--max-bytes", default="64M")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--iters", default="5")
    p.add_argument("--overlap", action="store_true",
                   help="also each op issued async while the ranks compute (ccl-bench --overlap): rows '<op> overlap'")
    p.add_argument("--train-params", metavar="N",
                   help="also a DDP and an FSDP2 training step of an MLP of about N parameters (e.g. 50M) per backend, "
                        "with the same losses checked (ccl-bench --ddp --fsdp --train-params)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="a variable for every rank (repeatable), e.g. CCL_CORE_HIERARCHY_PIECE_BYTES=16777216; the ranks "
                        "otherwise get none of this shell's CCL_, FI_ and I_MPI_ variables")
    p.add_argument("--json", help="write the rate, every round's rows and the summary here")
    args = p.parse_args(argv)
    why_not = netns_hosts.can_make_namespaces()
    if why_not:
        raise SystemExit(f"shaped_link: {why_not}")
    from ccl_core import free_port

    extra_env = {}
    for pair in args.env:
        name, eq, value = pair.partition("=")
        if not eq or not name:
            raise SystemExit(f"shaped_link: --env takes NAME=VALUE, got {pair!r}")
        extra_env[name] = value
    nproc = [int(n) for n in args.nproc.split(",")]
    if len(nproc) == 1:
        nproc *= args.hosts or 2
    elif args.hosts not in (None, len(nproc)):
        raise SystemExit(f"shaped_link: --nproc {args.nproc} names {len(nproc)} hosts, --hosts says {args.hosts}")
    hosts = netns_hosts.create(str(os.getpid() % 10000), len(nproc))
    try:
        netns_hosts.shape(hosts, args.rate)
        rate = link_rate(hosts)
        print(f"link: tbf {args.rate}; one TCP stream measured {rate / 1e6:.0f} MB/s", flush=True)
        bench = ["--ops", args.ops, "--backends", args.backends, "-b", args.min_bytes, "-e", args.max_bytes,
                 "--dtype", args.dtype, "--iters", args.iters, "--warmup", "2"] + (["--overlap"] if args.overlap else [])
        if args.train_params:
            bench += ["--ddp", "--fsdp", "--train-params", args.train_params]
        rounds = []
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.rounds):
                t = time.perf_counter()
                rounds.append(bench_round(hosts, nproc, bench, Path(tmp, f"round{i}.json"), free_port(), extra_env))
                print(f"round {i + 1}/{args.rounds}: {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    finally:
        netns_hosts.destroy(hosts)
    cases = summarize(rounds, rate, nproc)
    backends = args.backends.split(",")
    topology = (f"{len(nproc)} hosts x {nproc[0]} ranks" if len(set(nproc)) == 1
                else f"{len(nproc)} hosts of {', '.join(map(str, nproc))} ranks")
    print(f"{topology}, {args.dtype}; ms per op (range of the per-round medians over {args.rounds} round(s)); link "
          f"limit = bytes the busiest host's link must carry one way / {rate / 1e6:.0f} MB/s")
    print(table(cases, backends))
    if args.json:
        Path(args.json).write_text(json.dumps({"rate_Bps": rate, "tbf": args.rate, "ranks_per_host": nproc,
                                               "rounds": rounds,
                                               "cases": [dict(c, checks=sorted(c["checks"])) for c in cases]}, indent=2))
    return 0 if all(c["checks"] == {"ok"} for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
