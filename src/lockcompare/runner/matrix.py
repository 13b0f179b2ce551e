"""The matrix: every selected backend under every selected experiment, for K trials each.

Trials are interleaved (trial 0 of every cell, then trial 1, ...) so that slow drifts of the
machine spread over all cells instead of biasing one. Every trial appends its CSV row the moment it
ends; with ``resume`` the trials already in the file are skipped, so a crash costs one trial.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockcompare.analysis.results import ResultsWriter, make_row, supersede
from lockcompare.analysis.verdicts import NOTED
from lockcompare.backends import BackendConfig, load_backend, require_declarations, traits_of
from lockcompare.errors import (
    BackendLoadError,
    ConfigError,
    InvalidValueError,
    RedisServerNotFoundError,
)
from lockcompare.faults import plan as fault_plan
from lockcompare.faults import targets as fault_targets
from lockcompare.faults.zookeeper import zookeeper_servers_for
from lockcompare.files import check_output_file, real_path, results_lock
from lockcompare.infra.cluster import (
    Cluster,
    ClusterShape,
    connect_external,
    start_embedded,
)
from lockcompare.infra.kinds import AUTO, Capability, get_kind, lacks, server_for
from lockcompare.infra.lifecycle import sigterm_unwinds
from lockcompare.infra.pool import SharedCluster, WithPostgres
from lockcompare.infra.provenance import host_facts, registered_run
from lockcompare.infra.warm_pool import WarmPool
from lockcompare.runner.cost_order import CostOrder
from lockcompare.runner.crew import WorkerPool, spawn_crew
from lockcompare.runner.floor import RunFloor, RunMeter
from lockcompare.runner.outfile import claim_history_dir, history_ids, prepare_out, remove_unpointed
from lockcompare.runner.probes import probe_concurrently
from lockcompare.runner.scheduler import (
    CpuBudget,
    Finished,
    StallGovernor,
    prior_busy_fraction,
    run_scheduled,
)
from lockcompare.runner.sections import check_for
from lockcompare.runner.trial import (
    TrialResult,
    construct_in_child,
    new_run_id,
    run_trial,
    save_history,
)
from lockcompare.spec import faultkinds
from lockcompare.spec.experiments import get_experiment
from lockcompare.spec.limits import DEFAULT_CPU_SHARE, check_count, usable_cpus
from lockcompare.spec.parsing import Overrides, Sweep
from lockcompare.spec.schedule import parse_schedule
from lockcompare.spec.trialspec import TrialSpec, custom_faults, make_spec

log = logging.getLogger("lockcompare")


@dataclass(frozen=True, kw_only=True)
class ClusterOptions:
    """Where the servers come from: spawned (default) or the user's URLs."""

    nodes: tuple[str, ...] | None = None
    resource: str | None = None
    redis_server: str | None = None
    node_count: int = 5
    #: An external PostgreSQL server (``--postgres URL``) for the PostgreSQL backends' lock and
    #: resource; lockcompare touches only its own per-trial rows there.
    postgres: str | None = None
    #: An external ZooKeeper ensemble (``--zookeeper``, zk:// URLs) for the zk backends' locks; the
    #: resource stays an embedded server. lockcompare touches only its own znodes under /lockcompare.
    zookeeper: tuple[str, ...] | None = None

    @property
    def external(self) -> bool:
        """True when any server is the user's (shared by every trial, so trials run one at a time)."""
        return self.nodes is not None or self.postgres is not None or self.zookeeper is not None


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


#: Verdicts a run explains on stderr when it gives them: they are results, not failures, but a
#: reader may not expect them (little or no progress; exclusion that held only by luck).
NOTED_VERDICTS = NOTED  # analysis/verdicts.py: the vocabulary says which

ProgressCallback = Callable[[TrialSpec, TrialResult | None, int, int], None]


