"""A cell's answer as a rate with an interval: how often its trials broke safety, and how much
damage each struck fault did.

- *Violation rate*: the share of the cell's observed trials whose verdict is a safety violation
  (:data:`~lockcompare.analysis.verdicts.VIOLATIONS`, the verdicts flagged ``violation`` in
  analysis/verdicts.py), with its exact 95% Clopper–Pearson interval (analysis/intervals.py: exact,
  conservative, and defined at 0 and at n, where a lock never seen to fail needs its upper bound).
  Trials that did not observe the lock (:data:`~lockcompare.analysis.verdicts.UNOBSERVED`:
  ``unknown``, ``unavailable``) and verdicts this lockcompare does not know are left out and
  counted apart: nothing observed is never "clean".
- *Damage per struck fault*: lost updates summed over the observed trials, divided by the fault
  injections that struck in them (analysis/strikes.py), with the exact Poisson interval of the
  count divided likewise. Only where some injection struck (a client pause counts, one per round
  it paused): a baseline has none, and a file from before strikes were counted none to divide by.

>>> rows = [{"verdict": "lost-updates", "lost_updates": 3, "fault_steps_struck": 2}] + [
...     {"verdict": "exclusive", "lost_updates": 0, "fault_steps_struck": 2}] * 4 + [{"verdict": "unknown"}]
>>> rate = violation_rate(rows)
>>> (rate.violations, rate.observed, rate.unobserved, rate.text())
(1, 5, 1, '1/5 20% [0.5–71.6%]')
>>> damage_rate(rows).text()
'3/10 0.3 [0.06–0.88]'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lockcompare.analysis.intervals import clopper_pearson, poisson_interval
from lockcompare.analysis.verdicts import BY_NAME, UNOBSERVED, VIOLATIONS

Row = Mapping[str, Any]


def observed(row: Row) -> bool:
    """Did the trial observe the lock (a verdict this lockcompare knows, not unknown or unavailable)?"""
    verdict = str(row.get("verdict"))
    return verdict in BY_NAME and verdict not in UNOBSERVED


def violated(row: Row) -> bool:
    return str(row.get("verdict")) in VIOLATIONS


def percent(share: float) -> str:
    """A share as a percentage: one decimal (trailing zero dropped), "n/a" for NaN."""
    if math.isnan(share):
        return "n/a"
    text = f"{share * 100:.1f}".removesuffix(".0")
    return f"{text}%"


@dataclass(frozen=True, kw_only=True)
class ViolationRate:
    violations: int
    observed: int  # the denominator: trials that observed the lock
    unobserved: int  # left out: unknown, unavailable, a verdict not known here
    low: float  # the exact 95% interval (NaN, NaN with no trial observed)
    high: float

    @property
    def share(self) -> float:
        return self.violations / self.observed if self.observed else math.nan

    def text(self) -> str:
        """``2/5 40% [5.3–85.3%]``; ``0/0 n/a`` when no trial observed the lock."""
        if not self.observed:
            return "0/0 n/a"
        interval = f"{percent(self.low).removesuffix('%')}–{percent(self.high)}"
        return f"{self.violations}/{self.observed} {percent(self.share)} [{interval}]"


def violation_rate(rows: Sequence[Row]) -> ViolationRate:
    """The violation rate of one cell's rows (one row per trial: see the module docstring)."""
    seen = [r for r in rows if observed(r)]
    violations = sum(1 for r in seen if violated(r))
    low, high = clopper_pearson(violations, len(seen))
    return ViolationRate(
        violations=violations, observed=len(seen), unobserved=len(rows) - len(seen), low=low, high=high
    )


def _count(row: Row, column: str) -> int:
    """A non-negative count, 0 where the row has none (-1: older than the column)."""
    value = row.get(column)
    return value if isinstance(value, int) and value > 0 else 0


@dataclass(frozen=True, kw_only=True)
class DamageRate:
    lost: int  # lost updates summed over the observed trials
    struck: int  # fault injections that struck in them
    low: float  # the exact 95% interval of lost / struck
    high: float

    @property
    def per_fault(self) -> float:
        return self.lost / self.struck

    def text(self) -> str:
        """``12/5 2.4 [1.2–4.2]``: lost updates / struck faults, their ratio and its interval."""
        return f"{self.lost}/{self.struck} {_number(self.per_fault)} [{_number(self.low)}–{_number(self.high)}]"


def _number(value: float) -> str:
    digits = 2 if value < 1 else 1
    return f"{value:.{digits}f}".rstrip("0").rstrip(".") if value else "0"


def damage_rate(rows: Sequence[Row]) -> DamageRate | None:
    """Lost updates per struck fault over a cell's observed rows; None where no injection struck."""
    seen = [r for r in rows if observed(r)]
    struck = sum(_count(r, "fault_steps_struck") for r in seen)
    if not struck:
        return None
    lost = sum(_count(r, "lost_updates") for r in seen)
    low, high = poisson_interval(lost)
    return DamageRate(lost=lost, struck=struck, low=low / struck, high=high / struck)


def damage_text(rows: Sequence[Row]) -> str:
    """:meth:`DamageRate.text`, or "—" where the cell's trials struck no fault injection."""
    damage = damage_rate(rows)
    return damage.text() if damage is not None else "—"


#: Said under a table that shows rates (render/table.py, the HTML report).
RATE_NOTE = (
    f"violation rate: trials whose verdict is a safety violation ({', '.join(VIOLATIONS)}) out of those that "
    "observed the lock, with the exact 95% Clopper–Pearson interval (0 of 5 still allows up to 52%: add trials, "
    f"`matrix --until-settled`); {' and '.join(UNOBSERVED)} trials are left out and counted apart."
)
DAMAGE_NOTE = (
    "lost / struck fault: lost updates per fault injection that struck, with the exact Poisson interval "
    "(— where no injection struck: no faults, or rows from before strikes were counted)."
)
