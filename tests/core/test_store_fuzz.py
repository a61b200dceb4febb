"""Hostile bytes on ccl-core's TcpStore (the store of ccl_core.init_from_env). The server runs in a process of its
own; while this test throws random frames, truncated frames, oversized lengths, 1,000 idle connections, a slowloris
sender and descriptor exhaustion at it, an honest client keeps setting and getting keys. The honest client must be
served within its timeout every time, the server's memory must stay bounded, and nothing may crash."""
import os
import random
import socket
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import ccl_core
from ranks import clean_env

SERVER = """
import resource, sys, time, ccl_core
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
store = ccl_core.TcpStore("127.0.0.1", 0, is_server=True)
print(store.port, flush=True)
time.sleep(600)
"""


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS:")).split()[1])


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Honest(threading.Thread):
    """Sets and reads back keys in a loop; records the slowest round trip and any failure."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.store = ccl_core.TcpStore("127.0.0.1", port, connect_timeout=5)
        self.stop = threading.Event()
        self.rounds, self.slowest, self.failures = 0, 0.0, []

    def run(self):
        while not self.stop.is_set():
            key, value = f"honest/{self.rounds}", os.urandom(64)
            start = time.monotonic()
            try:
                self.store.set(key, value)
                if self.store.get(key, 2.0) != value:
                    self.failures.append(f"round {self.rounds}: wrong value")
            except Exception as e:  # noqa: BLE001 - every failure is reported by the test
                self.failures.append(f"round {self.rounds}: {type(e).__name__}: {e}")
            self.slowest = max(self.slowest, time.monotonic() - start)
            self.rounds += 1
            time.sleep(0.01)


def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=2)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset on close: no TIME_WAIT pile
    return s


def send_and_close(port, data):
    try:
        with connect(port) as s:
            s.sendall(data)
            s.settimeout(0.2)
            try:
                s.recv(64)
            except OSError:
                pass
    except OSError:
        pass


def frame(op, key, value):
    return bytes([op]) + struct.pack("!I", len(key)) + key + struct.pack("!I", len(value)) + value


@pytest.fixture
def server():
    proc = subprocess.Popen([sys.executable, "-c", SERVER, "4096"], env=clean_env(), stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline())
    yield proc, port
    proc.kill()
    proc.wait()


def test_hostile_frames_and_connections_leave_honest_clients_served(server):
    proc, port = server
    honest = Honest(port)
    honest.start()
    time.sleep(0.3)
    rss_before = rss_kib(proc.pid)
    rng = random.Random(7)
    counts = dict(random=0, truncated=0, oversized=0, idle=0, slowloris=0)

    # slowloris: a valid frame, one byte at a time, slower than the server's 10 s frame limit allows
    def slowloris():
        try:
            with connect(port) as s:
                for b in frame(1, b"slow", b"x" * 64):
                    s.send(bytes([b]))
                    time.sleep(0.25)
        except OSError:
            pass  # cut off by the server: what should happen

    loris = [threading.Thread(target=slowloris, daemon=True) for _ in range(5)]
    for t in loris:
        t.start()
    counts["slowloris"] = len(loris)

    idle = []
    for _ in range(1000):
        idle.append(connect(port))
    counts["idle"] = len(idle)

    hostile = []  # (kind, bytes), sent by 16 connections at a time
    for _ in range(1500):  # random bytes, some starting with a valid op
        data = os.urandom(rng.randint(1, 200))
        if rng.random() < 0.5:
            data = bytes([rng.choice([1, 2])]) + data
        hostile.append(("random", data))
    for _ in range(300):  # valid frames cut short
        f = frame(1, b"k" * rng.randint(1, 50), os.urandom(rng.randint(0, 500)))
        hostile.append(("truncated", f[: rng.randint(1, len(f) - 1)]))
    for head in (b"\x02\xff\xff\xff\xff", b"\x01\x00\x00\x00\x01k\xff\xff\xff\xff", b"\x01\x00\x01\x00\x00",
                 frame(2, b"k", b"a get carries no value"), b"\x07garbage op"):
        hostile += [("oversized", head)] * 20
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda sent: send_and_close(port, sent[1]), hostile))
    for kind, _ in hostile:
        counts[kind] += 1
    rss_during = rss_kib(proc.pid)
    for s in idle:
        s.close()
    for t in loris:
        t.join(timeout=30)
    time.sleep(1.0)
    cpu_idle_start = cpu_seconds(proc.pid)
    time.sleep(2.0)
    cpu_idle = cpu_seconds(proc.pid) - cpu_idle_start
    honest.stop.set()
    honest.join(timeout=10)

    print(f"fuzz: {counts}; honest rounds {honest.rounds}, slowest {honest.slowest * 1000:.0f} ms; "
          f"server RSS {rss_before} -> {rss_during} KiB; idle CPU {cpu_idle:.3f} s over 2 s")
    assert proc.poll() is None, "the server process died"
    assert honest.failures == [], honest.failures[:5]
    assert honest.rounds > 50 and honest.slowest < 2.0
    assert rss_during - rss_before < 64 * 1024, (rss_before, rss_during)
    assert cpu_idle < 0.2
    # and it still answers a new client
    late = ccl_core.TcpStore("127.0.0.1", port, connect_timeout=5)
    late.set("after", b"ok")
    assert late.get("after", 2.0) == b"ok"


def test_running_out_of_descriptors_sheds_connections_without_spinning():
    # a server limited to 64 descriptors, then 200 connections: it refuses the extra ones and keeps serving
    proc = subprocess.Popen([sys.executable, "-c", SERVER, "64"], env=clean_env(), stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        honest = ccl_core.TcpStore("127.0.0.1", port, connect_timeout=5)
        flood = []
        for _ in range(200):
            try:
                flood.append(connect(port))
            except OSError:
                pass
        time.sleep(0.5)
        cpu_start = cpu_seconds(proc.pid)
        time.sleep(1.0)
        assert cpu_seconds(proc.pid) - cpu_start < 0.2, "the server spins on a listening socket it cannot serve"
        honest.set("still", b"here")
        assert honest.get("still", 2.0) == b"here"
        for s in flood:
            s.close()
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_client_get_honours_its_timeout_against_a_silent_server():
    # a "server" that accepts and never answers
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    try:
        client = ccl_core.TcpStore("127.0.0.1", port, connect_timeout=2)
        start = time.monotonic()
        with pytest.raises(ccl_core.CclTimeoutError):
            client.get("k", 0.5)
        assert time.monotonic() - start < 1.5
    finally:
        listener.close()
