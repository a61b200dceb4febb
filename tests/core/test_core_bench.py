"""python -m ccl_core.bench (the benchmark the 16-core tables come from): it runs, checks every result, and its rows
say what they measured."""
import json
import subprocess
import sys

from ranks import clean_env


def test_bench_rows_for_every_dtype_with_back_to_back_timing_and_the_floor(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ccl_core.bench", "--ranks", "2,3", "--sizes", "1K,64K",
                          "--dtypes", "float32,bfloat16", "--floor", "--back-to-back", "--json", str(tmp_path / "b.json")],
                         env=clean_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = json.load(open(tmp_path / "b.json"))["rows"]
    ops = {(r["op"], r["dtype"], r["bytes"], r["ranks"]) for r in rows}
    for ranks in (2, 3):
        for dtype in ("float32", "bfloat16"):
            for nbytes in (1024, 65536):
                assert ("allreduce", dtype, nbytes, ranks) in ops
                assert ("allreduce back-to-back", dtype, nbytes, ranks) in ops
        assert ("floor", "float32", 1024, ranks) in ops
    assert all(r["check"] == "ok" and 0 < r["p10_us"] <= r["median_us"] <= r["p90_us"] for r in rows)
    assert "allreduce back-to-back" in out.stdout
