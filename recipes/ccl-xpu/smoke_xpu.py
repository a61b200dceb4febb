"""2-rank smoke test of the conda package: the torch plugin is registered, and where oneCCL's device path can run
(an Intel GPU machine) an allreduce on the default SYCL device; elsewhere it says why not."""
import numpy as np

import ccl_core
import ccl_xpu

comm = ccl_core.init_from_env()
problem = ccl_xpu.device_path_problem()
if problem:
    print(f"ccl-xpu smoke test: rank {comm.rank}: device path not run here: {problem}")
else:
    import os, tempfile
    q = ccl_xpu.Queue()
    store_dir = os.path.join(tempfile.gettempdir(), f"ccl-xpu-smoke-{os.environ.get('MASTER_PORT', '29500')}")
    dev = ccl_xpu.DeviceCommunicator(ccl_core.FileStore(store_dir), comm.rank, comm.size, q)
    x = q.usm(1024)
    np.asarray(x)[:] = comm.rank + 1
    dev.allreduce(x, x)
    assert np.all(np.asarray(x) == sum(range(1, comm.size + 1)))
    print(f"ccl-xpu smoke test: rank {comm.rank}: allreduce on {q.device_name} ok")
try:
    import torch  # noqa: F401
except ImportError:
    torch = None
if torch is not None:
    import oneccl_bindings_for_pytorch

    assert "xpu" in oneccl_bindings_for_pytorch.device_plugins(), oneccl_bindings_for_pytorch.device_plugins()
    print(f"ccl-xpu smoke test: rank {comm.rank}: the ccl backend serves xpu through the plugin")
comm.barrier()
