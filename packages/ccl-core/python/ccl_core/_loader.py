"""Make oneCCL loadable without LD_LIBRARY_PATH or an environment script.

Our libraries carry an RPATH to <prefix>/lib, where the oneccl-cpu wheel installs libccl.so.1. When the
package lives elsewhere (pip --target, unusual layouts), load libccl by its full path first; the dynamic
loader then reuses it for our extension.
"""
import ctypes
import os
from importlib import metadata
from pathlib import Path


def oneccl_library_candidates():
    try:
        files = metadata.distribution("oneccl-cpu").files or []
    except metadata.PackageNotFoundError:
        return []
    dist = metadata.distribution("oneccl-cpu")
    return [Path(dist.locate_file(f)) for f in files if f.name == "libccl.so.1"]


def preload_oneccl():
    """Load libccl.so.1 globally if the wheel is found; return its path or None."""
    for path in oneccl_library_candidates():
        if path.is_file():
            ctypes.CDLL(os.fspath(path), mode=ctypes.RTLD_GLOBAL)
            return path
    return None
