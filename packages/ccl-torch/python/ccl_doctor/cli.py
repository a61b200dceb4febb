"""ccl-doctor's run: every rank reports through the launcher's store, the hosts probe each other, a real ccl group
is timed where the network allows, and rank 0 prints the findings. Every wait on a peer is bounded by --timeout."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import threading
import time

from . import checks, facts, network

MEASURE_BYTES = 16 << 20


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ccl-doctor", description=sys.modules["ccl_doctor"].__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--nproc", type=int, default=2,
                   help="local ranks to start (under torchrun) when no launcher started this one (default 2)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds any step may wait for the other ranks, and the ccl group's timeout (default 60)")
    p.add_argument("--json", metavar="FILE", help="also write everything gathered and found to FILE (rank 0)")
    return p


class Exchange:
    """Keys in the launcher's store under ccl-doctor/; rank 0 reads everyone's, the others read rank 0's."""

    def __init__(self, store, rank: int, size: int, timeout: float):
        import torch.distributed as dist

        self.store = dist.PrefixStore("ccl-doctor", store)
        self.store.set_timeout(datetime.timedelta(seconds=timeout))
        self.rank, self.size, self.timeout = rank, size, timeout

    def put(self, key: str, value) -> None:
        self.store.set(key, json.dumps(value))

    def get(self, key: str):
        return json.loads(self.store.get(key))

    def gather(self, step: str, ranks) -> tuple[dict[int, dict], list[int]]:
        """(rank -> its value, ranks that did not report within the timeout)."""
        keys = [f"{step}/{r}" for r in ranks]
        try:
            self.store.wait(keys, datetime.timedelta(seconds=self.timeout))
        except Exception:  # noqa: BLE001 - a timeout: the missing ones are found below
            pass
        got, missing = {}, []
        for r, key in zip(ranks, keys):
            if self.store.check([key]):
                got[r] = self.get(key)
            else:
                missing.append(r)
        return got, missing


def measure_all_reduce(group, nbytes: int = MEASURE_BYTES, iters: int = 3) -> float:
    """Bus bandwidth (bytes/s) of the best of a few all_reduces of nbytes on `group`: 2(n-1)/n x bytes / time."""
    import torch
    import torch.distributed as dist

    n = dist.get_world_size(group)
    x = torch.ones(nbytes // 4)
    dist.all_reduce(x, group=group)
    best = float("inf")
    for _ in range(iters):
        dist.barrier(group=group)
        t = time.perf_counter()
        dist.all_reduce(x, group=group)
        best = min(best, time.perf_counter() - t)
    return 2 * (n - 1) / n * nbytes / best


def run_oneccl(rank: int, size: int, plan: dict, exchange: Exchange, skip_ports: set[int]) -> dict:
    """A real ccl group: correctness of one all_reduce, what the group agreed on, all_reduce inside each host and
    among the hosts' first ranks, and the addresses oneCCL listens on."""
    import torch
    import torch.distributed as dist

    out: dict = {"error": None}
    try:
        dist.init_process_group("ccl", store=dist.PrefixStore("pg", exchange.store), rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=exchange.timeout))
        x = torch.full((256,), float(rank + 1))
        dist.all_reduce(x)
        out["expected"] = size * (size + 1) / 2
        out["sum"] = x[0].item()
        out["sum_ok"] = bool((x == out["expected"]).all())
        world = dist.group.WORLD._get_backend(torch.device("cpu"))
        out["hierarchy"] = world.hierarchy
        out["world_shm"] = world.shared_memory
        host_ranks = plan["host_ranks"]
        mine, _ = dist.new_subgroups_by_enumeration(host_ranks)
        local = next(r for r in host_ranks if rank in r)
        inner = mine._get_backend(torch.device("cpu"))
        out["host_shm_status"] = getattr(inner, "shared_memory_status", "on" if inner.shared_memory else "off")
        if len(local) > 1:
            out["inside_busbw"] = measure_all_reduce(mine)
        leaders = [r[0] for r in host_ranks]
        if len(leaders) > 1:
            across = dist.new_group(leaders)
            if rank in leaders:
                out["across_busbw"] = measure_all_reduce(across)
        out["listening"] = network.listening_addresses(skip_ports)
        dist.barrier()
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 - reported as a finding, never a traceback
        out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:400]
    return out


