"""ccl-core's reduction kernels at every instruction-set level this machine has: each level's results, on 2 and 3
real ranks, equal torch (floats) or NumPy (integers) reducing the ranks' inputs in rank order, bit for bit; float16
and bfloat16 accumulate in float32 and round once. Also the level switch and 4 and 8 ranks."""
import functools
import subprocess
import sys

import numpy as np
import pytest
import torch

import ccl_core
import kernel_workers as kw_
import shm_workers
from dtypes import FLOATING, storage
from ranks import clean_env, run_ranks

LEVELS = ccl_core.supported_kernel_levels()
TORCH_DTYPE = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
               "float64": torch.float64}


def float_reference(arrays, dtype, op, size):
    """torch, rank by rank: 16-bit floats widened to float32, rounded once at the end."""
    t = TORCH_DTYPE[dtype]
    xs = [torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if dtype == "bfloat16" else torch.from_numpy(a)
          for a in arrays]
    wide = [x.float() if t in (torch.float16, torch.bfloat16) else x for x in xs]
    combine = {"sum": torch.add, "avg": torch.add, "prod": torch.mul, "min": torch.minimum, "max": torch.maximum}[op]
    acc = functools.reduce(combine, wide).to(t)
    if op == "avg":  # the sum as the dtype holds it, divided: float32 in double, 16-bit floats in float32
        acc = (acc.double() / size).float() if t == torch.float32 else (acc.float() / size).to(t) \
            if t != torch.float64 else acc / size
    return acc


def int_reference(arrays, op):
    ufunc = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}[op]
    with np.errstate(over="ignore"):
        return functools.reduce(ufunc, arrays)


def same_values(got: bytes, want, dtype) -> bool:
    """Bit-equal, except that a NaN only has to be a NaN (its payload is the CPU's)."""
    if dtype not in FLOATING:
        return got == want.tobytes()
    t = TORCH_DTYPE[dtype]
    g = torch.frombuffer(bytearray(got), dtype=t) if got else torch.empty(0, dtype=t)
    if not torch.equal(torch.isnan(g), torch.isnan(want)):
        return False
    keep = ~torch.isnan(want)
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[g.element_size()]
    return torch.equal(g[keep].view(bits), want[keep].view(bits))


@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("level", LEVELS)
def test_every_level_dtype_op_and_length_is_bit_exact(monkeypatch, level, size):
    monkeypatch.setenv("CCL_CORE_KERNEL", level)
    seed = 7
    per_rank = run_ranks(kw_.every_dtype_op_and_length, size, seed)
    assert all(r["level"] == level for r in per_rank), [r["level"] for r in per_rank]
    bad = []
    for case, _ in per_rank[0]["results"].items():
        dtype, op, n = case.split()
        arrays = [kw_.inputs(r, int(n), dtype, op, seed) for r in range(size)]
        want = float_reference(arrays, dtype, op, size) if dtype in FLOATING else \
            int_reference([a.astype(storage(dtype)) for a in arrays], op)
        for rank, r in enumerate(per_rank):
            out_of_place, in_place = r["results"][case]
            for name, got in (("out of place", out_of_place), ("in place", in_place)):
                if not same_values(got, want, dtype):
                    bad.append(f"{case} rank {rank} {name}")
    assert not bad, f"{len(bad)} mismatches at level {level}: {bad[:10]}"


def test_an_unknown_level_is_refused_on_every_rank_by_name(monkeypatch):
    monkeypatch.setenv("CCL_CORE_KERNEL", "avx9")
    with pytest.raises(AssertionError) as failure:
        run_ranks(kw_.every_dtype_op_and_length, 2, 1)
    text = str(failure.value)
    assert text.count("InvalidArgumentError") >= 2, text
    assert "CCL_CORE_KERNEL=avx9 is not a kernel level" in text and "baseline" in text, text


def test_info_names_the_level_in_use():
    for level in LEVELS:
        out = subprocess.run([sys.executable, "-m", "ccl_core.info"], env={**clean_env(), "CCL_CORE_KERNEL": level},
                             capture_output=True, text=True, check=True).stdout
        assert f"kernels       {level} (this CPU: {', '.join(LEVELS)})" in out, out


@pytest.mark.parametrize("size", [4, 8])
def test_four_and_eight_ranks_on_the_shared_memory_path(monkeypatch, size):
    """More ranks than this machine's 2 cores: correctness, with small segments so that every path runs."""
    monkeypatch.setenv("CCL_CORE_SHM_SEGMENT_BYTES", "4096")
    monkeypatch.setenv("CCL_CORE_SHM_SMALL_BYTES", "256")
    per_rank = run_ranks(shm_workers.sizes_dtypes_ops, size, timeout=300)
    problems = [f"rank {r}: {m}" for r, bad in enumerate(per_rank) for m in bad]
    assert not problems, "\n".join(problems[:20])
