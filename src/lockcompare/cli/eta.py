"""How long a matrix has left: its trials still to run, each at what its cell's trials took, laid
into as many job slots as trials ran at once, in the order the scheduler starts them.

Trials of one cell (a backend × an experiment with its settings) take about as long as each other;
trials of different cells do not (a Node client's cell or a ZooKeeper one costs several times a
Redis baseline's). So each trial still to run is expected to take its cell's mean duration so far;
a cell not yet seen, what its settings say (runner/cost_order.py's prior: its critical sections,
its pauses) times what its backend's trials took over theirs — not its backend's mean, which early
in a run is its slowest experiment's: the scheduler starts each round's longest trials first, and a
baseline estimated at a client-pause's 7 s put the first lines at +145% (issue 53). Without a prior,
the mean of its experiment's cells, else of its backend's, else of all. A trial's duration is the
time its job slot was taken — from its start to its end as reported here — so what surrounds a
trial (its cluster, its history, its checker) counts like its workers' time.

Those trials are laid, round by round and longest first as runner/cost_order.py starts them, into
the job slots after what the running trials have left (:func:`finish_after`); the last to end is
the time left, so the run's tail (its last trials alone in their slots) is counted as it will run,
not as a share of a global rate. The slots: how many trials ran at once, as the lesser of the mean
number since the run's first trial and the mean over the last :data:`SHORT_TRIALS` mean trials.
The scheduler's stall governor halves the trials admitted at once at a stall and adds one after
three calm trials (runner/scheduler.py), so the number running swings (3, 6, 3, 2 on one 45-trial
run) while its mean over the run ahead stays near its mean so far: a window of a quarter of the run
followed the swing and read 5.5 at once where 2.9 were to come (-41%; issue 53's +29% at 23 s was
its other side). The short window catches a cut that lasts — a run that began three at a time and
went on one at a time was estimated, by its mean since the start, at a third of what it had left
(issue 53: "~8 s left" for ~35 s). A machine whose load rises mid-run makes the governor cut the
trials at once from ~3 to 1: no estimate from the run so far foresees that, and it reads low (about
-50% on a run that went from 3 to 1 at a quarter of its length) until the cut shows. Not the
governor's limit itself, the moment it is cut: the cells' durations were measured at the contention
of their time (first-round trials, three at once on a loaded machine, took 1.7x what they took
alone), so one slot at those durations read +150%; the means at once move with the durations.

And the trials the timing sentinel marks run again alone at the end (``matrix --rerun-marked N``):
those marked so far (up to N) are trials left, and so are — estimated — as many of the trials still
to run as the share marked says, each at its cell's duration, one after another. The share is not
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

import heapq
import time
from collections.abc import Callable, Hashable, Sequence
from typing import NamedTuple

#: Where a trial neither planned nor given a cell is counted.
_UNKNOWN_CELL: tuple[Hashable, ...] = ("", "")
#: The short window over which trials at once are counted, in mean trials (the mean of the cells'
#: means): long enough to span a trial's end and the next start, short enough that a cut by the
#: stall governor shows within about one trial.
SHORT_TRIALS = 1.0
#: The prior of the share of trials the sentinel marks, as pseudo-trials: this many marked...
PRIOR_MARKED = 1.0
#: ...of this many (a share of 10%, weighing as ten trials: after 30 unmarked trials it says 2.5%).
PRIOR_TRIALS = 10.0


class Planned(NamedTuple):
    """A trial the run will run: its id, its cell, its round (its trial number: the scheduler starts
    round 0 of every cell before round 1, runner/cost_order.py) and what its settings say it takes
    (cost_order.prior_s; None: nothing said)."""

    trial_id: str
    cell: tuple[Hashable, ...]
    round: int = 0
    prior_s: float | None = None


def finish_after(*, running: Sequence[float], queue: Sequence[float], slots: int) -> float:
    """When the last trial ends: ``running`` trials with these seconds left, then the ``queue`` in
    its order, each started in the first of ``slots`` job slots to come free (list scheduling, as
    runner/scheduler.py does). More running than slots: a queued trial starts only once fewer than
    ``slots`` run, i.e. in the slots the longest running ones hold.

    >>> finish_after(running=[1.0, 4.0], queue=[3.0, 3.0, 1.0], slots=2)  # 1-4, 4-7 and 4-5
    7.0
    >>> finish_after(running=[1.0, 2.0, 6.0], queue=[2.0], slots=2)  # starts when the 2 s one ends
    6.0
    """
    slots = max(1, slots)
    free = sorted(running)[-slots:]
    free += [0.0] * (slots - len(free))
    heapq.heapify(free)
    end = max(running, default=0.0)
    for seconds in queue:
        start = heapq.heappop(free)
        heapq.heappush(free, start + seconds)
        end = max(end, start + seconds)
    return end


class Eta:
    """The trials of a run, what each cell's trials took, and the time left (see the module docstring).

    A cell is a tuple whose first two items are the backend and the experiment (they pick the
    fallback for a cell not yet seen); its other items are the settings that make it a cell.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cells: dict[str, tuple[Hashable, ...]] = {}  # trial id -> its cell, for the trials planned
        self._planned: dict[str, Planned] = {}  # trial id -> its round and prior, for the trials planned
        self._ratios: dict[Hashable, list[float]] = {}  # backend -> what its trials took over their priors
        self._took: dict[tuple[Hashable, ...], list[float]] = {}  # cell -> durations of its finished trials
        self._running: dict[str, float] = {}  # trial id -> when it started
        self._spans: list[tuple[float, float]] = []  # (start, end) of every finished trial: who ran when
        self._busy_s = 0.0  # the finished trials' slot time, all of it (the spans kept are the last 1000)
        self._finished: set[str] = set()
        self._first_start: float | None = None
        self._reruns = 0  # how many timing-marked trials the run will run again alone at its end
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

    def plan(self, trials: Sequence[Planned | tuple[str, tuple[Hashable, ...]]], *, reruns: int = 0) -> None:
        """The trials this run will run, as :class:`Planned` (or (trial id, cell): round 0, no prior);
        ``reruns``: how many timing-marked ones it runs again alone at its end, at most. A later plan
        (the next round of --until-settled) adds its trials to those done."""
        self._planned = {trial[0]: Planned(*trial) for trial in trials}
        self._cells = {trial_id: planned.cell for trial_id, planned in self._planned.items()}
        self._reruns = reruns
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
        planned = self._planned.get(trial_id)
        if planned is not None and planned.prior_s and key:
            self._ratios.setdefault(key[0], []).append(took / planned.prior_s)
        self._spans.append((now - took, now))
        self._busy_s += took
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
        trial's time so far (a lower bound), else what its settings or its experiment suggest — so a
        slow experiment's first trial, still running, raises the estimate of its other cells."""
        means = {key: sum(took) / len(took) for key, took in list(self._took.items()) if took}
        bounds: dict[tuple[Hashable, ...], tuple[float, float | None]] = {}
        for tid, since in running.items():
            planned = self._planned.get(tid)
            if planned is not None and planned.cell not in means:
                ran = max(bounds.get(planned.cell, (0.0, None))[0], now - since)
                bounds[planned.cell] = (ran, planned.prior_s)
        return means | {
            cell: max(ran, self._estimate(cell, means, prior_s=prior) or 0.0) for cell, (ran, prior) in bounds.items()
        }

    def _estimate(
        self, cell: tuple[Hashable, ...] | None, means: dict[tuple[Hashable, ...], float], *, prior_s: float | None
    ) -> float | None:
        """A trial's expected duration in ``cell``: its own mean; else its settings' prior times what
        its backend's trials took over theirs (all trials' where its backend has none finished: the
        ratio runner/cost_order.py orders by); else its experiment's cells', its backend's, every
        cell's (means of cell means: a cell of many trials weighs one). The prior comes before the
        backend's mean: a run's first trials are its slowest cells (longest first), and a baseline
        taken at a client-pause's 7 s put the first estimates at +145% (issue 53)."""
        if not means:
            return None
        if cell is not None and cell in means:
            return means[cell]
        if prior_s:
            ratios = (self._ratios.get(cell[0]) if cell else None) or [r for rs in self._ratios.values() for r in rs]
            if ratios:
                return prior_s * sum(ratios) / len(ratios)
        for position in (1, 0):  # the experiment, then the backend
            alike = [m for key, m in means.items() if cell is not None and len(cell) > position
                     and len(key) > position and key[position] == cell[position]]  # fmt: skip
            if alike:
                return sum(alike) / len(alike)
        return sum(means.values()) / len(means)

    def _at_once(self, running: dict[str, float], now: float, *, typical: float) -> float:
        """How many trials run at once: the lesser of their mean number since the run's first trial
        and over the last :data:`SHORT_TRIALS` mean trials (the module docstring); at least one."""
        assert self._first_start is not None
        elapsed = now - self._first_start
        spans = [*self._spans[-1000:], *((start, now) for start in running.values())]  # fmt: skip

        if elapsed <= 0:
            return float(max(1, len(running)))
        since_start = (self._busy_s + sum(now - start for start in running.values())) / elapsed
        window = min(elapsed, SHORT_TRIALS * typical)
        lately = sum(max(0.0, end - max(start, now - window)) for start, end in spans) / window if window > 0 else 1.0
        return max(1.0, min(since_start, lately))

    def seconds_left(self) -> float | None:
        """Wall-clock seconds until the last planned trial ends; None until a trial has finished.

        The trials still to run, each at its expected duration, in the order the scheduler starts
        them (round by round, longest first: runner/cost_order.py), are laid into as many job slots
        as trials run at once (:meth:`_at_once`), after what the running ones have left (:func:`finish_after`);
        a fraction of a slot between the two whole numbers around it. Then the marked trials' runs
        again, one after another."""
        if not self.done or self._first_start is None:
            return None
        now = self._clock()
        running = dict(self._running)  # a copy: the bar's refresh thread reads while callbacks write
        planned = dict(self._planned)
        means = self._means(running, now)
        per_cell: dict[tuple[Hashable, ...], float] = {}  # estimates, computed once per cell

        def estimate(tid: str) -> float:
            trial = planned.get(tid) or Planned(tid, self._cells.get(tid, _UNKNOWN_CELL))
            if trial.cell not in per_cell:
                per_cell[trial.cell] = self._estimate(trial.cell, means, prior_s=trial.prior_s) or 0.0
            return per_cell[trial.cell]

        pending = [tid for tid in planned if tid not in self._finished]
        busy = [max(0.0, estimate(tid) - (now - running[tid])) for tid in pending if tid in running]
        queue = sorted((planned[tid].round, -estimate(tid)) for tid in pending if tid not in running)
        unplanned = self.total - self.done - len(pending) - self._reruns_left_known()  # counted, not planned
        guess = self._estimate(None, means, prior_s=None) or 0.0
        seconds = [-minus for _, minus in queue] + [guess] * max(0, unplanned)
        typical = sum(means.values()) / len(means) if means else 0.0
        at_once = self._at_once(running, now, typical=typical)
        whole = int(at_once)
        main = finish_after(running=busy, queue=seconds, slots=whole)
        if at_once > whole:  # between the two whole numbers of slots
            fewer = main
            main -= (at_once - whole) * (fewer - finish_after(running=busy, queue=seconds, slots=whole + 1))
        return main + self._reruns_left(pending, running, now, estimate)

    def _reruns_left_known(self) -> int:
        """Marked trials that will run again (within the run's number) and have not ended that run."""
        chosen = self._marked[: self._reruns]
        return sum(1 for tid in chosen if tid not in self._rerun or tid in self._running)

    def _reruns_left(
        self, pending: list[str], running: dict[str, float], now: float, estimate: Callable[[str], float]
    ) -> float:
        """The time the marked trials' runs again take, one after another: those chosen so far, and
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
