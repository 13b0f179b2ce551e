"""Small statistics over trials: percentiles and Student-t confidence intervals (no numpy needed).

>>> percentile([1, 2, 3, 4], 50)
2.5
>>> mean_ci([10, 12, 14]).mean
12.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# Two-sided 95% critical values of Student's t for 1..30 degrees of freedom; 1.96 beyond.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between order statistics; NaN if empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True)
class MeanCI:
    """A mean with the half-width of its 95% confidence interval (NaN with fewer than 2 values)."""

    mean: float
    half_width: float
    n: int
    low: float
    high: float


def mean_ci(values: Sequence[float]) -> MeanCI:
    n = len(values)
    if n == 0:
        return MeanCI(math.nan, math.nan, 0, math.nan, math.nan)
    mean = sum(values) / n
    if n < 2:
        return MeanCI(mean, math.nan, n, min(values), max(values))
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    t = _T95[n - 2] if n - 1 <= len(_T95) else 1.96
    return MeanCI(mean, t * math.sqrt(var / n), n, min(values), max(values))
