import os
import sys

# Rank helpers live beside the tests; spawned ranks import them by the same path.
sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "torch"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "core"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "multihost"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "xpu"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "contract"))

import pytest  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def no_shared_memory_left_behind():
    """libfabric keeps a region per process in /dev/shm, and ccl-core a file per registered block, all named after
    their process's pid; ranks killed by fault tests must not leave theirs behind (ccl-core removes them:
    packages/ccl-core/src/oneccl/dead_processes.cpp)."""
    def regions():
        try:
            return {f for f in os.listdir("/dev/shm") if ":" in f and f.split(":")[0].isdigit()}
        except OSError:
            return set()

    def alive(region):
        try:
            os.kill(int(region.split(":")[0]), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True

    before = regions()
    yield
    # a live process's region is not left behind: under xdist it is a rank of a test another worker still runs
    left = sorted(r for r in regions() - before if not alive(r))
    assert not left, f"shared-memory regions left behind by test processes: {left}"
