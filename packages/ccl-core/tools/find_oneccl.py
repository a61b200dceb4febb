"""Print oneCCL's include and library directories (one per line) for meson.

With a prefix argument, use that installation (e.g. a oneAPI install); otherwise the PyPI wheels installed in this
Python environment: oneccl-cpu (libccl.so.1) and oneccl-cpu-devel (oneapi/ccl.hpp), or the SYCL-enabled oneccl and
oneccl-devel that an Intel GPU set-up (ccl-xpu) installs instead.
"""
import sys
from importlib import metadata
from pathlib import Path


def installed(dist_name: str) -> bool:
    try:
        metadata.distribution(dist_name)
        return True
    except metadata.PackageNotFoundError:
        return False


def find_in_wheel(dist_name: str, file_name: str) -> Path:
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        sys.exit(f"find_oneccl: the Python package '{dist_name}' is not installed; "
                 f"install the pinned oneCCL wheels or pass -Doneccl_prefix=DIR")
    for f in dist.files or []:
        if f.name == file_name:
            return Path(dist.locate_file(f)).resolve()
    sys.exit(f"find_oneccl: '{dist_name}' has no file {file_name}")


def main() -> None:
    prefix = sys.argv[1] if len(sys.argv) > 1 else ""
    if prefix:
        include, lib = Path(prefix, "include"), Path(prefix, "lib")
        if not (include / "oneapi" / "ccl.hpp").is_file():
            sys.exit(f"find_oneccl: {include}/oneapi/ccl.hpp does not exist")
    else:
        runtime, devel = ("oneccl-cpu", "oneccl-cpu-devel") if installed("oneccl-cpu") else ("oneccl", "oneccl-devel")
        include = find_in_wheel(devel, "ccl.hpp").parent.parent
        lib = find_in_wheel(runtime, "libccl.so.1").parent
    print(include)
    print(lib)


if __name__ == "__main__":
    main()
