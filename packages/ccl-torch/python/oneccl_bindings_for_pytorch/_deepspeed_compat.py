"""DeepSpeed on the `ccl` backend takes the path it takes on gloo: its own torch.distributed wrapper.

DeepSpeed's CPU accelerator names the backend `ccl` whenever this package imports, and for that name
`deepspeed.init_distributed` first builds its own `CCLBackend` (deepspeed/comm/ccl.py): it JIT-compiles a oneCCL op,
creates the process group at once and sends some collectives through the op. Users of that path meet defects gloo
users never see, each written up for DeepSpeed in docs/:
- `all_reduce(async_op=True)` returns the op's None: ZeRO-3's parameter fetch by all-reduce calls .wait() on it
  (docs/deepspeed-ccl-all-reduce.md); its 16-bit sums round unlike torch's on CPUs without AVX-512 (same file);
- `get_all_ranks_from_group` never ends for the world group: ZeRO-3 hangs, then is OOM-killed
  (docs/deepspeed-zero3-fix.md);
- `init_distributed(dist_init_required=False)` without a group creates one (and waits for peers that never come)
  instead of raising, and with a group the user made first it still runs MPI discovery, which needs mpi4py
  (docs/deepspeed-ccl-eager-init.md).

Two narrow changes make DeepSpeed run on `ccl` exactly as on gloo, with this backend under torch.distributed:
1. `CCLBackend.__init__` leaves the backend uninitialised, the state DeepSpeed itself gives it when its oneCCL op
   cannot be built. `init_distributed` then creates its `TorchBackend` on the `ccl` process group, as for gloo.
2. A `TorchBackend` on `ccl` does not build DeepSpeed's shared-memory op (another JIT build, which bypasses the
   backend and faulted on this machine in 0.19.8 on gloo), and its `inference_all_reduce` (what AutoTP's row-parallel
   layers call per layer) runs our registered op, torch.ops.ccl.all_reduce_: the backend's shared-memory path without
   torch.distributed's Python layer, within 1-2 µs of DeepSpeed's op in fp32 and running in bf16 on every CPU,
   where that op dies of SIGILL without AVX-512 (docs/performance.md, "Tensor-parallel latency").

Applied when `deepspeed.comm.ccl` is imported. Guarded: only DeepSpeed versions up to the one we test (FIXED_UP_TO),
and each method only while it still looks as described; anything else is left exactly as DeepSpeed ships it.
CCL_DEEPSPEED_COMPAT=0 turns the fixes off.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import os
import sys

MODULE = "deepspeed.comm.ccl"
FIXED_UP_TO = (0, 19)  # the pinned deepspeed==0.19.8 is tested (tests/field/test_deepspeed*.py)


def _calls(method, name: str) -> bool:
    code = getattr(method, "__code__", None)
    return code is not None and name in code.co_names


def _uninitialised(self, *args, **kwargs):
    """DeepSpeed's CCLBackend as when its oneCCL op is unavailable: init_distributed goes on with TorchBackend."""
    self.initialized = False


@contextlib.contextmanager
def _without_shm_op(torch_module):
    build = torch_module.build_shm_op
    torch_module.build_shm_op = lambda: None
    try:
        yield
    finally:
        torch_module.build_shm_op = build


def _registered_op_all_reduce(backend):
    """TorchBackend.inference_all_reduce on the registered op (the instance's own attribute: other backends keep
    DeepSpeed's method). Called once per layer per token: it does no more Python than it must (the op's name is
    looked up once per DeepSpeed op; dist.get_world_size alone costs more than the collective's dispatch)."""
    import torch
    import torch.distributed as dist

    all_reduce_ = torch.ops.ccl.all_reduce_.default
    names = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.AVG: "avg", dist.ReduceOp.PRODUCT: "product",
             dist.ReduceOp.MIN: "min", dist.ReduceOp.MAX: "max"}
    known = {}  # DeepSpeed's op -> our op's name, or "" where torch.distributed must do it (e.g. PREMUL_SUM)

    def name_of(op):
        try:
            return known[op]
        except KeyError:
            torch_op = backend._reduce_op(op)
            known[op] = next((n for o, n in names.items() if torch_op == o), "")
            return known[op]

    def inference_all_reduce(tensor, op, group=None):
        pg = dist.group.WORLD if group is None else group
        if pg.size() <= 1:
            return tensor
        name = name_of(op)
        if not name:
            return dist.all_reduce(tensor, op=backend._reduce_op(op), group=group)
        all_reduce_(tensor, pg.group_name, name)
        return tensor

    return inference_all_reduce


def _torch_backend_init(original, torch_module):
    @functools.wraps(original)
    def __init__(self, backend, *args, **kwargs):
        if backend != "ccl":
            return original(self, backend, *args, **kwargs)
        with _without_shm_op(torch_module):
            original(self, backend, *args, **kwargs)
        if callable(getattr(self, "inference_all_reduce", None)) and callable(getattr(self, "_reduce_op", None)):
            self.inference_all_reduce = _registered_op_all_reduce(self)

    __init__._ccl_torch_fixed = True
    return __init__


def fix_module(module) -> bool:
    """Apply the fixes to an imported deepspeed.comm.ccl; True when any was applied."""
    ccl_backend = getattr(module, "CCLBackend", None)
    torch_backend = getattr(module, "TorchBackend", None)
    try:  # from the metadata: the hook runs while deepspeed/__init__ is still importing, before __version__ exists
        from importlib.metadata import version as installed_version

        from packaging.version import Version  # a dependency of DeepSpeed itself

        version = Version(installed_version("deepspeed")).release[:2]
    except Exception:  # noqa: BLE001 - an unknown DeepSpeed is left alone
        return False
    if ccl_backend is None or version > FIXED_UP_TO:
        return False
    fixed = False
    if _calls(ccl_backend.__init__, "build_ccl_op"):
        ccl_backend.__init__ = _uninitialised
        fixed = True
    torch_module = sys.modules.get(getattr(torch_backend, "__module__", ""))
    if (torch_backend is not None and _calls(torch_backend.__init__, "build_shm_op")
            and callable(getattr(torch_module, "build_shm_op", None))):
        torch_backend.__init__ = _torch_backend_init(torch_backend.__init__, torch_module)
        fixed = True
    ccl_backend._ccl_torch_fixed = fixed
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
