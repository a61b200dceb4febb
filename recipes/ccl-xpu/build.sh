#!/usr/bin/env bash
# Against the ccl-core, ccl-torch and torch of the host environment, never an isolated build's own.
set -euo pipefail
"${PYTHON}" -m pip install . --no-deps --no-build-isolation -vv
