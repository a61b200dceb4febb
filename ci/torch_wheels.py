"""PyPI's torch wheels for the release matrix, shared by ci/wheels (to compile against) and tests/wheels (to test with).

    torch_wheels.py releases                 the torch releases of ci/torch-releases.txt
    torch_wheels.py available VERSION PYTHON print "yes" when PyPI has torch VERSION for PYTHON ("3.12"), else "no"
    torch_wheels.py wheel VERSION PYTHON     download PyPI's torch VERSION for PYTHON; print its path, or
                                             nothing when PyPI has no wheel of that release for that Python
    torch_wheels.py sdk VERSION              torch VERSION's headers and the libraries ccl-torch links, unpacked into
                                             build/wheels/torch-sdk/VERSION (a directory holding `torch`); print it
    torch_wheels.py cuda-libs [VERSION]      the CUDA libraries (nvidia-* wheels) torch VERSION (default: the newest)
                                             needs, shared by the releases of its CUDA major and installed once into
                                             build/wheels/cuda-libs-cuMAJOR; print the directory
    torch_wheels.py requirements WHEEL       the wheel's dependencies other than CUDA's libraries and triton

Everything lands in build/wheels and is reused. PyPI's Linux torch is the CUDA build, what `pip install torch` gives;
it imports only beside its nvidia-* wheels (about 3 GB), which are the same for every CPython, so the test venvs share
one copy through a .pth file. Downloads bypass this machine's pip configuration (it caps torch at the releases on
its disk, see ../shared notes) and take PyPI's files, as a user's pip does.
"""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "build" / "wheels"
DOWNLOADS = WORK / "downloads"
RELEASES = ROOT / "ci" / "torch-releases.txt"

# what ccl-torch compiles and links against; the rest of the wheel (CUDA kernels, Python code) is not needed
SDK_MEMBERS = re.compile(r"torch/(include/.*|version\.py|lib/lib(c10|torch|torch_cpu|torch_python)\.so)")


def releases() -> list[str]:
    lines = (line.split("#")[0].strip() for line in RELEASES.read_text().splitlines())
    return [line for line in lines if line]


def pypi_env() -> dict:
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PIP_FIND_LINKS", None)  # this machine's local wheels (a +cpu build among them) are not PyPI's
    env.pop("PIP_CONSTRAINT", None)
    return env


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], env=pypi_env(), capture_output=True, text=True)


def available(version: str, python: str) -> bool:
    """Whether PyPI has a manylinux_2_28 x86-64 torch VERSION wheel for PYTHON ("3.12"), asked of the index without
    downloading anything (torch 2.15 has none for CPython 3.10). The answer per Python is kept for the run."""
    if wheel_if_downloaded(version, python):
        return True
    listing = WORK / f"pypi-torch-{python}.txt"
    if not listing.is_file():
        out = pip("index", "versions", "torch", "--only-binary", ":all:", "--python-version", python,
                  "--platform", "manylinux_2_28_x86_64")
        found = re.search(r"Available versions: (.*)", out.stdout)
        if out.returncode != 0 or not found:
            raise SystemExit(f"torch_wheels.py: asking PyPI for torch's releases for Python {python} failed:\n"
                             f"{out.stdout}{out.stderr}")
        WORK.mkdir(parents=True, exist_ok=True)
        partial = listing.with_name(f".{listing.name}.{os.getpid()}")  # whole or absent for a reader beside it
        partial.write_text("\n".join(v.strip() for v in found.group(1).split(",")) + "\n")
        os.replace(partial, listing)
    return version in listing.read_text().split()


def wheel_if_downloaded(version: str, python: str) -> Path | None:
    tag = "cp" + python.replace(".", "")
    # a build tag may sit between version and Python tag (PyPI's 2.10.0 is torch-2.10.0-3-cp311-cp311-...)
    found = sorted(DOWNLOADS.glob(f"torch-{version}-*{tag}-{tag}-*.whl"))
    return found[-1] if found else None


