"""Percentiles and bandwidths, with nccl-tests' bus-bandwidth factors so figures compare across tools."""
from __future__ import annotations

import statistics


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of already sorted values."""
    if not sorted_values:
        raise ValueError("no samples")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(samples_us: list[float]) -> dict:
    s = sorted(samples_us)
    return {"median_us": statistics.median(s), "p10_us": percentile(s, 10), "p90_us": percentile(s, 90),
            "samples": len(s)}


# bus bandwidth = algorithm bandwidth x factor(n): the bytes each rank must move per byte of the payload
BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}


def bandwidths(op: str, nbytes: int, ranks: int, time_us: float) -> tuple[float, float]:
    """(algorithm, bus) bandwidth in GB/s for `nbytes` moved in `time_us`."""
    alg = nbytes / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0
    return alg, alg * BUS_FACTOR[op](ranks)
