"""torch 2.15's backend contract, side by side with gloo: groups made from groups, timeouts, the error state, abort,
shutdown, monitored_barrier, hooks. Runs in the torch-2.15.0 stage of ci/test (PyPI's torch 2.15)."""
import pytest
import torch

import group_workers as w
from pg import run_in_group

TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
pytestmark = pytest.mark.skipif(TORCH < (2, 15), reason="torch 2.15's contract: the torch-2.15.0 stage of ci/test")


@pytest.fixture(params=["gloo", "ccl"])
def backend(request):
    return request.param


def test_split_subgroups_device_mesh_and_merge_work_as_on_gloo():
    results = {b: run_in_group(w.groups_from_groups, 3, backend=b) for b in ("gloo", "ccl")}
    for b, ranks in results.items():
        assert [r["split"] for r in ranks] == [(0, 2, 4.0), None, (1, 2, 4.0)], (b, ranks)
        assert [r["subgroups"] for r in ranks] == [1.0, 2.0, 3.0], b
        assert [r["mesh dp"] for r in ranks] == [6.0] * 3 and [r["mesh tp"] for r in ranks] == [1.0, 2.0, 3.0], b
        # merge assigns ranks in the order the two arrive: only the size and the sum are fixed
        assert [r["merge"] for r in ranks[:2]] == [(2, 3.0)] * 2, (b, ranks)
        assert all(r["supports splitting"] for r in ranks)


def test_set_timeout_applies_to_later_ops_and_the_error_state_says_timeout(backend):
    rank0 = run_in_group(w.timeouts, 2, backend=backend, timeout=60)[0]
    kind, message, took = rank0["set_timeout"]
    assert took >= 1.0 and took < 30, rank0  # the new 1 s, not the group's 60 s
    assert kind in ("DistBackendError", "RuntimeError"), rank0
    assert rank0["error before"] == "ErrorType.SUCCESS"
    if backend == "ccl":  # gloo keeps reporting SUCCESS after a timeout
        assert rank0["error after"] == "ErrorType.TIMEOUT", rank0
        assert "allreduce" in message and "1000 ms" in message, message


def test_a_works_own_wait_timeout_bounds_the_wait(backend):
    kind, message, took = run_in_group(w.op_timeout, 2, backend=backend, timeout=60)[0]["wait"]
    assert 1.0 <= took < 30, (kind, message, took)


def test_abort_unblocks_a_stuck_collective_within_a_second_and_later_ops_raise_by_name():
    r = run_in_group(w.abort_unblocks, 2, backend="ccl", timeout=60)[0]
    kind, message, _ = r["stuck"]
    assert kind == "DistBackendError" and "abort() was called" in message, r
    assert r["unblocked after"] < 1.0, r
    later_kind, later, _ = r["later"]
    assert later_kind == "DistBackendError" and "broadcast" in later and "aborted" in later, r
    assert r["error"] == "ErrorType.COMM_ERROR", r


def test_shutdown_then_an_op_raises_instead_of_hanging():
    for r in run_in_group(w.shutdown_then_use, 2, backend="ccl"):
        kind, message, took = r["later"]
        assert "shut down" in message and took < 5, r


def test_monitored_barrier_names_the_rank_that_did_not_arrive(backend):
    results = run_in_group(w.monitored_barrier, 3, 2, backend=backend, timeout=60)
    kind, message, took = results[0]["missing one"]
    assert "Rank 2 failed to pass monitoredBarrier in 1000 ms" in message and took >= 1.0, results[0]
    assert "Rank 1" in results[1]["missing one"][1] and "monitoredBarrier" in results[1]["missing one"][1], results[1]
    assert [r["all there"] for r in results] == [None, None, None], results


def test_monitored_barrier_with_wait_all_ranks_names_every_missing_rank(backend):
    kind, message, took = run_in_group(w.monitored_barrier_names_all, 3, backend=backend, timeout=60)[0]["missing"]
    assert "Ranks 1, 2 failed to pass monitoredBarrier" in message, message


def test_ccl_offers_the_hooks_and_membership_changes_gloo_lacks():
    gloo = run_in_group(w.hooks_and_timing, 2, backend="gloo")[0]
    ccl = run_in_group(w.hooks_and_timing, 2, backend="ccl")[0]
    assert gloo == {"abort hooks": False, "completion hooks": False, "shrinking": False, "reconfigure": True}
    assert ccl == {"abort hooks": True, "completion hooks": True, "shrinking": True, "reconfigure": True}
