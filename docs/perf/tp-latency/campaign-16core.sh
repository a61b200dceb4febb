#!/bin/bash
# Issue 41 on the 16-core machine the `device` tool lends: small all_reduces at 2-16 ranks (ccl-core's NumPy face,
# pinned), the same through torch at 8 ranks (ccl-bench: dist.all_reduce, the registered op, raw), and --tp-decode at
# TP=2, 4, 8. CAMPAIGN=small instead: which all_reduce path small messages should take at each rank count (the
# default one-shot limit, every size one-shot with CCL_CORE_SHM_SMALL_BYTES=65536, every size two-step with =64,
# interleaved, ROUNDS rounds, 2 by default). Run from the repository root with .device/wheels holding the cp312 wheels (ccl-core, and
# ccl-torch with its torch 2.11 extension) in tp/ and the trimmed oneCCL beside them. JSON and log.txt go to $OUT (8
# files at most come back). RANKS, BENCH_RANKS, DECODE_RANKS and HIDDEN shrink it for a rehearsal on a small machine.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
CAMPAIGN=${CAMPAIGN:-tp}
RANKS=${RANKS:-2,4,8,16}; BENCH_RANKS=${BENCH_RANKS:-8}; DECODE_RANKS=${DECODE_RANKS:-2 4 8}; HIDDEN=${HIDDEN:-2048}
if [ -z "${PY:-}" ]; then
  export PYTHONPATH=$(python3 -c "import site; print(':'.join(site.getsitepackages()))")
  python3 -m venv --system-site-packages /tmp/v-tp
  /tmp/v-tp/bin/python -m pip install -q --no-index --no-deps --no-compile .device/wheels/tp/*.whl \
    .device/wheels/oneccl*.whl .device/wheels/impi*.whl
  PY=/tmp/v-tp/bin/python
fi
BENCH="$(dirname "$PY")/ccl-bench"
LOG="$OUT/log.txt"
{
  echo "== machine $(date -u +%FT%TZ)"; nproc; lscpu | grep -E "Model name|Socket|NUMA node\(s\)|L2|L3"
  free -g | head -2; df -h /dev/shm | tail -1
  $PY -c "import torch, numpy, oneccl_bindings_for_pytorch as o; print('torch', torch.__version__, 'numpy', numpy.__version__, 'ccl-torch', o.__version__)"
} >> "$LOG" 2>&1
step() {  # NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  echo "== $name $(date +%T)" >> "$LOG"
  timeout "$limit" "$@" >> "$LOG" 2>&1 || echo "FAILED $name rc=$?" >> "$LOG"
}
if [ "$CAMPAIGN" = small ]; then
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for limit in default 65536 64; do
      step "small-$limit-r$round" 120 env $([ $limit = default ] || echo CCL_CORE_SHM_SMALL_BYTES=$limit) \
        $PY -m ccl_core.bench --ranks "$RANKS" --pin --sizes 1K,2K,4K,8K,16K,32K,64K --dtypes float32,bfloat16 \
        --back-to-back --json "$OUT/small-$limit-r$round.json"
    done
  done
  tail -3 "$LOG"
  exit 0
fi
for round in 1 2; do
  step "raw-r$round" 90 $PY -m ccl_core.bench --ranks "$RANKS" --pin --sizes 1K,8K,64K --dtypes float32,bfloat16 \
    --floor --back-to-back --json "$OUT/raw-r$round.json"
done
for dt in float32 bfloat16; do
  step "bench-n$BENCH_RANKS-$dt" 60 "$BENCH" -n "$BENCH_RANKS" --ops all_reduce -b 1K -e 64K --dtype $dt \
    --backends ccl,ccl-op,raw --floor --quiet --json "$OUT/bench-n$BENCH_RANKS-$dt.json"
done
for n in $DECODE_RANKS; do
  step "decode-n$n" 90 "$BENCH" -n "$n" --tp-decode --dtype bfloat16 --hidden "$HIDDEN" --layers 8 --vocab 32000 \
    --tokens 32 --rounds 3 --backends fake,ccl,ccl-op,gloo --quiet --json "$OUT/decode-n$n.json"
done
tail -3 "$LOG"
