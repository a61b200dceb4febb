#!/usr/bin/env bash
# Against the pytorch and ccl-core of the host environment, never an isolated build's own torch.
set -euo pipefail
"${PYTHON}" -m pip install . --no-deps --no-build-isolation -vv
