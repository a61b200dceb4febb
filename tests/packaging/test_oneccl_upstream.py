"""The upstream defect that keeps the oneCCL pins where they are (docs/upstream/oneccl-2022.2-wheels.md): this test
fails the day PyPI serves a oneCCL 2022.2 or newer that pip can install, so that the pins move then."""
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "ci"))
from torch_wheels import pypi_env  # noqa: E402  (PyPI as a user's pip sees it: none of this machine's local indexes)


def test_no_installable_oneccl_2022_2_yet(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
                          "--only-binary", ":all:", "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
                          "--target", str(tmp_path / "t"), "oneccl-cpu>=2022.2"],
                         env=pypi_env(), capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    if out.returncode == 0:
        pytest.fail("pip can now install oneccl-cpu>=2022.2 from PyPI: move the pins in ci/requirements*.txt and "
                    "packages/ccl-core/pyproject.toml once its libccl.so.1 loads (docs/upstream/oneccl-2022.2-wheels.md)"
                    f"\n{out.stdout[-2000:]}")
    if "Downloading oneccl_cpu-" not in text and "oneccl_cpu-" not in text:
        pytest.skip(f"PyPI did not answer (no oneccl-cpu wheel seen): {text[-500:]}")
    # what keeps it out today: the libfabric it requires is not on PyPI
    assert "No matching distribution found for libfabric" in text, text[-2000:]
