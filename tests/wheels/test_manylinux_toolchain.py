"""The toolchain ci/wheels builds with (ci/manylinux/): this machine's GCC 12 against an older glibc and libstdc++.

A program compiled and linked with its flags must ask the system for nothing that auditwheel's manylinux_2_28 policy
does not allow, and must still behave, with this machine's libraries and with the sysroot's (Debian bullseye's loader,
glibc 2.31 and GCC 10's libstdc++, an older userland than any Python here can run on): the libstdc++ shim counts
exception_ptr's references right across threads, throws bad_array_new_length, and condition variables time out on
steady_clock without glibc 2.30's functions. The ccl-core wheel, installed in a venv, runs two ranks there.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import auditwheel.policy

from clean_venvs import install_ours, new_venv, ok, pin, run

ROOT = Path(__file__).resolve().parents[2]
SYSROOT = ROOT / "build" / "wheels" / "sysroot"

PROGRAM = r"""
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <thread>

static std::atomic<int> destroyed{0};
struct Tracked {
  int value = 42;
  ~Tracked() { ++destroyed; }
};

int main() {
  {
    std::exception_ptr kept;
    try {
      throw Tracked{};
    } catch (...) {
      kept = std::current_exception();
    }
    std::exception_ptr copies[16];
    std::thread other([&] { for (auto& c : copies) c = kept; });  // copied (and so counted) on another thread
    other.join();
    for (auto& c : copies) {
      try {
        std::rethrow_exception(c);
      } catch (const Tracked& t) {
        if (t.value != 42) return 2;
      }
    }
    std::thread releaser([&] { for (auto& c : copies) c = nullptr; });
    releaser.join();
    if (destroyed != 0) { std::puts("destroyed while still referenced"); return 3; }
  }
  if (destroyed != 1) { std::printf("destroyed %d times, not once\n", destroyed.load()); return 4; }

  volatile std::size_t too_many = SIZE_MAX / 2;
  try {
    static_cast<void>(std::allocator<int>().allocate(too_many));
    return 5;
  } catch (const std::bad_array_new_length&) {
  }

  std::mutex mutex;
  std::condition_variable cv;
  std::unique_lock<std::mutex> lock(mutex);
  auto start = std::chrono::steady_clock::now();
  if (cv.wait_for(lock, std::chrono::milliseconds(20)) != std::cv_status::timeout) return 6;
  if (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(20)) return 7;
  std::puts("ok");
  return 0;
}
"""


def toolchain_flags() -> tuple[list[str], list[str]]:
    """ci/manylinux/sysroot.sh's flags (it reuses ci/wheels' sysroot when that one is current)."""
    out = subprocess.run([ROOT / "ci" / "manylinux" / "sysroot.sh", SYSROOT], capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stderr
    cxxflags, ldflags = out.stdout.splitlines()
    return cxxflags.split(), ldflags.split()


def compile_program(source: Path, binary: Path, *extra: str) -> None:
    cxxflags, ldflags = toolchain_flags()
    build = subprocess.run(["g++", "-std=c++17", "-O2", "-pthread", *cxxflags, source, *extra, "-o", binary, *ldflags],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr


def in_older_userland(*command) -> list[str]:
    """command under the sysroot's own loader, with its glibc and libstdc++ before anything of this machine's."""
    root = SYSROOT / "root"
    libraries = f"{root}/lib/x86_64-linux-gnu:{root}/usr/lib/x86_64-linux-gnu"
    return [str(root / "lib64" / "ld-linux-x86-64.so.2"), "--library-path", libraries, *map(str, command)]


def manylinux_2_28_versions() -> dict[str, set[str]]:
    policies = json.loads((Path(auditwheel.policy.__file__).parent / "manylinux-policy.json").read_text())
    policy = next(p for p in policies if p["name"] == "manylinux_2_28")
    return {name: set(versions) for name, versions in policy["symbol_versions"]["x86_64"].items()}


def test_a_program_built_with_the_wheel_toolchain_asks_only_for_manylinux_2_28_and_works(tmp_path):
    source = tmp_path / "program.cpp"
    source.write_text(PROGRAM)
    binary = tmp_path / "program"
    compile_program(source, binary)

    needed = subprocess.run(["objdump", "-T", binary], capture_output=True, text=True, check=True).stdout
    allowed = manylinux_2_28_versions()
    asked = set(re.findall(r"\b(GLIBC|GLIBCXX|CXXABI|GCC)_([0-9][0-9.]*)\b", needed))
    assert asked, needed
    beyond = sorted(f"{name}_{version}" for name, version in asked if version not in allowed[name])
    assert not beyond, f"beyond manylinux_2_28: {beyond}"

    for command in ([binary], in_older_userland(binary)):
        out = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and out.stdout == "ok\n", (command, out.returncode, out.stdout, out.stderr)


def test_the_ccl_core_wheel_runs_two_ranks_on_glibc_2_31_and_gcc_10s_libstdcxx(tmp_path):
    """The wheel installed in a venv (with oneccl-cpu and impi-rt, as pip brings them); a C++ program on its library
    (tests/wheels/older_userland_job.cpp) all-reduces on 2 ranks and raises a kept timeout twice in bullseye's
    userland. Python cannot come along: every CPython here needs a newer glibc."""
    python = new_venv(sys.executable, tmp_path / "venv")
    ok(run(python, "-m", "pip", "install", "--only-binary", ":all:", pin("oneccl-cpu"), pin("impi-rt")))
    install_ours(python, "ccl-core")
    include, library = ok(run(python, "-c", "import ccl_core; print(ccl_core.get_include()); "
                                            "print(ccl_core.get_library_dir())")).split()
    binary = tmp_path / "job"
    compile_program(Path(__file__).with_name("older_userland_job.cpp"), binary, "-I", include,
                    "-L", library, "-lccl_core", f"-Wl,-rpath,{library}")
    (tmp_path / "store").mkdir()
    out = subprocess.run(in_older_userland(binary, tmp_path / "store"), capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert out.returncode == 0, (out.stdout, out.stderr[-3000:])
    assert out.stdout.startswith(f"glibc 2.31, libstdc++ {SYSROOT / 'root'}"), out.stdout
    assert "allreduce ok (shared memory on)" in out.stdout, out.stdout
    assert "timeout raised twice: " in out.stdout and "did not complete within 1000 ms" in out.stdout, out.stdout
