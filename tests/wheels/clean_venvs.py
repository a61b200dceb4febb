"""Clean virtual environments as a user without a compiler has them, for tests/wheels: nothing sourced, CC and CXX
set to `false`, dependencies from the package index as binaries, our packages only from dist/."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from ranks import clean_env

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "ci"))
import torch_wheels  # noqa: E402
DIST = ROOT / "dist"
REQUIREMENTS = (ROOT / "ci" / "requirements.txt").read_text()


def pin(name: str) -> str:
    match = re.search(rf"^{re.escape(name)}==\S+", REQUIREMENTS, re.M)
    assert match, f"{name} is not pinned in ci/requirements.txt"
    return match.group(0)


def user_env() -> dict:
    """A user's shell: nothing sourced, and no compiler (a build attempt would fail at once)."""
    return dict(clean_env(), CC="false", CXX="false", PIP_DISABLE_PIP_VERSION_CHECK="1")


def run(*args, cwd=None, timeout=600, **env) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], env=dict(user_env(), **env), cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


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


def install_ours(python: Path, *names: str) -> str:
    """Our packages from dist/ only, as binaries; their dependencies must already be there."""
    return ok(run(python, "-m", "pip", "install", "--no-index", "--find-links", DIST, "--only-binary", ":all:", *names))


def site_packages(python: Path) -> Path:
    return Path(ok(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")).strip())


def torch_record(python: Path) -> str:
    """The installed torch exactly: its version and the RECORD of every file pip installed for it."""
    return ok(run(python, "-c", "from importlib.metadata import distribution as d; t = d('torch'); "
                                "print(t.version); print(t.read_text('RECORD'))"))


def install_torch(python: Path, release: str, version: str) -> str:
    """PyPI's torch RELEASE for Python VERSION without its dependencies (a kept download, or straight from PyPI: see
    ci/torch_wheels.py). No pip configuration: this machine's (system-wide, which --isolated still reads) caps torch
    at the releases on its disk, and its local wheels are not PyPI's. No bytecode up front (the test's set-up, not
    what it tests: it halves the install)."""
    return ok(run(python, "-m", "pip", *torch_wheels.install_args(release, version), "--no-compile",
                  PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS=""))


def install_pypi_torch(python: Path, release: str, version: str) -> None:
    """PyPI's torch RELEASE for Python VERSION, usable: torch, its plain dependencies, and the CUDA libraries of its
    CUDA major through a .pth file (one shared copy: the same files for every CPython)."""
    install_torch(python, release, version)
    ok(run(python, "-m", "pip", "install", "--only-binary", ":all:", "--no-compile",
           *torch_wheels.plain_requirements(release)))
    (site_packages(python) / "cuda-libs.pth").write_text(str(torch_wheels.cuda_libs(release)) + "\n")


def run_all_reduce(python: Path, cwd: Path) -> str:
    """all_reduce_job.py on 2 ranks with the venv's Python; rank 0's output."""
    port = ok(run(python, "-c", "from ccl_core import free_port; print(free_port())")).strip()
    env = dict(user_env(), MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE="2")
    ranks = [subprocess.Popen([str(python), str(Path(__file__).with_name("all_reduce_job.py"))], cwd=cwd,
                              env=dict(env, RANK=str(r)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    outs = [r.communicate(timeout=300) for r in ranks]
    for r, (out, err) in zip(ranks, outs):
        assert r.returncode == 0, f"rank {ranks.index(r)}:\n{out}\n{err[-3000:]}"
    return outs[0][0]
