"""The matrix: every selected backend under every selected experiment, for K trials each.

Trials are interleaved (trial 0 of every cell, then trial 1, ...) so that slow drifts of the
machine spread over all cells instead of biasing one. Every trial appends its CSV row the moment it
ends; with ``resume`` the trials already in the file are skipped, so a crash costs one trial.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lockcompare.backends import load_backend
from lockcompare.cluster import Cluster, ClusterShape, connect_external, start_embedded
from lockcompare.crew import WorkerPool, spawn_crew
from lockcompare.errors import ConfigError, InvalidValueError, ResultsFileError
from lockcompare.lifecycle import sigterm_unwinds
from lockcompare.pool import ClusterPool, SharedCluster
from lockcompare.scheduler import (
    DEFAULT_CPU_SHARE,
    CpuBudget,
    Finished,
    prior_busy_fraction,
    run_scheduled,
    usable_cpus,
)
from lockcompare.server import find_redis_server
from lockcompare.experiments import Overrides, PausePoint, TrialSpec, get_experiment, make_spec
from lockcompare.sections import check_for
from lockcompare.results import ResultsWriter, finished_trials, make_row
from lockcompare.trial import TrialResult, new_run_id, run_trial, save_history


@dataclass(frozen=True, kw_only=True)
class ClusterOptions:
    """Where the servers come from: spawned (default) or the user's URLs."""

    nodes: tuple[str, ...] | None = None
    resource: str | None = None
    redis_server: str | None = None
    node_count: int = 5


@dataclass(frozen=True, kw_only=True)
class Sweep:
    """Settings swept inside one matrix, each value a cell of its own (``None``: the experiment's)."""

    pause_ms: tuple[float | None, ...] = (None,)
    pause_points: tuple[PausePoint, ...] = (PausePoint.AFTER_ACQUIRE,)
    fences: tuple[str, ...] = ("writes",)


@dataclass(frozen=True, kw_only=True)
class MatrixReport:
    out: Path
    trials_run: int
    trials_skipped: int
    jobs: int = 1  # asked for
    jobs_used: int = 1  # the most trials that ran at once
    #: Mean busy-CPU fraction per (backend, experiment): CPU of workers + servers / wall time.
    busy_cpu: dict[tuple[str, str], float] = field(default_factory=dict)


ProgressCallback = Callable[[TrialSpec, TrialResult | None, int, int], None]


def history_dir(out: Path) -> Path:
    """Histories live beside the CSV: ``results/x.csv`` → ``results/x.histories/``."""
    return out.with_name(out.stem + ".histories")


def plan_matrix(
    *,
    backends: Sequence[str],
    experiments: Sequence[str],
    trials: int,
    overrides: Overrides,
    node_count: int | None,
    sweep: Sweep = Sweep(),
) -> list[TrialSpec]:
    """Every trial's spec, validated before anything starts (bad names fail before any server does).

    Combinations that would run the same trial (a fence mode for a backend with nothing to fence,
    a pause point without a pause) are planned once.
    """
    if trials < 1:
        raise InvalidValueError(f"--trials must be >= 1, got {trials}")
    if not backends or not experiments:
        raise InvalidValueError("select at least one backend and one experiment")
    classes = {backend: load_backend(backend) for backend in backends}
    exps = [get_experiment(name) for name in experiments]
    specs: dict[str, TrialSpec] = {}
    for k, backend, experiment, pause_ms, point, fence in itertools.product(
        range(trials), backends, exps, sweep.pause_ms, sweep.pause_points, sweep.fences
    ):
        cell = replace(
            overrides,
            pause_ms=overrides.pause_ms if pause_ms is None else pause_ms,
            pause_point=point,
            fence=fence,
        )
        spec = make_spec(
            backend=backend,
            experiment=experiment,
            trial=k,
            overrides=cell,
            node_count=node_count,
            resource_check=check_for(classes[backend], fence=fence),
        )
        specs.setdefault(spec.trial_id, spec)
    return list(specs.values())