def plan_matrix(
    *,
    backends: Sequence[str],
    experiments: Sequence[str],
    trials: int,
    overrides: Overrides,
    node_count: int | None,
    sweep: Sweep | None = None,
    skip_unfit: bool = True,
    redis_server: str | None = None,
) -> list[TrialSpec]:
    """Every trial's spec, validated before anything starts (bad names fail before any server does).

    Combinations that would run the same trial (a fence mode for a backend with nothing to fence,
    a pause point without a pause, --wait-replicas for a backend that issues no WAIT) are planned once.
    """
    check_count("trials", trials)
    if not backends or not experiments:
        raise InvalidValueError("select at least one backend and one experiment")
    classes = {backend: load_backend(backend, check_viable=False) for backend in backends}
    exps = [get_experiment(name) for name in experiments]
    overrides = overrides.replace(server=_redis_protocol_server(overrides.server, binary=redis_server))
    specs: dict[str, TrialSpec] = {}
    sweep = sweep if sweep is not None else Sweep()
    _warn_no_wait(classes, asked=sweep.values.get("wait_replicas", (overrides.wait_replicas,)), experiments=exps)
    for k, backend, experiment, swept in itertools.product(range(trials), backends, exps, list(sweep.combinations())):
        cell = overrides.replace(**swept)
        cls = classes[backend]
        spec = make_spec(
            backend=backend,
            experiment=experiment,
            trial=k,
            overrides=cell,
            node_count=node_count,
            resource_check=check_for(cls, fence=cell.fence),
            supports_wait_replicas=traits_of(cls).supports_wait_replicas,
            lock_servers=traits_of(cls).servers,
            backend_resource_kind=traits_of(cls).resource_kind,
            backend_timeout_ms=_client_timeout_ms(cls),
        )
        specs.setdefault(spec.trial_id, spec)
    return _fitting(classes, list(specs.values()), skip_unfit=skip_unfit)


def _redis_protocol_server(choice: str, *, binary: str | None) -> str:
    """``--server`` resolved: the kind that runs this run's Redis-protocol servers ("auto": what is here)."""
    if choice != AUTO and get_kind(choice).speaks != "redis":
        raise InvalidValueError(f"--server {choice}: its servers do not speak the Redis protocol (e.g. redis, valkey)")
    return server_for("redis", choice=choice, binary=binary).name


def _client_timeout_ms(cls: type) -> float | None:
    """A backend's own client request timeout (its ``client_timeout_s``), None if it states none."""
    own = traits_of(cls).client_timeout_s
    return None if own is None else float(own) * 1000


def _warn_no_wait(classes: dict[str, type], *, asked: Sequence[int], experiments: Sequence[Any]) -> None:
    """Say once, up front, which backends run their failover trials without the asked-for WAIT."""
    if not any(asked) or not any("failover" in e.kinds for e in experiments):
        return
    without = [name for name, cls in classes.items() if not traits_of(cls).supports_wait_replicas]
    if without:
        log.warning(
            "--wait-replicas: %s issue(s) no WAIT; their failover trials run without it (wait_replicas 0)",
            ", ".join(without),
        )


#: What a fault kind (spec/faultkinds) asks of the lock servers beyond start, crash and restart; a
#: kind of server that does not offer it (infra/kinds.py) cannot take the fault.
FAULT_NEEDS = {
    kind.name: Capability(need)
    for kind in faultkinds.KINDS.values()
    for need in sorted(kind.needs)
    if need in {c.value for c in Capability}
}


def _unfit(cls: type, spec: TrialSpec) -> str:
    """Why a backend cannot run the trial ("" when it can): a TTL it cannot express (its optional
    ``check_ttl``, e.g. etcd's whole-second leases), a fault its kind of lock server cannot take, or
    a fault step that can never reach its lock (faults/targets.py: never_resolves)."""
    servers = traits_of(cls).servers
    server_kind = server_for(servers, choice=spec.server)
    schedule = parse_schedule(spec.faults)
    for kind in sorted(schedule.kinds()):
        missing = lacks(server_kind, FAULT_NEEDS[kind]) if kind in FAULT_NEEDS else ""
        if missing:
            return missing
        only = faultkinds.KINDS[kind].acts_on_checks  # lost-reply: the increments only
        if only and spec.resource_check.value not in only:
            return f"{kind} acts on {', '.join(only)} critical sections only, not on {spec.resource_check.value}"
    aimed = [step for step in schedule.steps if step.nodes is not None and step.nodes.mode in ("holders", "others")]
    unreadable = lacks(server_kind, Capability.LEASE_HOLDERS) if aimed else ""
    if unreadable:  # every such step would be skipped in every round: a trial without its fault
        return f"fault step {aimed[0].text!r}: {unreadable}"
    by_role = [step for step in schedule.steps if step.nodes is not None and step.nodes.by_role]
    if by_role and lacks(server_kind, Capability.ROLES):  # nodes=leader on servers that cannot say who leads
        return f"fault step {by_role[0].text!r}: {lacks(server_kind, Capability.ROLES)}"
    if servers in ("postgres", "etcd", "zookeeper"):  # their servers fix the node count: more is not for them
        used = cluster_shape(spec, cluster_options=ClusterOptions()).node_count
        try:
            fault_plan.check_schedule(schedule, lock_nodes=used, workers=spec.workers)
        except InvalidValueError as exc:
            return f"{servers} lock servers: {exc}"
    reach = fault_targets.never_resolves(
        schedule.steps,
        lease_nodes=fault_targets.lease_nodes(cls, node_count=cluster_shape(spec, cluster_options=ClusterOptions(
            node_count=spec.node_count or ClusterOptions().node_count)).node_count),
        fixed_nodes=custom_faults(spec.recorded_settings()),
    )  # fmt: skip
    if reach:
        return reach
    check_ttl = traits_of(cls).check_ttl
    if check_ttl is None:
        return ""
    try:
        check_ttl(ttl_ms=spec.ttl_ms)
    except InvalidValueError as exc:
        return str(exc)
    return ""


