"""The matrix: every selected backend under every selected experiment, for K trials each.

Trials are interleaved (trial 0 of every cell, then trial 1, ...) so that slow drifts of the
machine spread over all cells instead of biasing one. Every trial appends its CSV row the moment it
ends; with ``resume`` the trials already in the file are skipped, so a crash costs one trial.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockcompare.analysis.results import ResultsWriter, make_row, supersede
from lockcompare.analysis.sentinel import is_marked
from lockcompare.analysis.verdicts import NOTED
from lockcompare.backends import BackendConfig, load_backend, require_declarations, traits_of
from lockcompare.backends.external.named import remember
from lockcompare.backends.versions import client_versions, python_version
from lockcompare.errors import (
    BackendLoadError,
    ConfigError,
    InvalidValueError,
    RedisServerNotFoundError,
)
from lockcompare.files import check_output_file, real_path, results_lock
from lockcompare.infra.cluster import (
    Cluster,
    ClusterShape,
    connect_external,
    start_embedded,
)
from lockcompare.infra.kinds import POSTGRES_PROTOCOL, REDIS_PROTOCOL, ZOOKEEPER_PROTOCOL, server_for
from lockcompare.infra.lifecycle import sigterm_unwinds
from lockcompare.infra.pool import SharedCluster, WithPostgres
from lockcompare.infra.provenance import host_facts, registered_run
from lockcompare.infra.warm_pool import WarmPool
from lockcompare.runner.cost_order import CostOrder
from lockcompare.runner.crew import WorkerPool, spawn_crew
from lockcompare.runner.floor import RunFloor, RunMeter
from lockcompare.runner.mixed_versions import FileVersions
from lockcompare.runner.outfile import claim_history_dir, history_dir, history_ids, prepare_out, remove_unpointed
from lockcompare.runner.plan import (
    ClusterOptions,
    check_faults,
    cluster_shape,
    lock_servers_of,
    plan_matrix,
)
from lockcompare.runner.probes import probe_concurrently
from lockcompare.runner.scheduler import (
    CpuBudget,
    Finished,
    StallGovernor,
    prior_busy_fraction,
    run_scheduled,
)
from lockcompare.runner.trial import (
    TrialResult,
    construct_in_child,
    new_run_id,
    run_trial,
    save_history,
)
from lockcompare.scenario.limits import DEFAULT_CPU_SHARE, check_count, usable_cpus
from lockcompare.scenario.parsing import Overrides, Sweep
from lockcompare.scenario.trialspec import TrialSpec

log = logging.getLogger("lockcompare")


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
    #: How many trials of this run had each of :data:`NOTED_VERDICTS` (said on stderr with its meaning).
    no_progress: dict[str, int] = field(default_factory=dict)
    #: The fewest trials the stall governor let run at once, and how often it backed off (scheduler.py).
    jobs_floor: int = 1
    backed_off: int = 0
    #: The run's own floor and where its wall went (runner/floor.py); None when no trial ran here.
    floor: RunFloor | None = None
    #: (trial_id, still marked) of every timing-marked trial run again alone (``rerun_marked``).
    reruns: tuple[tuple[str, bool], ...] = ()
    #: (backend, experiment, trials, reason) of each cell skipped because its servers failed to start
    #: every time the pool tried (infra/pool.py): no rows; ``--resume`` runs them later.
    unstartable: tuple[tuple[str, str, int, str], ...] = ()


#: The note of a row that replaced a timing-marked one (``rerun_marked``); the marked row is in the
#: .superseded file with its history.
RERUN_NOTE = "run again alone after a timing-marked run (its row is in the .superseded file)"

#: Verdicts a run explains on stderr when it gives them: they are results, not failures, but a
#: reader may not expect them (little or no progress; exclusion that held only by luck).
NOTED_VERDICTS = NOTED  # analysis/verdicts.py: the vocabulary says which

ProgressCallback = Callable[[TrialSpec, TrialResult | None, int, int], None]


def probe_backends(names: Sequence[str], *, config: BackendConfig, timeout_s: float) -> None:
    """Construct and close each backend once, in a child process with a deadline, before any trial:
    a plug-in that cannot be constructed is one load error, not a matrix of ``unknown`` rows."""
    for name in dict.fromkeys(names):
        problem = construct_in_child(name, config=config, timeout_s=timeout_s)
        if problem:
            raise BackendLoadError(f"backend {name!r} cannot be constructed: {problem}")


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
        fresh_workers=fresh_workers, cpu_share=cpu_share, rerun_marked=rerun_marked,
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
            fresh_workers=fresh_workers, cpu_share=cpu_share, rerun_marked=rerun_marked,
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
) -> MatrixReport:
    redlock_nodes = specs[0].node_count
    time_scale = min(spec.time_scale for spec in specs)
    call_timeout_ms = max(spec.call_timeout_ms for spec in specs)
    done = prepare_out(out, resume=resume, allow_mixed_revisions=allow_mixed_revisions)
    todo = [s for s in specs if s.trial_id not in done]
    trial_ids = tuple(s.trial_id for s in specs)
    if not todo:
        return MatrixReport(out=out, trials_run=0, trials_skipped=len(specs), trial_ids=trial_ids)
    versions = FileVersions.read(out, allow=allow_mixed_revisions)
    versions.check_before(s.backend for s in todo)  # an external client's: at its first row (on_done)
    check_faults(todo, cluster_options=cluster_options)  # and backends that need servers of their own
    plan = getattr(progress, "plan", None)  # the terminal bar weighs the trials left by cell (cli/progress_bar.py)
    if plan is not None:
        plan(todo, reruns=rerun_marked)  # and counts the marked trials run again at the end
    if dask is not None:
        from lockcompare.runner.dask_executor import run_matrix_on_dask

        return run_matrix_on_dask(
            todo, address=dask, out=out, cluster_options=cluster_options, jobs=jobs, fresh_workers=fresh_workers,
            progress=progress, skipped=len(specs) - len(todo), trial_ids=tuple(s.trial_id for s in specs),
        )  # fmt: skip
    if cluster_options.external:
        # External servers are one shared set: trials beside each other would share the lock
        # nodes' CPU and timing (their keys never collide: every trial has its own prefix). So
        # trials there run one at a time, as --jobs's help says.
        jobs = 1
    meter = RunMeter(jobs=jobs, cores=usable_cpus())
    meter.start()
    costs = CostOrder()  # expensive trials first within each round (cost_order.py)
    held: dict[str, float] = {}  # free job-slot seconds by what held the waiting trials (scheduler.py)
    writer = ResultsWriter(out)
    histories = history_dir(out)  # never another results file's (issue 38); made inside the try below
    pointed = history_ids(out)  # histories rows of the file already point to (an unknown one rerun)
    run_id = new_run_id()
    budget = CpuBudget(cpus=usable_cpus(), share=cpu_share, prior=prior_busy_fraction(time_scale))
    governor = StallGovernor(jobs=jobs)
    floor = jobs
    jobs_used = 0
    unknown: list[tuple[str, str]] = []
    no_progress: dict[str, int] = {}
    unstartable: list[tuple[str, str, int, str]] = []

    saved: dict[str, Path] = {}  # trial_id -> history written in this run
    rowed: set[str] = set()  # trial_ids whose row this run appended
    marked: list[TrialSpec] = []  # trials of this run the timing sentinel marked, in the order they ended
    reruns: dict[str, bool] = {}  # trial_id -> still marked, for the marked trials run again alone

    def run_one(spec: TrialSpec, cluster: Cluster) -> tuple[TrialResult, dict[str, Any]]:
        result = run_trial(spec=spec, cluster=cluster, run_id=run_id, crews=crews)
        # A rerun (the file holds the trial's unknown row) keeps that row's history: a name of its own.
        path = save_history(result, histories, attempt=run_id if spec.trial_id in pointed else "")
        saved[spec.trial_id] = path
        traits = traits_of(load_backend(spec.backend, check_viable=False))
        row = make_row(
            result,
            host=host_facts(),
            run_id=run_id,
            cluster_kind="embedded" if cluster.embedded else "external",
            server_version=cluster.server_version,
            history_path=str(path.relative_to(out.parent)),  # the CSV and its histories move together
            note=f"resumed over another revision: {allow_mixed_revisions}" if allow_mixed_revisions else "",
            python_version=python_version(),
            client_versions=client_versions(
                libraries=traits.libraries, external=traits.external, history=result.history
            ),
        )
        return result, row

    def on_done(done: Finished[TrialSpec, tuple[TrialResult, dict[str, Any]]]) -> None:
        nonlocal jobs_used, floor
        floor = min(floor, governor.limit)
        result, row = done.result
        meter.trial(result.wall_s)
        costs.record(done.spec, wall_s=result.wall_s)
        row["jobs_concurrent"] = done.jobs_concurrent
        versions.check_row(row)  # before it is written: a refusal leaves no row (and no history) of it
        jobs_used = max(jobs_used, done.jobs_concurrent)
        # on_done runs in the main thread only: rows never interleave. A rerun takes its old row's
        # place (the old row moves to the .superseded file): one row per trial in the file.
        if done.spec.trial_id in reruns:  # a marked trial run again alone: its first row is superseded
            reruns[done.spec.trial_id] = is_marked(row)
            row["note"] = "; ".join(filter(None, [row.get("note"), RERUN_NOTE]))
        elif is_marked(row):
            marked.append(done.spec)
        if done.spec.trial_id in pointed:
            supersede(out, row)
        else:
            writer.append(row)
        rowed.add(done.spec.trial_id)
        verdict = result.metrics.verdict
        if verdict == "unknown":
            unknown.append((done.spec.trial_id, result.metrics.problem))
        elif verdict in NOTED_VERDICTS:
            no_progress[verdict] = no_progress.get(verdict, 0) + 1
        if progress:
            progress(done.spec, result, done.finished, len(todo))

    def on_unstartable(skipped: list[TrialSpec], reason: str) -> None:
        # One line, as a cell the servers cannot serve is skipped while planning; no rows (--resume runs them).
        first = skipped[0]
        unstartable.append((first.backend, first.experiment, len(skipped), reason))
        log.warning("skipping %s x %s (%d trial(s) not run): %s", first.backend, first.experiment, len(skipped), reason)

    def on_start(spec: TrialSpec, finished: int) -> None:
        meter.mark("until the first trial")  # its start (before its cluster is handed over)
        if progress:
            progress(spec, None, finished, len(todo))

    workers = WorkerPool()
    crews = spawn_crew if fresh_workers else workers.start
    with (
        registered_run("matrix", out=out),
        sigterm_unwinds(),
        _cluster_source(cluster_options, jobs=jobs, specs=todo) as clusters,
    ):
        try:
            claim_history_dir(out)
            # Clusters for the first trials start on the pool's threads while the backends are probed.
            clusters.expect([cluster_shape(spec, cluster_options=cluster_options) for spec in costs(todo)])
            by_servers: dict[str, TrialSpec] = {}  # each backend is probed on the kind of nodes it uses
            for spec in todo:
                by_servers.setdefault(lock_servers_of(spec.backend), spec)
            count = min(jobs, len(todo)) * max(spec.workers for spec in todo)
            # Every worker the run can use, started before any trial (see WorkerPool.prestart), in
            # this thread while the probes run on theirs (probes.py).
            probe_concurrently(
                [
                    (
                        cluster_shape(first, cluster_options=cluster_options),
                        [s.backend for s in todo if lock_servers_of(s.backend) == servers],
                    )
                    for servers, first in by_servers.items()
                ],
                clusters=clusters,
                node_count=redlock_nodes,
                timeout_s=call_timeout_ms / 1000,
                meanwhile=(lambda: None) if fresh_workers else (lambda: workers.prestart(count)),
            )
            meter.mark("probes and warm workers")
            waited_before = getattr(clusters.inner, "waited_s", 0.0)
            run_scheduled(
                todo,
                jobs=jobs,
                run_one=run_one,
                clusters=clusters,
                shape_for=lambda spec: cluster_shape(spec, cluster_options=cluster_options),
                kind_of=lambda spec: (spec.backend, spec.experiment),
                budget=budget,
                solo=_runs_alone,
                stall_of=_stall_share,
                governor=governor,
                on_start=on_start,
                on_done=on_done,
                on_cancel=workers.kill_all,
                order=costs,
                held=held,
                on_unstartable=on_unstartable,
                cell_of=lambda spec: (spec.backend, spec.experiment),
            )
            meter.mark("trials")
            again = marked[:rerun_marked]  # run again alone, at the end: nothing of this run beside them
            if again:
                reruns.update(dict.fromkeys((s.trial_id for s in again), True))
                pointed.update(reruns)  # each takes its marked row's place; that row keeps its own history
                rowed.difference_update(reruns)  # an interrupted rerun leaves no history without its row
                run_scheduled(
                    again, jobs=1, run_one=run_one, clusters=clusters,
                    shape_for=lambda spec: cluster_shape(spec, cluster_options=cluster_options),
                    kind_of=lambda spec: (spec.backend, spec.experiment), budget=budget, on_start=on_start,
                    on_done=on_done, on_cancel=workers.kill_all, held=held,
                )  # fmt: skip
                meter.mark("timing-marked trials run again alone")
        finally:
            workers.close()
            remove_unpointed(saved, rowed=rowed, kept=set())  # a rerun's history has a name of its own
            with contextlib.suppress(OSError):
                histories.rmdir()  # only when empty: a run stopped before its first history leaves no folder
    floor_now = meter.finish(  # after the servers stopped: their CPU is in RUSAGE_CHILDREN
        waited_for_clusters_s=getattr(clusters.inner, "waited_s", 0.0),
        waited_before_trials_s=waited_before,
        held_slots=held,
        clusters_started=getattr(clusters.inner, "built", 0),
    )
    return MatrixReport(
        out=out,
        trials_run=len(todo) - sum(count for _, _, count, _ in unstartable),
        trials_skipped=len(specs) - len(todo),
        trial_ids=trial_ids,
        unknown=tuple(unknown),
        unstartable=tuple(unstartable),
        no_progress=no_progress,
        jobs=jobs,
        jobs_used=jobs_used,
        busy_cpu=budget.estimates(),  # type: ignore[arg-type]  # kinds are (backend, experiment)
        jobs_floor=floor,
        backed_off=governor.backed_off,
        floor=floor_now,
        reruns=tuple(reruns.items()),
    )


def _stall_share(outcome: tuple[TrialResult, dict[str, Any]]) -> float:
    """The share of its margin a finished trial's worst stall ate (NaN: not measured)."""
    timing = outcome[0].timing
    return timing.eaten if timing is not None else math.nan


