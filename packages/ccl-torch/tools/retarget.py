"""retarget.py MINOR [DIR]: points the ccl-torch sources in DIR (default: this package) at torch MINOR ("2.12").

ccl-torch's version goes in lockstep with torch (2.13.x is built for, and requires, torch 2.13), so a build for another
torch minor is the same source with two lines changed: meson.build's project version (MINOR.<our patch>) and
pyproject.toml's torch pin (torch==MINOR.*). ci/wheels and the conda recipe run this on a copy before building.
"""
import re
import sys
from pathlib import Path


def retarget(directory: Path, minor: str) -> str:
    if not re.fullmatch(r"\d+\.\d+", minor):
        raise SystemExit(f"retarget.py: {minor!r} is not a torch minor version such as 2.13")
    meson = directory / "meson.build"
    text = meson.read_text()
    match = re.search(r"(project\('ccl-torch',\s*'cpp',\s*version:\s*')(\d+)\.(\d+)\.(\d+)(')", text)
    if not match:
        raise SystemExit(f"retarget.py: no ccl-torch project version in {meson}")
    version = f"{minor}.{match.group(4)}"
    meson.write_text(text[:match.start()] + match.group(1) + version + match.group(5) + text[match.end():])
    pyproject = directory / "pyproject.toml"
    text, pins = re.subn(r'"torch==\d+\.\d+\.\*"', f'"torch=={minor}.*"', pyproject.read_text())
    if pins != 1:
        raise SystemExit(f"retarget.py: no torch==X.Y.* pin in {pyproject}")
    pyproject.write_text(text)
    return version


if __name__ == "__main__":
    target = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).resolve().parents[1]
    print(retarget(target, sys.argv[1]))
