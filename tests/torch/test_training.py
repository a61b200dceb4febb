"""DDP, FSDP2 and compiled functional collectives on ccl give the same results as on gloo."""
import pytest

import training_workers as w
from pg import run_in_group


@pytest.mark.parametrize("with_hook", [False, True], ids=["plain", "comm_hook"])
def test_ddp_matches_gloo(with_hook):
    for max_diff, ranks_agree in run_in_group(w.ddp_matches_gloo, 2, with_hook):
        assert max_diff < 1e-6 and ranks_agree


@pytest.mark.parametrize("prefetch", [False, True], ids=["default", "async-prefetch"])
def test_fsdp2_fully_shard_matches_gloo(prefetch):
    for max_diff in run_in_group(w.fsdp2_matches_gloo, 2, prefetch):
        assert max_diff < 1e-6


def test_functional_collectives_in_torch_compile_match_gloo():
    for vs_gloo, vs_eager in run_in_group(w.compiled_functional_collectives, 2, test_timeout=400):
        assert vs_gloo == 0.0 and vs_eager == 0.0
