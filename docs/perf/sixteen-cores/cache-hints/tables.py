"""Tables from campaign-cache.sh's JSON: python cache_tables.py DIR [--barrier].

Per dtype, size and rank count, the range over rounds of the back-to-back median (µs per call; --barrier: the
barrier-timed rows) for every (CCL_CORE_SHM_DEMOTE, CCL_CORE_SHM_SMALL_BYTES) the campaign ran; then the large rows."""
from __future__ import annotations

import glob
import json
import os
import re
import sys
from collections import defaultdict


def span(values: list[float]) -> str:
    return f"{min(values):.1f}-{max(values):.1f}" if len(values) > 1 else f"{values[0]:.1f}"


def main(directory: str, barrier: bool) -> None:
    small = defaultdict(list)  # (dtype, bytes, ranks, variant) -> medians
    variants = []
    for path in sorted(glob.glob(os.path.join(directory, "small-d*-r*.json"))):
        demote, limit = re.match(r"small-d(\d)-(\w+)-r\d+\.json", os.path.basename(path)).groups()
        variant = f"d{demote}/{ {'default': 'auto', '65536': 'one-shot', '64': 'two-step'}[limit] }"
        if variant not in variants:
            variants.append(variant)
        for row in json.load(open(path))["rows"]:
            if row["op"] == ("allreduce" if barrier else "allreduce back-to-back"):
                small[(row["dtype"], row["bytes"], row["ranks"], variant)].append(row["median_us"])
    keys = sorted({k[:3] for k in small}, key=lambda k: (k[0], k[2], k[1]))
    print("dtype     size     P  " + "".join(f"{v:>16}" for v in variants))
    for dtype, nbytes, ranks in keys:
        cells = [span(small[(dtype, nbytes, ranks, v)]) if small[(dtype, nbytes, ranks, v)] else "-" for v in variants]
        size = f"{nbytes >> 20}M" if nbytes >= 1 << 20 else f"{nbytes >> 10}K"
        print(f"{dtype:<9} {size:>5} {ranks:>3}  " + "".join(f"{c:>16}" for c in cells))
    for path in sorted(glob.glob(os.path.join(directory, "large-d*.json"))):
        print(os.path.basename(path))
        for row in json.load(open(path))["rows"]:
            print(f"  {row['op']:<24} {row['dtype']:<9} {row['bytes'] >> 20:>4} MiB P={row['ranks']:<3} "
                  f"{row['median_us'] / 1000:8.2f} ms  {row['check']}")


if __name__ == "__main__":
    main(sys.argv[1], "--barrier" in sys.argv)
