#!/bin/bash
# The 16-core campaign: ccl-core before (the tree before issue 40) and after, the same bench (bench.py, carried),
# interleaved per configuration. Results and logs go to $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cd "$(dirname "$0")"
export PYTHONPATH=$(python3 -c "import site; print(':'.join(site.getsitepackages()))")
for v in before after; do
  python3 -m venv --system-site-packages /tmp/v-$v
  /tmp/v-$v/bin/python -m pip install -q --no-index --no-deps --no-compile wheels/$v/*.whl wheels/oneccl*.whl wheels/impi*.whl
done
{
  echo "== machine"; nproc; lscpu | grep -E "Model name|Socket|NUMA node\(s\)|L2|L3"; free -g | head -2; df -h /dev/shm | tail -1
  /tmp/v-after/bin/python -c "import torch, numpy; print('torch', torch.__version__, 'numpy', numpy.__version__)"
} > "$OUT/machine.txt" 2>&1
run() {  # NAME VENV "VAR=value ..." ARGS...
  local name=$1 v=$2 vars=$3; shift 3
  echo "== $name $(date +%T)" >> "$OUT/log.txt"
  env $vars timeout 300 /tmp/v-$v/bin/python bench.py "$@" --json "$OUT/$name.json" \
    >> "$OUT/log.txt" 2>&1 || echo "FAILED $name rc=$?" >> "$OUT/log.txt"
}
CAMPAIGN=${CAMPAIGN:-scaling}
if [ "$CAMPAIGN" = scaling ]; then
  for round in 1 2; do
    for v in before after; do
      run "$v-pinned-r$round" $v "" --ranks 2,4,8,16 --pin --sizes 1K,8K,64K,1M,64M --floor
    done
  done
  for v in before after; do
    run "$v-threads" $v "" --ranks 2 --pin --cores-per-rank 8 --sizes 1M,64M --floor --registered
  done
  run "after-threads1" after CCL_CORE_THREADS=1 --ranks 2 --pin --cores-per-rank 8 --sizes 64M
  run "after-allgather" after "" --ranks 2,4,8 --pin --sizes 16M --ops allgather,reduce_scatter --dtypes float32 --flat --registered
  run "before-allgather" before "" --ranks 2,4,8 --pin --sizes 16M --ops allgather,reduce_scatter --dtypes float32 --registered
  run "after-registered" after "" --ranks 2,8,16 --pin --sizes 64M --registered --ops allreduce --dtypes float32 --floor
fi
if [ "$CAMPAIGN" = scaling ]; then
  run "after-flat" after "" --ranks 8,16 --pin --sizes 1K,64K,1M --dtypes float32,bfloat16 --flat
  run "after-gloo" after "" --ranks 8 --sizes 1K,64M --dtypes float32 --gloo
fi
if [ "$CAMPAIGN" = rehearse ]; then
  run "before-rehearse" before "" --ranks 2 --pin --sizes 1K,1M --floor
  run "after-rehearse" after "" --ranks 2 --pin --sizes 1K,1M --floor --registered --flat
fi
tail -5 "$OUT/log.txt"
cd "$OUT" && tar czf all.tgz *.json log.txt machine.txt && rm -f *.json  # what comes back is at most 8 files
