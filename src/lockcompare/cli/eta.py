"""How long a matrix has left, from how long its trials took, cell by cell.

Trials of one cell (a backend × an experiment with its settings) take about as long as each other;
trials of different cells do not (a Node client's cell or a ZooKeeper one costs several times a
Redis baseline's). So the work left is each trial still to run at its cell's mean duration so far
(a cell not yet seen: the mean of the seen cells of its experiment, else of its backend, else of
all), less what the running trials have already done. The wall-clock time that work takes is
learned from the run itself: wall time elapsed per second of trial work done (finished trials'
durations plus the running ones' time so far), which covers both trials run side by side
(``--jobs``) and the time between trials — but never less than the longest single trial left
(the last trials of a run run alone).

Pure bookkeeping with an injectable clock; the terminal bar (cli/options.py) shows
:meth:`Eta.seconds_left` through :func:`remaining_text`.

>>> now = [0.0]
>>> eta = Eta(clock=lambda: now[0])
>>> eta.plan([("a0", ("redlock", "baseline")), ("a1", ("redlock", "baseline")), ("b0", ("redlock", "pause"))])
>>> eta.started("a0"); now[0] = 10.0; eta.finished("a0", wall_s=10.0, failed=False)
>>> eta.started("a1")  # the pause cell is unseen: it takes redlock's mean, 10 s
>>> eta.seconds_left(), eta.done, eta.left, eta.failed
(20.0, 1, 2, 0)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence

#: Where a trial neither planned nor given a cell is counted.
_UNKNOWN_CELL: tuple[Hashable, ...] = ("", "")


class Eta:
    """The trials of a run, what each cell's trials took, and the time left (see the module docstring).

    A cell is a tuple whose first two items are the backend and the experiment (they pick the
    fallback for a cell not yet seen); its other items are the settings that make it a cell.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cells: dict[str, tuple[Hashable, ...]] = {}  # trial id -> its cell, for the trials planned
        self._walls: dict[tuple[Hashable, ...], list[float]] = {}  # cell -> durations of its finished trials
        self._running: dict[str, float] = {}  # trial id -> when it started
        self._finished: set[str] = set()
        self._first_start: float | None = None
        self._work_done = 0.0  # seconds of trial work finished
        self.total = 0
        self.done = 0
        self.failed = 0

    @property
    def left(self) -> int:
        return max(0, self.total - self.done)

    def plan(self, trials: Sequence[tuple[str, tuple[Hashable, ...]]]) -> None:
        """The trials this run will run, as (trial id, cell)."""
        self._cells = dict(trials)
        self.total = len(self._cells)

    def expect(self, total: int) -> None:
        """The run says it has ``total`` trials (where no plan was given, the count alone)."""
        self.total = max(self.total, total)

    def started(self, trial_id: str) -> None:
        now = self._clock()
        if self._first_start is None:
            self._first_start = now
        self._running.setdefault(trial_id, now)

    def finished(self, trial_id: str, *, wall_s: float, failed: bool, cell: tuple[Hashable, ...] | None = None) -> None:
        """A trial ended after ``wall_s`` seconds; ``failed``: it could not be judged."""
        started = self._running.pop(trial_id, None)
        if self._first_start is None:  # no start was reported (a remote executor): it began wall_s ago
            self._first_start = self._clock() - wall_s
        if started is None and trial_id in self._finished:
            return
        self._finished.add(trial_id)
        key = cell if cell is not None else self._cells.get(trial_id, _UNKNOWN_CELL)
        self._walls.setdefault(key, []).append(wall_s)
        self._work_done += wall_s
        self.done += 1
        self.failed += int(failed)
        self.total = max(self.total, self.done)

    def _means(self, running: dict[str, float], now: float) -> dict[tuple[Hashable, ...], float]:
        """Each cell's mean duration; a cell with a trial running but none finished: at least that
        trial's time so far (a lower bound), else what its experiment or backend suggest — so a slow
        experiment's first trial, still running, raises the estimate of its other cells."""
        means = {key: sum(walls) / len(walls) for key, walls in list(self._walls.items()) if walls}
        bounds: dict[tuple[Hashable, ...], float] = {}
        for tid, since in running.items():
            cell = self._cells.get(tid)
            if cell is not None and cell not in means:
                bounds[cell] = max(bounds.get(cell, 0.0), now - since)
        return means | {cell: max(ran, self._estimate(cell, means) or 0.0) for cell, ran in bounds.items()}

    @staticmethod
    def _estimate(cell: tuple[Hashable, ...] | None, means: dict[tuple[Hashable, ...], float]) -> float | None:
        """A trial's expected duration in ``cell``: its own mean, else its experiment's cells', else
        its backend's, else every cell's (means of cell means: a cell of many trials weighs one)."""
        if not means:
            return None
        if cell is not None and cell in means:
            return means[cell]
        for position in (1, 0):  # the experiment, then the backend
            alike = [m for key, m in means.items() if cell is not None and len(cell) > position
                     and len(key) > position and key[position] == cell[position]]  # fmt: skip
            if alike:
                return sum(alike) / len(alike)
        return sum(means.values()) / len(means)

    def seconds_left(self) -> float | None:
        """Wall-clock seconds until the last planned trial ends; None until a trial has finished."""
        if not self.done or self._first_start is None:
            return None
        now = self._clock()
        elapsed = now - self._first_start
        running = dict(self._running)  # a copy: the bar's refresh thread reads while callbacks write
        running_done = sum(now - t for t in running.values())
        work_done = self._work_done + running_done
        if work_done <= 0 or elapsed <= 0:
            return None
        cells = dict(self._cells)
        pending = [tid for tid in cells if tid not in self._finished]
        means = self._means(running, now)
        per_cell: dict[tuple[Hashable, ...], float] = {}  # estimates, computed once per cell
        work_left = longest = 0.0
        for tid in pending:
            cell = cells[tid]
            if cell not in per_cell:
                per_cell[cell] = self._estimate(cell, means) or 0.0
            estimate = per_cell[cell]
            if tid in running:
                estimate = max(0.0, estimate - (now - running[tid]))
            work_left += estimate
            longest = max(longest, estimate)
        unplanned = self.left - len(pending)  # trials counted but not planned (no plan given)
        if unplanned > 0:
            work_left += unplanned * (self._estimate(None, means) or 0.0)
        # Trials side by side shorten the work left, but never below the longest single trial left:
        # the last trial of a run runs alone.
        return max(work_left * elapsed / work_done, longest)


def remaining_text(seconds: float | None) -> str:
    """``~40 s left``, ``~12 min left``, ``~1 h 40 min left``; before any estimate (no trial has
    finished yet), ``~? left``.

    >>> remaining_text(None), remaining_text(12.4), remaining_text(700), remaining_text(6000)
    ('~? left', '~12 s left', '~12 min left', '~1 h 40 min left')
    """
    if seconds is None:
        return "~? left"
    if seconds < 90:
        return f"~{max(0, round(seconds))} s left"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"~{minutes} min left"
    return f"~{minutes // 60} h {minutes % 60} min left"
