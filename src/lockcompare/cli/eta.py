"""How long a matrix has left, from how long its trials took, cell by cell, and how many ran at once lately.

Trials of one cell (a backend × an experiment with its settings) take about as long as each other;
trials of different cells do not (a Node client's cell or a ZooKeeper one costs several times a
Redis baseline's). So the work left is each trial still to run at its cell's mean duration so far
(a cell not yet seen: the mean of the seen cells of its experiment, else of its backend, else of
all), less what the running trials have already done. A trial's duration is the time its job slot
was taken — from its start to its end as reported here — so what surrounds a trial (its cluster,
its history, its checker) counts like its workers' time.

How fast that work goes is how many trials ran at once *lately*: the mean number running over the
last :data:`WINDOW_SHARE` of the run (at least :data:`WINDOW_TRIALS` mean trials: of the longest cell,
the window reached back into a first batch the scheduler had long left — -38% on the recorded
schedule of the tests, whose first three trials ran side by side and the rest one at a time). Not
since the start: the scheduler admits fewer trials once stalls appear (runner/scheduler.py) or a
no-lock trial runs alone, and a run that began three at a time and went on one at a time was
estimated, from its first minute, at a third of what it had left (issue 53: "~8 s left" for ~35 s).
Never less than the longest single trial left (the last trials of a run run alone).

And the trials the timing sentinel marks run again by themselves at the end (``matrix --rerun-marked
N``): those marked so far (up to N) are trials left, and so are — estimated — as many of the trials
still to run as the share marked says, each at its cell's duration, ``--rerun-jobs K`` at once (their
time summed and shared by K). The share is not
the bare share marked so far: before the first mark that is 0, and the reruns — serial, each a whole
trial — were missing from the estimate until a mark came (issue 53: -50% on a recorded schedule
whose marks came in its last cells). It starts from a prior, :data:`PRIOR_MARKED` of
:data:`PRIOR_TRIALS` (the committed reproduction marked 17% on a loaded machine, quiet runs none),
which the run's own trials outweigh as they finish; a trial expected to be marked costs, until one
is, its cell's duration like the trials still to run.

Pure bookkeeping with an injectable clock; the terminal bar and the plain progress lines
(cli/progress_bar.py) show :meth:`Eta.seconds_left` through :func:`remaining_text`.

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
#: How far back "lately" reaches: this share of the run so far...
WINDOW_SHARE = 0.25
#: ...but at least this many mean trials (the mean of the cells' means: a window shorter than a trial
#: sees one trial's start or end, not how many ran at once).
WINDOW_TRIALS = 1.5
#: The prior of the share of trials the sentinel marks, as pseudo-trials: this many marked...
PRIOR_MARKED = 1.0
#: ...of this many (a share of 10%, weighing as ten trials: after 30 unmarked trials it says 2.5%).
PRIOR_TRIALS = 10.0


class Eta:
    """The trials of a run, what each cell's trials took, and the time left (see the module docstring).

    A cell is a tuple whose first two items are the backend and the experiment (they pick the
    fallback for a cell not yet seen); its other items are the settings that make it a cell.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cells: dict[str, tuple[Hashable, ...]] = {}  # trial id -> its cell, for the trials planned
        self._took: dict[tuple[Hashable, ...], list[float]] = {}  # cell -> durations of its finished trials
        self._running: dict[str, float] = {}  # trial id -> when it started
        self._spans: list[tuple[float, float]] = []  # (start, end) of every finished trial: who ran when
        self._finished: set[str] = set()
        self._first_start: float | None = None
        self._reruns = 0  # how many timing-marked trials the run will run again at its end...
        self._rerun_jobs = 1  # ...this many at once
        self._marked: list[str] = []  # finished trials the sentinel marked, in order (the first _reruns rerun)
        self._rerun: set[str] = set()  # marked trials run again (or running again)
        self._main_done = 0  # trials of this plan finished the first time
        self._before = 0  # trials done before this plan (--until-settled plans a round at a time)
        self.total = 0
        self.done = 0
        self.failed = 0

    @property
    def left(self) -> int:
        return max(0, self.total - self.done)

    def plan(self, trials: Sequence[tuple[str, tuple[Hashable, ...]]], *, reruns: int = 0, rerun_jobs: int = 1) -> None:
        """The trials this run will run, as (trial id, cell); ``reruns``: how many timing-marked ones it
        runs again at its end, at most, ``rerun_jobs`` at once. A later plan (the next round of
        --until-settled) adds its trials to those done."""
        self._cells = dict(trials)
        self._reruns = reruns
        self._rerun_jobs = max(1, rerun_jobs)
        self._marked, self._rerun, self._main_done = [], set(), 0
        self._before = self.done
        self.total = self._before + len(self._cells)

    def expect(self, total: int) -> None:
        """The run says it has ``total`` trials (where no plan was given, the count alone)."""
        self.total = max(self.total, total)

    def started(self, trial_id: str) -> None:
        now = self._clock()
        if self._first_start is None:
            self._first_start = now
        if trial_id in self._finished:  # a marked trial, run again alone
            self._rerun.add(trial_id)
        self._running.setdefault(trial_id, now)

    def finished(
        self,
        trial_id: str,
        *,
        wall_s: float,
        failed: bool,
        cell: tuple[Hashable, ...] | None = None,
        marked: bool = False,
    ) -> None:
        """A trial ended after ``wall_s`` seconds of its own; ``failed``: it could not be judged;
        ``marked``: the timing sentinel marked it (so it may run again at the end)."""
        now = self._clock()
        started = self._running.pop(trial_id, None)
        if started is None and trial_id in self._finished:
            return  # reported twice
        # Its job slot's time, where its start was seen; a remote executor reports none: its own time.
        took = now - started if started is not None else wall_s
        if self._first_start is None:
            self._first_start = now - took
        key = cell if cell is not None else self._cells.get(trial_id, _UNKNOWN_CELL)
        self._took.setdefault(key, []).append(took)
        self._spans.append((now - took, now))
        self.done += 1
        self.failed += int(failed)
        if trial_id not in self._finished:
            self._finished.add(trial_id)
            self._main_done += 1
            if marked:
                self._marked.append(trial_id)
        chosen = min(self._reruns, len(self._marked))  # the marked trials that will run again
        self.total = max(self.total, self.done, self._before + len(self._cells) + chosen)

    def _means(self, running: dict[str, float], now: float) -> dict[tuple[Hashable, ...], float]:
        """Each cell's mean duration; a cell with a trial running but none finished: at least that
        trial's time so far (a lower bound), else what its experiment or backend suggest — so a slow
        experiment's first trial, still running, raises the estimate of its other cells."""
        means = {key: sum(took) / len(took) for key, took in list(self._took.items()) if took}
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

    def _at_once(self, running: dict[str, float], now: float, *, typical: float) -> float:
        """How many trials ran at once lately: their time inside the window over its length."""
        assert self._first_start is not None
        elapsed = now - self._first_start
        window = min(elapsed, max(WINDOW_SHARE * elapsed, WINDOW_TRIALS * typical))
        since = now - window
        spans = [*self._spans[-1000:], *((start, now) for start in running.values())]  # fmt: skip
        inside = sum(max(0.0, end - max(start, since)) for start, end in spans)
        return max(inside / window, 1e-9) if window > 0 else 1.0

    def seconds_left(self) -> float | None:
        """Wall-clock seconds until the last planned trial ends; None until a trial has finished."""
        if not self.done or self._first_start is None:
            return None
        now = self._clock()
        running = dict(self._running)  # a copy: the bar's refresh thread reads while callbacks write
        cells = dict(self._cells)
        means = self._means(running, now)
        per_cell: dict[tuple[Hashable, ...], float] = {}  # estimates, computed once per cell

        def estimate(tid: str) -> float:
            cell = cells.get(tid, _UNKNOWN_CELL)
            if cell not in per_cell:
                per_cell[cell] = self._estimate(cell, means) or 0.0
            return per_cell[cell]

        pending = [tid for tid in cells if tid not in self._finished]
        work_left = longest = 0.0
        for tid in pending:
            guess = max(0.0, estimate(tid) - (now - running[tid])) if tid in running else estimate(tid)
            work_left += guess
            longest = max(longest, guess)
        unplanned = self.total - self.done - len(pending) - self._reruns_left_known()  # counted, not planned
        if unplanned > 0:
            work_left += unplanned * (self._estimate(None, means) or 0.0)
        typical = sum(means.values()) / len(means) if means else 0.0
        main = max(work_left / self._at_once(running, now, typical=typical), longest) if work_left else 0.0
        return main + self._reruns_left(pending, running, now, estimate) / self._rerun_jobs

    def _reruns_left_known(self) -> int:
        """Marked trials that will run again (within the run's number) and have not ended that run."""
        chosen = self._marked[: self._reruns]
        return sum(1 for tid in chosen if tid not in self._rerun or tid in self._running)

    def _reruns_left(
        self, pending: list[str], running: dict[str, float], now: float, estimate: Callable[[str], float]
    ) -> float:
        """The time the marked trials' runs again take one after another (the caller shares it among
        the reruns run at once): those chosen so far, and
        as many of the trials still to run as the marked share says (within the number; the prior's
        share until the run's own trials outweigh it: the module docstring)."""
        chosen = self._marked[: self._reruns]
        left = 0.0
        for tid in chosen:
            if tid in running and tid in self._rerun:
                left += max(0.0, estimate(tid) - (now - running[tid]))
            elif tid not in self._rerun:
                left += estimate(tid)
        share = (len(self._marked) + PRIOR_MARKED) / (self._main_done + PRIOR_TRIALS)
        more = min(self._reruns - len(chosen), len(pending) * share)
        like = self._marked or pending  # whose durations an expected mark costs: the marked, else those to run
        if more > 0 and like:
            left += more * sum(estimate(tid) for tid in like) / len(like)
        return left


def remaining_text(seconds: float | None) -> str:
    """``~40 s left``, ``~12 min left``, ``~1 h 40 min left``; before any estimate (no trial has
    finished yet), ``~? left``. Seconds up to five minutes, by fives above 90: in whole minutes, 91 s
    and 149 s both read "~2 min" (+32% and -19%), a rounding larger than the estimate's own error.

    >>> remaining_text(None), remaining_text(12.4), remaining_text(103), remaining_text(700), remaining_text(6000)
    ('~? left', '~12 s left', '~105 s left', '~12 min left', '~1 h 40 min left')
    """
    if seconds is None:
        return "~? left"
    if seconds < 90:
        return f"~{max(0, round(seconds))} s left"
    if seconds < 300:
        return f"~{5 * round(seconds / 5)} s left"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"~{minutes} min left"
    return f"~{minutes // 60} h {minutes % 60} min left"
