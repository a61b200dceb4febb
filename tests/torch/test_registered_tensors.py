"""Registered memory for torch: the ccl backend's allocate_tensor (what FSDP2 asks for with
set_allocate_memory_from_process_group_for_comm) gives CPU tensors in shared memory, and collectives whose tensors are
registered on every rank read their peers' tensors in place, with the same results as gloo and as ordinary tensors."""
import pytest
from torch.distributed import ReduceOp

import registered_tensor_workers as w
from pg import run_in_group


def expected_in_place(mode: str, size: int) -> set[str]:
    """registered on every rank: every call but the small all_reduces (up to 64 KiB they stay on the shared segment's
    slots, which costs fewer synchronisations). mixed (rank 0's tensors only): the broadcasts from rank 0 alone (only
    the root's tensor is read)."""
    cases = set()
    for n in w.SIZES:
        for dtype in w.DTYPES:
            ops = [ReduceOp.SUM, ReduceOp.MAX] + ([ReduceOp.AVG] if dtype.is_floating_point else [])
            if mode == "registered":
                if n * dtype.itemsize > 64 * 1024:
                    cases |= {f"all_reduce {n} {dtype} {op}" for op in ops}
                cases |= {f"reduce_scatter_tensor {n} {dtype} {op}" for op in ops}
                cases.add(f"all_gather_into_tensor {n} {dtype}")
            cases |= {f"broadcast {n} {dtype} from {root}" for root in range(size) if mode == "registered" or root == 0}
    return cases


@pytest.mark.parametrize("mode", ["registered", "mixed"])
def test_every_op_and_dtype_on_registered_tensors_matches_gloo(mode):
    for rank, (differ, in_place) in enumerate(run_in_group(w.every_op, 2, mode, test_timeout=300)):
        assert not differ, (rank, differ[:10])
        want = expected_in_place(mode, 2)
        assert in_place == want, (rank, sorted(in_place ^ want)[:10])


def test_three_ranks_registered_match_gloo():
    for rank, (differ, in_place) in enumerate(run_in_group(w.every_op, 3, "registered", test_timeout=300)):
        assert not differ, (rank, differ[:10])
        assert in_place == expected_in_place("registered", 3), rank


def test_fsdp2_with_buffers_from_the_group_matches_gloo_to_the_bit():
    gloo = run_in_group(w.fsdp_steps, 2, "gloo", False)
    plain = run_in_group(w.fsdp_steps, 2, "ccl", False)
    registered = run_in_group(w.fsdp_steps, 2, "ccl", True)
    assert [r[:2] for r in registered] == [r[:2] for r in gloo] == [r[:2] for r in plain]
    # with the flag, FSDP2's all-gathers and reduce-scatters read the peers' buffers in place; without, none do
    assert all(r[2] > 0 for r in registered) and all(r[2] == 0 for r in plain), (registered, plain)