def host_lines(h: checks.Host, net: dict, oneccl: dict[int, dict], findings: list[checks.Finding]) -> list[str]:
    lead, o = h.leader, oneccl.get(h.leader["rank"], {})
    nodes = lead["numa"]
    lines = [f"host {h.name}: {checks.ranks_text(h.ranks)}"]
    pin = ", ".join(f"rank {r['rank']} on {checks.cpus(r['affinity'])}" for r in h.ranks)
    lines.append(f"  cores      {len(h.cores)} of {lead['host_cpus']} (cpus {checks.cpus(h.cores)}; "
                 f"{len(nodes)} NUMA node{'s' if len(nodes) > 1 else ''}); {pin}")
    omp = sorted({r["omp_num_threads"] or "unset" for r in h.ranks})
    lines.append(f"  threads    {sum(checks.threads_of(r) for r in h.ranks)} on {len(h.cores)} cores (torch threads "
                 f"per rank {'/'.join(sorted({str(r['torch_threads']) for r in h.ranks}))}, "
                 f"OMP_NUM_THREADS={'/'.join(omp)})")
    shm = lead["dev_shm"]
    room = f"{checks.size_text(shm['free'])} free of {checks.size_text(shm['total'])}" if shm else "missing"
    path = o.get("host_shm_status") or ("(no group made)" if not o or o.get("error") else "-")
    lines.append(f"  /dev/shm   {room}; ccl-core's shared-memory path: {path if len(h.ranks) > 1 else 'one rank here'}")
    iface, t = lead["interface"], lead["transport"]
    speed = f", {iface['speed_mbit']} Mbit/s" if iface["speed_mbit"] else ""
    listens = f"; oneCCL listens on {', '.join(o['listening'])}" if o.get("listening") else ""
    provider = t["fi_provider"] or "tcp (libfabric's choice)"
    lines.append(f"  interface  {iface['name']} {iface['address']} ({iface['how']}){speed}{listens}")
    lines.append(f"  transport  ATL {t['atl']}, provider {provider}, oneCCL shared memory between this host's ranks "
                 f"{'on' if t['atl_shm'] == '1' else 'off'}")
    reach = net.get("reach", {})
    if reach:
        lines.append("  reaches    " + ", ".join(f"{other} {'yes' if not why else 'NO (' + why + ')'}"
                                               for other, why in reach.items()))
    measured = []
    if net.get("stream"):
        measured.append(f"TCP stream to {net['stream_to']} {checks.rate_text(net['stream'])}")
    if o.get("inside_busbw"):
        measured.append(f"all_reduce {checks.size_text(MEASURE_BYTES)} inside {checks.rate_text(o['inside_busbw'])} "
                        f"(bus)")
    measured.append(f"memory copy {checks.rate_text(lead['memory_copy_rate'])} (one rank)")
    lines.append("  bandwidth  " + "; ".join(measured))
    lines.append("  versions   " + ", ".join(f"{k} {v}" for k, v in lead["versions"].items()))
    lines += finding_lines([f for f in findings if f.where == h.name])
    return lines


def finding_lines(found: list[checks.Finding]) -> list[str]:
    lines = []
    for f in sorted(found, key=lambda f: not f.problem):
        lines.append(f"  {'PROBLEM' if f.problem else 'note':<9}  {f.what}")
        if f.fix:
            lines.append(f"  {'':<9}  fix: {f.fix}")
    return lines


