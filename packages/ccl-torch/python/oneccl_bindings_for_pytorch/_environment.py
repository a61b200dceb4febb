"""Where the oneCCL that this package runs on lives, and the variables that building against it needs.

Users of the original sourced env/setvars.sh before anything worked. Here nothing needs sourcing: oneCCL is
found through RPATH. But programs that compile their own oneCCL code at run time (DeepSpeed's CCLCommBuilder
JIT-builds csrc/cpu/comm/ccl.cpp) still look for CCL_ROOT and for oneapi/ccl.hpp on the include path; on import we
point them at the pip/conda oneCCL, unless the user chose a oneCCL of their own.
"""
from __future__ import annotations

import os
from pathlib import Path


def oneccl_prefix() -> Path | None:
    """The install prefix holding lib/libccl.so.1 and include/oneapi/ccl.hpp (the venv or conda env), or None
    when the loaded oneCCL has no headers beside it."""
    import ccl_core

    library = ccl_core.oneccl_library_path()
    if not library:
        return None
    prefix = Path(library).parent.parent
    return prefix if (prefix / "include" / "oneapi" / "ccl.hpp").is_file() else None


def _append_path(environ, name: str, directory: Path) -> None:
    parts = [p for p in environ.get(name, "").split(os.pathsep) if p]
    if str(directory) not in parts:
        environ[name] = os.pathsep.join(parts + [str(directory)])


def set_build_defaults(environ=os.environ) -> None:
    """CCL_ROOT, and our include and lib directories at the end of CPATH and LIBRARY_PATH, for compilers started
    later by this process. A CCL_ROOT the user set means they chose their own oneCCL: then nothing is touched."""
    prefix = None if "CCL_ROOT" in environ else oneccl_prefix()
    if prefix is None:
        return
    environ["CCL_ROOT"] = str(prefix)
    _append_path(environ, "CPATH", prefix / "include")
    _append_path(environ, "LIBRARY_PATH", prefix / "lib")
