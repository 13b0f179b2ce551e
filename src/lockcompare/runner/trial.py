"""One trial: one backend under one experiment, with N worker processes started together.

The runner prepares the trial's keys, starts the workers (``spawn``: a fresh interpreter each, no
inherited sockets or threads), releases them together once all are ready,
collects their histories, reads the resource's counters, and hands both to the checker. Workers
are stopped in ``finally`` whatever happens; only this trial's own keys are touched.

The workers are started and watched to their end in watch.py; stopwatch.py notices a runner that was
itself stopped from outside.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path

from lockcompare.analysis import history as history_io
from lockcompare.analysis.checker import TrialMetrics, check, unknown
from lockcompare.analysis.history import Event
from lockcompare.analysis.sentinel import TimingPlan, TimingVerdict, judge_timing, plan_from_settings
from lockcompare.backends import BackendConfig, LockBackend, Traits, load_backend, traits_of
from lockcompare.faults import continuer as continuers
from lockcompare.faults import network, plan
from lockcompare.faults.freeze import Freezer
from lockcompare.faults.holders import LockHolders, key_glob
from lockcompare.faults.schedule import FaultScheduler
from lockcompare.faults.steps import PlannedStep
from lockcompare.infra import cgroup, health, provenance
from lockcompare.infra.cluster import Cluster
from lockcompare.infra.kinds import Capability, lacks
from lockcompare.infra.lifecycle import SPAWN, die_with_parent, kill_and_reap_group
from lockcompare.infra.messages import send
from lockcompare.infra.postgres.client import with_idle_session_timeout
from lockcompare.infra.proxy import ProxySet
from lockcompare.runner.crew import CrewSource, spawn_crew
from lockcompare.runner.resource import Resource, ResourceCounters, open_resource
from lockcompare.runner.stopwatch import STOPPED_GAP_S, StopWatch
from lockcompare.runner.watch import CONSTRUCT_TIMEOUT_S, freezes_workers, run_workers
from lockcompare.runner.worker import START_TIMEOUT_S, WorkerPlan
from lockcompare.scenario.choices import PauseHow, PausePoint
from lockcompare.scenario.experiments import rests_on_renewal
from lockcompare.scenario.schedule import Schedule, parse_schedule
from lockcompare.scenario.trialspec import TrialSpec


@dataclass(frozen=True, kw_only=True)
class ResolvedTrial:
    """A trial's spec with what it names looked up once, then passed on: the backend class, its
    traits and the fault schedule."""

    spec: TrialSpec
    backend: type[LockBackend]
    traits: Traits
    schedule: Schedule

    @classmethod
    def of(cls, spec: TrialSpec, *, check_viable: bool = True) -> ResolvedTrial:
        """``spec`` resolved; ``check_viable=False`` for judging, which runs nothing (load_backend)."""
        backend = load_backend(spec.backend, check_viable=check_viable)
        return cls(spec=spec, backend=backend, traits=traits_of(backend), schedule=parse_schedule(spec.faults))


@dataclass(frozen=True, kw_only=True)
class TrialResult:
    spec: TrialSpec
    metrics: TrialMetrics
    history: list[Event]
    wall_s: float
    started_at: str  # ISO 8601, UTC
    lock_nodes_reachable: int  # lock nodes that answered right before the trial
    load_avg_1m: float  # the machine's load when the trial started
    concurrent_runs: int  # other lockcompare runs active when the trial started
    timing: TimingVerdict | None = None  # how late the machine ran it (analysis/sentinel.py)
    isolation: str = ""  # what held each client: cgroup-v1, cgroup-v2 or process-group (infra/cgroup.py)


def new_run_id() -> str:
    return uuid.uuid4().hex[:10]


def worst_case_duration_s(spec: TrialSpec) -> float:
    """An upper bound on a healthy trial's length; past it the trial is declared stuck."""
    per_round_ms = spec.acquire_timeout_ms + spec.pause_ms + spec.work_ms + spec.think_ms * (1 + spec.jitter) + 50
    # A call into a cut or slowed link may outlast the acquire deadline by one request timeout.
    per_round_ms += (link_timeout_s(spec) or 0) * 1000
    extra_round_ms = per_round_ms if spec.workload == "contend" else 0  # the one a rival may finish after "stop"
    return (spec.rounds * per_round_ms * 2 + extra_round_ms) / 1000 + call_deadline_s(spec)


