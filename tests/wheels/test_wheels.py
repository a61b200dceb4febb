"""The wheels of dist/ (ci/wheels) in clean virtual environments, as a user without a compiler gets them.

Every venv here is new. Its dependencies come from the package index as binaries; our packages come only from
dist/ (--no-index), binary-only, with CC and CXX set to `false` and nothing sourced. ci/test runs this after ci/wheels.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from clean_venvs import (DIST, install_ours, install_pypi_torch, install_torch, new_venv, ok, pin, run,
                         run_all_reduce, torch_record, torch_wheels, wheel)

ROOT = Path(__file__).resolve().parents[2]


@functools.lru_cache(maxsize=None)
def python_version(python: str) -> str:
    return ok(run(python, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')")).strip()


def python_tag(python: str) -> str:
    return ok(run(python, "-c", "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')")).strip()


def pythons() -> list[str]:
    """The Pythons ccl-core and ccl-torch support that this machine has (pyenv), .venv's own first."""
    found = [sys.executable]
    for version in ("3.10", "3.12", "3.13"):
        candidates = sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python3"))
        if candidates:
            found.append(str(candidates[-1]))
    return found


@pytest.mark.parametrize("base", pythons(), ids=lambda p: Path(p).parts[-3] if ".pyenv" in p else "venv-python")
def test_ccl_core_wheel_runs_a_group_on_every_python(base, tmp_path):
    python = new_venv(base, tmp_path / "venv")
    tag = python_tag(str(python))
    wheel("ccl-core", tag)  # a clear failure when ci/wheels did not build it
    ok(run(python, "-m", "pip", "install", "--only-binary", ":all:", pin("oneccl-cpu"), pin("impi-rt"), "numpy"))
    install_ours(python, "ccl-core")
    out = ok(run(python, "-m", "ccl_core.info", cwd=tmp_path))
    assert "group         2 local ranks agreed: shared-memory path on" in out, out


def install_ccl_torch(python: Path) -> str:
    """What a user types: no version, dependencies from the index, our wheels from dist/; torch must stay as it was."""
    before = torch_record(python)
    out = ok(run(python, "-m", "pip", "install", "--find-links", DIST, "--only-binary", ":all:", "ccl-torch"))
    assert torch_record(python) == before, f"pip install ccl-torch changed torch:\n{out}"
    assert "torch" not in out.split("Successfully installed")[-1].split(), out
    return out


def train_ddp(python: Path, cwd: Path) -> str:
    port = ok(run(python, "-c", "from ccl_core import free_port; print(free_port())")).strip()
    out = ok(run(python.parent / "torchrun", "--nproc-per-node", "2", "--master-port", port,
                 ROOT / "examples" / "ddp_train.py", cwd=cwd))
    assert "DDP on backend 'ccl' with 2 ranks" in out and "replicas identical: True" in out, out
    return out


# The release matrix: the torch releases of ci/torch-releases.txt (PyPI's builds, CUDA on Linux) x the Pythons here
# that PyPI has each for (torch 2.15 has none for CPython 3.10). Within CI's 45 minutes: every release once, on the
# CPythons in turn (each CPython's wheel runs at least twice), DDP under torchrun included; and torch 2.8 once more on
# the newest CPython (its pybind11 files its types under a name that depends on the CPython; 2.9 on use pybind11 3).
# CCL_TEST_FULL_MATRIX=1 runs every pair (31), DDP on CPython 3.11.
def matrix() -> list[tuple[str, str, bool]]:
    versions = sorted((python_version(b) for b in pythons()), key=lambda v: tuple(map(int, v.split("."))))
    pairs = []
    for i, release in enumerate(torch_wheels.releases()):
        have = [v for v in versions if torch_wheels.available(release, v)]
        if os.environ.get("CCL_TEST_FULL_MATRIX") == "1":
            pairs += [(release, v, v == "3.11") for v in have]
        elif have:
            pairs.append((release, have[i % len(have)], True))
            if i == 0 and have[-1] != pairs[-1][1]:
                pairs.append((release, have[-1], False))
    return sorted(pairs, key=lambda p: (tuple(map(int, p[0].split("."))), p[1]))


@pytest.mark.parametrize("release,version,ddp", matrix(), ids=lambda v: {True: "ddp", False: "all_reduce"}.get(v, v))
def test_ccl_torch_wheel_runs_with_every_torch_on_every_python(release, version, ddp, tmp_path):
    """A venv with PyPI's torch (the CUDA build, used on the CPU: the CUDA libraries come from one shared copy), then
    `pip install ccl-torch`: torch stays as it was, and 2 ranks all_reduce on it; under torchrun, DDP trains (once per
    torch release)."""
    base = next(b for b in pythons() if python_version(b) == version)
    python = new_venv(base, tmp_path / "venv")
    install_pypi_torch(python, release, version)
    install_ccl_torch(python)
    out = run_all_reduce(python, tmp_path)
    minor = "_".join(release.split(".")[:2])
    assert f"torch {release}" in out and "all_reduce ok on 2 ranks" in out and f"_C_torch{minor}" in out, out
    if ddp:
        train_ddp(python, tmp_path)


def test_every_python_has_a_ccl_torch_wheel_with_every_torch_pypi_has_for_it():
    import zipfile

    for base in pythons():
        version = python_version(base)
        tag = "cp" + version.replace(".", "")
        names = zipfile.ZipFile(wheel("ccl-torch", tag)).namelist()
        built = sorted(n.split("/")[-1].split(".")[0] for n in names if "/_C_torch" in n)
        want = sorted("_C_torch" + "_".join(r.split(".")[:2]) for r in torch_wheels.releases()
                      if torch_wheels.available(r, version))
        assert built == want, f"{tag}: {built} != {want}"