def report(everyone: list[dict], nets: dict[int, dict], oneccl: dict[int, dict], missing: list[int],
           launcher: str, size: int, skipped: str) -> tuple[list[str], list[checks.Finding]]:
    hosts = checks.hosts_of(everyone)
    reach = {h.name: nets.get(h.leader["rank"], {}).get("reach", {}) for h in hosts}
    streams = {h.name: nets[h.leader["rank"]]["stream"] for h in hosts
               if nets.get(h.leader["rank"], {}).get("stream")}
    found = []
    if missing:
        found.append(checks.Finding(True, "job", f"{checks.ranks_text(missing)} did not report (stuck or dead)",
                                    "check those ranks' output and their hosts"))
    found += checks.check_versions(everyone, hosts)
    for h in hosts:
        found += checks.check_threads(h) + checks.check_affinity(h) + checks.check_dev_shm(h, oneccl.get(h.leader["rank"]))
    found += checks.check_interfaces(hosts, reach)
    found += checks.check_same_machine(hosts)
    across = next((o["across_busbw"] for o in oneccl.values() if o.get("across_busbw")), None)
    found += checks.check_oneccl(hosts, oneccl) + checks.check_links(hosts, streams, across)
    lines = [f"ccl-doctor: {size} ranks on {len(hosts)} host{'s' if len(hosts) > 1 else ''}, started by {launcher}", ""]
    for h in hosts:
        lines += host_lines(h, nets.get(h.leader["rank"], {}), oneccl, found) + [""]
    lines.append(f"job: {size} ranks")
    if skipped:
        lines.append(f"  group      not made: {skipped}")
    elif oneccl:
        first = oneccl.get(0, {})
        good = sum(1 for o in oneccl.values() if o.get("sum_ok"))
        lines.append(f"  group      ccl, hierarchy {first.get('hierarchy', '-')}; all_reduce right on {good} of {size} "
                     f"ranks")
    if across:
        lines.append(f"  across     all_reduce {checks.size_text(MEASURE_BYTES)} among the hosts' first ranks "
                     f"{checks.rate_text(across)} (bus); slowest TCP stream "
                     f"{checks.rate_text(min(streams.values()) if streams else None)}")
    lines += finding_lines([f for f in found if f.where == "job"])
    problems = sum(f.problem for f in found)
    lines += ["", f"ccl-doctor: {problems} problem{'' if problems == 1 else 's'} found" if problems
              else "ccl-doctor: no problems found"]
    return lines, found


