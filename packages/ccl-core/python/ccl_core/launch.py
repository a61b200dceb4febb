"""Start N local ranks of a Python script, each with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.

    python -m ccl_core.launch -n 2 my_script.py args...
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

from ._bootstrap import free_port


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ccl_core.launch",
                                     description="Start N local ranks of a Python script")
    parser.add_argument("-n", "--nproc", type=int, default=2, help="number of ranks (default 2)")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    port = free_port()
    procs = []
    for rank in range(ns.nproc):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(ns.nproc), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, ns.script, *ns.args], env=env))
    codes = [p.wait() for p in procs]
    return next((c for c in codes if c != 0), 0)


if __name__ == "__main__":
    sys.exit(main())
