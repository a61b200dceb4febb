"""python -m ccl_core.info [--json] [--ranks N]: versions, library paths, transport, the effective oneCCL environment,
and what a group of N local ranks (2 by default; 0 skips it) agrees on when it is made here."""
from __future__ import annotations

import json
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context


def loaded_library(fragment: str) -> str | None:
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if fragment in os.path.basename(path):
                    return path
    except OSError:
        pass
    return None


def _agreed_by(rank: int, size: int, store_dir: str) -> dict:
    import ccl_core

    comm = ccl_core.Communicator(ccl_core.FileStore(store_dir), rank, size, timeout=60, name="info")
    return comm.agreed


def group_agreement(size: int) -> dict:
    """Makes a real group of `size` ranks on this host (fresh processes, this environment) and returns what rank 0's
    communicator settled on: the environment says what each rank asks for, the group decides (one rank with
    CCL_CORE_SHM=0, or too small a /dev/shm, takes every rank to oneCCL)."""
    with tempfile.TemporaryDirectory(prefix="ccl-info-") as store_dir:
        with ProcessPoolExecutor(size, mp_context=get_context("spawn")) as pool:
            agreed = list(pool.map(_agreed_by, range(size), [size] * size, [store_dir] * size))
    return dict(agreed[0], ranks=size)


def collect(ranks: int = 2) -> dict:
    import ccl_core

    # first, so that its ranks start from the user's environment, not the one our defaults fill in below
    group = group_agreement(ranks) if ranks > 1 else None
    user_set = {name for name, _, _ in ccl_core.env_defaults() if name in os.environ}
    ccl_core.initialize_runtime()  # applies our defaults, as a communicator would
    effective = dict(ccl_core.effective_environment())
    environment = [
        {"name": name, "value": effective[name], "default": value,
         "source": "user" if name in user_set else "ccl-core default", "why": why}
        for name, value, why in ccl_core.env_defaults()
    ]
    ours = {e["name"] for e in environment}
    others = {k: v for k, v in sorted(os.environ.items())
              if k.startswith(("CCL_", "FI_", "I_MPI_")) and k not in ours}
    return {
        "ccl_core": ccl_core.__version__,
        "oneccl": ccl_core.oneccl_version(),
        "libccl": ccl_core.oneccl_library_path(),
        "libccl_core": loaded_library("libccl_core"),
        "libfabric": loaded_library("libfabric"),
        "transport": {"atl": effective["CCL_ATL_TRANSPORT"],
                      "shared_memory": effective["CCL_ATL_SHM"] == "1",
                      "fi_provider": os.environ.get("FI_PROVIDER", "(oneCCL's choice)"),
                      # what this process asks for; "group" below says what a group agreed on
                      "ccl_core_shared_memory": os.environ.get("CCL_CORE_SHM", "1") != "0"},
        # the reduction kernels' instruction-set level (CCL_CORE_KERNEL forces one of the supported)
        "kernels": {"level": ccl_core.kernel_level(), "supported": ccl_core.supported_kernel_levels()},
        "progress": ccl_core.progress_mode(),  # CCL_CORE_PROGRESS: who moves async operations
        "group": group,
        "environment": environment,
        "other_variables": others,
    }


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ranks = int(argv[argv.index("--ranks") + 1]) if "--ranks" in argv else 2
    info = collect(ranks)
    if "--json" in argv:
        print(json.dumps(info, indent=2))
        return 0
    print(f"ccl-core      {info['ccl_core']}")
    print(f"oneCCL        {info['oneccl']}")
    print(f"libccl        {info['libccl']}")
    print(f"libccl_core   {info['libccl_core']}")
    print(f"libfabric     {info['libfabric'] or '(loaded when the first communicator is made)'}")
    t = info["transport"]
    print(f"transport     ATL {t['atl']}, shared memory {'on' if t['shared_memory'] else 'off'}, "
          f"FI_PROVIDER {t['fi_provider']}")
    k = info["kernels"]
    print(f"kernels       {k['level']} (this CPU: {', '.join(k['supported'])})")
    what = ("a background thread moves async operations" if info["progress"] == "thread"
            else "async operations move inside test()/wait() only")
    print(f"progress      {info['progress']} ({what})")
    g = info["group"]
    if g:
        print(f"group         {g['ranks']} local ranks agreed: shared-memory path {g['shared_memory']}, "
              f"{g['local_ranks']} on this host, {'oversubscribed' if g['oversubscribed'] else 'a core each'}, "
              f"kernels {g['kernels']}, progress {g['progress']}")
    print("environment:")
    for e in info["environment"]:
        print(f"  {e['name']}={e['value']}  [{e['source']}]")
    for k, v in info["other_variables"].items():
        print(f"  {k}={v}  [user]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
