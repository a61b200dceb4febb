#!/bin/bash
# Issue 41 on the 2-vCPU VM: small all_reduces called every way, the decode bench, large messages; 3 runs.
cd "$(dirname "$0")/../../.."; B=.venv/bin/ccl-bench; M=${OUT:-/tmp/m41}; mkdir -p "$M"
for r in 1 2 3; do
  for dt in float32 bfloat16; do
    $B -n 2 --ops all_reduce -b 1K -e 64K --floor --dtype $dt --backends ccl,ccl-op,ccl-funcol,ccl-async,raw,deepspeed-inference --quiet --json $M/small-$dt-r$r.json > $M/small-$dt-r$r.txt 2>&1
  done
  for dt in bfloat16 float32; do
    $B -n 2 --tp-decode --dtype $dt --rounds 5 --quiet --json $M/decode-$dt-r$r.json > $M/decode-$dt-r$r.txt 2>&1
  done
done
$B -n 2 --ops all_reduce,all_gather -b 1M -e 64M --floor --backends ccl,ccl-op,ccl-funcol,ccl-async,raw --quiet --json $M/large.json > $M/large.txt 2>&1
$B -n 2 --ops all_gather -b 1K -e 64K --floor --backends ccl,ccl-op,ccl-funcol,ccl-async,raw --quiet --json $M/gather.json > $M/gather.txt 2>&1
echo done > $M/DONE
