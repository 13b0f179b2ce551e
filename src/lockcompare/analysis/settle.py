"""When is a cell's answer settled? The rule ``matrix --until-settled`` adds trials by.

A cell is *settled* when either

- *unsafe here*: one of its observed trials that the timing sentinel did not mark has a safety
  violation (analysis/rates.py). One is enough: the lock broke under these settings, which no
  number of clean trials after it undoes; how often is what its interval says, and more trials would
  narrow it, not change the answer. A violation seen only in timing-marked trials settles nothing
  (a finding that rests on a marked trial is not a finding yet: the machine, not only the lock, may
  have made it); the cell stays open until a trial the machine did not disturb shows one, or its
  marked trials are run again (``--rerun-marked``);
- *clean*: none of its observed trials has one, and the exact 95% upper bound of its violation rate
  is at or below the target (``--settle-below``, default :data:`DEFAULT_TARGET`).

Otherwise it is *open*: too few clean trials to bound its rate below the target. Trials that did not
observe the lock (``unknown``, ``unavailable``) count against the cell's trial budget but not
toward its answer. Pure: rows in, a state out.

>>> [trials_to_settle(target) for target in (0.5, 0.2, 0.1, 0.05)]
[6, 17, 36, 72]
>>> rows = [{"verdict": "exclusive"}] * 5
>>> state = cell_state("single × baseline", rows, target=0.2)
>>> (state.status, state.needed)
('open', 12)
>>> marked = cell_state("single × pause", [{"verdict": "lost-updates", "timing_marked": True}] * 3, target=0.2)
>>> (marked.status, marked.text())
('open', 'single × pause: 3/3 100% [29.2–100%], every violation in a timing-marked trial')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lockcompare.analysis.intervals import clopper_pearson
from lockcompare.analysis.rates import ViolationRate, observed, percent, violated, violation_rate
from lockcompare.analysis.sentinel import is_marked

DEFAULT_TARGET = 0.2
UNSAFE, CLEAN, OPEN = "unsafe here", "clean", "open"
#: No cell is bounded by more clean trials than this (a target of 0.1% needs 3687).
MAX_NEEDED = 100_000


def trials_to_settle(target: float) -> int:
    """The fewest observed trials, all clean, whose exact upper bound is at or below ``target``."""
    if not 0 < target < 1:
        raise ValueError(f"a target rate between 0 and 1, got {target}")
    low, high = 1, 1
    while clopper_pearson(0, high)[1] > target:  # doubling, then bisection: the bound falls with n
        low, high = high + 1, high * 2
        if high > MAX_NEEDED:
            raise ValueError(f"a target of {percent(target)} needs more than {MAX_NEEDED} trials")
    while low < high:
        middle = (low + high) // 2
        if clopper_pearson(0, middle)[1] <= target:
            high = middle
        else:
            low = middle + 1
    return low


@dataclass(frozen=True, kw_only=True)
class CellState:
    name: str  # e.g. "fenced × client-pause" (with its varying settings)
    rate: ViolationRate
    trials: int  # every trial of the cell in the file, observed or not
    status: str  # UNSAFE, CLEAN or OPEN
    #: More observed trials this cell needs, all clean, to settle clean (0 unless open).
    needed: int
    #: Violations seen, every one of them in a timing-marked trial: not yet a finding.
    marked_only: bool = False

    @property
    def settled(self) -> bool:
        return self.status != OPEN

    def text(self) -> str:
        """``fenced × client-pause: 0/5 0% [0–52.2%]`` and, for an open cell, how many more it needs."""
        if self.marked_only:
            more = ", every violation in a timing-marked trial"
        else:
            more = f", {self.needed} more clean to settle" if self.status == OPEN else ""
        unobserved = f" (+{self.rate.unobserved} not observed)" if self.rate.unobserved else ""
        return f"{self.name}: {self.rate.text()}{unobserved}{more}"


def cell_state(name: str, rows: Sequence[Mapping[str, Any]], *, target: float) -> CellState:
    """Where one cell's answer stands (module docstring)."""
    rate = violation_rate(rows)
    unmarked_violations = sum(1 for r in rows if observed(r) and violated(r) and not is_marked(r))
    if unmarked_violations:
        status, needed = UNSAFE, 0
    elif rate.violations:  # only in marked trials: open until an undisturbed trial shows one
        return CellState(name=name, rate=rate, trials=len(rows), status=OPEN, needed=1, marked_only=True)
    elif rate.observed and rate.high <= target:
        status, needed = CLEAN, 0
    else:
        status, needed = OPEN, trials_to_settle(target) - rate.observed
    return CellState(name=name, rate=rate, trials=len(rows), status=status, needed=max(needed, 0))


def progress_line(states: Sequence[CellState], *, round_number: int) -> str:
    """``round 2: 4 of 6 cells settled (2 unsafe here, 2 clean); open: a × b 0/5 [0–52.2%], ...``"""
    unsafe = sum(1 for s in states if s.status == UNSAFE)
    clean = sum(1 for s in states if s.status == CLEAN)
    open_cells = [s for s in states if not s.settled]
    line = (
        f"settle: after round {round_number}: {unsafe + clean} of {len(states)} cells settled "
        f"({unsafe} unsafe here, {clean} clean)"
    )
    if open_cells:
        line += f"; {len(open_cells)} open: " + "; ".join(s.text() for s in open_cells)
    return line
