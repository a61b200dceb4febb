"""The wheels of dist/ (ci/wheels) in clean virtual environments, as a user without a compiler gets them.

Every venv here is new. Its dependencies come from the package index as binaries; our packages come only from
dist/ (--no-index), binary-only, with CC and CXX set to `false` and nothing sourced. ci/test runs this after ci/wheels.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ranks import clean_env

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "dist"
REQUIREMENTS = (ROOT / "ci" / "requirements.txt").read_text()


def pin(name: str) -> str:
    match = re.search(rf"^{re.escape(name)}==\S+", REQUIREMENTS, re.M)
    assert match, f"{name} is not pinned in ci/requirements.txt"
    return match.group(0)


def user_env() -> dict:
    """A user's shell: nothing sourced, and no compiler (a build attempt would fail at once)."""
    return dict(clean_env(), CC="false", CXX="false", PIP_DISABLE_PIP_VERSION_CHECK="1")


def run(*args, cwd=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], env=user_env(), cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def ok(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 0, f"{out.args}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def wheel(name: str, tag: str) -> Path:
    found = sorted(DIST.glob(f"{name.replace('-', '_')}-*-{tag}-*.whl"))
    assert found, f"no {name} wheel for {tag} in {DIST}: run ci/wheels first"
    return found[-1]


def new_venv(base_python: str, path: Path) -> Path:
    ok(run(base_python, "-m", "venv", path))
    return path / "bin" / "python"


def python_tag(python: str) -> str:
    return ok(run(python, "-c", "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')")).strip()


def pythons() -> list[str]:
    """The Pythons torch 2.13 supports that this machine has (pyenv), .venv's own first."""
    found = [sys.executable]
    for version in ("3.10", "3.12", "3.13"):
        candidates = sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python3"))
        if candidates:
            found.append(str(candidates[-1]))
    return found


def install_ours(python: Path, *names: str) -> str:
    """Our packages from dist/ only, as binaries; their dependencies must already be there."""
    return ok(run(python, "-m", "pip", "install", "--no-index", "--find-links", DIST, "--only-binary", ":all:", *names))


@pytest.mark.parametrize("base", pythons(), ids=lambda p: Path(p).parts[-3] if ".pyenv" in p else "venv-python")
def test_ccl_core_wheel_runs_a_group_on_every_python(base, tmp_path):
    python = new_venv(base, tmp_path / "venv")
    tag = python_tag(str(python))
    wheel("ccl-core", tag)  # a clear failure when ci/wheels did not build it
    ok(run(python, "-m", "pip", "install", "--only-binary", ":all:", pin("oneccl-cpu"), pin("impi-rt"), "numpy"))
    install_ours(python, "ccl-core")
    out = ok(run(python, "-m", "ccl_core.info", cwd=tmp_path))
    assert "group         2 local ranks agreed: shared-memory path on" in out, out


@pytest.fixture(scope="module")
def torch_venv(tmp_path_factory) -> Path:
    python = new_venv(sys.executable, tmp_path_factory.mktemp("torch") / "venv")
    ok(run(python, "-m", "pip", "install", "--only-binary", ":all:", pin("torch"), pin("oneccl-cpu"), pin("impi-rt"),
           "numpy"))
    install_ours(python, "ccl-torch")
    return python


def test_ccl_torch_wheel_trains_ddp_under_torchrun(torch_venv, tmp_path):
    port = ok(run(torch_venv, "-c", "from ccl_core import free_port; print(free_port())")).strip()
    torchrun = torch_venv.parent / "torchrun"
    out = ok(run(torchrun, "--nproc-per-node", "2", "--master-port", port, ROOT / "examples" / "ddp_train.py",
                 cwd=tmp_path))
    assert "DDP on backend 'ccl' with 2 ranks" in out and "replicas identical: True" in out, out


def test_ccl_torch_wheel_runs_ccl_bench_and_info(torch_venv, tmp_path):
    bench = ok(run(torch_venv.parent / "ccl-bench", "-n", "2", "-e", "1M", cwd=tmp_path))
    assert "1M" in bench or "1 MiB" in bench, bench
    info = ok(run(torch_venv, "-m", "ccl_core.info", cwd=tmp_path))
    assert "shared-memory path on" in info, info


def test_the_wheel_names_the_torch_it_needs(torch_venv):
    requires = ok(run(torch_venv, "-c", "from importlib.metadata import requires; print(requires('ccl-torch'))"))
    assert "torch==2.13.*" in requires, requires


def test_a_wrong_torch_is_refused_naming_both_versions(tmp_path):
    """torch 2.14.1 (the other torch minor on this machine's disk; without its CUDA dependencies, it is never imported
    here) beside the wheel built for torch 2.13."""
    python = new_venv(sys.executable, tmp_path / "venv")
    ok(run(python, "-m", "pip", "install", "--only-binary", ":all:", "--no-deps", "torch==2.14.1"))
    ok(run(python, "-m", "pip", "install", "--only-binary", ":all:", pin("oneccl-cpu"), pin("impi-rt"), "numpy"))
    # --isolated: only dist/, not the machine's pip configuration (which offers torch 2.13)
    refused = run(python, "-m", "pip", "install", "--isolated", "--no-index", "--find-links", DIST, "--only-binary",
                  ":all:", "ccl-torch==2.13.*")
    assert refused.returncode != 0, refused.stdout
    assert "ccl-torch 2.13.0 depends on torch==2.13.*" in refused.stdout, refused.stdout + refused.stderr
    # forced past pip, pip check names both versions, and the import refuses before torch is even imported
    install_ours(python, "--no-deps", "ccl-core", "ccl-torch==2.13.*")
    check = run(python, "-m", "pip", "check")
    assert "ccl-torch 2.13.0 has requirement torch==2.13.*, but you have torch 2.14.1" in check.stdout, check.stdout
    out = run(python, "-c", "import oneccl_bindings_for_pytorch", cwd=tmp_path)
    assert out.returncode != 0
    assert "was built for torch 2.13.0+cpu, but torch 2.14.1 is installed" in out.stderr, out.stderr


def other_torch_wheels() -> list[Path]:
    """ccl-torch wheels for a torch other than .venv's (CCL_WHEELS_TORCH=2.14.1 ci/wheels builds them)."""
    return [w for w in sorted(DIST.glob("ccl_torch-*-cp311-*.whl")) if not w.name.startswith("ccl_torch-2.13.")]


@pytest.mark.skipif(not other_torch_wheels(), reason="no ccl-torch wheel for another torch in dist/ (opt-in: "
                                                     "CCL_WHEELS_TORCH=2.14.1 ci/wheels, several GB of CUDA torch)")
def test_ccl_torch_wheel_for_another_torch_trains_ddp(tmp_path):
    built = other_torch_wheels()[-1]
    ours = built.name.split("-")[1]  # 2.14.0
    minor = ".".join(ours.split(".")[:2])
    python = new_venv(sys.executable, tmp_path / "venv")
    ok(run(python, "-m", "pip", "install", "--only-binary", ":all:", f"torch=={minor}.*", pin("oneccl-cpu"),
           pin("impi-rt"), "numpy", timeout=1800))
    install_ours(python, f"ccl-torch=={ours}")
    port = ok(run(python, "-c", "from ccl_core import free_port; print(free_port())")).strip()
    out = ok(run(python.parent / "torchrun", "--nproc-per-node", "2", "--master-port", port,
                 ROOT / "examples" / "ddp_train.py", cwd=tmp_path))
    assert "DDP on backend 'ccl' with 2 ranks" in out and "replicas identical: True" in out, out
