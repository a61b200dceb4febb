"""The rate-limited test bed (shaped_link.py) end to end: the links are shaped (a TCP stream cannot beat the token
bucket's rate), ccl-bench runs on every host for ccl, ccl-flat and gloo, and every result is checked. Speed is the
benchmark's to report (docs/performance.md, "Across hosts"), not asserted here."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

import netns_hosts

SCRIPT = Path(__file__).resolve().parent / "shaped_link.py"
why_not = netns_hosts.can_make_namespaces()
pytestmark = pytest.mark.skipif(bool(why_not), reason=why_not)


def test_shaped_link_bench(tmp_path):
    """On three hosts of one rank (a bridge between them, every port shaped both ways)."""
    out = tmp_path / "shaped.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--rate", "1000mbit", "--rounds", "1", "-b", "4M", "-e", "4M",
                          "--iters", "2", "--hosts", "3", "--nproc", "1", "--json", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["rate_Bps"] < 1.1 * 1000e6 / 8, result["rate_Bps"]  # the bucket holds the stream to its rate
    cases = {c["op"]: c for c in result["cases"]}
    assert set(cases) == {"all_reduce", "all_gather", "reduce_scatter", "broadcast"}
    for c in cases.values():
        assert c["checks"] == ["ok"]
        assert {"ccl", "ccl-flat", "gloo"} <= c.keys() and c["link_limit_ms"] > 0
    # the busiest link carries 2 (H - 1) / H of an all_reduce, and all_gather's blocks of the two other hosts
    per_byte_ms = 1000 / result["rate_Bps"] * (4 << 20)
    assert cases["all_reduce"]["link_limit_ms"] == pytest.approx(4 / 3 * per_byte_ms)
    assert cases["all_gather"]["link_limit_ms"] == pytest.approx(2 / 3 * per_byte_ms)
    assert "3 hosts x 1 ranks" in run.stdout and "link limit" in run.stdout


def test_an_env_option_without_a_value_is_refused_by_name():
    run = subprocess.run([sys.executable, str(SCRIPT), "--env", "CCL_CORE_HIERARCHY_PIECE_BYTES"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "--env takes NAME=VALUE" in run.stderr, run.stdout + run.stderr
