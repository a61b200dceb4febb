#!/bin/bash
# Issues 40 and 41 on the 16-core machine the `device` tool lends: the one-shot limits per rank count and dtype
# (shm_collectives.cpp, default_small_limit) against the limit before them (65536 / (P - 1), one for every dtype, set
# with CCL_CORE_SHM_SMALL_BYTES), interleaved per rank count, ROUNDS rounds (2 by default); one pinned rank per core,
# back-to-back and barrier-timed rows. ccl-core's NumPy face only. Run from the repository root with
# .device/wheels/paths/ holding the cp312 ccl-core wheel under test and the trimmed oneCCL wheels in .device/wheels/.
# JSON and log.txt go to $OUT; tables.py beside it prints the comparison. RANKS shrinks it for a rehearsal on a small machine.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ROUNDS=${ROUNDS:-2}; RANKS=${RANKS:-2 4 8 16}
if [ -z "${PY:-}" ]; then
  export PYTHONPATH=$(python3 -c "import site; print(':'.join(site.getsitepackages()))")
  python3 -m venv --system-site-packages /tmp/v-paths
  /tmp/v-paths/bin/python -m pip install -q --no-index --no-deps --no-compile .device/wheels/paths/*.whl \
    .device/wheels/oneccl*.whl .device/wheels/impi*.whl
  PY=/tmp/v-paths/bin/python
fi
LOG="$OUT/log.txt"
{
  echo "== machine $(date -u +%FT%TZ)"; nproc; lscpu | grep -E "Model name|Socket|NUMA node\(s\)|L2|L3"
  free -g | head -2; df -h /dev/shm | tail -1
  $PY -m ccl_core.info --ranks 2 > /tmp/info.txt 2>&1; head -8 /tmp/info.txt
} >> "$LOG" 2>&1
step() {  # NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  echo "== $name $(date +%T)" >> "$LOG"
  timeout "$limit" "$@" >> "$LOG" 2>&1 || echo "FAILED $name rc=$?" >> "$LOG"
}
old_limit() { python3 -c "print(min(65536, (65536 // ($1 - 1) + 63) // 64 * 64))"; }  # the rule before
for round in $(seq 1 "$ROUNDS"); do
  for p in $RANKS; do
    for variant in before after; do
      step "$variant-p$p-r$round" 120 env $([ $variant = after ] || echo CCL_CORE_SHM_SMALL_BYTES=$(old_limit $p)) \
        $PY -m ccl_core.bench --ranks "$p" --pin --sizes 1K,2K,4K,8K,16K,32K,64K \
        --dtypes float32,bfloat16 --back-to-back --json "$OUT/$variant-p$p-r$round.json"
    done
  done
done
tail -3 "$LOG"