def run_matrix(
    *,
    backends: Sequence[str],
    experiments: Sequence[str],
    trials: int,
    overrides: Overrides,
    out: Path,
    cluster_options: ClusterOptions = ClusterOptions(),
    redlock_nodes: int | None = None,
    sweep: Sweep = Sweep(),
    resume: bool = False,
    progress: ProgressCallback | None = None,
    jobs: int = 1,
    fresh_workers: bool = False,
    cpu_share: float = DEFAULT_CPU_SHARE,
) -> MatrixReport:
    """Run the matrix, appending one row per trial to ``out``; see the module docstring.

    ``jobs`` trials run at once at most, fewer when they would keep more than ``cpu_share`` of
    the CPUs busy (see scheduler.py); ``fresh_workers`` spawns new worker processes for every
    trial instead of reusing warm ones (crew.py).
    """
    if jobs < 1:
        raise InvalidValueError(f"--jobs must be >= 1, got {jobs}")
    specs = plan_matrix(
        backends=backends,
        experiments=experiments,
        trials=trials,
        overrides=overrides,
        node_count=redlock_nodes,
        sweep=sweep,
    )
    if out.exists() and not resume:
        raise ResultsFileError(f"{out} exists: pass --resume to continue it, or choose another --out")
    done = finished_trials(out) if resume else set()
    todo = [s for s in specs if s.trial_id not in done]
    writer = ResultsWriter(out)
    histories = history_dir(out)
    run_id = new_run_id()
    budget = CpuBudget(cpus=usable_cpus(), share=cpu_share, prior=prior_busy_fraction(overrides.time_scale))
    jobs_used = 0

    def run_one(spec: TrialSpec, cluster: Cluster) -> tuple[TrialResult, dict[str, Any]]:
        result = run_trial(spec=spec, cluster=cluster, run_id=run_id, crews=crews)
        path = save_history(result, histories)
        row = make_row(
            result,
            run_id=run_id,
            cluster_kind="embedded" if cluster.embedded else "external",
            redis_version=cluster.redis_version,
            history_path=str(path.relative_to(out.parent)),  # the CSV and its histories move together
        )
        return result, row

    def on_done(done: Finished[TrialSpec, tuple[TrialResult, dict[str, Any]]]) -> None:
        nonlocal jobs_used
        result, row = done.result
        row["jobs_concurrent"] = done.jobs_concurrent  # a column in results.py's next schema
        jobs_used = max(jobs_used, done.jobs_concurrent)
        writer.append(row)  # on_done runs in the main thread only: rows never interleave
        if progress:
            progress(done.spec, result, done.finished, len(todo))

    workers = WorkerPool()
    crews = spawn_crew if fresh_workers else workers.start
    with sigterm_unwinds(), _cluster_source(cluster_options, jobs=jobs) as clusters:
        try:
            if not fresh_workers and todo:
                # Every worker the run can use, started before any trial (see WorkerPool.prestart).
                workers.prestart(min(jobs, len(todo)) * max(spec.workers for spec in todo))
            run_scheduled(
                todo,
                jobs=jobs,
                run_one=run_one,
                clusters=clusters,
                shape_for=lambda spec: ClusterShape(node_count=cluster_options.node_count),
                kind_of=lambda spec: (spec.backend, spec.experiment),
                budget=budget,
                solo=_runs_alone,
                on_start=lambda spec, done: progress(spec, None, done, len(todo)) if progress else None,
                on_done=on_done,
                on_cancel=workers.kill_all,
            )
        finally:
            workers.close()
    return MatrixReport(
        out=out,
        trials_run=len(todo),
        trials_skipped=len(specs) - len(todo),
        jobs=jobs,
        jobs_used=jobs_used,
        busy_cpu=budget.estimates(),  # type: ignore[arg-type]  # kinds are (backend, experiment)
    )


def _runs_alone(spec: TrialSpec) -> bool:
    """Without a lock and without pauses, conflicts measure the phase of two free-running workers,
    which a neighbour trial's CPU use shifts (scheduler.py): such a trial runs with no neighbour.
    With a pause in every round the pause sets the rhythm (no-lock client-pause cells matched the
    serial run in every parallel run measured), so those trials run in parallel like the rest."""
    return spec.pause_ms == 0 and not getattr(load_backend(spec.backend), "exclusive", True)


@contextlib.contextmanager
def _cluster_source(options: ClusterOptions, *, jobs: int) -> Iterator[ClusterPool | SharedCluster]:
    """A pool of embedded clusters (one per trial in flight), or the user's servers shared by all."""
    if (options.nodes is None) != (options.resource is None):
        raise ConfigError("--nodes and --resource go together: give both, or neither for the embedded cluster")
    if options.nodes is not None and options.resource is not None:
        yield SharedCluster(connect_external(nodes=options.nodes, resource=options.resource))
        return
    find_redis_server(options.redis_server)  # no binary: one clear error before anything starts
    with ClusterPool(build=lambda shape: start_embedded(shape, redis_server=options.redis_server), limit=jobs) as pool:
        yield pool
