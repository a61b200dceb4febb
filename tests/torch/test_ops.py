"""Every torch.distributed op on the ccl backend x dtypes x reduce ops, on 2 and 3 real ranks."""
import pytest

import op_workers
from pg import run_in_group


@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("worker", op_workers.ALL_WORKERS, ids=lambda f: f.__name__)
def test_op_matches_reference(worker, size):
    per_rank = run_in_group(worker, size)
    problems = [f"rank {r}: {p}" for r, bad in enumerate(per_rank) for p in bad]
    assert not problems, "\n".join(problems)
