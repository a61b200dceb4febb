"""The XPU set (dist/xpu: ccl-core 0.1.0+xpu and ccl-xpu, built by ci/wheels where the Intel GPU stage is set up) in
a clean venv, as a user without a compiler gets it: `pip install ccl-xpu[torch]` beside the torch they have, binary
only, nothing sourced. The device collectives then run on the OpenCL CPU device (the one SYCL device without an
Intel GPU), and the torch plugin gives the `ccl` backend the xpu device. ci/test runs this in the Intel GPU stage."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clean_venvs import (DIST, install_pypi_torch, new_venv, ok, pin, run, run_all_reduce, site_packages, torch_record,
                         torch_wheels, user_env)

ROOT = Path(__file__).resolve().parents[2]
XPU_DIST = DIST / "xpu"
# The machine's part: on an Intel GPU machine the driver brings a Level Zero loader with zesInit; here the Intel GPU
# stage fetched one (ci/level_zero), the system's being too old.
STAGE_LOADER = ROOT / ".venv-xpu" / "lib" / "level-zero" / "libze_loader.so.1"

pytestmark = pytest.mark.skipif(not list(XPU_DIST.glob("ccl_xpu-*.whl")),
                                reason="no XPU set in dist/xpu: ci/wheels builds it where the Intel GPU stage "
                                       "(.venv-xpu) is set up")


def installed(python: Path) -> dict[str, str]:
    listed = json.loads(ok(run(python, "-m", "pip", "list", "--format", "json")))
    return {p["name"].lower(): p["version"] for p in listed}


def test_pip_install_ccl_xpu_gives_a_set_whose_device_collectives_run(tmp_path):
    python = new_venv(sys.executable, tmp_path / "venv")
    ok(run(python, "-m", "pip", "install", "--only-binary", ":all:", "--no-compile", pin("torch")))
    before = torch_record(python)
    out = ok(run(python, "-m", "pip", "install", "--find-links", XPU_DIST, "--find-links", DIST, "--only-binary",
                 ":all:", "--no-compile", "ccl-xpu[torch,test]"))
    assert torch_record(python) == before, f"pip install ccl-xpu changed torch:\n{out}"
    have = installed(python)
    assert have["ccl-core"] == "0.1.0+xpu" and have["oneccl"] and "oneccl-cpu" not in have, have
    assert "ccl-torch" in have and "ccl-xpu" in have, have

    # the OpenCL CPU device of intel-opencl-rt (its wheel's ICD file names a wrong path: the runtime is named)
    lib = site_packages(python).parents[2] / "lib"
    env = dict(user_env(), ONEAPI_DEVICE_SELECTOR="opencl:cpu", OCL_ICD_FILENAMES=str(lib / "libintelocl.so"),
               MASTER_ADDR="127.0.0.1", WORLD_SIZE="2")
    if STAGE_LOADER.exists():
        env["CCL_XPU_ZE_LOADER"] = str(STAGE_LOADER)
    problem = ok(run(python, "-c", "import ccl_xpu; print(ccl_xpu.device_path_problem())",
                     **{k: v for k, v in env.items() if k.startswith(("ONEAPI", "OCL", "CCL"))})).strip()
    assert problem == "", f"the device path cannot run in the clean venv: {problem}"
    # Each part in processes of its own: one device communicator, then the backend's host communicator in the same
    # processes, hung in oneCCL's transport set-up (atl_ofi allgatherv in create_comm_id, both ranks) in 2 of 3 runs
    # on 2026-12-07 (tests/xpu's device_then_host_communicators case passes; open, see docs/xpu.md).
    result = {}
    for part in ("device", "torch"):
        env["MASTER_PORT"] = ok(run(python, "-c", "from ccl_core import free_port; print(free_port())")).strip()
        ranks = [subprocess.Popen([str(python), str(Path(__file__).with_name("xpu_job.py")), part], cwd=tmp_path,
                                  env=dict(env, RANK=str(r), STORE_DIR=str(tmp_path / f"store-{part}")),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in range(2)]
        try:
            outs = [r.communicate(timeout=300) for r in ranks]
        finally:  # a rank left behind would spin on, and hold its shared memory, past the test
            for r in ranks:
                r.kill()
        for r, (stdout, stderr) in enumerate(outs):
            assert ranks[r].returncode == 0, f"{part}, rank {r}:\n{stdout}\n{stderr[-3000:]}"
            result[part, r] = json.loads(stdout.splitlines()[-1])
    for r in range(2):
        assert result["device", r]["device ops wrong"] == [], (r, result)
        torch_part = result["torch", r]
        assert torch_part["plugins"] == {"xpu": f"ccl-xpu {have['ccl-xpu']}"} and \
            torch_part["devices"] == ["cpu", "xpu"], (r, torch_part)
        assert torch_part["cpu_all_reduce_right"], (r, torch_part)


def test_the_torch_plugin_loads_with_the_oldest_torch_too(tmp_path):
    """ccl-xpu carries its torch plugin for every torch minor ccl-torch has. Beside PyPI's torch 2.8 (the oldest;
    the test above has 2.13+cpu), `pip install ccl-xpu[torch]` keeps torch, the plugin gives the backend its xpu
    device, and 2 ranks all_reduce on the XPU set's oneCCL."""
    release = torch_wheels.releases()[0]
    python = new_venv(sys.executable, tmp_path / "venv")
    install_pypi_torch(python, release, "3.11")
    before = torch_record(python)
    out = ok(run(python, "-m", "pip", "install", "--find-links", XPU_DIST, "--find-links", DIST, "--only-binary",
                 ":all:", "--no-compile", "ccl-xpu[torch]"))
    assert torch_record(python) == before, f"pip install ccl-xpu changed torch:\n{out}"
    plugins = ok(run(python, "-W", "error::RuntimeWarning", "-c",
                     "import oneccl_bindings_for_pytorch as b; print(b.device_plugins(), b._C.__name__)"))
    minor = "_".join(release.split(".")[:2])
    assert "{'xpu': 'ccl-xpu " in plugins and plugins.strip().endswith(f"_C_torch{minor}"), plugins
    assert f"torch {release}" in run_all_reduce(python, tmp_path)
