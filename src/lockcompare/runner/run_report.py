"""What a run of planned trials reports, whichever executor ran them (local or Dask)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lockcompare.runner.floor import RunFloor
    from lockcompare.runner.trial import TrialResult
    from lockcompare.scenario.trialspec import TrialSpec


@dataclass(frozen=True, kw_only=True)
class MatrixReport:
    out: Path
    trials_run: int
    trials_skipped: int
    jobs: int = 1  # asked for
    jobs_used: int = 1  # the most trials that ran at once
    #: Mean busy-CPU fraction per (backend, experiment): CPU of workers + servers / wall time.
    busy_cpu: dict[tuple[str, str], float] = field(default_factory=dict)
    #: Every planned trial, run now or before.
    trial_ids: tuple[str, ...] = ()
    #: (trial_id, problem) of every trial judged ``unknown`` in this run.
    unknown: tuple[tuple[str, str], ...] = ()
    #: How many trials of this run had each of the noted verdicts (said on stderr with its meaning).
    no_progress: dict[str, int] = field(default_factory=dict)
    #: The fewest trials the stall governor let run at once, and how often it backed off (scheduler.py).
    jobs_floor: int = 1
    backed_off: int = 0
    #: The run's own floor and where its wall went (runner/floor.py); None when no trial ran here.
    floor: RunFloor | None = None
    #: (trial_id, still marked) of every timing-marked trial run again at the end (``rerun_marked``).
    reruns: tuple[tuple[str, bool], ...] = ()
    #: (backend, experiment, trials, reason) of each cell skipped because its servers failed to start
    #: every time the pool tried (infra/pool.py): no rows; ``--resume`` runs them later.
    unstartable: tuple[tuple[str, str, int, str], ...] = ()


#: Called when a trial starts (result None) and when it ends: (spec, result, finished, of how many).
ProgressCallback = Callable[["TrialSpec", "TrialResult | None", int, int], None]
