#!/usr/bin/env bash
# Stands in for ssh when Hydra (mpiexec) starts its proxy on a test host: "netns_ssh.sh [options] HOST COMMAND..."
# runs COMMAND inside HOST's network namespace, with HOST as hostname. CCL_TEST_HOSTS maps hosts:
# "name=netns,...".
set -euo pipefail
while [[ "${1:-}" == -* ]]; do shift; done
host="$1"; shift
IFS=',' read -ra entries <<< "${CCL_TEST_HOSTS:?}"
for entry in "${entries[@]}"; do
  IFS='=' read -r name netns <<< "$entry"
  if [[ "$name" == "$host" ]]; then
    exec ip netns exec "$netns" unshare --uts bash -c "hostname $name; $*"
  fi
done
echo "netns_ssh.sh: unknown host $host" >&2
exit 1