def _fitting(classes: dict[str, type], specs: Sequence[TrialSpec], *, skip_unfit: bool) -> list[TrialSpec]:
    """The specs their backends can run. Cells a backend cannot run are left out with one warning
    line per backend and reason; it is an error when nothing is left (or ``skip_unfit`` is off)."""
    kept: list[TrialSpec] = []
    left_out: dict[tuple[str, str], list[str]] = {}
    for spec in specs:
        reason = _unfit(classes[spec.backend], spec)
        if not reason:
            kept.append(spec)
            continue
        cells = left_out.setdefault((spec.backend, reason), [])
        if spec.experiment not in cells:
            cells.append(spec.experiment)
    if left_out and (not kept or not skip_unfit):
        (backend, reason), cells = next(iter(left_out.items()))
        raise InvalidValueError(f"backend {backend!r}, {cells[0]}: {reason}")
    # One line per reason and cells: "skipping single, redlock x session-kill: ..." (not one per backend).
    lines: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for (backend, reason), experiments in left_out.items():
        lines.setdefault((reason, tuple(experiments)), []).append(backend)
    for (reason, skipped), names in lines.items():
        log.warning("skipping %s x %s: %s", ", ".join(names), ", ".join(skipped), reason)
    return kept


#: etcd members for a trial with a node fault: a quorum that survives one member down, not two.
ETCD_FAULT_MEMBERS = 3


def lock_servers_of(backend: str) -> str:
    """Which servers a backend's lock nodes are (its optional ``servers`` attribute; "redis" without)."""
    return traits_of(load_backend(backend, check_viable=False)).servers


def cluster_shape(spec: TrialSpec, *, cluster_options: ClusterOptions) -> ClusterShape:
    """The servers ``spec`` needs: how many lock nodes, and what its fault asks of them.

    A backend on etcd gets one member, or three when a fault crashes or restarts members
    (``--redlock-nodes`` sets the count instead)."""
    servers = lock_servers_of(spec.backend)
    schedule = parse_schedule(spec.faults)
    nodes = server_for(servers, choice=spec.server).name
    resource = server_for(spec.resource_kind, choice=spec.server).name
    if servers == "etcd":
        members = spec.node_count or (ETCD_FAULT_MEMBERS if fault_plan.touches_servers(schedule) else 1)
        return ClusterShape(node_count=members, lock_servers=nodes, resource_kind=resource)
    if servers == "postgres":  # a failover makes each node a primary + streaming replica
        replicas = fault_plan.cluster_needs(schedule)["replicas"]
        count = spec.node_count or 1
        return ClusterShape(node_count=count, replicas=replicas, lock_servers=nodes, resource_kind=resource)
    if servers == "zookeeper":
        count = spec.node_count or zookeeper_servers_for(schedule)
        return ClusterShape(node_count=count, lock_servers=nodes, resource_kind=resource)
    return ClusterShape(
        node_count=cluster_options.node_count,
        lock_servers=nodes,
        resource_kind=resource,
        **fault_plan.cluster_needs(schedule),
    )


