"""torch.ops.ccl: the collectives as registered torch ops (packages/ccl-torch/src/registered_ops.cpp), for
tensor-parallel inference and compiled code."""
import pytest

import registered_op_workers as w
from pg import run_in_group


@pytest.mark.parametrize("size", [2, 3])
def test_all_reduce_op_reduces_in_place_in_every_dtype(size):
    for bad, calls, counted in run_in_group(w.all_reduce_every_dtype_and_op, size, test_timeout=180):
        assert not bad, bad
        assert counted == calls  # each op is one step of the group's sequence, on the fast path too


def test_all_reduce_op_on_a_subgroup_and_on_a_gloo_group():
    out = run_in_group(w.all_reduce_on_a_subgroup_and_on_gloo, 3)
    assert [o.get("sub") for o in out] == [3.0, 3.0, None]
    assert [o["gloo"] for o in out] == [3.0] * 3


def test_all_gather_into_tensor_op_in_every_dtype():
    for bad, calls, counted in run_in_group(w.all_gather_into_tensor, 3, test_timeout=120):
        assert not bad, bad
        assert counted == calls


def test_the_op_makes_one_graph_without_a_break():
    assert run_in_group(w.explain_counts_no_break, 2) == [(1, 0)] * 2


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_with_fullgraph_the_op_and_functional_collectives_match_eager(backend):
    assert run_in_group(w.compiled_layer, 2, backend, test_timeout=300) == [(True, True)] * 2


def test_bad_input_raises_a_clear_error_on_every_rank():
    first, second = run_in_group(w.bad_input, 2)
    assert first == second
    assert first["op"][0] == "ValueError" and "unknown reduce op 'median'" in first["op"][1]
    assert first["group"][0] == "ValueError" and "no process group is named 'no-such-group'" in first["group"][1]
    assert first["avg of ints"] is not None and "avg" in first["avg of ints"][1].lower()
    assert first["gather size"] is not None
    assert first["after"] == 1.0


def test_a_missing_peer_ends_in_a_timeout_error():
    caught = run_in_group(w.missing_peer, 2)[0]
    assert caught[0] == "DistBackendError", caught
    assert caught[1] < 3 + 10, caught  # the group's 3 s timeout, with headroom for a loaded machine
    assert "did not complete within 3000 ms" in caught[2], caught


def test_deepspeed_inference_all_reduce_runs_the_registered_op():
    pytest.importorskip("deepspeed")
    for rank, (sums, via_op) in enumerate(run_in_group(w.deepspeed_inference_all_reduce, 2, test_timeout=180)):
        assert sums == [3.0, 3.0, 1.5, 2.0, rank + 1.0]  # fp32 and bf16 sums, avg on a group, max, a 1-rank group
        assert via_op


def test_torchs_flight_recorder_sees_every_op_complete():
    import torch

    if tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 15):
        pytest.skip("torch attaches its flight recorder to every group from 2.15 on")
    assert run_in_group(w.flight_recorder_entries, 2) == [["completed"] * 3] * 2