def run_trial(
    *, spec: TrialSpec, cluster: Cluster, run_id: str, request_timeout_s: float = 2.0, crews: CrewSource = spawn_crew
) -> TrialResult:
    """Run one trial to the end and judge it. ``crews`` provides the worker processes: spawned for
    this trial (default), or warm ones a :class:`~lockcompare.runner.crew.WorkerPool` reuses.

    Whatever goes wrong inside the trial (a worker that dies, a backend call past its deadline, a
    node that dies under it) makes the verdict ``unknown`` with the reason in ``problem``; only a
    cluster that cannot be used at all raises (:class:`NodeUnreachableError`).

    In a link experiment (faults/network.py) each worker reaches each lock node through a proxied
    link of its own, started here and stopped whatever happens; the runner's own connections go direct.
    """
    trial = ResolvedTrial.of(spec)  # fail here, once, rather than in every worker
    links = (
        network.start_links(
            cluster=cluster,
            workers=spec.workers,
            name=f"links-{spec.trial_id}",
            resource=plan.needs_resource_link(trial.schedule),
        )
        if plan.needs_links(trial.schedule)
        else None
    )
    try:
        return _run_trial(
            trial=trial, cluster=cluster, run_id=run_id, request_timeout_s=request_timeout_s, crews=crews, links=links,
        )  # fmt: skip
    finally:
        if links is not None:
            links.stop()


def _lock_urls(links: ProxySet, worker: int, cluster: Cluster) -> tuple[str, ...]:
    return network.worker_urls(links, worker=worker, lock_nodes=len(cluster.node_urls))[0]


def _resource_url(links: ProxySet | None, worker: int, cluster: Cluster) -> str:
    """Where the worker reaches the resource: through its link when a step acts on that link."""
    if links is None:
        return cluster.resource_url
    proxied = network.worker_urls(links, worker=worker, lock_nodes=len(cluster.node_urls))[1]
    return proxied or cluster.resource_url


