"""Print, one per line, what meson needs to build ccl-xpu against the installed wheels: the SYCL include and library
directories (intel-sycl-rt) and oneCCL's (the SYCL-enabled oneccl / oneccl-devel; oneccl-cpu has no device path)."""
import sys
from importlib import metadata
from pathlib import Path


def locate(dist_name: str, file_name: str) -> Path:
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        sys.exit(f"find_sycl: the Python package '{dist_name}' is not installed (ccl-xpu builds against "
                 "intel-sycl-rt, oneccl and oneccl-devel)")
    for f in dist.files or []:
        if str(f).replace("\\", "/").endswith(file_name):
            return Path(dist.locate_file(f)).resolve()
    sys.exit(f"find_sycl: '{dist_name}' has no file {file_name}")


print(locate("intel-sycl-rt", "sycl/sycl.hpp").parent.parent)
print(locate("intel-sycl-rt", "/libsycl.so").parent)
print(locate("oneccl-devel", "oneapi/ccl.hpp").parent.parent)
print(locate("oneccl", "libccl.so.1").parent)
