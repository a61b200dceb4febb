"""Tables from campaign.sh's JSON: python tables.py DIR.

Per dtype, rank count and size, the range over rounds of the median (µs per call) before (the limit 64 KiB / (P - 1),
one for every dtype) and after (default_small_limit), back-to-back rows first, then barrier-timed; a row is marked
better or WORSE only where the two ranges do not overlap."""
from __future__ import annotations

import glob
import json
import os
import sys
from collections import defaultdict


def span(values: list[float]) -> str:
    return f"{min(values):.1f}-{max(values):.1f}"


def main(directory: str) -> None:
    medians = defaultdict(list)  # (timing, dtype, ranks, bytes, variant) -> one median per round
    for path in sorted(glob.glob(os.path.join(directory, "*-p*-r*.json"))):
        variant = os.path.basename(path).split("-")[0]
        for row in json.load(open(path))["rows"]:
            if row["check"] != "ok":
                sys.exit(f"{path}: {row}")
            timing = "back-to-back" if "back-to-back" in row["op"] else "barrier"
            medians[(timing, row["dtype"], row["ranks"], row["bytes"], variant)].append(row["median_us"])
    for timing in ("back-to-back", "barrier"):
        print(timing)
        for key in sorted({k[:4] for k in medians if k[0] == timing}):
            before, after = medians[key + ("before",)], medians[key + ("after",)]
            mark = " better" if max(after) < min(before) else " WORSE" if min(after) > max(before) else ""
            print(f"  {key[1]:<9} P={key[2]:<3}{key[3] >> 10:>3} KiB  before {span(before):>12}  "
                  f"after {span(after):>12}{mark}")


if __name__ == "__main__":
    main(sys.argv[1])
