"""xpu_variant.py WHEEL OUT_DIR: the Intel GPU variant of a ccl-core wheel built against the SYCL-enabled oneCCL.

Both oneCCL distributions install <prefix>/lib/libccl.so.1, so one environment holds only one of them; ccl-core's
wheel names `oneccl-cpu`, so an XPU environment needs a ccl-core of its own. Its version carries the local label
`+xpu` (as torch's `+cpu` / `+xpu` builds do): `pip list` shows which one is installed, ccl-xpu asks for exactly it,
and ccl-torch's `ccl-core==0.1.0` matches both (PEP 440 ignores a candidate's local label against a public pin).
meson-python takes version and dependencies from pyproject.toml and meson.build only, so the built wheel's metadata
is rewritten here: the version, and oneccl-cpu's requirements replaced by the pins of ci/requirements-xpu.txt.
Prints the new wheel's path.
"""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LABEL = "xpu"
# what the variant requires instead of oneccl-cpu: the SYCL oneCCL and what its libccl.so.1 loads
FROM_XPU_PINS = ("oneccl", "impi-rt", "intel-sycl-rt")


def xpu_pins() -> list[str]:
    text = (ROOT / "ci" / "requirements-xpu.txt").read_text()
    pins = []
    for name in FROM_XPU_PINS:
        match = re.search(rf"^{re.escape(name)}==\S+", text, re.M)
        if not match:
            sys.exit(f"xpu_variant: {name} is not pinned in ci/requirements-xpu.txt")
        pins.append(match.group(0))
    return pins


def rewrite_metadata(metadata: str, version: str) -> str:
    lines = []
    for line in metadata.splitlines():
        if line.startswith("Version: "):
            line = f"Version: {version}"
        elif re.match(r"Requires-Dist: (oneccl-cpu|impi-rt)\b", line):
            continue  # replaced below, after the other Requires-Dist lines keep their places
        lines.append(line)
    first = next(i for i, line in enumerate(lines) if line.startswith("Requires-Dist: ") or line == "")
    lines[first:first] = [f"Requires-Dist: {pin}" for pin in xpu_pins()]
    return "\n".join(lines) + "\n"


def main(wheel: Path, out_dir: Path) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "wheel", "unpack", "-d", tmp, wheel], check=True, capture_output=True)
        (tree,) = Path(tmp).iterdir()
        (info,) = tree.glob("*.dist-info")
        name, version = info.name[: -len(".dist-info")].rsplit("-", 1)
        if "+" in version:
            sys.exit(f"xpu_variant: {wheel.name} already has a local version ({version})")
        new_version = f"{version}+{LABEL}"
        metadata = info / "METADATA"
        metadata.write_text(rewrite_metadata(metadata.read_text(), new_version))
        info.rename(info.with_name(f"{name}-{new_version}.dist-info"))
        tags = wheel.name.split("-", 2)[2]  # python, ABI and platform tags, and ".whl"
        out_dir.mkdir(parents=True, exist_ok=True)
        for old in out_dir.glob(f"{name}-*+{LABEL}-{tags}"):
            old.unlink()
        subprocess.run([sys.executable, "-m", "wheel", "pack", "-d", out_dir, tree], check=True, capture_output=True)
    (made,) = out_dir.glob(f"{name}-{new_version}-{tags}")
    return made


if __name__ == "__main__":
    print(main(Path(sys.argv[1]), Path(sys.argv[2])))
