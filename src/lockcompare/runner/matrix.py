"""The matrix: every selected backend under every selected experiment, for K trials each.

Trials are interleaved (trial 0 of every cell, then trial 1, ...) so that slow drifts of the
machine spread over all cells instead of biasing one. Every trial appends its CSV row the moment it
ends; with ``resume`` the trials already in the file are skipped, so a crash costs one trial.

Plan, then execute: the plan (runner/plan.py) decides the trials and their clusters; the trials the
results file does not hold yet are handed to an executor (runner/executor.py): this host's
(local_executor.py) or a Dask cluster's (dask_executor.py, ``dask``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lockcompare.backends import load_backend, require_declarations
from lockcompare.backends.external.named import remember
from lockcompare.errors import InvalidValueError
from lockcompare.files import check_output_file, real_path, results_lock
from lockcompare.runner.dask_executor import DaskExecutor
from lockcompare.runner.executor import Execution, Executor
from lockcompare.runner.local_executor import LocalExecutor
from lockcompare.runner.mixed_versions import FileVersions
from lockcompare.runner.outfile import prepare_out
from lockcompare.runner.plan import ClusterOptions, check_faults, cluster_shape, plan_matrix
from lockcompare.runner.run_report import MatrixReport, ProgressCallback
from lockcompare.scenario.limits import DEFAULT_CPU_SHARE, check_count
from lockcompare.scenario.parsing import Overrides, Sweep
from lockcompare.scenario.trialspec import TrialSpec

#: What callers import from the matrix: running it, and the plan's names it hands on.
__all__ = [
    "ClusterOptions", "MatrixReport", "ProgressCallback", "Sweep", "cluster_shape", "plan_matrix", "run_matrix",
    "run_planned",
]  # fmt: skip


def run_matrix(
    *,
    backends: Sequence[str],
    experiments: Sequence[str],
    trials: int,
    overrides: Overrides,
    out: Path,
    cluster_options: ClusterOptions = ClusterOptions(),
    redlock_nodes: int | None = None,
    sweep: Sweep | None = None,
    resume: bool = False,
    allow_mixed_revisions: str | None = None,
    dask: str | None = None,
    progress: ProgressCallback | None = None,
    skip_unfit: bool = True,
    jobs: int = 1,
    fresh_workers: bool = False,
    cpu_share: float = DEFAULT_CPU_SHARE,
    rerun_marked: int = 0,
    rerun_jobs: int = 1,
) -> MatrixReport:
    """Run the matrix, appending one row per trial to ``out``; see the module docstring.

    ``skip_unfit`` leaves out (with one warning line per backend) the cells a backend cannot run,
    e.g. a TTL it cannot express; without it, or when no cell is left, that is an error before
    anything starts. ``jobs`` trials run at
    once at most, fewer when they would keep more than ``cpu_share`` of the CPUs busy (see
    scheduler.py); each running trial has a cluster of its own (pool.py). ``fresh_workers`` spawns
    new worker processes for every trial instead of reusing warm ones (crew.py).
    """
    check_count("jobs", jobs)
    for backend in dict.fromkeys(backends):  # running needs what planning does not: a backend that
        load_backend(backend)  # cannot run here is refused first, in its own one line
    specs = plan_matrix(
        backends=backends,
        experiments=experiments,
        trials=trials,
        overrides=overrides,
        node_count=redlock_nodes,
        sweep=sweep,
        skip_unfit=skip_unfit,
        redis_server=cluster_options.redis_server,
    )
    return run_planned(
        specs, out=out, cluster_options=cluster_options, resume=resume, progress=progress, jobs=jobs,
        allow_mixed_revisions=allow_mixed_revisions, dask=dask,
        fresh_workers=fresh_workers, cpu_share=cpu_share, rerun_marked=rerun_marked, rerun_jobs=rerun_jobs,
    )  # fmt: skip


def run_planned(
    specs: Sequence[TrialSpec],
    *,
    out: Path,
    cluster_options: ClusterOptions = ClusterOptions(),
    resume: bool = False,
    allow_mixed_revisions: str | None = None,
    dask: str | None = None,
    progress: ProgressCallback | None = None,
    jobs: int = 1,
    fresh_workers: bool = False,
    cpu_share: float = DEFAULT_CPU_SHARE,
    rerun_marked: int = 0,
    rerun_jobs: int = 1,
) -> MatrixReport:
    """Run trials already planned (by :func:`plan_matrix`, or rebuilt from a results row by
    ``run --from``), appending one row per trial to ``out``; see :func:`run_matrix`."""
    if not specs:
        raise InvalidValueError("no trial to run")
    for spec in specs:  # a manifest known by its name (run --from, a Dask host): this run knows it again
        if spec.backend_source:
            remember(spec.backend_source, expect=spec.backend)
    for backend in dict.fromkeys(spec.backend for spec in specs):  # before any file or server is touched
        require_declarations(load_backend(backend), name=backend)
    out = real_path(out)  # through a symlink: the lock, the rows and the histories beside the real file
    check_output_file(out, flag="--out")  # before the lock file beside it is created
    with results_lock(out):  # one writer per results file, for the whole run
        return _run_locked(
            specs, out=out, cluster_options=cluster_options, resume=resume, progress=progress, jobs=jobs,
            allow_mixed_revisions=allow_mixed_revisions, dask=dask,
            fresh_workers=fresh_workers, cpu_share=cpu_share, rerun_marked=rerun_marked, rerun_jobs=rerun_jobs,
        )  # fmt: skip


def _run_locked(
    specs: Sequence[TrialSpec],
    *,
    out: Path,
    cluster_options: ClusterOptions,
    resume: bool,
    allow_mixed_revisions: str | None = None,
    dask: str | None = None,
    progress: ProgressCallback | None,
    jobs: int,
    fresh_workers: bool,
    cpu_share: float,
    rerun_marked: int = 0,
    rerun_jobs: int = 1,
) -> MatrixReport:
    """The plan's trials the results file does not hold yet, handed to an executor (executor.py)."""
    done = prepare_out(out, resume=resume, allow_mixed_revisions=allow_mixed_revisions)
    todo = [s for s in specs if s.trial_id not in done]
    if not todo:
        return MatrixReport(
            out=out, trials_run=0, trials_skipped=len(specs), trial_ids=tuple(s.trial_id for s in specs)
        )
    versions = FileVersions.read(out, allow=allow_mixed_revisions)
    versions.check_before(s.backend for s in todo)  # an external client's: at its first row (on_done)
    check_faults(todo, cluster_options=cluster_options)  # and backends that need servers of their own
    plan = getattr(progress, "plan", None)  # the terminal bar weighs the trials left by cell (cli/progress_bar.py)
    if plan is not None:
        plan(todo, reruns=rerun_marked, rerun_jobs=rerun_jobs)  # and counts the marked trials run again at the end
    execution = Execution(
        planned=specs, todo=todo, out=out, cluster_options=cluster_options, versions=versions, jobs=jobs,
        fresh_workers=fresh_workers, cpu_share=cpu_share, rerun_marked=rerun_marked, rerun_jobs=rerun_jobs,
        allow_mixed_revisions=allow_mixed_revisions, progress=progress,
    )  # fmt: skip
    executor: Executor = DaskExecutor(address=dask) if dask is not None else LocalExecutor()
    return executor.run(execution)
