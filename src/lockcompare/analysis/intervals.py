"""Exact intervals and tests for counts, with the standard library alone (no scipy).

- :func:`clopper_pearson`: the exact 95% interval of a binomial proportion (k violations in n
  judged trials). Exact: it inverts the binomial distribution itself, no normal approximation;
  conservative: its coverage is at least 95% for every true rate (Wilson's can fall below); and
  defined at the edges: 0 of n gives [0, 1 − (α/2)^(1/n)], the bound a reader needs when a lock
  was never seen to fail (0/5 → 52.2%: five clean trials cannot say "never").
- :func:`poisson_interval`: the exact (Garwood) interval of a Poisson mean (lost updates counted
  over a number of struck faults).
- :func:`fisher_exact`: the two-sided p-value of Fisher's exact test on a 2×2 table (violations
  and clean trials in two cells), by summing hypergeometric probabilities no larger than the
  observed table's (the rule R and scipy use).

Each bound is found by bisection on a distribution function computed in log space (lgamma), so
it holds for the counts a results file has (thousands of trials, lost updates in the thousands).

>>> [round(x, 3) for x in clopper_pearson(0, 5)]
[0.0, 0.522]
>>> [round(x, 3) for x in clopper_pearson(3, 10)]
[0.067, 0.652]
>>> round(fisher_exact(3, 2, 0, 5), 3)
0.167
"""

from __future__ import annotations

import math
from collections.abc import Callable

#: 95% two-sided: every interval here leaves 2.5% on each side.
CONFIDENCE = 0.95
_BISECTIONS = 64
#: Tables whose probability is within this relative tolerance of the observed one count as "as
#: extreme" (floating-point ties; scipy and R use the same guard).
_TIE = 1 + 1e-7


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X ≤ k) for X ~ Binomial(n, p)."""
    if k < 0:
        return 0.0
    if k >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    logp, logq = math.log(p), math.log1p(-p)
    return min(1.0, sum(math.exp(_log_choose(n, i) + i * logp + (n - i) * logq) for i in range(k + 1)))


def poisson_cdf(k: int, mean: float) -> float:
    """P(X ≤ k) for X ~ Poisson(mean)."""
    if k < 0:
        return 0.0
    if mean <= 0.0:
        return 1.0
    log_mean = math.log(mean)
    return min(1.0, sum(math.exp(i * log_mean - mean - math.lgamma(i + 1)) for i in range(k + 1)))


def _root(falling: Callable[[float], float], target: float, *, high: float) -> float:
    """The x in [0, high] where the decreasing function ``falling`` crosses ``target``."""
    low = 0.0
    for _ in range(_BISECTIONS):
        middle = (low + high) / 2
        if falling(middle) > target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def clopper_pearson(k: int, n: int, *, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The exact interval of the proportion k/n (module docstring); (NaN, NaN) for n = 0: no trial
    judged, nothing known."""
    if n <= 0:
        return math.nan, math.nan
    if not 0 <= k <= n:
        raise ValueError(f"{k} successes out of {n} trials")
    tail = (1 - confidence) / 2
    # The lower bound: the p at which seeing k or more is just as likely as the tail (P(X ≤ k-1) = 1 - tail).
    low = 0.0 if k == 0 else _root(lambda p: binomial_cdf(k - 1, n, p), 1 - tail, high=1.0)
    # The upper bound: the p at which seeing k or fewer is just the tail.
    high = 1.0 if k == n else _root(lambda p: binomial_cdf(k, n, p), tail, high=1.0)
    return low, high


def poisson_interval(count: int, *, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The exact interval of a Poisson mean given one observed ``count`` (module docstring)."""
    if count < 0:
        raise ValueError(f"a negative count ({count})")
    tail = (1 - confidence) / 2
    ceiling = count + 20 * math.sqrt(count + 1) + 20  # far beyond any upper bound at 95%
    low = 0.0 if count == 0 else _root(lambda m: poisson_cdf(count - 1, m), 1 - tail, high=ceiling)
    high = _root(lambda m: poisson_cdf(count, m), tail, high=ceiling)
    return low, high


def _hypergeometric_log(x: int, *, row: int, column: int, total: int) -> float:
    return _log_choose(column, x) + _log_choose(total - column, row - x) - _log_choose(total, row)


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """The two-sided p-value of Fisher's exact test on the table [[a, b], [c, d]] (e.g. violations
    and clean trials of cell A, then of cell B): the probability, with the margins fixed, of a
    table no more likely than the one observed. 1.0 when a margin is empty (nothing to test)."""
    if min(a, b, c, d) < 0:
        raise ValueError(f"a negative count in the table {[[a, b], [c, d]]}")
    row, column, total = a + b, a + c, a + b + c + d
    if 0 in (row, column) or total in (row, column):
        return 1.0
    observed = _hypergeometric_log(a, row=row, column=column, total=total)
    p = 0.0
    for x in range(max(0, row + column - total), min(row, column) + 1):
        log_p = _hypergeometric_log(x, row=row, column=column, total=total)
        if log_p <= observed + math.log(_TIE):
            p += math.exp(log_p)
    return min(1.0, p)