def _run_trial(
    *,
    trial: ResolvedTrial,
    cluster: Cluster,
    run_id: str,
    request_timeout_s: float,
    crews: CrewSource,
    links: ProxySet | None,
) -> TrialResult:
    spec, schedule = trial.spec, trial.schedule
    reachable = health.prepare(cluster, node_count=spec.node_count)
    prefix = f"lockcompare:{run_id}:{spec.trial_id}"
    config = BackendConfig(
        node_urls=session_urls(cluster.node_urls, spec=spec),
        request_timeout_s=link_timeout_s(spec) or request_timeout_s,
        node_count=spec.node_count,
        wait_replicas=spec.wait_replicas,
        retry_delay_ms=spec.retry_delay_ms,
    )
    pauses = plan.worker_pauses(spec.schedule)
    plans = [
        WorkerPlan(
            index=w,
            backend=spec.backend,
            backend_config=config
            if links is None
            else replace(config, node_urls=session_urls(_lock_urls(links, w, cluster), spec=spec)),
            resource_url=_resource_url(links, w, cluster),
            resource_prefix=prefix,
            lock_key=f"{prefix}:lock",
            rounds=spec.rounds,
            ttl_ms=spec.ttl_ms,
            work_ms=spec.work_ms,
            pause_ms=pauses[w].pause_ms if w in pauses else 0.0,
            pause_rounds=pauses[w].rounds(spec.rounds) if w in pauses else frozenset(),
            pause_point=PausePoint(pauses[w].point) if w in pauses else PausePoint.AFTER_ACQUIRE,
            pause_how=PauseHow(pauses[w].how) if w in pauses else PauseHow.SLEEP,
            check=spec.resource_check,
            acquire_timeout_ms=spec.acquire_timeout_ms,
            retry_delay_ms=spec.retry_delay_ms,
            think_ms=spec.think_ms,
            jitter=spec.jitter,
            seed=spec.seed,
            report_acquires=plan.reports_acquires(schedule),
            workload=spec.workload,
            acquire_handshake=w in plan.acquire_handshake_workers(schedule),
            workers=spec.workers,
            lost_reply_rounds=plan.worker_lost_replies(schedule, rounds=spec.rounds).get(w, frozenset()),
        )
        for w in range(spec.workers)
    ]
    steps = plan.with_lease_declaration(fault_plan(spec, lock_key=f"{prefix}:lock"), backend=trial.backend)
    faults = (
        FaultScheduler(
            steps=steps,
            cluster=cluster,
            node_count=len(cluster.node_urls),
            workers=spec.workers,
            links=links,
            holders=_lock_holders(cluster, lock_key=f"{prefix}:lock", traits=trial.traits),
        )
        if steps
        else None
    )
    if faults is None or not faults.freezes_workers():  # no strobe to meet a stop the runner has not heard of
        plans = [replace(worker_plan, pause_stops_itself=True) for worker_plan in plans]
    resource = open_resource(url=cluster.resource_url, prefix=prefix)
    try:
        # Keys on servers we do not own must not outlive a killed run: they expire on their own.
        resource.prepare(expire_s=worst_case_duration_s(spec) + 3600)
        started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        load_avg, others = os.getloadavg()[0], provenance.other_runs()
        wall_start = time.monotonic()
        # Its pause events join the history. Pauses the workers make themselves end in a process of
        # the runner's own (faults/continuer.py), started now, not when the first worker waits on it.
        self_stopping = any(worker_plan.pause_stops_itself and worker_plan.pause_ms > 0 for worker_plan in plans)
        freezer = Freezer(continuer=continuers.shared() if self_stopping else None)
        with StopWatch() as stops:
            events, failure, isolation = run_workers(
                plans,
                timeout_s=worst_case_duration_s(spec),
                call_timeout_s=call_deadline_s(spec),
                backend=spec.backend,
                faults=faults,
                crews=crews,
                freezer=freezer,
                freezes=freezes_workers(plans, faults),
            )
        wall_s = time.monotonic() - wall_start
        if stops.longest_s > STOPPED_GAP_S:
            stopped = f"the run was stopped from outside for {stops.longest_s:.1f} s of its {wall_s:.1f} s (SIGSTOP?)"
            failure = "; ".join(filter(None, [failure, stopped]))
        events = history_io.merge([events, freezer.events, faults.events if faults is not None else []])
        if links is not None and not links.is_running():
            failure = "; ".join(filter(None, [failure, "the link proxy died during the trial"]))
        died = health.dead_nodes(cluster, node_count=spec.node_count, settle_s=REJOIN_S)
        if died:
            failure = "; ".join(filter(None, [failure, f"{health.describe_dead(cluster, died)} died during the trial"]))
        counters, unread = _read_counters(resource)
        failure = "; ".join(filter(None, [failure, unread if not died or -1 not in died else ""]))
        metrics = (
            unknown(counters, problem=failure, entries_planned=spec.entries_planned)
            if failure or counters is None
            else check(
                events,
                counters,
                entries_planned=spec.entries_planned,
                unavailable_under=trial.traits.unavailable_under,
                rests_on_renewal=rests_on_renewal(spec.experiment),
            )
        )
        return TrialResult(
            spec=spec,
            metrics=metrics,
            history=events,
            wall_s=wall_s,
            started_at=started_at,
            lock_nodes_reachable=reachable,
            load_avg_1m=load_avg,
            concurrent_runs=others,
            timing=_judge_timing(trial, events),
            isolation=isolation,
        )
    finally:
        cluster.delete_keys_containing(prefix)
        resource.close()


def timing_plan(trial: ResolvedTrial) -> TimingPlan:
    """What the trial's timing rests on, for the sentinel: its settings, the earliest offset of a
    schedule step that follows a lease, and a slow link's delay past the TTL."""
    spec = trial.spec
    extra = plan.timing_extras(spec.schedule, ttl_ms=spec.ttl_ms)  # the trial's ms, the kinds' margins
    # A lock-free design has no lease: a TTL margin is not its margin (nor is a slow acquire's).
    leased = trial.traits.exclusive
    if not leased:
        extra.pop("extra_margins", None)
    return plan_from_settings(spec.settings(), leased=leased, acquire_waits=trial.traits.acquire_waits, **extra)


def _judge_timing(trial: ResolvedTrial, events: list[Event]) -> TimingVerdict | None:
    """The sentinel's verdict; None (empty columns) for a history it cannot read: it never fails a trial."""
    try:
        return judge_timing(events, timing_plan(trial))
    except (KeyError, TypeError, ValueError):
        return None


#: How long a lock server silent at a trial's end may take to answer before the trial counts it as
#: died: a consensus member rejoining after a healed partition re-elects first (health.dead_nodes).
REJOIN_S = 10.0


