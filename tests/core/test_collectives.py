"""Every collective x every dtype x every reduce op it allows, on 2 and 3 real ranks, against NumPy."""
import pytest

import collective_workers
from ranks import run_ranks


@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("worker", collective_workers.ALL, ids=lambda f: f.__name__)
def test_collective_matches_numpy(worker, size):
    per_rank = run_ranks(worker, size)
    mismatches = [f"rank {r}: {m}" for r, bad in enumerate(per_rank) for m in bad]
    assert not mismatches, "\n".join(mismatches)