def start_local_ranks(args, argv) -> int:
    """No launcher: run ourselves under torchrun with --nproc local ranks."""
    from ccl_core import free_port

    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.nproc),
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "-m", "ccl_doctor", *argv]
    return subprocess.run(cmd).returncode


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    import ccl_core

    launch = ccl_core.detect_launch()
    if launch is None:
        return start_local_ranks(args, argv)
    launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else launch.launcher
    import oneccl_bindings_for_pytorch  # noqa: F401  (registers ccl; RANK/WORLD_SIZE under mpiexec and srun)
    import torch.distributed as dist

    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    os.environ.setdefault("MASTER_ADDR", ccl_core.rendezvous_address()[0])
    os.environ.setdefault("MASTER_PORT", str(ccl_core.rendezvous_address()[1]))
    store, _, _ = next(dist.rendezvous("env://", rank, size, timeout=datetime.timedelta(seconds=args.timeout)))
    exchange = Exchange(store, rank, size, args.timeout)

    # 1. what this rank finds, and a probe server on the interface oneCCL will use
    mine = facts.collect(rank, launch.local_rank)
    mine["interface"] = network.chosen_interface(os.environ["MASTER_ADDR"])
    server = None
    if mine["interface"]["address"]:
        try:
            server = network.ProbeServer(mine["interface"]["address"])
            mine["probe"] = [server.address, server.port]
        except OSError as e:
            mine["interface"]["how"] += f"; cannot listen there: {e.strerror}"
    exchange.put(f"facts/{rank}", mine)

    # 2. rank 0 groups the ranks by host; each host's first rank probes the others and streams to the next
    if rank == 0:
        everyone, missing = exchange.gather("facts", range(size))
        hosts = checks.hosts_of(list(everyone.values()))
        exchange.put("plan", {"host_ranks": [[r["rank"] for r in h.ranks] for h in hosts],
                              "hosts": [[h.name, h.leader["rank"], h.leader.get("probe")] for h in hosts],
                              "missing": missing})
    plan = exchange.get("plan")
    net = {}
    names = [name for name, _, _ in plan["hosts"]]
    mine_at = next((i for i, (_, leader, _) in enumerate(plan["hosts"]) if leader == rank), None)
    if mine_at is not None:
        net["reach"] = {}
        for name, _, endpoint in plan["hosts"]:
            if name != names[mine_at]:
                net["reach"][name] = network.probe(*endpoint) if endpoint else "it has no address to listen on"
        if len(names) > 1:
            to = (mine_at + 1) % len(names)
            endpoint = plan["hosts"][to][2]
            if endpoint and not net["reach"].get(names[to]):
                net["stream"], net["stream_to"] = network.stream_rate(*endpoint), names[to]
        exchange.put(f"net/{rank}", net)
    leaders = [leader for _, leader, _ in plan["hosts"]]
    if rank == 0:
        nets, late = exchange.gather("net", leaders)
        unreachable = [f"{names[leaders.index(r)]} -> {b}" for r, n in sorted(nets.items())
                       for b, why in n.get("reach", {}).items() if why]
        reasons = [f"{checks.ranks_text(plan['missing'])} did not report" if plan["missing"] else "",
                   f"{checks.ranks_text(late)} did not finish probing" if late else "",
                   f"hosts do not reach each other ({', '.join(unreachable)})" if unreachable else ""]
        skipped = "; ".join(filter(None, reasons))
        exchange.put("go", {"skipped": skipped})

    # 3. a real ccl group, unless a rank is missing or a host unreachable (oneCCL would hang making it)
    skipped = exchange.get("go")["skipped"]
    stuck = False
    if not skipped:
        skip_ports = {int(os.environ["MASTER_PORT"])} | ({server.port} if server else set())
        # in a thread: a rank stuck inside oneCCL past its own timeout is reported, not waited for
        result: dict = {}
        worker = threading.Thread(target=lambda: result.update(run_oneccl(rank, size, plan, exchange, skip_ports)),
                                  daemon=True)
        worker.start()
        worker.join(2 * args.timeout + 10)
        stuck = worker.is_alive()
        exchange.put(f"ccl/{rank}", result if not stuck else
                     {"error": f"stuck in oneCCL for {2 * args.timeout + 10:g} s (the group's timeout is "
                               f"{args.timeout:g} s)"})
    code = 0
    if rank == 0:
        oneccl, gone = ({}, []) if skipped else exchange.gather("ccl", range(size))
        for r in gone:
            oneccl[r] = {"error": f"no answer within {args.timeout:g} s (stuck in oneCCL?)"}
        lines, found = report(list(everyone.values()), nets, oneccl, plan["missing"] + late, launcher, size, skipped)
        print("\n".join(lines), flush=True)
        code = 1 if any(f.problem for f in found) else 0
        if args.json:
            with open(args.json, "w") as out:
                json.dump({"facts": everyone, "net": nets, "oneccl": oneccl, "skipped": skipped,
                           "findings": [f.__dict__ for f in found], "exit": code}, out, indent=2)
        exchange.put("verdict", code)
        # under mpiexec and srun the store lives in this process: keep it until every rank has read the verdict
        exchange.gather("read", range(1, size))
    else:
        try:
            code = exchange.get("verdict")
            exchange.put(f"read/{rank}", True)
        except Exception:  # noqa: BLE001 - rank 0 is gone: its own output says why
            code = 1
    if server:
        server.close()
    if stuck:  # the stuck thread holds oneCCL: leave without running its clean-up
        sys.stdout.flush()
        os._exit(code)
    return code
