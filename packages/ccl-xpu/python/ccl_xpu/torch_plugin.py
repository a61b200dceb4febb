"""The `xpu` device of the `ccl` backend. ccl-torch calls register() at import time through the entry point
`oneccl_bindings_for_pytorch.device_plugins: xpu`; the C++ side (_torch_plugin_2_X, one per torch minor) calls back into the helpers below
for what only torch's Python API offers on a CPU-only torch build (no libc10_xpu to link against)."""
from __future__ import annotations

import ccl_xpu


def register() -> None:
    import importlib
    import pkgutil

    from oneccl_bindings_for_pytorch import _C

    # the plugin compiled for the torch minor ccl-torch runs on (its extension is _C_torch2_15 for torch 2.15)
    minor = _C.__name__.rsplit("_C_torch", 1)[1]
    built = sorted((m.name.removeprefix("_torch_plugin_") for m in pkgutil.iter_modules(ccl_xpu.__path__)
                    if m.name.startswith("_torch_plugin_")), key=lambda m: tuple(map(int, m.split("_"))))
    if minor not in built:
        raise ImportError(f"ccl-xpu {ccl_xpu.__version__} has its torch plugin for torch "
                          f"{', '.join(b.replace('_', '.') for b in built) or 'no release'}, not for the installed "
                          f"torch {minor.replace('_', '.')}: the xpu device of the ccl backend is unavailable")
    plugin = importlib.import_module(f"._torch_plugin_{minor}", __package__)
    _C._register_device_plugin("xpu", plugin.capsule(ccl_xpu.__version__))
    warn_about_unsupported_options()


def warn_about_unsupported_options() -> None:
    """Launch options of the original bindings that this plugin does not follow say so, instead of being ignored."""
    import os
    import warnings

    if os.environ.get("CCL_SAME_STREAM") == "0":
        warnings.warn("ccl-xpu: CCL_SAME_STREAM=0 is not supported: collectives on XPU tensors are always ordered on "
                      "the current stream (as with CCL_SAME_STREAM=1)", RuntimeWarning, stacklevel=2)
    if os.environ.get("TORCH_LLM_ALLREDUCE", "0") not in ("", "0"):
        warnings.warn("ccl-xpu: TORCH_LLM_ALLREDUCE is ignored: its hand-written SYCL allreduce kernels are not part "
                      "of ccl-xpu; allreduce runs through oneCCL", RuntimeWarning, stacklevel=2)


def check_usable(index: int) -> None:
    """Raise, saying what is missing, unless XPU tensors of device `index` can take part in collectives here."""
    import torch

    if not hasattr(torch, "xpu") or not torch.xpu.is_available():
        raise RuntimeError(
            "ccl-xpu: no XPU is available to this process: torch.xpu.is_available() is False (a CPU-only torch "
            "build, no Intel GPU, or no GPU driver); XPU tensors need an XPU build of torch on an Intel GPU machine")
    problem = ccl_xpu.device_path_problem()
    if problem:
        raise RuntimeError(f"ccl-xpu: {problem}")
    if index >= torch.xpu.device_count():
        raise RuntimeError(f"ccl-xpu: xpu:{index} does not exist ({torch.xpu.device_count()} XPU device(s))")


def current_queue(index: int) -> int:
    """Address of the sycl::queue of the current XPU stream of device `index` (-1: the current device)."""
    import torch

    device = None if index < 0 else torch.device("xpu", index)
    return int(torch.xpu.current_stream(device).sycl_queue)
