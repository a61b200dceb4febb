"""Registered memory (ccl_core's Communicator.allocate): collectives whose arrays are registered on every rank read
their peers' arrays in place, and give the same bits as the copying path; mixed calls (one rank registered, one not)
take the copying path; freed arrays stay alive until peers are through; allocation leaks nothing."""
import pytest

import registered_workers as w
from ranks import run_ranks

SMALL_SEGMENTS = {"CCL_CORE_SHM_SEGMENT_BYTES": "4096", "CCL_CORE_SHM_SMALL_BYTES": "256"}


@pytest.fixture
def small_segments(monkeypatch):
    """The copying path with tiny segments, so that its results cover every segment boundary."""
    for key, value in SMALL_SEGMENTS.items():
        monkeypatch.setenv(key, value)


def expected_in_place(case: str, mode: str, small_bytes: int) -> bool:
    """registered on every rank: every op reads in place but small allreduces (up to CCL_CORE_SHM_SMALL_BYTES they
    stay on the slots: fewer synchronisations). mixed (even ranks registered): only the broadcasts from an even root,
    since only the root's buffer is read (the ranks learn it from each other). ordinary: none."""
    words = case.split()
    if mode == "ordinary":
        return False
    if mode == "mixed":
        return words[0] == "broadcast" and int(words[-1]) % 2 == 0
    if words[0] == "allreduce":
        n, dtype = int(words[-3]), words[-2]
        return n * DTYPE_BYTES[dtype] > small_bytes
    return True


DTYPE_BYTES = {"int8": 1, "uint16": 2, "int32": 4, "int64": 8, "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


@pytest.mark.parametrize("size", [2, 3, 4])
def test_every_op_and_dtype_gives_the_same_bits_registered_mixed_and_ordinary(small_segments, size):
    ordinary = run_ranks(w.every_op, size, "ordinary", timeout=300)
    small_bytes = int(SMALL_SEGMENTS["CCL_CORE_SHM_SMALL_BYTES"])
    for mode in ("registered", "mixed", "ordinary"):
        got = ordinary if mode == "ordinary" else run_ranks(w.every_op, size, mode, timeout=300)
        for rank in range(size):
            (want_bits, _), (bits, in_place) = ordinary[rank], got[rank]
            different = [case for case in want_bits if bits[case] != want_bits[case]]
            assert not different, f"{mode}, rank {rank}: {len(different)} case(s) differ, e.g. {different[:5]}"
            wrong = sorted(case for case in bits if (case in in_place) != expected_in_place(case, mode, small_bytes))
            assert not wrong, f"{mode}, rank {rank}: {len(wrong)} case(s) on the wrong path, e.g. {wrong[:5]}"
        if mode == "registered":  # the copying path is compared against the in-place one on sizes of each kind
            assert any(c.startswith("allreduce") and c in got[0][1] for c in got[0][0])


def test_eight_ranks_registered_give_the_same_bits():
    # correctness only: 8 ranks on this machine's 2 cores say nothing about speed
    ordinary = run_ranks(w.every_op, 8, "ordinary", timeout=600)
    registered = run_ranks(w.every_op, 8, "registered", timeout=600)
    for r in range(8):
        assert not ordinary[r][1] and registered[r][1]  # the in-place path ran, and only with registered arrays
        assert registered[r][0] == ordinary[r][0]


def test_arrays_dropped_mid_op_stay_alive_until_every_rank_is_through():
    for rank, results in enumerate(run_ranks(w.freed_mid_op, 3)):
        assert results == [True, True, True], (rank, results)


def test_ten_thousand_allocations_leave_rss_and_dev_shm_where_they_were():
    for rank, (before, after) in enumerate(run_ranks(w.allocate_free_cycles, 2, 10_000, timeout=300)):
        print(f"rank {rank}: RSS {before[0]} -> {after[0]} KiB, /dev/shm used {before[1]} -> {after[1]} bytes")
        assert after[0] - before[0] < 4096, (rank, before, after)  # KiB: no block per cycle left behind
        assert after[1] <= before[1] + (1 << 20), (rank, before, after)


def test_a_peer_killed_mid_op_on_registered_arrays_is_reported_and_leaves_nothing_in_dev_shm():
    elapsed, error, leftovers = run_ranks(w.peer_dies_mid_op, 2, 30.0, allow_missing=(1,))[0]
    assert error.startswith("BackendError") and "rank 1 (pid " in error and "on this host died" in error, error
    assert elapsed < 5.0, elapsed  # the death is seen at once; the timeout (30 s) is far away
    assert leftovers == [], leftovers  # its segment and every block of its pool, in use or cached
