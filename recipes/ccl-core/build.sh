#!/usr/bin/env bash
# oneCCL comes from the conda environment here, not from the PyPI wheels the pip build probes for.
set -euo pipefail
"${PYTHON}" -m pip install . --no-deps --no-build-isolation -vv -Csetup-args=-Doneccl_prefix="${PREFIX}"
