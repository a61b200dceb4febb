"""The toolchain ci/wheels builds with (ci/manylinux/): this machine's GCC 12 against an older glibc and libstdc++.

A program compiled and linked with its flags must ask the system for nothing that auditwheel's manylinux_2_28 policy
does not allow, and must still behave: the libstdc++ shim counts exception_ptr's references right across threads,
throws bad_array_new_length, and condition variables time out on steady_clock without glibc 2.30's functions.
"""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import auditwheel.policy

ROOT = Path(__file__).resolve().parents[2]

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


def toolchain_flags(tmp: Path) -> tuple[list[str], list[str]]:
    """ci/manylinux/sysroot.sh's flags (it reuses ci/wheels' sysroot when that one is current)."""
    out = subprocess.run([ROOT / "ci" / "manylinux" / "sysroot.sh", ROOT / "build" / "wheels" / "sysroot"],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    cxxflags, ldflags = out.stdout.splitlines()
    return cxxflags.split(), ldflags.split()


def manylinux_2_28_versions() -> dict[str, set[str]]:
    policies = json.loads((Path(auditwheel.policy.__file__).parent / "manylinux-policy.json").read_text())
    policy = next(p for p in policies if p["name"] == "manylinux_2_28")
    return {name: set(versions) for name, versions in policy["symbol_versions"]["x86_64"].items()}


def test_a_program_built_with_the_wheel_toolchain_asks_only_for_manylinux_2_28_and_works(tmp_path):
    cxxflags, ldflags = toolchain_flags(tmp_path)
    source = tmp_path / "program.cpp"
    source.write_text(PROGRAM)
    binary = tmp_path / "program"
    build = subprocess.run(["g++", "-std=c++17", "-O2", "-pthread", *cxxflags, source, "-o", binary, *ldflags],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr

    needed = subprocess.run(["objdump", "-T", binary], capture_output=True, text=True, check=True).stdout
    allowed = manylinux_2_28_versions()
    asked = set(re.findall(r"\b(GLIBC|GLIBCXX|CXXABI|GCC)_([0-9][0-9.]*)\b", needed))
    assert asked, needed
    beyond = sorted(f"{name}_{version}" for name, version in asked if version not in allowed[name])
    assert not beyond, f"beyond manylinux_2_28: {beyond}"

    run = subprocess.run([binary], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout == "ok\n", (run.returncode, run.stdout, run.stderr)
