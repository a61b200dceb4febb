"""From what every rank reported to findings: each a problem (the job will be slow, wrong or hang: the exit status
says so) or a note, with where it is and what to do about it. Pure functions of the gathered data."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

# Below this much free /dev/shm a host's ranks cannot keep ccl-core's shared-memory segment plus oneCCL's own
# regions (ccl-core's segment alone is up to 4 MiB per group).
MIN_DEV_SHM = 64 << 20
LOW_SHARE = 0.25  # a measured rate below this share of what the hardware suggests is called low


@dataclass
class Finding:
    problem: bool
    where: str  # a host's name, or "job"
    what: str
    fix: str = ""


@dataclass
class Host:
    name: str
    boot_id: str
    ranks: list[dict] = field(default_factory=list)  # the facts of its ranks, by rank

    @property
    def leader(self) -> dict:
        return self.ranks[0]

    @property
    def cores(self) -> list[int]:
        """The CPUs any of its ranks may run on."""
        return sorted(set().union(*(r["affinity"] for r in self.ranks)))


def hosts_of(facts: list[dict]) -> list[Host]:
    """Ranks grouped by host: hostname and boot id, as ccl-core counts co-located ranks (never LOCAL_WORLD_SIZE)."""
    hosts: dict[tuple, Host] = {}
    for f in sorted(facts, key=lambda f: f["rank"]):
        key = (f["hostname"], f["boot_id"])
        hosts.setdefault(key, Host(f["hostname"], f["boot_id"])).ranks.append(f)
    names = [h.name for h in hosts.values()]
    for h in hosts.values():  # one hostname on two machines (cloned images): tell them apart
        if names.count(h.name) > 1:
            h.name = f"{h.name} (boot {h.boot_id[:8]})"
    return list(hosts.values())


def cpus(ids) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    ids, parts, i = sorted(ids), [], 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts) or "none"


def ranks_text(ranks) -> str:
    numbers = [r["rank"] if isinstance(r, dict) else r for r in ranks]
    return ("rank " if len(numbers) == 1 else "ranks ") + cpus(numbers)


def cores_text(n: int) -> str:
    return f"{n} core{'' if n == 1 else 's'}"


def size_text(nbytes: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{int(nbytes)} B"


def rate_text(rate: float | None) -> str:
    return "-" if rate is None else f"{rate / 1e9:.2f} GB/s" if rate >= 1e9 else f"{rate / 1e6:.0f} MB/s"


def check_versions(facts: list[dict], hosts: list[Host]) -> list[Finding]:
    found = []
    for package in facts[0]["versions"]:
        by_version: dict[str, list[dict]] = {}
        for f in facts:
            by_version.setdefault(f["versions"][package], []).append(f)
        if len(by_version) > 1:
            where = "; ".join(f"{v} on {', '.join(sorted({h.name for h in hosts for r in rs if r in h.ranks}))} "
                              f"({ranks_text(rs)})" for v, rs in by_version.items())
            found.append(Finding(True, "job", f"{package} differs between ranks: {where}",
                                 f"install the same {package} release on every host (one image or one lock file)"))
    return found


def threads_of(rank: dict) -> int:
    """The compute threads a rank runs: torch's intra-op threads, or OMP_NUM_THREADS where it asks for more (OpenMP
    code outside torch's pool takes that many)."""
    omp = rank["omp_num_threads"] or ""
    return max(rank["torch_threads"], int(omp) if omp.isdigit() else 0)


