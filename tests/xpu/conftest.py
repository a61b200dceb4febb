"""Every test here runs on the default SYCL device of the OpenCL CPU runtime when no other is chosen."""
import pytest


@pytest.fixture(autouse=True)
def sycl_cpu_device(monkeypatch):
    pytest.importorskip("ccl_xpu")
    from xpu_workers import opencl_cpu_env

    for key, value in opencl_cpu_env().items():
        monkeypatch.setenv(key, value)
