"""Bad input and faults: a clear exception on every rank that can detect it; no hang, no crash."""
import pytest

import ccl_core
import error_workers
from ranks import run_ranks


def test_bad_arguments_raise_clear_errors_and_leave_the_communicator_usable():
    per_rank = run_ranks(error_workers.bad_arguments, 2)
    problems = [f"rank {r}: {p}" for r, errs in enumerate(per_rank) for p in errs]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("rank,size,fragment", [
    (2, 2, "rank 2 is out of range for size 2"),
    (-1, 2, "rank -1 is out of range"),
    (0, 0, "size must be >= 1"),
])
def test_communicator_rejects_bad_rank_or_size(tmp_path, rank, size, fragment):
    with pytest.raises(ccl_core.InvalidArgumentError, match=fragment):
        ccl_core.Communicator(ccl_core.FileStore(str(tmp_path)), rank, size, timeout=5)


def test_peer_that_never_joins_times_out_at_bootstrap():
    # Only rank 0 of a 2-rank group starts: it must give up after the timeout, naming rank 1.
    message, elapsed = run_ranks(error_workers.lone_rank, 1, 2.0, make_comm=False)[0]
    assert "rank(s) 1 did not join within 2000 ms" in message
    assert elapsed >= 1.9  # never early; a late answer is caught by run_ranks' own limit


def test_lone_non_zero_rank_times_out_waiting_for_rank_0(tmp_path):
    start_message, _ = error_workers.lone_rank(1, 1, str(tmp_path), 1.0)
    assert "rank(s) 0 did not join within 1000 ms" in start_message


def test_same_host_peer_dying_mid_run_is_reported_at_once_then_aborted_error():
    timeout = 30.0
    results = run_ranks(error_workers.peer_dies, 2, timeout, allow_missing=(1,))
    elapsed, first, second, aborted, shm_leftovers = results[0]
    assert first.startswith("BackendError") and "allreduce on communicator 'default' (rank 0 of 2)" in first, first
    assert "rank 1 (pid " in first and "on this host died" in first, first
    assert elapsed < 2.0, elapsed  # the bar; the timeout (30 s) is far away
    assert "was aborted and cannot be used any more" in second
    assert aborted
    assert shm_leftovers == []  # the survivor removed the dead peer's shared-memory region


def test_peer_that_never_calls_the_collective_times_out():
    results = run_ranks(error_workers.peer_never_calls, 2, 2.0, comm_timeout=2.0)
    message, elapsed = results[0]
    assert "broadcast on communicator 'default' (rank 0 of 2) did not complete within 2000 ms" in message
    assert elapsed >= 2.0, elapsed


def test_requests_dropped_in_flight_keep_their_buffers_until_done():
    for late in (0, 1):
        for r in run_ranks(error_workers.dropped_requests, 2, late):
            assert r == (3.0, 3.0, [2.0] * 8), r


def test_interpreter_exit_with_a_dropped_request_in_flight():
    assert run_ranks(error_workers.dropped_request_at_exit, 2) == ["exiting", "exiting"]


def test_a_communicator_dropped_with_an_op_in_flight():
    assert run_ranks(error_workers.dropped_communicator, 2, make_comm=False) == [3.0, 3.0]


def test_a_segment_not_made_by_rank_0_is_refused_and_the_group_uses_oneccl():
    assert run_ranks(error_workers.tampered_segment_name, 2, make_comm=False) == [(False, 3.0, 3.0)] * 2


def test_ranks_with_and_without_oneccls_shm_transport_get_a_clear_error_not_an_exit():
    # oneCCL cannot mix the two (its address exchange fails and it ends the process): every rank is told why first
    for message in run_ranks(error_workers.atl_shm_differs, 2, make_comm=False):
        assert "oneCCL needs the same CCL_ATL_SHM on every rank, but the ranks have CCL_ATL_SHM=0 on rank(s) 1, " \
               "CCL_ATL_SHM=1 on rank(s) 0" in message, message
        assert "--shm-size" in message
