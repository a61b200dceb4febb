"""ccl-xpu: oneCCL's device path for Intel GPUs (SYCL USM memory ordered on a SYCL queue), and the `xpu` device of
ccl-torch's `ccl` backend (registered automatically when both are installed).

    import ccl_xpu, ccl_core
    q = ccl_xpu.Queue()                              # default SYCL device (ONEAPI_DEVICE_SELECTOR)
    comm = ccl_xpu.DeviceCommunicator(ccl_core.FileStore(d), rank, size, q)
    x = q.usm(1024)                                  # shared USM, readable as numpy.asarray(x)
    comm.allreduce(x, x)

device_path_problem() says what keeps oneCCL's device path from running on this machine ('' when nothing does).
"""
import ccl_core as _ccl_core  # noqa: F401  (loads oneCCL and libccl_core, and the Store types)

from ._ccl_xpu import DeviceCommunicator, Queue, Request, UsmBuffer, device_path_problem, devices  # noqa: E402
from ._version import __version__  # noqa: E402

__all__ = ["DeviceCommunicator", "Queue", "Request", "UsmBuffer", "__version__", "device_path_problem", "devices"]