def wheel(version: str, python: str) -> Path | None:
    if found := wheel_if_downloaded(version, python):
        return found
    DOWNLOADS.mkdir(parents=True, exist_ok=True)
    # Tests running side by side may want the same wheel: one downloads while the others wait on the lock, and the
    # wheel appears under its name only once complete (pip writes it in place, where a glob would see it half written).
    with open(DOWNLOADS / f".torch-{version}-{python}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if found := wheel_if_downloaded(version, python):  # downloaded meanwhile by the lock's holder
            return found
        with tempfile.TemporaryDirectory(dir=DOWNLOADS, prefix=".partial-") as partial:
            out = pip("download", "--quiet", "--no-deps", "--only-binary", ":all:", "--python-version", python,
                      "--platform", "manylinux_2_28_x86_64", "--dest", partial, f"torch=={version}")
            if out.returncode != 0:
                if "No matching distribution" in out.stderr or "from versions:" in out.stderr:
                    return None  # that release has no wheel for that Python (torch 2.15 and CPython 3.10)
                raise SystemExit(f"torch_wheels.py: downloading torch {version} for Python {python} failed:\n{out.stderr}")
            for downloaded in Path(partial).glob("torch-*.whl"):
                os.replace(downloaded, DOWNLOADS / downloaded.name)
    found = wheel_if_downloaded(version, python)
    if not found:
        raise SystemExit(f"torch_wheels.py: pip downloaded no torch {version} wheel for Python {python} into {DOWNLOADS}")
    return found


def sdk(version: str) -> Path:
    dest = WORK / "torch-sdk" / version
    if (dest / "torch" / "version.py").is_file():
        return dest
    source = wheel(version, "3.11")  # headers and libraries are the same in every CPython's wheel
    if source is None:
        raise SystemExit(f"torch_wheels.py: PyPI has no torch {version} for Python 3.11")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{version}.lock", "w") as lock:  # one unpacks, the others wait and take its copy
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (dest / "torch" / "version.py").is_file():
            partial = tempfile.mkdtemp(dir=dest.parent, prefix=".partial-")
            os.chmod(partial, 0o755)
            try:
                with zipfile.ZipFile(source) as archive:
                    for member in archive.namelist():
                        if SDK_MEMBERS.fullmatch(member):
                            archive.extract(member, partial)
                shutil.rmtree(dest, ignore_errors=True)  # what an interrupted run of an older version left
                os.rename(partial, dest)
            finally:
                shutil.rmtree(partial, ignore_errors=True)
    return dest


def requirements_of(wheel_file: Path) -> list[str]:
    with zipfile.ZipFile(wheel_file) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(metadata).decode().splitlines()
    return [line.split(":", 1)[1].strip() for line in lines
            if line.startswith("Requires-Dist:") and "extra ==" not in line]


def is_cuda(requirement: str) -> bool:
    return re.match(r"(nvidia|cuda|triton)", requirement) is not None


def plain_requirements(wheel_file: Path) -> list[str]:
    """torch's dependencies other than CUDA's libraries and triton (pure Python: sympy, networkx, ...)."""
    return [r for r in requirements_of(wheel_file) if not is_cuda(r)]


def cuda_major(wheel_file: Path) -> str:
    """The CUDA major a torch wheel was built for: 12 (nvidia-*-cu12 packages, torch 2.8-2.10) or 13 (cuda-toolkit
    13, torch 2.11 on)."""
    majors = set()
    for requirement in requirements_of(wheel_file):
        m = re.match(r"nvidia-[\w-]*-cu(\d+)\b", requirement) or re.match(r"cuda-toolkit\S*==(\d+)", requirement)
        if m:
            majors.add(int(m.group(1)))
    if not majors:
        raise SystemExit(f"torch_wheels.py: {wheel_file.name} names no CUDA libraries")
    return str(max(majors))


def cuda_libs(release: str | None = None) -> Path:
    """The CUDA libraries of RELEASE's CUDA major (default: the newest release's), installed once for every Python
    into build/wheels/cuda-libs-cuMAJOR: each nvidia-* package at the newest pin among that major's releases,
    cuda-toolkit with the union of their extras (torch 2.13 loads libcurand, which 2.15 no longer asks for). CUDA's
    runtime libraries load for older torch releases of the same CUDA major."""
    release = release or releases()[-1]
    major = cuda_major(wheel(release, "3.11"))
    dest = WORK / f"cuda-libs-cu{major}"
    wanted: dict[str, tuple[set[str], str]] = {}  # name -> (extras, version specifier)
    for other in releases():  # oldest first: a newer release's pin replaces an older one's
        if cuda_major(wheel(other, "3.11")) != major:
            continue
        named = set()
        for requirement in requirements_of(wheel(other, "3.11")):
            m = re.match(r"(nvidia-[\w-]+|cuda-toolkit)(?:\[([^\]]*)\])?\s*([^;]*)", requirement)
            if m:
                extras = set(filter(None, (m.group(2) or "").split(",")))
                wanted[m.group(1)] = (wanted.get(m.group(1), (set(), ""))[0] | extras, m.group(3).strip())
                named.add(m.group(1))
        # what an older release pinned itself and a newer one takes through cuda-toolkit (2.12's nvidia-cublas):
        # that newer pin decides its version
        wanted = {name: (extras, spec if name in named else "") for name, (extras, spec) in wanted.items()}
    requirements = sorted(f"{name}[{','.join(sorted(extras))}]{spec}" if extras else f"{name}{spec}"
                          for name, (extras, spec) in wanted.items())
    stamp = dest / ".requirements"
    if stamp.is_file() and stamp.read_text() == "\n".join(requirements):
        return dest
    with open(WORK / f".cuda-libs-cu{major}.lock", "w") as lock:  # tests side by side: one installs, others wait
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text() == "\n".join(requirements):
            return dest
        out = pip("install", "--quiet", "--only-binary", ":all:", "--target", str(dest), "--upgrade", *requirements)
        if out.returncode != 0:
            raise SystemExit(f"torch_wheels.py: installing {requirements} failed:\n{out.stderr}")
        stamp.write_text("\n".join(requirements))
    return dest


def main(argv: list[str]) -> None:
    command, args = argv[0], argv[1:]
    if command == "releases":
        print("\n".join(releases()))
    elif command == "available":
        print("yes" if available(*args) else "no")
    elif command == "wheel":
        found = wheel(*args)
        if found:
            print(found)
    elif command == "sdk":
        print(sdk(*args))
    elif command == "cuda-libs":
        print(cuda_libs(*args))
    elif command == "requirements":
        # one word each, for a shell's word splitting (2.8's METADATA writes "typing-extensions >= 4.10.0")
        print(" ".join("".join(r.split()) for r in plain_requirements(Path(args[0]))))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