def test_no_library_in_a_wheel_looks_for_libraries_on_the_build_machine(tmp_path):
    """Every RUNPATH entry of every library in dist/ is relative to the library ($ORIGIN): a path of the machine that
    built it would point elsewhere, or at the wrong library, on the user's."""
    import zipfile

    for whl in sorted(DIST.glob("*.whl")):
        with zipfile.ZipFile(whl) as z:
            for name in (n for n in z.namelist() if re.search(r"\.so(\.|$)", n)):
                library = Path(z.extract(name, tmp_path / whl.stem))
                dynamic = subprocess.run(["readelf", "-d", library], capture_output=True, text=True, check=True).stdout
                for entry in re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.*)\]", dynamic):
                    foreign = [d for d in entry.split(":") if not d.startswith("$ORIGIN")]
                    assert not foreign, f"{whl.name}: {name} looks in {foreign}"


@pytest.fixture(scope="session")  # kept while other modules' tests run between its users
def cpu_torch_venv(tmp_path_factory) -> Iterator[Path]:
    """torch 2.13.0+cpu (the build from PyTorch's CPU index, which this machine's pip serves), as its users have it."""
    python = new_venv(sys.executable, tmp_path_factory.mktemp("torch") / "venv")
    ok(run(python, "-m", "pip", "install", "--only-binary", ":all:", "--no-compile", pin("torch"), "numpy"))
    assert "+cpu" in torch_record(python).splitlines()[0]
    install_ccl_torch(python)
    yield python
    shutil.rmtree(python.parent.parent, ignore_errors=True)  # 1.2 GB: gone before the session's other tests end


@pytest.mark.xdist_group("cpu_torch_venv")  # one venv for the three, under pytest-xdist too
def test_ccl_torch_wheel_trains_ddp_under_torchrun_on_a_cpu_torch(cpu_torch_venv, tmp_path):
    assert "all_reduce ok on 2 ranks" in run_all_reduce(cpu_torch_venv, tmp_path)
    train_ddp(cpu_torch_venv, tmp_path)


@pytest.mark.xdist_group("cpu_torch_venv")  # one venv for the three, under pytest-xdist too
def test_ccl_torch_wheel_runs_ccl_bench_and_info(cpu_torch_venv, tmp_path):
    bench = ok(run(cpu_torch_venv.parent / "ccl-bench", "-n", "2", "-e", "1M", cwd=tmp_path))
    assert "1M" in bench or "1 MiB" in bench, bench
    info = ok(run(cpu_torch_venv, "-m", "ccl_core.info", cwd=tmp_path))
    assert "shared-memory path on" in info, info


@pytest.mark.xdist_group("cpu_torch_venv")  # one venv for the three, under pytest-xdist too
def test_the_wheel_requires_no_torch_and_its_extra_asks_for_a_supported_one(cpu_torch_venv):
    listed = ok(run(cpu_torch_venv, "-c", "from importlib.metadata import requires; print(*requires('ccl-torch'), "
                                          "sep='\\n')")).splitlines()
    torch = [Requirement(r) for r in listed if Requirement(r).name == "torch"]
    assert len(torch) == 1 and str(torch[0].marker) == 'extra == "torch"', listed  # never required without the extra
    assert torch[0].specifier == SpecifierSet(">=2.8,<2.16"), listed


def test_an_unsupported_torch_is_kept_and_the_import_names_the_supported_ones(tmp_path):
    """torch 2.7.1 (PyPI's, never imported here: the check runs before torch is imported): pip installs ccl-torch
    beside it without touching it, and the import refuses, naming the releases that are supported."""
    python = new_venv(sys.executable, tmp_path / "venv")
    install_torch(python, "2.7.1", "3.11")
    install_ccl_torch(python)
    out = run(python, "-c", "import oneccl_bindings_for_pytorch", cwd=tmp_path)
    assert out.returncode != 0
    assert "runs on torch 2.8, 2.9, 2.10, 2.11, 2.12, 2.13, 2.14, 2.15, but torch 2.7.1" in out.stderr, out.stderr


def test_without_torch_the_import_says_to_install_one(tmp_path):
    python = new_venv(sys.executable, tmp_path / "venv")
    ok(run(python, "-m", "pip", "install", "--find-links", DIST, "--only-binary", ":all:", "ccl-torch"))
    out = run(python, "-c", "import oneccl_bindings_for_pytorch", cwd=tmp_path)
    assert out.returncode != 0 and "torch is not installed: pip install torch" in out.stderr, out.stderr


def test_a_source_build_refuses_an_unsupported_torch_before_compiling(tmp_path):
    """meson setup against torch 2.7.1's headers (PyPI's wheel, unpacked) stops with the supported range."""
    out = subprocess.run([sys.executable, "-m", "mesonbuild.mesonmain", "setup", tmp_path / "build",
                          ROOT / "packages" / "ccl-torch", f"-Dtorch={torch_wheels.sdk('2.7.1')}"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert ("ccl-torch 3.0.0 supports torch 2.8, 2.9, 2.10, 2.11, 2.12, 2.13, 2.14, 2.15; torch 2.7.1"
            in out.stdout + out.stderr), out.stdout
    assert not list((tmp_path / "build").glob("**/*.o"))
