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
    """libccl.so.1 of oneccl-cpu, or of the SYCL-enabled oneccl (Intel GPU set-ups)."""
    for name in ("oneccl-cpu", "oneccl"):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        return [Path(dist.locate_file(f)) for f in dist.files or [] if f.name == "libccl.so.1"]
    return []


def preload_oneccl():
    """Load libccl.so.1 globally if the wheel is found; return its path or None.

    The SYCL-enabled build needs libccl.so.2 and Intel's compiler runtime from its own directory but carries no
    RUNPATH, and our RUNPATH does not extend to the libraries we load: whatever the loader reports missing is loaded
    first from the same directory, then libccl.so.1 again."""
    for path in oneccl_library_candidates():
        if path.is_file():
            _load_with_missing_neighbours(path)
            return path
    return None


def _load_with_missing_neighbours(path: Path) -> None:
    for _ in range(16):
        try:
            ctypes.CDLL(os.fspath(path), mode=ctypes.RTLD_GLOBAL)
            return
        except OSError as e:
            missing = str(e).split(":")[0].strip()
            beside = path.parent / missing
            if not missing or "/" in missing or not beside.is_file():
                raise
            _load_with_missing_neighbours(beside)
