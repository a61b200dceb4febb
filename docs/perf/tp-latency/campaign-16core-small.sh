#!/bin/bash
# Which all_reduce path small messages should take at each rank count, on the 16-core machine: ccl-core's
# shared-memory path with its default one-shot limit, with every size one-shot (CCL_CORE_SHM_SMALL_BYTES=65536) and
# with every size two-step (=64), interleaved, two rounds. Same set-up and $OUT as campaign-16core.sh.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
RANKS=${RANKS:-2,4,8,16}
if [ -z "${PY:-}" ]; then
  export PYTHONPATH=$(python3 -c "import site; print(':'.join(site.getsitepackages()))")
  python3 -m venv --system-site-packages /tmp/v-tp
  /tmp/v-tp/bin/python -m pip install -q --no-index --no-deps --no-compile .device/wheels/tp/*.whl \
    .device/wheels/oneccl*.whl .device/wheels/impi*.whl
  PY=/tmp/v-tp/bin/python
fi
LOG="$OUT/log.txt"
echo "== machine $(date -u +%FT%TZ) $(nproc) cores" >> "$LOG"
for round in 1 2; do
  for limit in default 65536 64; do
    echo "== small-$limit-r$round $(date +%T)" >> "$LOG"
    env $([ $limit = default ] || echo CCL_CORE_SHM_SMALL_BYTES=$limit) timeout 120 $PY -m ccl_core.bench \
      --ranks "$RANKS" --pin --sizes 1K,2K,4K,8K,16K,32K,64K --dtypes float32,bfloat16 --back-to-back \
      --json "$OUT/small-$limit-r$round.json" >> "$LOG" 2>&1 || echo "FAILED small-$limit-r$round rc=$?" >> "$LOG"
  done
done
tail -3 "$LOG"
