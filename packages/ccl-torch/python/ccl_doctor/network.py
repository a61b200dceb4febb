"""The network side of the check: which interface oneCCL's tcp traffic will take, whether the other hosts answer on
it, how fast one TCP stream crosses to them, and which addresses oneCCL really listens on once a group exists."""
from __future__ import annotations

import fcntl
import os
import socket
import struct
import threading
import time
from pathlib import Path

SIOCGIFADDR = 0x8915  # <linux/sockios.h>: an interface's IPv4 address
PROBE_TIMEOUT = 3.0  # a host that does not answer a connect on its interface within this is unreachable
STREAM_CAP = 1 << 30  # the probe server reads no more than this from one connection


def interface_addresses() -> dict[str, str]:
    """Interface name -> its IPv4 address (interfaces without one are left out)."""
    found = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                reply = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            found[name] = socket.inet_ntoa(reply[20:24])
    return found


def link_speed_mbit(interface: str | None) -> int | None:
    """What the interface says its link runs at (Mbit/s), or None where it does not say (loopback, some VMs)."""
    try:
        speed = int(Path("/sys/class/net", interface or "-", "speed").read_text())
    except (OSError, ValueError):
        return None
    return speed if speed > 0 else None


def chosen_interface(master_addr: str) -> dict:
    """The interface oneCCL's tcp provider is meant to use: FI_TCP_IFACE where set, else the one holding the route to
    MASTER_ADDR (the address every host already reaches for the rendezvous)."""
    addresses = interface_addresses()
    named = os.environ.get("FI_TCP_IFACE")
    if named:
        return {"name": named, "address": addresses.get(named), "how": "FI_TCP_IFACE",
                "speed_mbit": link_speed_mbit(named)}
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((socket.gethostbyname(master_addr), 9))  # UDP: picks the route, sends nothing
            local = s.getsockname()[0]
    except OSError as e:
        return {"name": None, "address": None, "how": f"no route to MASTER_ADDR {master_addr}: {e}",
                "speed_mbit": None}
    name = next((n for n, a in addresses.items() if a == local), None)
    return {"name": name, "address": local, "how": f"route to MASTER_ADDR {master_addr}",
            "speed_mbit": link_speed_mbit(name)}


class ProbeServer:
    """Answers the other hosts' probes on one address: b'p' is answered b'k' (reachable); b's' is followed by a
    stream read to its end (at most STREAM_CAP bytes) and answered with the byte count, 8 bytes big-endian."""

    def __init__(self, address: str):
        self.sock = socket.create_server((address, 0))
        self.address, self.port = self.sock.getsockname()[:2]
        threading.Thread(target=self._serve, name="ccl-doctor-probe", daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    @staticmethod
    def _answer(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(60)
            try:
                kind = conn.recv(1)
                if kind == b"p":
                    conn.sendall(b"k")
                elif kind == b"s":
                    got = 0
                    while got < STREAM_CAP:
                        chunk = conn.recv(1 << 20)
                        if not chunk:
                            break
                        got += len(chunk)
                    conn.sendall(struct.pack(">Q", got))
            except OSError:
                pass

    def close(self) -> None:
        self.sock.close()


def probe(address: str, port: int, timeout: float = PROBE_TIMEOUT) -> str:
    """'' when address:port answers a probe within `timeout`, else what went wrong."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as c:
            c.sendall(b"p")
            return "" if c.recv(1) == b"k" else "no answer to the probe"
    except OSError as e:
        return "timed out" if isinstance(e, socket.timeout) else (e.strerror or str(e))


def stream_rate(address: str, port: int, nbytes: int = 32 << 20) -> float:
    """Bytes per second of one TCP stream to address:port, counted by the receiver."""
    chunk = b"\0" * (1 << 20)
    with socket.create_connection((address, port), timeout=30) as c:
        c.sendall(b"s")
        start = time.perf_counter()
        for _ in range(nbytes // len(chunk)):
            c.sendall(chunk)
        c.shutdown(socket.SHUT_WR)
        (got,) = struct.unpack(">Q", c.recv(8))
        return got / (time.perf_counter() - start)


def _socket_inodes() -> set[str]:
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _ipv4(hex_address: str) -> str | None:
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return socket.inet_ntoa(raw[::-1])
    # /proc/net/tcp6 prints four host-order words; an IPv4-mapped address ends in ffff + the IPv4 address
    words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]
    if words[0] == words[1] == b"\0\0\0\0" and words[2] == b"\0\0\xff\xff":
        return socket.inet_ntoa(words[3])
    return None


def listening_addresses(skip_ports: set[int]) -> list[str]:
    """The IPv4 addresses this process listens on (TCP), other than on skip_ports: after a group is made, the
    endpoints oneCCL's tcp provider opened."""
    inodes = _socket_inodes()
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 10 or fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            address, port = fields[1].split(":")
            ip = _ipv4(address)
            if ip is not None and int(port, 16) not in skip_ports:
                found.add(ip)
    return sorted(found)
