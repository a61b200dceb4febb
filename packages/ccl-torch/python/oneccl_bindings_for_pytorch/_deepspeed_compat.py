"""Narrow fixes for DeepSpeed bugs that only users of the `ccl` backend reach (docs/deepspeed-zero3-fix.md).

1. DeepSpeed's `CCLBackend.get_all_ranks_from_group` (deepspeed/comm/ccl.py) lists a group's ranks by calling
`torch.distributed.get_global_rank(group, r)` for r = 0, 1, 2, ... until it raises. For the world group torch
returns r unchanged and never raises, so the list grows until the process runs out of memory: ZeRO-3, which
passes the world group explicitly, hangs and then is OOM-killed. The original bindings hit this too.

We replace that method by one that asks torch for the group's ranks.

2. `CCLBackend.all_reduce` and `inference_all_reduce` run DeepSpeed's own JIT-built oneCCL op instead of
torch.distributed: `all_reduce(async_op=True)` returns that op's None, which ZeRO-3's parameter fetch calls .wait()
on, and without LOCAL_SIZE set the op falls back to oneCCL's own 16-bit reductions, which on CPUs without AVX-512
do not round as torch does (bf16 sums differ from gloo's in the last bit). We send both through torch.distributed,
that is through this backend: a real Work, torch's rounding, and the shared-memory path.

Applied when `deepspeed.comm.ccl` is imported. Guarded: only DeepSpeed versions up to the one we test (FIXED_UP_TO),
and each method only while it still looks as described; anything else is left exactly as DeepSpeed ships it.
CCL_DEEPSPEED_COMPAT=0 turns the fixes off.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

MODULE = "deepspeed.comm.ccl"
FIXED_UP_TO = (0, 19)  # the pinned deepspeed==0.19.8 is tested (tests/field/test_deepspeed.py)


def _has_probing_loop(method) -> bool:
    code = getattr(method, "__code__", None)
    return code is not None and "get_global_rank" in code.co_names and "get_process_group_ranks" not in code.co_names


def _get_all_ranks_from_group(self, group):
    """The group's global ranks, from torch (DeepSpeed's own bookkeeping of sub-communicators kept as is)."""
    import torch.distributed as dist

    if group is None:
        return list(range(self.get_world_size()))
    ranks = dist.get_process_group_ranks(group)
    if tuple(ranks) not in self.groups:
        self._new_group(ranks, group)
    return ranks


def _uses_jit_op(method) -> bool:
    code = getattr(method, "__code__", None)
    return code is not None and "ccl_comm_op" in code.co_names


def _all_reduce(self, tensor, op=None, group=None, async_op=False):
    """torch.distributed.all_reduce on the ccl backend (a real Work when async_op)."""
    import torch.distributed as dist

    return dist.all_reduce(tensor, op=self._reduce_op(op) if op is not None else dist.ReduceOp.SUM, group=group,
                           async_op=async_op)


def _inference_all_reduce(self, tensor, op=None, group=None):
    """The same blocking all_reduce: the ccl backend's shared-memory path already is DeepSpeed's low-latency one."""
    _all_reduce(self, tensor, op, group)


def fix_module(module) -> bool:
    """Apply the fixes to an imported deepspeed.comm.ccl; True when any was applied."""
    backend = getattr(module, "CCLBackend", None)
    try:  # from the metadata: the hook runs while deepspeed/__init__ is still importing, before __version__ exists
        from importlib.metadata import version as installed_version

        from packaging.version import Version  # a dependency of DeepSpeed itself

        version = Version(installed_version("deepspeed")).release[:2]
    except Exception:  # noqa: BLE001 - an unknown DeepSpeed is left alone
        return False
    if backend is None or version > FIXED_UP_TO:
        return False
    fixed = False
    if _has_probing_loop(backend.get_all_ranks_from_group):
        backend.get_all_ranks_from_group = _get_all_ranks_from_group
        fixed = True
    for name, replacement in (("all_reduce", _all_reduce), ("inference_all_reduce", _inference_all_reduce)):
        if _uses_jit_op(getattr(backend, name, None)):
            setattr(backend, name, replacement)
            fixed = True
    backend._ccl_torch_fixed = fixed
    return fixed


class _FixOnImport(importlib.abc.MetaPathFinder):
    """Finds deepspeed.comm.ccl like the normal path finder, and applies the fix right after it executes."""

    def find_spec(self, name, path, target=None):
        if name != MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            fix_module(module)

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    if os.environ.get("CCL_DEEPSPEED_COMPAT", "1") == "0":
        return
    if MODULE in sys.modules:
        fix_module(sys.modules[MODULE])
    elif not any(isinstance(f, _FixOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _FixOnImport())
