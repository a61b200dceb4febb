"""Background progress (CCL_CORE_PROGRESS): async operations move while their caller computes, fail in time when
a peer is gone, and never keep a process from ending. With CCL_CORE_PROGRESS=caller nothing moves until the
caller waits, which is what proves that these tests can fail."""
import pytest

import progress_workers as w
from ranks import run_ranks


@pytest.mark.parametrize("shm", ["1", "0"], ids=["shared-memory", "oneCCL"])
@pytest.mark.parametrize("nbytes", [4 << 10, 16 << 20], ids=["4KiB", "16MiB"])
def test_an_async_allreduce_completes_while_the_caller_computes(monkeypatch, shm, nbytes):
    monkeypatch.setenv("CCL_CORE_SHM", shm)
    per_rank = run_ranks(w.moves_while_caller_computes, 2, nbytes, 5.0)
    for seen, right in per_rank:
        assert right
        assert seen is not None and seen < 2.0, per_rank  # bound from one side: the VM has slow phases


def test_without_the_thread_nothing_moves_until_wait(monkeypatch):
    monkeypatch.setenv("CCL_CORE_PROGRESS", "caller")
    per_rank = run_ranks(w.moves_while_caller_computes, 2, 16 << 20, 1.0)
    assert all(seen is None and right for seen, right in per_rank), per_rank


def test_a_bad_progress_mode_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("CCL_CORE_PROGRESS", "sometimes")
    with pytest.raises(AssertionError) as failure:
        run_ranks(w.exits_with_ops_pending, 2)
    assert str(failure.value).count("CCL_CORE_PROGRESS=sometimes is not a progress mode") >= 2, str(failure.value)


def test_a_pending_op_whose_peer_died_fails_in_the_background():
    message, took = run_ranks(w.pending_op_of_a_dead_peer, 2, 1.5, comm_timeout=60, allow_missing=(1,))[0]
    assert "rank 1" in message and "died" in message, message
    assert took < 0.5, took  # already failed: test() only reports it


def test_a_pending_op_times_out_in_the_background_naming_the_timeout():
    message, took = run_ranks(w.pending_op_times_out, 2, 3.5, comm_timeout=2)[0]
    assert message.startswith("CclTimeoutError") and "did not complete within 2000 ms" in message, message
    assert took < 0.5, took


def test_a_process_with_ops_pending_ends_cleanly():
    assert run_ranks(w.exits_with_ops_pending, 2, timeout=60) == ["issued", "issued"]


@pytest.mark.parametrize("threads", ["1", "2"])
def test_nothing_pending_costs_no_cpu(monkeypatch, threads):
    """Also with helper threads (CCL_CORE_THREADS=2), which the large ops before the idle time woke: they sleep."""
    monkeypatch.setenv("CCL_CORE_THREADS", threads)
    spent = run_ranks(w.idle_cost, 2, 5.0)
    print(f"CPU seconds over 5 s with nothing pending: {spent}")
    assert all(s < 0.05 for s in spent), spent  # 1% of a core over 5 s


def test_a_forked_child_exits_normally():
    for status, took in run_ranks(w.forked_child_exits, 2):
        assert status == 3, (status, took)


def test_info_names_the_progress_mode():
    import subprocess
    import sys

    from ranks import clean_env

    for mode in ("thread", "caller"):
        out = subprocess.run([sys.executable, "-m", "ccl_core.info"], env={**clean_env(), "CCL_CORE_PROGRESS": mode},
                             capture_output=True, text=True, check=True).stdout
        assert f"progress      {mode} (" in out, out
