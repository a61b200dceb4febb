"""One-sided windows (torch 2.15's supportsWindow / new_window, c10d::Window) on ccl, beside gloo, which has none:
puts into a peer's registered tensor, signals that order them, remote views, and bad calls by name."""
import pytest
import torch

import window_workers as w
from pg import run_in_group

TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
pytestmark = pytest.mark.skipif(TORCH < (2, 15), reason="torch 2.15's windows: the torch-2.15.0 stage of ci/test")


@pytest.mark.parametrize("size,dtype", [(2, "float32"), (3, "bfloat16"), (4, "int64")])
def test_puts_ordered_by_signals_arrive_in_the_next_ranks_window(size, dtype):
    for rank, r in enumerate(run_in_group(w.ring, size, dtype)):
        prev = (rank - 1) % size
        assert r["seen"] == [[float(prev * 10 + k)] if dtype != "int64" else [prev * 10 + k] for k in range(5)], (rank, r)
        numel, mine_there, same_dtype = r["remote"]
        assert numel == size * 1000 and same_dtype, r
        assert mine_there == ([4.0 + rank * 10] if dtype != "int64" else [4 + rank * 10]), r  # the last round's put
        assert r["attr"] == "WindowAccessType.UNIFIED" and r["supports"], r


def test_async_wait_signal_completes_only_when_the_peer_signals():
    for rank, (before, after) in enumerate(run_in_group(w.async_waits_then_signals, 3)):
        assert before == [False, False] and after == [True, True], rank


def test_a_peer_writing_after_the_owner_let_go_never_reaches_a_later_allocation():
    # the owner's blocks are retired, not reused: the late put and signal land in memory only the peer still maps
    tensors, counters = run_in_group(w.late_writes_after_the_owner_let_go, 2)[0]
    assert tensors == [0.0] * 4 and counters == [0] * 4, (tensors, counters)


def test_bad_window_calls_raise_by_name_and_a_missing_signal_times_out():
    results = run_in_group(w.bad_calls, 2, timeout=3.0)
    for rank, (errors, took) in enumerate(results):
        if rank == 1:
            assert "ValueError" in errors["ordinary tensor"].split(":")[0] and "allocate_tensor" in errors["ordinary tensor"]
        else:  # rank 0's tensor was fine: it learns of rank 1's from the exchange
            assert "rank(s) 1 have no registered memory" in errors["ordinary tensor"], errors
        assert "TypeError" in errors["dtypes differ"].split(":")[0] and "same dtype" in errors["dtypes differ"], errors
        assert "rank 5 is out of range for a group of 2" in errors["rank out of range"], errors
        assert "do not fit rank" in errors["past the end"] and "ValueError" in errors["past the end"].split(":")[0], errors
        assert "offset -1" in errors["negative offset"], errors
        assert "TypeError" in errors["wrong dtype"].split(":")[0] and "Int" in errors["wrong dtype"], errors
        assert "rank -1 is out of range" in errors["map out of range"], errors
        assert "DistBackendError" in errors["never signalled"].split(":")[0] and "did not arrive within 3000 ms" in \
            errors["never signalled"], errors
        assert 3.0 <= took < 20, took  # the group's timeout, from one side only
        assert "no tensor is registered" in errors["put before register"], errors


def test_gloo_offers_no_windows():
    for supports, made in run_in_group(w.gloo_side, 2, backend="gloo"):
        assert supports is False and "does not support new_window" in made, made
