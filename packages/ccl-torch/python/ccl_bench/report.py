"""Results as a table (stdout), CSV, JSON and a PNG plot (time and bus bandwidth vs size, a line per backend)."""
from __future__ import annotations

import csv
import json


def human(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


COLUMNS = ["op", "bytes", "backend", "ranks", "median_us", "p10_us", "p90_us", "algbw_GBps", "busbw_GBps",
           "x_gloo", "x_floor", "compute_us", "hidden_pct", "check"]


def table(rows: list[dict]) -> str:
    head = (f"{'op':<23}{'size':>9} {'backend':<7}{'median µs':>11}{'p10':>10}{'p90':>10}"
            f"{'algbw GB/s':>11}{'busbw GB/s':>11}{'x gloo':>8}{'x floor':>8}  check")
    lines = [head, "-" * len(head)]
    for r in rows:
        xg = f"{r['x_gloo']:.1f}" if r.get("x_gloo") else "-"
        xf = f"{r['x_floor']:.2f}" if r.get("x_floor") else "-"
        lines.append(f"{r['op']:<23}{human(r['bytes']):>9} {r['backend']:<7}{r['median_us']:11.1f}{r['p10_us']:10.1f}"
                     f"{r['p90_us']:10.1f}{r['algbw_GBps']:11.2f}{r['busbw_GBps']:11.2f}{xg:>8}{xf:>8}  {r['check']}")
    return "\n".join(lines)


def write_csv(rows: list[dict], path: str) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def write_json(rows: list[dict], meta: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump({"meta": meta, "results": rows}, f, indent=2)


def plot(rows: list[dict], path: str, title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise SystemExit(f"ccl-bench: --plot needs matplotlib ({e}); pip install matplotlib") from None
    # a DDP step has no message-size axis; overlap rows are waits after computation, not op times
    ops = sorted({r["op"] for r in rows if not r["op"].endswith(("_step", "overlap"))})
    fig, axes = plt.subplots(2, len(ops), figsize=(5 * len(ops), 8), squeeze=False)
    for col, op in enumerate(ops):
        for backend in sorted({r["backend"] for r in rows if r["op"] == op}):
            pts = sorted((r["bytes"], r["median_us"], r["busbw_GBps"]) for r in rows
                         if r["op"] == op and r["backend"] == backend)
            xs = [p[0] for p in pts]
            axes[0][col].plot(xs, [p[1] for p in pts], marker="o", label=backend)
            axes[1][col].plot(xs, [p[2] for p in pts], marker="o", label=backend)
        for row, label in ((0, "median time (µs)"), (1, "bus bandwidth (GB/s)")):
            ax = axes[row][col]
            ax.set_xscale("log", base=2)
            if row == 0:
                ax.set_yscale("log")
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel(label)
            ax.set_title(op)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
