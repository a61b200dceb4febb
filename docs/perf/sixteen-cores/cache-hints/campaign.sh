#!/bin/bash
# Measured (2026-12-07, log and JSON beside it) on a build of 1aca0ee, which had the hint; it was slower, so the hint
# was removed again (docs/performance.md, "Scaling on one host"). Kept for the record and as the template of a campaign.
# Issues 40 and 41 on the 16-core machine the `device` tool lends: does handing the lines the shared-memory path writes
# for its peers to the shared cache (CLDEMOTE, CCL_CORE_SHM_DEMOTE=1 against 0) pay, and which allreduce path should
# small messages take at each rank count (the default one-shot limit; every size one-shot with
# CCL_CORE_SHM_SMALL_BYTES=65536; every size two-step with =64)? Every combination interleaved, ROUNDS rounds (2 by
# default), one pinned rank per core, back-to-back rows beside the barrier-timed ones; then large messages of every op
# with and without demotion. ccl-core's NumPy face only (no torch in the timed path; torch times the floor).
# Run from the repository root with .device/wheels/cache/ holding the cp312 ccl-core wheel under test and the trimmed
# oneCCL wheels in .device/wheels/. JSON and log.txt go to $OUT. RANKS shrinks it for a rehearsal on a small machine.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ROUNDS=${ROUNDS:-2}; RANKS=${RANKS:-2,4,8,16}; LARGE_RANKS=${LARGE_RANKS:-2,8,16}
if [ -z "${PY:-}" ]; then
  export PYTHONPATH=$(python3 -c "import site; print(':'.join(site.getsitepackages()))")
  python3 -m venv --system-site-packages /tmp/v-cache
  /tmp/v-cache/bin/python -m pip install -q --no-index --no-deps --no-compile .device/wheels/cache/*.whl \
    .device/wheels/oneccl*.whl .device/wheels/impi*.whl
  PY=/tmp/v-cache/bin/python
fi
LOG="$OUT/log.txt"
{
  echo "== machine $(date -u +%FT%TZ)"; nproc; lscpu | grep -E "Model name|Socket|NUMA node\(s\)|L2|L3"
  echo "cpu flags: $(grep -m1 -o -w -E 'cldemote|movdir64b|serialize|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  free -g | head -2; df -h /dev/shm | tail -1
  $PY -m ccl_core.info --ranks 2 | head -9
} >> "$LOG" 2>&1
step() {  # NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  echo "== $name $(date +%T)" >> "$LOG"
  timeout "$limit" "$@" >> "$LOG" 2>&1 || echo "FAILED $name rc=$?" >> "$LOG"
}
for round in $(seq 1 "$ROUNDS"); do
  for demote in 1 0; do
    for limit in default 65536 64; do
      step "small-d$demote-$limit-r$round" 120 env CCL_CORE_SHM_DEMOTE=$demote \
        $([ $limit = default ] || echo CCL_CORE_SHM_SMALL_BYTES=$limit) \
        $PY -m ccl_core.bench --ranks "$RANKS" --pin --sizes 1K,2K,4K,8K,16K,32K,64K,256K,1M \
        --dtypes float32,bfloat16 --back-to-back --json "$OUT/small-d$demote-$limit-r$round.json"
    done
  done
done
for demote in 1 0; do
  step "large-d$demote" 150 env CCL_CORE_SHM_DEMOTE=$demote $PY -m ccl_core.bench --ranks "$LARGE_RANKS" --pin \
    --sizes 16M --ops allreduce,allgather,reduce_scatter --dtypes float32 --floor --json "$OUT/large-d$demote.json"
done
tail -3 "$LOG"