def check_threads(host: Host) -> list[Finding]:
    cores = len(host.cores)
    threads = sum(threads_of(r) for r in host.ranks)
    found = []
    if len(host.ranks) > cores:
        found.append(Finding(True, host.name, f"{len(host.ranks)} ranks on {cores_text(cores)}",
                             f"start at most {cores} ranks on this host (--nproc-per-node / --ntasks-per-node)"))
    elif threads > cores:
        omp = sorted({r["omp_num_threads"] or "unset" for r in host.ranks})
        torch_threads = sorted({str(r["torch_threads"]) for r in host.ranks})
        per = max(1, cores // len(host.ranks))
        found.append(Finding(True, host.name,
                             f"oversubscribed: {len(host.ranks)} ranks x "
                             f"{'/'.join(sorted({str(threads_of(r)) for r in host.ranks}))} threads = {threads} "
                             f"threads on {cores_text(cores)} (OMP_NUM_THREADS={'/'.join(omp)}, torch threads per rank "
                             f"{'/'.join(torch_threads)})",
                             f"OMP_NUM_THREADS={per} (cores / ranks on this host), or torch.set_num_threads({per})"))
    return found


def check_affinity(host: Host) -> list[Finding]:
    found = []
    everything = set(range(host.leader["host_cpus"]))
    pinned = [r for r in host.ranks if set(r["affinity"]) != everything]
    for i, a in enumerate(pinned):
        for b in pinned[i + 1:]:
            shared = set(a["affinity"]) & set(b["affinity"])
            if shared:
                idle = everything - set(host.cores)
                found.append(Finding(True, host.name,
                                     f"ranks {a['rank']} and {b['rank']} are pinned to the same cores ({cpus(shared)})"
                                     + (f" while {'core' if len(idle) == 1 else 'cores'} {cpus(idle)} "
                                        f"{'runs' if len(idle) == 1 else 'run'} no rank" if idle else ""),
                                     "give each rank cores of its own (srun --cpu-bind=cores, mpiexec's I_MPI_PIN, "
                                     "or no pinning)"))
    nodes = host.leader["numa"]
    if len(nodes) > 1 and len(host.ranks) > 1:
        used = [n for n, node_cpus in nodes.items() if set(node_cpus) & set(host.cores)]
        if len(used) == 1:
            found.append(Finding(True, host.name, f"all {len(host.ranks)} ranks run on NUMA node {used[0]} of "
                                                  f"{len(nodes)}", "spread the ranks over the NUMA nodes "
                                                                   "(srun --cpu-bind=cores --distribution=block:cyclic)"))
    return found


def check_dev_shm(host: Host, oneccl: dict | None) -> list[Finding]:
    shm = host.leader["dev_shm"]
    if len(host.ranks) < 2:
        return []
    fix = "give /dev/shm room: docker run --shm-size=1g, or mount -o remount,size=1g /dev/shm"
    if shm is None:
        return [Finding(True, host.name, "/dev/shm is missing: ranks on this host cannot share memory", fix)]
    status = (oneccl or {}).get("host_shm_status", "")
    if status.startswith("off") and "/dev/shm" in status:
        return [Finding(True, host.name, f"the shared-memory path is off ({status.removeprefix('off: ')})", fix)]
    if shm["free"] < MIN_DEV_SHM:
        return [Finding(True, host.name, f"/dev/shm has {size_text(shm['free'])} free of {size_text(shm['total'])}: "
                                         f"too little for the shared-memory path", fix)]
    if not all(r["ccl_core_shm"] for r in host.ranks):
        off = [r for r in host.ranks if not r["ccl_core_shm"]]
        return [Finding(False, host.name, f"the shared-memory path is turned off ({ranks_text(off)}: CCL_CORE_SHM=0)")]
    return []


def check_interfaces(hosts: list[Host], reach: dict[str, dict[str, str]]) -> list[Finding]:
    """reach[a][b]: '' when host a's leader reached host b's on b's interface, else what went wrong."""
    found = []
    for h in hosts:
        iface = h.leader["interface"]
        if iface["address"] is None:
            found.append(Finding(True, h.name, f"interface {iface['name'] or '?'} ({iface['how']}) has no IPv4 address "
                                               f"here", "set FI_TCP_IFACE to an interface of this host that the "
                                                        "others reach, or unset it"))
    for a in hosts:
        for b in hosts:
            why = reach.get(a.name, {}).get(b.name)
            if a is b or not why:
                continue
            iface = b.leader["interface"]
            found.append(Finding(True, b.name,
                                 f"{a.name} cannot reach {b.name} on {iface['name']} {iface['address']} "
                                 f"({iface['how']}): {why}",
                                 "oneCCL would hang creating the group: set FI_TCP_IFACE on every host to the interface "
                                 "on the network between the hosts (the one the route to MASTER_ADDR takes), or unset "
                                 "it"))
    return found


def check_same_machine(hosts: list[Host]) -> list[Finding]:
    by_boot: dict[str, list[str]] = {}
    for h in hosts:
        if h.boot_id:
            by_boot.setdefault(h.boot_id, []).append(h.name)
    return [Finding(False, "job", f"hosts {', '.join(names)} are one machine (one boot id, e.g. containers or "
                                  f"network namespaces): their ranks share its cores and memory")
            for names in by_boot.values() if len(names) > 1]


def check_oneccl(hosts: list[Host], oneccl: dict[int, dict]) -> list[Finding]:
    found = []
    by_error: dict[str, list[int]] = {}
    for r, o in sorted(oneccl.items()):
        if o.get("error"):  # one entry for the ranks that failed alike
            by_error.setdefault(re.sub(r"\(rank \d+ of ", "(rank r of ", o["error"]), []).append(r)
    for error, ranks in by_error.items():
        found.append(Finding(True, "job", f"{ranks_text(ranks)}: the ccl group failed: {error}",
                             "see the problems above; run again with CCL_LOG_LEVEL=info for oneCCL's own account"))
    for r, o in sorted(oneccl.items()):
        if not o.get("error") and not o.get("sum_ok", True):
            found.append(Finding(True, "job", f"rank {r}: all_reduce gave a wrong sum ({o['sum']}, expected "
                                              f"{o['expected']})", "report this, with ccl-doctor's output"))
    for h in hosts:
        o = oneccl.get(h.leader["rank"], {})
        want = h.leader["interface"]
        listening = o.get("listening") or []
        if len(hosts) > 1 and want["address"] and listening and want["address"] not in listening:
            found.append(Finding(False, h.name, f"oneCCL listens on {', '.join(listening)}, not on {want['name']} "
                                                f"{want['address']} ({want['how']})",
                                 "set FI_TCP_IFACE to the interface between the hosts if traffic takes the wrong one"))
        inside, copy = o.get("inside_busbw"), h.leader["memory_copy_rate"]
        if inside and copy and inside < LOW_SHARE * copy:
            found.append(Finding(False, h.name, f"all_reduce inside the host moves {rate_text(inside)} (bus), under "
                                                f"{LOW_SHARE:.0%} of one rank's memory copy ({rate_text(copy)})"))
    return found


def check_links(hosts: list[Host], streams: dict[str, float], across: float | None) -> list[Finding]:
    found = []
    for h in hosts:
        rate, speed = streams.get(h.name), h.leader["interface"]["speed_mbit"]
        if rate and speed and rate < LOW_SHARE * speed * 1e6 / 8:
            found.append(Finding(False, h.name, f"one TCP stream from {h.name} moves {rate_text(rate)}, under "
                                                f"{LOW_SHARE:.0%} of what its interface reports ({speed} Mbit/s)"))
    slowest = min(streams.values()) if streams else None
    if across and slowest and across < LOW_SHARE * slowest:
        found.append(Finding(False, "job", f"all_reduce between hosts moves {rate_text(across)} (bus), under "
                                           f"{LOW_SHARE:.0%} of one TCP stream ({rate_text(slowest)})"))
    return found