def check_faults(specs: Sequence[TrialSpec], *, cluster_options: ClusterOptions) -> None:
    """Refuse, before any server starts, fault trials that cannot run as asked."""
    on_etcd = [s for s in specs if lock_servers_of(s.backend) == "etcd"]
    if on_etcd and cluster_options.nodes is not None:
        raise ConfigError(
            f"backend {on_etcd[0].backend!r} runs on etcd members that lockcompare starts: drop --nodes/--resource"
        )
    on_zookeeper = [s for s in specs if lock_servers_of(s.backend) == "zookeeper"]
    if on_zookeeper and cluster_options.nodes is not None:
        raise ConfigError(
            f"backend {on_zookeeper[0].backend!r} runs on ZooKeeper servers that lockcompare starts: "
            "drop --nodes/--resource"
        )
    if cluster_options.zookeeper is not None:
        for spec in on_zookeeper:
            if fault_plan.touches_servers(parse_schedule(spec.faults)):
                raise ConfigError(
                    f"{spec.experiment} crashes, restarts or cuts off ZooKeeper servers: it needs the embedded "
                    "ones, not --zookeeper (session-kill ends only the holder's session and runs there)"
                )
        specs = [s for s in specs if s not in on_zookeeper]
    on_postgres = [s for s in specs if lock_servers_of(s.backend) == "postgres"]
    if on_postgres and cluster_options.nodes is not None and cluster_options.postgres is None:
        raise ConfigError(
            f"backend {on_postgres[0].backend!r} locks on PostgreSQL: with --nodes/--resource give --postgres URL too"
        )
    for spec in specs:  # every step has a runtime, every worker one pause: said now, not mid-matrix
        schedule = parse_schedule(spec.faults)
        fault_plan.planned_steps(schedule, time_scale=spec.time_scale, ttl_ms=spec.ttl_ms)
        fault_plan.worker_pauses(schedule, time_scale=spec.time_scale)
        if schedule and not fault_plan.touches_servers(schedule):
            fault_plan.check_schedule(schedule, lock_nodes=cluster_options.node_count, workers=spec.workers)
    if cluster_options.postgres is not None:
        for spec in on_postgres:
            if fault_plan.touches_servers(parse_schedule(spec.faults)):
                raise ConfigError(
                    f"{spec.experiment} restarts or cuts off the PostgreSQL server: it needs the embedded one, "
                    "not --postgres (session-kill ends only lockcompare's own sessions and runs there)"
                )
            if spec.resource_kind != "postgres":
                raise ConfigError(
                    "with --postgres the PostgreSQL backends keep the resource there: --resource-kind postgres"
                )
        specs = [s for s in specs if s not in on_postgres]
    faulty = [s for s in specs if fault_plan.touches_servers(parse_schedule(s.faults))]
    if not faulty:
        return
    if cluster_options.nodes is not None and any("failover" in parse_schedule(s.faults).kinds() for s in faulty):
        raise ConfigError(
            "failover needs lock nodes with replicas, which lockcompare builds only in its embedded cluster: "
            "not with --nodes/--resource"
        )
    if cluster_options.nodes is not None:
        raise ConfigError(
            f"{faulty[0].experiment} kills, restarts or re-clocks lock nodes, or proxies their links: "
            "it needs the embedded cluster, not --nodes/--resource"
        )
    for spec in faulty:
        used = spec.node_count or cluster_options.node_count
        if lock_servers_of(spec.backend) in ("etcd", "postgres", "zookeeper"):
            used = cluster_shape(spec, cluster_options=cluster_options).node_count
        if spec.fault_nodes > used:
            raise InvalidValueError(f"--fault-nodes {spec.fault_nodes} but {spec.backend} uses {used} lock nodes")
        fault_plan.check_schedule(parse_schedule(spec.faults), lock_nodes=used, workers=spec.workers)


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
        fresh_workers=fresh_workers, cpu_share=cpu_share,
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
) -> MatrixReport:
    """Run trials already planned (by :func:`plan_matrix`, or rebuilt from a results row by
    ``run --from``), appending one row per trial to ``out``; see :func:`run_matrix`."""
    if not specs:
        raise InvalidValueError("no trial to run")
    for backend in dict.fromkeys(spec.backend for spec in specs):  # before any file or server is touched
        require_declarations(load_backend(backend), name=backend)
    out = real_path(out)  # through a symlink: the lock, the rows and the histories beside the real file
    check_output_file(out, flag="--out")  # before the lock file beside it is created
    with results_lock(out):  # one writer per results file, for the whole run
        return _run_locked(
            specs, out=out, cluster_options=cluster_options, resume=resume, progress=progress, jobs=jobs,
            allow_mixed_revisions=allow_mixed_revisions, dask=dask,
            fresh_workers=fresh_workers, cpu_share=cpu_share,
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
) -> MatrixReport:
    redlock_nodes = specs[0].node_count
    time_scale = min(spec.time_scale for spec in specs)
    call_timeout_ms = max(spec.call_timeout_ms for spec in specs)
    done = prepare_out(out, resume=resume, allow_mixed_revisions=allow_mixed_revisions)
    todo = [s for s in specs if s.trial_id not in done]
    trial_ids = tuple(s.trial_id for s in specs)
    if not todo:
        return MatrixReport(out=out, trials_run=0, trials_skipped=len(specs), trial_ids=trial_ids)
    check_faults(todo, cluster_options=cluster_options)  # and backends that need servers of their own
    plan = getattr(progress, "plan", None)  # the terminal bar weighs the trials left by cell (cli/progress_bar.py)
    if plan is not None:
        plan(todo)
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
    histories = claim_history_dir(out)  # never another results file's (issue 38)
    pointed = history_ids(out)  # histories rows of the file already point to (an unknown one rerun)
    run_id = new_run_id()
    budget = CpuBudget(cpus=usable_cpus(), share=cpu_share, prior=prior_busy_fraction(time_scale))
    governor = StallGovernor(jobs=jobs)
    floor = jobs
    jobs_used = 0
    unknown: list[tuple[str, str]] = []
    no_progress: dict[str, int] = {}

    saved: dict[str, Path] = {}  # trial_id -> history written in this run
    rowed: set[str] = set()  # trial_ids whose row this run appended

    def run_one(spec: TrialSpec, cluster: Cluster) -> tuple[TrialResult, dict[str, Any]]:
        result = run_trial(spec=spec, cluster=cluster, run_id=run_id, crews=crews)
        # A rerun (the file holds the trial's unknown row) keeps that row's history: a name of its own.
        path = save_history(result, histories, attempt=run_id if spec.trial_id in pointed else "")
        saved[spec.trial_id] = path
        row = make_row(
            result,
            host=host_facts(),
            run_id=run_id,
            cluster_kind="embedded" if cluster.embedded else "external",
            server_version=cluster.server_version,
            history_path=str(path.relative_to(out.parent)),  # the CSV and its histories move together
            note=f"resumed over another revision: {allow_mixed_revisions}" if allow_mixed_revisions else "",
        )
        return result, row

    def on_done(done: Finished[TrialSpec, tuple[TrialResult, dict[str, Any]]]) -> None:
        nonlocal jobs_used, floor
        floor = min(floor, governor.limit)
        result, row = done.result
        meter.trial(result.wall_s)
        costs.record(done.spec, wall_s=result.wall_s)
        row["jobs_concurrent"] = done.jobs_concurrent
        jobs_used = max(jobs_used, done.jobs_concurrent)
        # on_done runs in the main thread only: rows never interleave. A rerun takes its old row's
        # place (the old row moves to the .superseded file): one row per trial in the file.
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
            )
            meter.mark("trials")
        finally:
            workers.close()
            remove_unpointed(saved, rowed=rowed, kept=set())  # a rerun's history has a name of its own
    floor_now = meter.finish(  # after the servers stopped: their CPU is in RUSAGE_CHILDREN
        waited_for_clusters_s=getattr(clusters.inner, "waited_s", 0.0),
        waited_before_trials_s=waited_before,
        held_slots=held,
        clusters_started=getattr(clusters.inner, "built", 0),
    )
    return MatrixReport(
        out=out,
        trials_run=len(todo),
        trials_skipped=len(specs) - len(todo),
        trial_ids=trial_ids,
        unknown=tuple(unknown),
        no_progress=no_progress,
        jobs=jobs,
        jobs_used=jobs_used,
        busy_cpu=budget.estimates(),  # type: ignore[arg-type]  # kinds are (backend, experiment)
        jobs_floor=floor,
        backed_off=governor.backed_off,
        floor=floor_now,
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
    """A pool of embedded clusters (one per trial in flight), or the user's servers shared by all."""
    if (options.nodes is None) != (options.resource is None):
        raise ConfigError("--nodes and --resource go together: give both, or neither for the embedded cluster")
    if options.nodes is None:  # no binary for the chosen Redis-protocol server: one clear error before anything starts
        # (only for trials that run one: a trial on PostgreSQL alone records the neutral "redis")
        speaking = [spec for spec in specs if "redis" in (spec.lock_servers, spec.resource_kind)]
        for kind in {server_for("redis", choice=spec.server) for spec in speaking}:
            problem = kind.problem(binary=options.redis_server)
            if problem:
                raise RedisServerNotFoundError(problem)
    postgres = (
        SharedCluster(connect_external(nodes=(options.postgres,), resource=options.postgres))
        if options.postgres is not None
        else None
    )
    if options.nodes is not None and options.resource is not None:
        yield WithPostgres(SharedCluster(connect_external(nodes=options.nodes, resource=options.resource)), postgres)
        return

    def build(shape: ClusterShape) -> Cluster:
        return start_embedded(shape, redis_server=options.redis_server, zookeeper=options.zookeeper)

    # Clusters start and reset on the pool's threads, SPARE_CLUSTERS ahead of the trials (warm_pool.py).
    with WarmPool(build=build, limit=jobs + SPARE_CLUSTERS) as pool:
        yield WithPostgres(pool, postgres)


#: Clusters kept warm beyond one per job slot, for the trials about to start (issue 44).
SPARE_CLUSTERS = 2
