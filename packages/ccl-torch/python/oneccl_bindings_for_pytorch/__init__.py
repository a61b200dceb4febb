"""The `ccl` backend of torch.distributed for CPU tensors, on oneCCL (a drop-in for Intel's deprecated
oneccl_bindings_for_pytorch).

    import torch.distributed as dist
    dist.init_process_group("ccl")           # no import needed: registered when torch is imported

`import oneccl_bindings_for_pytorch` (or `import torch_ccl`) also registers it, as with the original.
"""
import importlib as _importlib
import os as _os
import sys as _sys
from importlib import metadata as _metadata

from ._build_info import __version__, built_for_torch


def _minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def _supported() -> str:
    return ", ".join(sorted(built_for_torch, key=lambda m: tuple(map(int, m.split(".")))))


# Checked before torch is imported: a torch this package has no extension for may not even import beside it.
try:
    _installed_torch = _metadata.version("torch")
except _metadata.PackageNotFoundError:
    raise ImportError(f"ccl-torch {__version__} runs on torch {_supported()}, and torch is not installed: "
                      f"pip install torch (or pip install 'ccl-torch[torch]')") from None
if _minor(_installed_torch) not in built_for_torch:
    raise ImportError(
        f"ccl-torch {__version__} runs on torch {_supported()}, but torch {_installed_torch} is installed: install "
        f"one of those torch releases, or build ccl-torch from source against this one "
        f"(pip install --no-build-isolation --no-binary ccl-torch ccl-torch)")

import torch as _torch  # noqa: E402

import ccl_core as _ccl_core  # noqa: E402,F401  (loads oneCCL and libccl_core before our extension)

# The extension compiled for this torch minor, known as ._C to the rest of the package (and to code that used the
# original's oneccl_bindings_for_pytorch._C).
_C = _importlib.import_module(f".{'_C_torch' + _minor(_installed_torch).replace('.', '_')}", __name__)
_sys.modules[f"{__name__}._C"] = _C
built_with_torch = built_for_torch[_minor(_installed_torch)]

from ._C import ArgumentError, DTypeError, ProcessGroupCCL  # noqa: E402
from ._registration import register  # noqa: E402
from . import _deepspeed_compat, _environment  # noqa: E402

# The package directory: the original exposed it for its env/setvars.sh.
cwd = _os.path.dirname(_os.path.abspath(__file__))


def device_plugins() -> dict:
    """Device types served through plugins, e.g. {'xpu': 'ccl-xpu 0.1.0 (...)'}; CPU is built in."""
    return dict(_C._device_plugins())


def explain() -> str:
    """Where the ranks of every ccl group of this process are: each rank's last op, and how long ago (the report a
    timeout's error carries, and SIGUSR1 prints). Printed to stderr and returned; the job goes on."""
    report = _C._explain()
    _sys.stderr.write(report)
    return report


def get_include() -> str:
    """Directory of ccl_torch/device_plugin.hpp, for building a device plugin."""
    return _os.path.join(cwd, "include")


register()
_environment.set_build_defaults()  # CCL_ROOT, CPATH, LIBRARY_PATH for run-time builds (DeepSpeed), never overriding
_deepspeed_compat.install()

__all__ = ["ArgumentError", "DTypeError", "ProcessGroupCCL", "__version__", "built_for_torch", "built_with_torch", "cwd", "device_plugins", "explain", "get_include", "register"]
