"""The supported torch minors are written in three places; they must agree: meson.build's supported_minors (what a
build accepts), pyproject.toml's `torch` extra (what `pip install ccl-torch[torch]` may bring) and
ci/torch-releases.txt (what the wheels are compiled against and tested with)."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "packages" / "ccl-torch"


def test_meson_pyproject_and_the_release_matrix_name_the_same_torch_minors():
    meson = re.search(r"supported_minors = \[([^\]]*)\]", (PACKAGE / "meson.build").read_text())
    supported = [s.strip().strip("'").replace("_", ".") for s in meson.group(1).split(",")]
    releases = [line.strip() for line in (ROOT / "ci" / "torch-releases.txt").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert [".".join(r.split(".")[:2]) for r in releases] == supported
    extra = tomllib.loads((PACKAGE / "pyproject.toml").read_text())["project"]["optional-dependencies"]["torch"]
    lowest, highest = supported[0], supported[-1]
    major, minor = highest.split(".")
    assert extra == [f"torch>={lowest},<{major}.{int(minor) + 1}"], extra
