"""PyPI's torch wheels for the release matrix, shared by ci/wheels (to compile against) and tests/wheels (to test with).

    torch_wheels.py releases                 the torch releases of ci/torch-releases.txt
    torch_wheels.py available VERSION PYTHON print "yes" when PyPI has torch VERSION for PYTHON ("3.12"), else "no"
    torch_wheels.py wheel VERSION PYTHON     download PyPI's torch VERSION for PYTHON; print its path, or
                                             nothing when PyPI has no wheel of that release for that Python
    torch_wheels.py install-args VERSION PYTHON
                                             pip's arguments (one a line) that install torch VERSION for PYTHON
                                             without its dependencies: the kept download or straight from PyPI
    torch_wheels.py sdk VERSION              torch VERSION's headers, link stubs of the libraries ccl-torch links and
                                             the wheel's METADATA, unpacked into build/wheels/torch-sdk/VERSION (a
                                             directory holding `torch`); print it
    torch_wheels.py cuda-libs [VERSION]      the CUDA libraries (nvidia-* wheels) torch VERSION (default: the newest)
                                             needs, shared by the releases of its CUDA major and installed once into
                                             build/wheels/cuda-libs-cuMAJOR; print the directory
    torch_wheels.py requirements VERSION     torch VERSION's dependencies other than CUDA's libraries and triton

Everything lands in build/wheels and is reused. PyPI's Linux torch is the CUDA build, what `pip install torch` gives;
it imports only beside its nvidia-* wheels (about 3 GB), which are the same for every CPython, so the test venvs share
one copy through a .pth file. Downloads bypass this machine's pip configuration (it caps torch at the releases on
its disk, see ../shared notes) and take PyPI's files, as a user's pip does.

The downloaded wheels are kept for the next run (0.5-0.9 GB each, ~9 GB for the matrix). CCL_KEEP_TORCH_WHEELS=0
(CI's one run on a fresh clone) keeps none: each user of a wheel downloads it for itself and drops it, and torch's
dependencies are read from the METADATA kept with its headers (`sdk`).
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

# what ccl-torch compiles and links against, and the wheel's METADATA (its dependencies); the rest of the wheel (CUDA
# kernels, Python code) is not needed
SDK_MEMBERS = re.compile(r"torch/(include/.*|version\.py|lib/lib(c10|torch|torch_cpu|torch_python)\.so)"
                         r"|torch-[^/]*\.dist-info/METADATA")


def keep_downloads() -> bool:
    return os.environ.get("CCL_KEEP_TORCH_WHEELS", "1") != "0"


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
            downloaded = download_into(Path(partial), version, python)
            if downloaded is None:
                return None
            os.replace(downloaded, DOWNLOADS / downloaded.name)
    return wheel_if_downloaded(version, python)


def download_into(directory: Path, version: str, python: str) -> Path | None:
    """PyPI's torch VERSION for PYTHON downloaded into DIRECTORY; None when PyPI has no wheel of that release for that
    Python (torch 2.15 and CPython 3.10)."""
    out = pip("download", "--quiet", "--no-deps", "--only-binary", ":all:", "--python-version", python,
              "--platform", "manylinux_2_28_x86_64", "--dest", str(directory), f"torch=={version}")
    if out.returncode != 0:
        if "No matching distribution" in out.stderr or "from versions:" in out.stderr:
            return None
        raise SystemExit(f"torch_wheels.py: downloading torch {version} for Python {python} failed:\n{out.stderr}")
    found = list(directory.glob("torch-*.whl"))
    if len(found) != 1:
        raise SystemExit(f"torch_wheels.py: pip downloaded {len(found)} torch {version} wheels for Python {python}")
    return found[0]


def install_args(version: str, python: str) -> list[str]:
    """pip's arguments that install PyPI's torch VERSION for PYTHON without its dependencies: from the kept download,
    or with downloads not kept, from PyPI straight into the environment (pip drops its copy)."""
    if not keep_downloads():
        return ["install", "--no-deps", "--only-binary", ":all:", "--no-cache-dir", f"torch=={version}"]
    found = wheel(version, python)
    if found is None:
        raise SystemExit(f"torch_wheels.py: PyPI has no torch {version} for Python {python}")
    return ["install", "--no-deps", str(found)]


def sdk(version: str) -> Path:
    dest = WORK / "torch-sdk" / version
    if (dest / "METADATA").is_file():  # (a copy of an older layout lacks it and is unpacked again)
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{version}.lock", "w") as lock:  # one unpacks, the others wait and take its copy
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (dest / "METADATA").is_file():
            partial = tempfile.mkdtemp(dir=dest.parent, prefix=".partial-")
            os.chmod(partial, 0o755)
            try:
                # headers and libraries are the same in every CPython's wheel
                source = wheel(version, "3.11") if keep_downloads() else download_into(Path(partial), version, "3.11")
                if source is None:
                    raise SystemExit(f"torch_wheels.py: PyPI has no torch {version} for Python 3.11")
                with zipfile.ZipFile(source) as archive:
                    for member in archive.namelist():
                        if SDK_MEMBERS.fullmatch(member):
                            archive.extract(member, partial)
                link_stub(Path(partial) / "torch" / "lib" / "libtorch_cpu.so")
                if source.parent == Path(partial):
                    source.unlink()
                for metadata in Path(partial).glob("torch-*.dist-info/METADATA"):
                    os.rename(metadata, Path(partial) / "METADATA")
                    metadata.parent.rmdir()
                shutil.rmtree(dest, ignore_errors=True)  # what an interrupted run of an older version left
                os.rename(partial, dest)
            finally:
                shutil.rmtree(partial, ignore_errors=True)
    return dest


def link_stub(library: Path) -> None:
    """Replace LIBRARY by a stub that serves the linker as well: the same soname and exported symbols (name, type,
    binding, object size) and no code. Linking only reads those, and libtorch_cpu.so is ~450 MB of kernels per release
    (9 releases: 4 GB of CI's disk). What a built extension asks of torch is checked where it loads: every wheel test
    imports it beside PyPI's real torch. Read with binutils' readelf, which comes with the compiler."""
    def readelf(*args: str) -> str:
        out = subprocess.run(["readelf", "-W", *args, str(library)], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"torch_wheels.py: readelf {' '.join(args)} {library} failed:\n{out.stderr}")
        return out.stdout

    soname = re.search(r"\(SONAME\)\s+Library soname: \[(.+)\]", readelf("--dynamic")).group(1)
    lines = []
    # "  1335: 000000000e027340     0 NOTYPE  GLOBAL DEFAULT    8 name" (a size may be written 0x...)
    for row in re.finditer(r"^\s*\d+: [0-9a-f]+\s+(\S+) (\w+)\s+(\w+)\s+(\w+)\s+(\w+) (\S+)$",
                           readelf("--dyn-syms"), re.M):
        size, kind, bind, visibility, index, name = row.groups()
        if index == "UND":
            continue
        if visibility != "DEFAULT" or bind not in ("GLOBAL", "WEAK", "UNIQUE") or "@" in name:
            raise SystemExit(f"torch_wheels.py: {library.name}: no stub for {name} ({bind} {visibility})")
        size = int(size, 0)
        binding = ".weak" if bind == "WEAK" else ".globl"
        if kind in ("FUNC", "IFUNC", "NOTYPE"):  # an ifunc is a function to its callers
            section, type_ = ".text", "" if kind == "NOTYPE" else "@function"
        elif kind == "OBJECT":
            section, type_ = ".bss", "@gnu_unique_object" if bind == "UNIQUE" else "@object"
        elif kind == "TLS":
            section, type_ = '.tbss,"awT",@nobits', "@tls_object"
        else:
            raise SystemExit(f"torch_wheels.py: {library.name}: no stub for {name} ({kind})")
        name = f'"{name}"'
        lines += [f".section {section}", f"{binding} {name}"]
        lines += [f".type {name}, {type_}"] if type_ else []
        lines += [f".size {name}, {size}", f"{name}:"]
        lines += [] if section == ".text" else [f".zero {max(size, 1)}"]  # bss and tbss: sizes cost no bytes
    if len(lines) < 1000:
        raise SystemExit(f"torch_wheels.py: {library.name}: readelf listed only {len(lines)} lines of symbols")
    with tempfile.TemporaryDirectory(dir=library.parent) as work:
        source = Path(work) / "stub.s"
        source.write_text("\n".join(lines) + "\n")
        out = subprocess.run(["cc", "-shared", "-nostdlib", "-s", f"-Wl,-soname,{soname}", "-o", Path(work) / "stub.so",
                              source], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"torch_wheels.py: the link stub of {library.name} failed:\n{out.stderr[-3000:]}")
        os.replace(Path(work) / "stub.so", library)


def requirements_of(version: str) -> list[str]:
    """torch VERSION's Requires-Dist (its Linux x86-64 wheels all name the same), extras left out."""
    lines = (sdk(version) / "METADATA").read_text().splitlines()
    return [line.split(":", 1)[1].strip() for line in lines
            if line.startswith("Requires-Dist:") and "extra ==" not in line]


def is_cuda(requirement: str) -> bool:
    return re.match(r"(nvidia|cuda|triton)", requirement) is not None


def plain_requirements(version: str) -> list[str]:
    """torch's dependencies other than CUDA's libraries and triton (pure Python: sympy, networkx, ...)."""
    return [r for r in requirements_of(version) if not is_cuda(r)]


def cuda_major(version: str) -> str:
    """The CUDA major torch VERSION was built for: 12 (nvidia-*-cu12 packages, torch 2.8-2.10) or 13 (cuda-toolkit
    13, torch 2.11 on)."""
    majors = set()
    for requirement in requirements_of(version):
        m = re.match(r"nvidia-[\w-]*-cu(\d+)\b", requirement) or re.match(r"cuda-toolkit\S*==(\d+)", requirement)
        if m:
            majors.add(int(m.group(1)))
    if not majors:
        raise SystemExit(f"torch_wheels.py: torch {version} names no CUDA libraries")
    return str(max(majors))


def cuda_libs(release: str | None = None) -> Path:
    """The CUDA libraries of RELEASE's CUDA major (default: the newest release's), installed once for every Python
    into build/wheels/cuda-libs-cuMAJOR: each nvidia-* package at the newest pin among that major's releases,
    cuda-toolkit with the union of their extras (torch 2.13 loads libcurand, which 2.15 no longer asks for). CUDA's
    runtime libraries load for older torch releases of the same CUDA major."""
    release = release or releases()[-1]
    major = cuda_major(release)
    dest = WORK / f"cuda-libs-cu{major}"
    wanted: dict[str, tuple[set[str], str]] = {}  # name -> (extras, version specifier)
    for other in releases():  # oldest first: a newer release's pin replaces an older one's
        if cuda_major(other) != major:
            continue
        named = set()
        for requirement in requirements_of(other):
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
    elif command == "install-args":
        print("\n".join(install_args(*args)))
    elif command == "sdk":
        print(sdk(*args))
    elif command == "cuda-libs":
        print(cuda_libs(*args))
    elif command == "requirements":
        # one word each, for a shell's word splitting (2.8's METADATA writes "typing-extensions >= 4.10.0")
        print(" ".join("".join(r.split()) for r in plain_requirements(args[0])))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
