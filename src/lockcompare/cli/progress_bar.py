"""The matrix's progress on a terminal: a live bar with done / left / failed and the time left.

On a terminal (rich): the last trial's result, the bar, ``12 done · 30 left · 0 failed``, the time
elapsed and the time left as cli/eta.py estimates it from the durations of each cell's trials
(ticking down between trials). Elsewhere (a log file, CI) one plain line per finished trial, as
before, ending in ``(~N min left)`` once there is an estimate. *Failed* counts the trials that
could not be judged (verdict ``unknown``).

The callback is the matrix's ProgressCallback; its ``plan`` method receives the trials the run
will run and how many timing-marked ones it runs again at its end (runner/matrix.py calls it when
it has one), so the estimate weighs each by its cell and counts the runs again. The counts (and
``[done/total]``) include the runs again the sentinel's marks have decided so far.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.table import Column
from rich.text import Text

from lockcompare.cli.eta import Eta, remaining_text

if TYPE_CHECKING:
    from lockcompare.runner.trial import TrialResult
    from lockcompare.scenario.trialspec import TrialSpec

#: The bar redraws this often; the estimate is recomputed at each redraw (cheap, but not free
#: beside trials whose timing is measured).
REFRESH_PER_SECOND = 2
#: What the bar, the counts, the time elapsed and the time left take on a line (with their gaps).
FIXED_COLUMNS_WIDTH = 80


def cell_of(spec: TrialSpec) -> tuple[Hashable, ...]:
    """A trial's cell: its backend, its experiment, and every other setting but the trial's number and seed."""
    return (spec.backend, spec.experiment, dataclasses.replace(spec, trial=0, seed=0))


class EtaColumn(ProgressColumn):
    """The time left, recomputed at every redraw."""

    def __init__(self, eta: Eta) -> None:
        super().__init__()
        self.eta = eta

    def render(self, task: Task) -> Text:
        return Text(remaining_text(self.eta.seconds_left()), style="progress.remaining")


class ProgressUpdate:
    """The matrix's progress callback, driving the bar (a terminal) or plain lines (elsewhere)."""

    def __init__(self, *, bar: Progress, console: Console, eta: Eta) -> None:
        self.bar, self.console, self.eta = bar, console, eta
        self.task = bar.add_task("starting", total=None, counts="")

    def plan(self, specs: Sequence[TrialSpec], *, reruns: int = 0, rerun_jobs: int = 1) -> None:
        self.eta.plan([(spec.trial_id, cell_of(spec)) for spec in specs], reruns=reruns, rerun_jobs=rerun_jobs)

    def counts(self) -> str:
        return f"{self.eta.done} done · {self.eta.left} left · {self.eta.failed} failed"

    def __call__(self, spec: TrialSpec, result: TrialResult | None, done: int, total: int) -> None:
        self.eta.expect(total)
        label = f"{spec.backend} × {spec.experiment} #{spec.trial}"
        if result is None:
            self.eta.started(spec.trial_id)
        else:
            m = result.metrics
            failed = m.verdict == "unknown"
            timing = getattr(result, "timing", None)  # None: a row read back (Dask), or no sentinel
            marked = timing is not None and timing.marked
            self.eta.finished(spec.trial_id, wall_s=result.wall_s, failed=failed, cell=cell_of(spec), marked=marked)
            label = (
                f"{label}: {m.verdict}, {m.conflicts}/{m.entries} conflicts, {m.lost_updates} lost, "
                f"{result.wall_s:.1f} s"
            )
            if m.problem and not failed:  # what the history shows that no count says (checker.py)
                label += f" ({m.problem})"
        if not self.console.is_terminal:  # a log file or CI: one plain line per finished trial
            if result is not None:
                seconds = self.eta.seconds_left()
                left = f" ({remaining_text(seconds)})" if seconds is not None and self.eta.left else ""
                print(f"[{self.eta.done}/{self.eta.total}] {label}{left}", file=sys.stderr, flush=True)
            return
        if not self.bar.live.is_started:
            self.bar.start()
        self.bar.update(
            self.task, description=label, completed=self.eta.done, total=self.eta.total, counts=self.counts()
        )


def progress_bar(*, console: Console, eta: Eta | None = None) -> tuple[Progress, ProgressUpdate]:
    """A progress bar that appears with the first trial (so a bad option prints no empty bar);
    ``eta``: the estimator it shows (a test gives one on its own clock)."""
    eta = eta or Eta()
    # The counts and the time first, the last trial's result after them, cut to the terminal's width:
    # a long result line must never push the time left off a narrow terminal.
    room = max(16, console.width - FIXED_COLUMNS_WIDTH)
    bar = Progress(
        BarColumn(bar_width=20),
        TextColumn("{task.fields[counts]}"),
        TimeElapsedColumn(),
        EtaColumn(eta),
        TextColumn("{task.description}", table_column=Column(no_wrap=True, overflow="ellipsis", max_width=room)),
        console=console,
        refresh_per_second=REFRESH_PER_SECOND,
    )
    return bar, ProgressUpdate(bar=bar, console=console, eta=eta)
