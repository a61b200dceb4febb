"""Hosts on one machine for multi-host tests: network namespaces joined by a veth pair with link-local
addresses (169.254.77.0/24), each process also in a UTS namespace with its own hostname. Everything the tests
send stays on these interfaces; the namespaces are made and removed by the tests themselves."""
from __future__ import annotations

import os
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


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def create(tag: str) -> list[Host]:
    hosts = [Host(f"ccl{tag}h{i}", f"cclhost{i}", f"169.254.77.{i + 1}", f"ccl{tag}v{i}") for i in range(2)]
    for h in hosts:
        _ip("netns", "add", h.netns)
    _ip("link", "add", hosts[0].interface, "type", "veth", "peer", "name", hosts[1].interface)
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


def destroy(hosts: list[Host]) -> None:
    for h in hosts:
        subprocess.run(["ip", "netns", "del", h.netns], capture_output=True)  # also removes its veth ends


def start(host: Host, argv: list[str], env: dict) -> subprocess.Popen:
    """argv on `host`: inside its network namespace, with its own hostname."""
    inner = f'hostname {host.hostname} && exec "$@"'
    return subprocess.Popen(["ip", "netns", "exec", host.netns, "unshare", "--uts", "bash", "-c", inner, "bash", *argv],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def torchrun_on_hosts(hosts: list[Host], script: Path, nproc: int, env: dict, port: int, timeout: float = 300):
    """torchrun --nnodes 2 --node-rank i on each host; returns [(returncode, stdout, stderr)] per host."""
    procs = []
    for i, h in enumerate(hosts):
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(hosts)), "--node-rank", str(i),
                "--nproc-per-node", str(nproc), "--master-addr", hosts[0].address, "--master-port", str(port),
                str(script)]
        # gloo (the comparison backend) finds its address by resolving the hostname; name the interface instead
        procs.append(start(h, argv, dict(env, CCL_TEST_IFACE=h.interface, GLOO_SOCKET_IFNAME=h.interface)))
    outs = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            o, e = p.communicate()
        outs.append((p.returncode, o, e))
    return outs


def can_make_namespaces() -> str:
    """'' when this process may create namespaces, else why not."""
    if os.geteuid() != 0:
        return "multi-host tests need root (network namespaces)"
    try:
        subprocess.run(["ip", "netns", "list"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as e:
        return f"ip netns unavailable: {e}"
    return ""
