"""Bootstrap through each kind of store, and the stores' own behaviour."""
import time

import pytest

import ccl_core
import store_workers
from ccl_core import free_port
from ranks import run_ranks


@pytest.mark.parametrize("size", [2, 3])
def test_bootstrap_through_tcp_store(size):
    assert run_ranks(store_workers.via_tcp_store, size, free_port(), make_comm=False) == [size * (size + 1) // 2] * size


def test_bootstrap_through_file_store():
    assert run_ranks(store_workers.allreduce_sum, 2) == [3, 3]


def test_bootstrap_through_a_store_written_in_python():
    assert run_ranks(store_workers.via_python_store, 2, make_comm=False) == [3, 3]


def test_prefix_stores_keep_two_groups_apart():
    assert run_ranks(store_workers.two_groups_on_one_store, 2, make_comm=False) == [[3, 3, 3]] * 2


def test_tcp_store_round_trip_and_timeout():
    server = ccl_core.TcpStore("127.0.0.1", 0, is_server=True)
    client = ccl_core.TcpStore("127.0.0.1", server.port)
    value = bytes(range(256)) * 3  # NUL bytes and all
    client.set("k", value)
    assert server.get("k", 1.0) == value
    start = time.monotonic()
    with pytest.raises(ccl_core.CclTimeoutError, match="key 'missing' was not set"):
        client.get("missing", 0.3)
    assert time.monotonic() - start < 1.5


def test_tcp_store_client_without_server_times_out():
    port = free_port()
    with pytest.raises(ccl_core.CclTimeoutError, match=f"cannot connect to 127.0.0.1:{port}"):
        ccl_core.TcpStore("127.0.0.1", port, connect_timeout=0.3)


def test_tcp_store_rejects_bad_port():
    with pytest.raises(ccl_core.InvalidArgumentError, match="port 70000 is out of range"):
        ccl_core.TcpStore("127.0.0.1", 70000, is_server=True)


def test_file_store_get_times_out(tmp_path):
    store = ccl_core.FileStore(str(tmp_path))
    store.set("a/b", b"\x00x")
    assert store.get("a/b", 1.0) == b"\x00x"
    with pytest.raises(ccl_core.CclTimeoutError, match="key 'nope' did not appear"):
        store.get("nope", 0.2)


@pytest.mark.parametrize("size", [2, 3])
def test_bootstrap_counts_co_located_ranks_by_host_identity(size):
    import os

    cores = len(os.sched_getaffinity(0))
    results = run_ranks(store_workers.host_census, size)
    for rank, (local, oversubscribed, sub) in enumerate(results):
        assert local == size  # all ranks of these tests share this host
        assert oversubscribed == (size > cores)
        assert sub == ((1, False) if rank == 0 else None)