def _read_counters(resource: Resource) -> tuple[ResourceCounters | None, str]:
    """The resource's counters, or None and why not: a resource that died (its kind says what a
    failure is) is an unknown trial, as a dead lock node is, and the matrix goes on (an unusable
    one is refused by the next health check)."""
    try:
        return resource.counters(), ""
    except resource.failures as exc:
        return None, f"cannot read the resource's counters: {exc}"


def _lock_holders(cluster: Cluster, *, lock_key: str, traits: Traits) -> LockHolders | None:
    """What reads the lock's holders before a node fault: embedded Redis nodes only (faults/holders.py).

    Where the backend says its key lives (``key_pattern``, ``key_type``: an external client's
    manifest), else as ``*<lock key>``: a library stores the harness's key under a prefix of its
    own (pottery: ``redlock:``, python-redis-lock: ``lock:``).
    """
    # The kinds say whether their holders can be read (Capability.LEASE_HOLDERS), not URL schemes.
    if not cluster.embedded or any(lacks(cluster.kind_of(url), Capability.LEASE_HOLDERS) for url in cluster.node_urls):
        return None
    return LockHolders(
        node_urls=cluster.node_urls,
        key_pattern=key_glob(lock_key, pattern=traits.key_pattern),
        key_type=traits.key_type,
    )


def session_urls(urls: tuple[str, ...], *, spec: TrialSpec) -> tuple[str, ...]:
    """The lock nodes' URLs as workers use them: sessions carry the trial's idle session timeout
    where the servers have one (infra decides which)."""
    return with_idle_session_timeout(urls, timeout_ms=spec.idle_session_timeout_ms)


def fault_plan(spec: TrialSpec, *, lock_key: str = "") -> list[PlannedStep]:
    """The steps the runner injects and heals in a trial (its schedule's pauses are the workers' own);
    ``lock_key``: the trial's lock, which a session-kill step looks up on the server."""
    return plan.planned_steps(spec.schedule, ttl_ms=spec.ttl_ms, lock_key=lock_key)


def link_timeout_s(spec: TrialSpec) -> float | None:
    """The workers' client request timeout when their links are slowed or cut (None: the runner's
    default). The backend's own (its library's default, resolved into the spec), never one the
    harness picks to make an experiment come out a certain way."""
    return None if spec.client_timeout_ms is None else spec.client_timeout_ms / 1000


def call_deadline_s(spec: TrialSpec) -> float:
    """The deadline on each backend call: a client waiting out its own request timeout (a call into
    a cut link) is not a hung call, so the deadline is at least twice that timeout plus a second."""
    own = link_timeout_s(spec)
    return max(spec.call_timeout_ms / 1000, 2 * own + 1 if own is not None else 0)


def construct_in_child(backend: str, *, config: BackendConfig, timeout_s: float) -> str:
    """Construct and close ``backend`` in a spawned process; "" if that worked, else what failed."""
    parent_end, child_end = SPAWN.Pipe(duplex=False)
    # In a cgroup too: a helper that daemonises in construct() must not outlive the probe.
    proc = cgroup.start_in_cgroup(target=_construct_and_close, args=(backend, config, child_end))
    child_end.close()
    try:
        if not parent_end.poll(START_TIMEOUT_S) or parent_end.recv() != "constructing":
            return "the probe process did not start"
        timeout_s = max(timeout_s, CONSTRUCT_TIMEOUT_S)  # start-up, as in a trial (see CONSTRUCT_TIMEOUT_S)
        if not parent_end.poll(timeout_s):
            return f"construct() or close() did not return within {timeout_s:g} s"
        return str(parent_end.recv())
    except EOFError:
        return "the probe process exited without reporting"
    finally:
        parent_end.close()
        kill_and_reap_group(proc)
        cgroup.release(proc.pid)


def _construct_and_close(backend: str, config: BackendConfig, conn: Connection) -> None:
    die_with_parent()
    try:
        cls = load_backend(backend)
        send(conn, "constructing")
        cls(config=config).close()
        send(conn, "")
    except BaseException as exc:  # noqa: BLE001 - reported as data
        send(conn, f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()


def save_history(result: TrialResult, directory: Path, *, attempt: str = "") -> Path:
    """The trial's history as ``<trial_id>.jsonl.gz``; a rerun of a trial the results file already
    holds names its ``attempt`` (``<trial_id>.<attempt>.jsonl.gz``), so the row it replaces keeps
    the history it was judged from."""
    name = f"{result.spec.trial_id}.{attempt}" if attempt else result.spec.trial_id
    path = directory / f"{name}.jsonl.gz"
    history_io.save(result.history, path)
    return path
