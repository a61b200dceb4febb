"""The original bindings' contract: errors that are ValueError and RuntimeError with its wording, uneven
reduce_scatter, recv without src. Nothing sourced (clean_env in the rank launcher)."""
import contract_workers as w
from pg import run_in_group
from ranks import run_ranks


def _run_direct(fn, size=2):
    """fn(rank, size, store_dir) on real ranks with no process group: it builds its own, as the original's tests did."""
    return run_ranks(fn, size, make_comm=False, timeout=90, preload_torch=True)


def test_argument_errors_are_value_and_runtime_errors_with_the_originals_wording():
    for rank, r in enumerate(_run_direct(w.original_argument_checks)):
        for name in ("root", "reduce root", "size", "dtype"):
            assert r[name] is not None and r[name]["value"] and r[name]["runtime"], (rank, name, r[name])
        assert "unexpected rank" in r["root"]["message"] and "-1" in r["root"]["message"], r["root"]
        assert "unexpected rank" in r["reduce root"]["message"], r["reduce root"]
        assert "output tensor size must be equal to world_size times input tensor size" in r["size"]["message"], r["size"]
        assert "Tensors are not equal in data type" in r["dtype"]["message"] and r["dtype"]["type"], r["dtype"]
        unsupported = r["unsupported dtype"]
        assert unsupported["type"] and unsupported["runtime"] and "Float8_e4m3fn" in unsupported["message"], unsupported
        assert r["sum"] == 1.0


def test_error_classes_are_exported_by_both_module_names():
    for r in run_in_group(w.error_classes, 2):
        assert r["argument"][:3] == ["ArgumentError", "ValueError", "RuntimeError"], r
        assert "TypeError" in r["dtype"] and "ArgumentError" in r["dtype"], r
        assert r["same in torch_ccl"] and r["module"] == "oneccl_bindings_for_pytorch"


def test_reduce_scatter_with_a_different_output_size_on_each_rank():
    for rank, rows in enumerate(run_in_group(w.uneven_reduce_scatter, 3)):
        for dtype, op, got, expected in rows:
            assert got == expected, (rank, dtype, op, got, expected)


def test_recv_without_src_returns_the_sender_as_gloo_does():
    ccl = run_in_group(w.recv_any_source, 3)
    gloo = run_in_group(w.recv_any_source, 3, backend="gloo")
    assert ccl == gloo, (ccl, gloo)
    assert ccl[0] == [(1, [1.0] * 3), (2, [2.0] * 3), ("named", 1, [10.0] * 3), ("any", 1, [11.0] * 3),
                      ("named", 1, [12.0] * 3)], ccl[0]


def test_irecv_without_src_on_every_rank_does_not_deadlock():
    results = run_in_group(w.pipeline_exchange_without_src, 3, timeout=30)
    assert results == [(2, [2.0, 2.0]), (0, [0.0, 0.0]), (1, [1.0, 1.0])], results


def test_recv_without_any_sender_times_out_without_spinning():
    (message, elapsed, cpu), total = run_in_group(w.recv_without_sender_times_out, 2, timeout=3)[0]
    assert message.startswith("DistBackendError") and "no rank sent to rank 0 within 3000 ms" in message, message
    assert elapsed >= 3.0 and cpu < 0.3, (elapsed, cpu)
    assert total == 2.0
