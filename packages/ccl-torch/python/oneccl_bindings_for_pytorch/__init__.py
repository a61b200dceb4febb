"""The `ccl` backend of torch.distributed for CPU tensors, on oneCCL (a drop-in for Intel's deprecated
oneccl_bindings_for_pytorch).

    import torch.distributed as dist
    dist.init_process_group("ccl")           # no import needed: registered when torch is imported

`import oneccl_bindings_for_pytorch` (or `import torch_ccl`) also registers it, as with the original.
"""
import os as _os
from importlib import metadata as _metadata

from ._build_info import __version__, built_with_torch


def _minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


# Checked before torch is imported: a torch of another minor may not even import beside this extension.
_installed_torch = _metadata.version("torch")
if _minor(_installed_torch) != _minor(built_with_torch):
    raise ImportError(
        f"oneccl_bindings_for_pytorch {__version__} was built for torch {built_with_torch}, but torch "
        f"{_installed_torch} is installed; install ccl-torch=={_minor(_installed_torch)}.* (one release per torch "
        f"minor), or torch=={_minor(built_with_torch)}.*, or rebuild: pip install --no-build-isolation ccl-torch")

import torch as _torch  # noqa: E402

import ccl_core as _ccl_core  # noqa: E402,F401  (loads oneCCL and libccl_core before our extension)

from . import _C  # noqa: E402
from ._C import ArgumentError, DTypeError, ProcessGroupCCL  # noqa: E402
from ._registration import register  # noqa: E402
from . import _deepspeed_compat, _environment  # noqa: E402

# The package directory: the original exposed it for its env/setvars.sh.
cwd = _os.path.dirname(_os.path.abspath(__file__))


def device_plugins() -> dict:
    """Device types served through plugins, e.g. {'xpu': 'ccl-xpu 0.1.0 (...)'}; CPU is built in."""
    return dict(_C._device_plugins())


def get_include() -> str:
    """Directory of ccl_torch/device_plugin.hpp, for building a device plugin."""
    return _os.path.join(cwd, "include")


register()
_environment.set_build_defaults()  # CCL_ROOT, CPATH, LIBRARY_PATH for run-time builds (DeepSpeed), never overriding
_deepspeed_compat.install()

__all__ = ["ArgumentError", "DTypeError", "ProcessGroupCCL", "__version__", "built_with_torch", "cwd", "device_plugins", "get_include", "register"]