def _runs_alone(spec: TrialSpec) -> bool:
    """Without a lock, without pauses and without jitter, conflicts measure the phase of two
    free-running workers in lockstep, which a neighbour trial's CPU use shifts (scheduler.py): such
    a trial runs with no neighbour. Jitter (the default) draws every retry and think time afresh,
    so the phase is random in every round whatever a neighbour does, and a pause in every round
    sets the rhythm itself; those trials run in parallel like the rest (the fidelity check in the
    README compares such a run with a serial one cell by cell)."""
    return spec.pause_ms == 0 and spec.jitter == 0 and not traits_of(load_backend(spec.backend)).exclusive


@contextlib.contextmanager
def _cluster_source(options: ClusterOptions, *, jobs: int, specs: Sequence[TrialSpec]) -> Iterator[WithPostgres]:
    """A pool of embedded clusters (one per trial in flight), or the user's servers shared by all.

    Whose servers a trial gets is asked of the one option (``options.lock_servers``): the user's
    Redis-protocol nodes are every trial's cluster; the user's PostgreSQL server serves the trials
    on it beside them; the user's ZooKeeper ensemble is the lock nodes of the pool's clusters of
    that kind (runner/lock_servers.py ROUTES says so)."""
    shared = options.lock_servers.shared()
    if (shared is None) != (options.resource is None):
        raise ConfigError(
            "--nodes and --resource go together (--resource goes with Redis-protocol --lock-servers): give both, "
            "or neither for the embedded cluster"
        )
    if shared is None:  # no binary for the chosen Redis-protocol server: one clear error before anything starts
        # (only for trials that run one: a trial on PostgreSQL alone records the neutral --server)
        speaking = [spec for spec in specs if REDIS_PROTOCOL in (spec.lock_servers, spec.resource_kind)]
        for kind in {server_for(REDIS_PROTOCOL, choice=spec.server) for spec in speaking}:
            problem = kind.problem(binary=options.redis_server)
            if problem:
                raise RedisServerNotFoundError(problem)
    database = options.lock_servers.urls_for(POSTGRES_PROTOCOL)  # one server: the lock and the resource
    postgres = SharedCluster(connect_external(nodes=database, resource=database[0])) if database else None
    if shared is not None and options.resource is not None:
        yield WithPostgres(SharedCluster(connect_external(nodes=shared, resource=options.resource)), postgres)
        return
    ensemble = options.lock_servers.urls_for(ZOOKEEPER_PROTOCOL)

    def build(shape: ClusterShape) -> Cluster:
        return start_embedded(shape, redis_server=options.redis_server, zookeeper=ensemble)

    # Clusters start and reset on the pool's threads, SPARE_CLUSTERS ahead of the trials (warm_pool.py).
    with WarmPool(build=build, limit=jobs + SPARE_CLUSTERS) as pool:
        yield WithPostgres(pool, postgres)


#: Clusters kept warm beyond one per job slot, for the trials about to start (issue 44).
SPARE_CLUSTERS = 2
