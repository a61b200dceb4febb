"""Hosts on one machine for multi-host tests: network namespaces with link-local addresses (169.254.77.0/24), two
joined by a veth pair, more through a bridge in a namespace of its own (as hosts on one switch), each process also in
a UTS namespace with its own hostname. Everything the tests send stays on these interfaces; the namespaces are made
and removed by the tests themselves."""
from __future__ import annotations

import concurrent.futures
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Host:
    netns: str
    hostname: str
    address: str
    interface: str
    switch: str = ""  # the bridge's namespace, when more than two hosts share one
    port: str = ""    # then: the bridge's end of this host's veth pair


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def create(tag: str, count: int = 2) -> list[Host]:
    """`count` hosts: a veth pair between two, a bridge in a namespace of its own between more."""
    switch = f"ccl{tag}br" if count > 2 else ""
    hosts = [Host(f"ccl{tag}h{i}", f"cclhost{i}", f"169.254.77.{i + 1}", f"ccl{tag}v{i}", switch,
                  f"ccl{tag}p{i}" if switch else "") for i in range(count)]
    names = "".join(f"{h.address} {h.hostname}\n" for h in hosts)
    for h in hosts:
        _ip("netns", "add", h.netns)
        # `ip netns exec` mounts /etc/netns/<name>/hosts over /etc/hosts: the hosts know each other by name
        Path("/etc/netns", h.netns).mkdir(parents=True, exist_ok=True)
        Path("/etc/netns", h.netns, "hosts").write_text("127.0.0.1 localhost\n" + names)
    if count == 2:
        _ip("link", "add", hosts[0].interface, "type", "veth", "peer", "name", hosts[1].interface)
    else:  # each host's interface is one end of a veth pair whose other end is a port of the bridge
        _ip("netns", "add", switch)
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        for h in hosts:
            _ip("link", "add", h.interface, "type", "veth", "peer", "name", h.port)
            _ip("link", "set", h.port, "netns", switch)
            _ip("-n", switch, "link", "set", h.port, "master", "br0")
            _ip("-n", switch, "link", "set", h.port, "up")
    for i, h in enumerate(hosts):
        _ip("link", "set", h.interface, "netns", h.netns)
        _ip("-n", h.netns, "addr", "add", f"{h.address}/24", "dev", h.interface)
        _ip("-n", h.netns, "link", "set", "lo", "up")
        _ip("-n", h.netns, "link", "set", h.interface, "up")
        # a second, live interface that reaches none of the other hosts: traffic must not go there
        stray, stray_peer = f"ccl{tag}x{i}", f"ccl{tag}y{i}"
        _ip("link", "add", stray, "type", "veth", "peer", "name", stray_peer)
        _ip("link", "set", stray, "netns", h.netns)
        _ip("-n", h.netns, "addr", "add", f"169.254.88.{i + 1}/24", "dev", stray)
        _ip("-n", h.netns, "link", "set", stray, "up")
        _ip("link", "set", stray_peer, "up")
    return hosts


def shape(hosts: list[Host], rate: str) -> None:
    """Limits each host's link to `rate` ("2500mbit") in both directions, with tc's token bucket on each end's egress:
    the host's interface, and its port of the bridge when there is one (what several hosts send to one arrives
    through that port, as through a switch's port)."""
    for h in hosts:
        ends = [(h.netns, h.interface)] + ([(h.switch, h.port)] if h.switch else [])
        for netns, device in ends:
            _ip("netns", "exec", netns, "tc", "qdisc", "replace", "dev", device, "root", "tbf", "rate", rate,
                "burst", "1mb", "latency", "10ms")


def destroy(hosts: list[Host]) -> None:
    for h in hosts:
        subprocess.run(["ip", "netns", "del", h.netns], capture_output=True)  # also removes its veth ends
        shutil.rmtree(Path("/etc/netns", h.netns), ignore_errors=True)
    for switch in {h.switch for h in hosts if h.switch}:
        subprocess.run(["ip", "netns", "del", switch], capture_output=True)


def start(host: Host, argv: list[str], env: dict, prelude: str = "") -> subprocess.Popen:
    """argv on `host`: inside its network namespace, with its own hostname. `prelude`, shell commands run first in a
    mount namespace of the host's own (e.g. a small tmpfs on /dev/shm), changes the host for argv only."""
    inner = f'hostname {host.hostname} && {prelude + " && " if prelude else ""}exec "$@"'
    mount = ["--mount", "--propagation", "private"] if prelude else []
    return subprocess.Popen(["ip", "netns", "exec", host.netns, "unshare", "--uts", *mount, "bash", "-c", inner, "bash",
                             *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def torchrun_on_hosts(hosts: list[Host], script, nproc, env: dict, port: int, timeout: float = 300,
                      args: list[str] = (), host_env: list[dict] = (), preludes: list[str] = ()):
    """torchrun --nnodes N --node-rank i on each of the N hosts, with `nproc` ranks on each (or nproc[i] on host i); host i
    gets host_env[i] on top of env and runs preludes[i] first (see start). `script` is a path, or ["-m", module].
    Returns [(returncode, stdout, stderr)] per host."""
    procs = []
    for i, h in enumerate(hosts):
        ranks_here = nproc[i] if isinstance(nproc, (list, tuple)) else nproc
        target = list(script) if isinstance(script, (list, tuple)) else [str(script)]
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(hosts)), "--node-rank", str(i),
                "--nproc-per-node", str(ranks_here), "--master-addr", hosts[0].address, "--master-port", str(port),
                *target, *args]
        procs.append(start(h, argv, dict(env, **(host_env[i] if host_env else {})),
                           preludes[i] if preludes else ""))
    return _collect(procs, timeout)


def _collect(procs: list[subprocess.Popen], timeout: float) -> list[tuple[int, str, str]]:
    """Every process's (returncode, stdout, stderr), read side by side: a host whose output is read only after
    another's has ended would block in write() once its pipe is full, and the ranks waiting for it with it."""
    def one(p):
        try:
            o, e = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            o, e = p.communicate()
        return p.returncode, o, e

    with concurrent.futures.ThreadPoolExecutor(len(procs)) as pool:
        return list(pool.map(one, procs))


SSH_STANDIN = Path(__file__).resolve().parent / "netns_ssh.sh"


def mpiexec_on_hosts(hosts: list[Host], script: Path, nproc: int, env: dict, port: int, timeout: float = 300):
    """Intel MPI's mpiexec with a host list, started on host 0; Hydra reaches host 1 through netns_ssh.sh in
    place of ssh. Returns (returncode, stdout, stderr)."""
    mapping = ",".join(f"{h.hostname}={h.netns}" for h in hosts)
    argv = [str(Path(sys.executable).parent / "mpiexec"), "-launcher", "ssh", "-launcher-exec", str(SSH_STANDIN),
            "-hosts", ",".join(h.hostname for h in hosts), "-n", str(nproc * len(hosts)), "-ppn", str(nproc),
            "-genv", "MASTER_ADDR", hosts[0].address, "-genv", "MASTER_PORT", str(port),
            "-genv", "LOCAL_WORLD_SIZE", str(nproc), sys.executable, str(script)]
    p = start(hosts[0], [str(SSH_STANDIN), hosts[0].hostname, *argv], dict(env, CCL_TEST_HOSTS=mapping))
    return _collect([p], timeout)[0]


def can_make_namespaces() -> str:
    """'' when this process may create namespaces, else why not."""
    if os.geteuid() != 0:
        return "multi-host tests need root (network namespaces)"
    try:
        subprocess.run(["ip", "netns", "list"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as e:
        return f"ip netns unavailable: {e}"
    return ""
