"""Plan, then execute: what an executor is handed, and the one thing it does with it.

The matrix plans (runner/plan.py: the trials, their cluster shapes, which cells fit) and prepares
the results file (which trials are done already); an :class:`Executor` runs the trials still to
run and reports. Two implementations: :class:`~lockcompare.runner.local_executor.LocalExecutor`
(this host: a cluster pool, warm workers, the CPU governor) and
:class:`~lockcompare.runner.dask_executor.DaskExecutor` (each cell's trials as one task on a Dask
worker's host; this process writes every row). A third (another engine) is one module beside them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from lockcompare.scenario.limits import DEFAULT_CPU_SHARE

if TYPE_CHECKING:
    from lockcompare.runner.mixed_versions import FileVersions
    from lockcompare.runner.plan import ClusterOptions
    from lockcompare.runner.run_report import MatrixReport, ProgressCallback
    from lockcompare.scenario.trialspec import TrialSpec


@dataclass(frozen=True, kw_only=True)
class Execution:
    """The planned trials still to run, where their rows go, and how (the run's options)."""

    #: Every planned trial, run now or before (the report names them all).
    planned: Sequence[TrialSpec]
    #: The trials to run now (planned, and not in the results file yet), in the plan's order.
    todo: Sequence[TrialSpec]
    out: Path
    cluster_options: ClusterOptions
    #: The versions the file's rows ran: each new row is checked against them before it is written.
    versions: FileVersions
    jobs: int = 1
    fresh_workers: bool = False
    cpu_share: float = DEFAULT_CPU_SHARE
    rerun_marked: int = 0
    #: How many of those run again at once (1: alone); none of the main run's trials is beside them.
    rerun_jobs: int = 1
    #: ``--allow-mixed-revisions``'s reason, noted on every row (None: not allowed).
    allow_mixed_revisions: str | None = None
    progress: ProgressCallback | None = None

    @property
    def trial_ids(self) -> tuple[str, ...]:
        return tuple(spec.trial_id for spec in self.planned)

    @property
    def skipped(self) -> int:
        """Planned trials the results file holds already."""
        return len(self.planned) - len(self.todo)


class Executor(Protocol):
    """Runs an :class:`Execution`'s trials, appending one row per trial to its ``out``."""

    def run(self, execution: Execution) -> MatrixReport: ...
