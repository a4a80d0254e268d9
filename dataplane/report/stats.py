"""Statistics over plain lists of numbers, for the report's metrics: spread (max/mean,
Jain's index), percentiles and a metric's distribution over runs."""
from __future__ import annotations

import math

import numpy as np


def jain_index(values) -> float | None:
    """(sum x)^2 / (n sum x^2); 1.0 for all-zero values, None for no values."""
    xs = [float(v) for v in values]
    if not xs:
        return None
    square_sum = sum(x * x for x in xs)
    if square_sum == 0:
        return 1.0
    return sum(xs) ** 2 / (len(xs) * square_sum)


def max_mean(values) -> float | None:
    """max / mean; 1.0 when the mean is 0, None for no values."""
    xs = [float(v) for v in values]
    if not xs:
        return None
    mean = sum(xs) / len(xs)
    return 1.0 if mean == 0 else max(xs) / mean


def percentile(values, q: float) -> float | None:
    xs = [float(v) for v in values]
    if not xs:
        return None
    return float(np.percentile(xs, q))


def distribution(values, percentiles=(50,)) -> dict | None:
    """mean, std (sample, n-1; 0 for one value), min, p<q> for each q, max, n, values."""
    xs = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not xs:
        return None
    arr = np.asarray(xs)
    out = {"mean": float(arr.mean()), "std": float(arr.std(ddof=1)) if len(xs) > 1 else 0.0,
           "min": float(arr.min())}
    for q in percentiles:
        out[f"p{q:g}"] = float(np.percentile(arr, q))
    out.update({"max": float(arr.max()), "n": len(xs), "values": xs})
    return out
