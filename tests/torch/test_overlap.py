"""Background progress through torch.distributed: an isend moves while its sender computes, and a pipeline's
isend-then-recv exchange never deadlocks. CCL_CORE_PROGRESS=caller shows the difference."""
import pytest

import overlap_workers as w
from pg import run_in_group


def test_an_isend_moves_while_the_sender_computes():
    took, intact = run_in_group(w.isend_while_the_sender_computes, 2)[1]
    assert intact
    assert took < 0.5, took  # the sender computes for 1 s; the target is 50 ms


def test_without_the_thread_the_recv_waits_for_the_senders_wait(monkeypatch):
    monkeypatch.setenv("CCL_CORE_PROGRESS", "caller")
    took, intact = run_in_group(w.isend_while_the_sender_computes, 2)[1]
    assert intact and took >= 0.9, took


@pytest.mark.parametrize("size", [2, 3])
def test_a_pipeline_exchange_does_not_deadlock(size):
    assert run_in_group(w.pipeline_exchange, size) == [True] * size
