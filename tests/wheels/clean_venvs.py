"""Clean virtual environments as a user without a compiler has them, for tests/wheels: nothing sourced, CC and CXX
set to `false`, dependencies from the package index as binaries, our packages only from dist/."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

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
