"""ccl-core's shared-memory path (ranks on one host: allreduce, allgather, reduce_scatter, broadcast): correctness
on every path, agreement between ranks, fall-back switch, and errors. The generic collective tests (test_collectives.py) run through it as well."""
import pytest

import collective_workers
import shm_workers
from ranks import run_ranks

SMALL_SEGMENTS = {"CCL_CORE_SHM_SEGMENT_BYTES": "4096", "CCL_CORE_SHM_SMALL_BYTES": "256"}


@pytest.fixture
def small_segments(monkeypatch):
    """Tiny segments and thresholds, so that small test buffers cross every path boundary."""
    for key, value in SMALL_SEGMENTS.items():
        monkeypatch.setenv(key, value)


@pytest.mark.parametrize("size", [2, 3, 4, 8])
@pytest.mark.parametrize("worker", [shm_workers.sizes_dtypes_ops, shm_workers.placed_ops], ids=lambda f: f.__name__)
def test_every_count_dtype_and_op_matches_numpy(small_segments, worker, size):
    """allreduce (sizes_dtypes_ops); allgather, reduce_scatter and broadcast (placed_ops)."""
    per_rank = run_ranks(worker, size)
    problems = [f"rank {r}: {m}" for r, bad in enumerate(per_rank) for m in bad]
    assert not problems, "\n".join(problems[:20])


def test_default_segments_match_numpy():
    per_rank = run_ranks(collective_workers.allreduce, 2)
    assert per_rank == [[], []]
    per_rank = run_ranks(shm_workers.sizes_dtypes_ops, 2)
    assert per_rank == [[], []]


@pytest.mark.parametrize("size", [2, 3])
def test_every_rank_gets_the_same_bits(small_segments, size):
    digests = run_ranks(shm_workers.same_bits_everywhere, size)
    assert all(d == digests[0] for d in digests)


def test_async_allreduce_waited_out_of_order_with_oneccl_ops(small_segments):
    assert run_ranks(shm_workers.waits_out_of_order, 3) == [[], [], []]


@pytest.mark.parametrize("size", [2, 3])
def test_disagreeing_counts_raise_on_every_rank(size):
    messages = run_ranks(shm_workers.disagreeing_counts, size)
    for rank, message in enumerate(messages):
        assert "disagree" in message and "10 float32" in message and "20 float32" in message, (rank, message)


def test_switched_off_by_environment(monkeypatch):
    monkeypatch.setenv("CCL_CORE_SHM", "0")
    assert run_ranks(shm_workers.path_in_use, 2) == [(False, 2.0), (False, 2.0)]


def test_switched_on_by_default():
    assert run_ranks(shm_workers.path_in_use, 3) == [(True, 3.0)] * 3


def test_subgroups_take_the_path():
    per_rank = run_ranks(shm_workers.subgroup_paths, 3)
    for results in per_rank:
        for ranks, shm, correct in results:
            assert shm and correct, (ranks, shm, correct)
    assert len(per_rank[0]) == 3 and len(per_rank[1]) == 2 and len(per_rank[2]) == 2


def test_one_rank_switching_it_off_makes_every_rank_fall_back():
    settings = [{}, {"CCL_CORE_SHM": "0"}, {}]
    assert run_ranks(shm_workers.uneven_settings, 3, settings, make_comm=False) == [(False, True)] * 3


def test_every_rank_reports_what_the_group_agreed():
    settings = [{}, {"CCL_CORE_SHM": "0"}, {}]
    for agreed, old_name, warned in run_ranks(shm_workers.what_the_group_agreed, 3, settings, make_comm=False):
        assert agreed["shared_memory"] == "off: rank 1 has CCL_CORE_SHM=0", agreed
        assert agreed["local_ranks"] == 3 and agreed["progress"] == "thread" and agreed["kernels"], agreed
        assert old_name is False and warned and "use shared_memory" in warned[0], (old_name, warned)
    for agreed, old_name, _ in run_ranks(shm_workers.what_the_group_agreed, 2, [{}, {}], make_comm=False):
        assert agreed["shared_memory"] == "on" and old_name is True, agreed


def test_rank_0s_segment_sizes_apply_to_every_rank():
    settings = [{"CCL_CORE_SHM_SEGMENT_BYTES": "8192", "CCL_CORE_SHM_SMALL_BYTES": "512"},
                {"CCL_CORE_SHM_SEGMENT_BYTES": "4194304"}]
    assert run_ranks(shm_workers.uneven_settings, 2, settings, make_comm=False) == [(True, True)] * 2


def test_placed_ops_with_default_segments():
    assert run_ranks(shm_workers.placed_ops, 2) == [[], []]


def test_disagreeing_broadcast_roots_raise_on_every_rank():
    for message in run_ranks(shm_workers.disagreeing_roots, 2):
        assert "disagree" in message and "from root 0" in message and "from root 1" in message, message


@pytest.mark.parametrize("size", [2, 3, 4, 8])
def test_allreduce_around_the_one_shot_limit_of_each_rank_count(size):
    """The one-synchronisation variant's limit shrinks as ranks are added (65536 / (ranks - 1) bytes): both sides of
    it, at the default settings."""
    assert run_ranks(shm_workers.one_shot_limit_by_rank_count, size, timeout=240) == [[]] * size


@pytest.mark.parametrize("registered", [False, True], ids=["copied", "registered"])
def test_helper_threads_give_the_same_bits(monkeypatch, registered):
    """Large messages split across helper threads (CCL_CORE_THREADS=2) give the bits one thread gives, on every path,
    the copying and the in-place ones, up to outputs stored past the caches (8 MiB and more)."""
    results = {}
    for threads in ("1", "2"):
        monkeypatch.setenv("CCL_CORE_THREADS", threads)
        per_rank = run_ranks(shm_workers.large_ops_digests, 2, registered, timeout=300)
        for digests, bad, in_place_ops in per_rank:
            assert bad == [], bad
            assert (in_place_ops > 0) == registered, in_place_ops
        assert per_rank[0][0] == per_rank[1][0]  # every rank holds the same bits
        results[threads] = per_rank[0][0]
    assert results["1"] == results["2"]
