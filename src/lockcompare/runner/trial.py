"""One trial: one backend under one experiment, with N worker processes started together.

The runner prepares the trial's keys, starts the workers (``spawn``: a fresh interpreter each, no
inherited sockets or threads), releases them together once all are ready,
collects their histories, reads the resource's counters, and hands both to the checker. Workers
are stopped in ``finally`` whatever happens; only this trial's own keys are touched.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for_connections
from pathlib import Path
from typing import Any, cast

import redis

from lockcompare.analysis import history as history_io
from lockcompare.analysis.checker import TrialMetrics, check, unknown
from lockcompare.analysis.history import Event, now_ns
from lockcompare.analysis.sentinel import TimingPlan, TimingVerdict, judge_timing, plan_from_settings
from lockcompare.backends import BackendConfig, load_backend, traits_of
from lockcompare.faults import network, plan
from lockcompare.faults.freeze import Freezer
from lockcompare.faults.holders import LockHolders, key_glob
from lockcompare.faults.schedule import FaultScheduler, PlannedStep
from lockcompare.infra import cgroup, health, provenance
from lockcompare.infra.cluster import Cluster, delete_keys_containing
from lockcompare.infra.kinds import Capability, kind_of_url, lacks
from lockcompare.infra.lifecycle import SPAWN, die_with_parent, kill_and_reap_group
from lockcompare.infra.pg_client import is_postgres_url, with_session_settings
from lockcompare.infra.procgroup import GroupView, any_stopped, describe_escaped
from lockcompare.infra.proxy import ProxySet
from lockcompare.runner.contend import DoneTracker
from lockcompare.runner.crew import CrewSource, spawn_crew
from lockcompare.runner.resource import Resource, ResourceCounters
from lockcompare.runner.resource_pg import PgResource, ResourceError, open_resource
from lockcompare.runner.worker import START_TIMEOUT_S, CallSlot, WorkerPlan
from lockcompare.spec.choices import PauseHow, PausePoint
from lockcompare.spec.schedule import Schedule, parse_schedule
from lockcompare.spec.trialspec import TrialSpec

_log = logging.getLogger(__name__)


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
    load_backend(spec.backend)  # fail here, once, rather than in every worker
    schedule = parse_schedule(spec.faults)
    links = (
        network.start_links(cluster=cluster, workers=spec.workers, name=f"links-{spec.trial_id}")
        if plan.needs_links(schedule)
        else None
    )
    try:
        return _run_trial(
            spec=spec, cluster=cluster, run_id=run_id, request_timeout_s=request_timeout_s, crews=crews, links=links,
            schedule=schedule,
        )  # fmt: skip
    finally:
        if links is not None:
            links.stop()


def _run_trial(
    *,
    spec: TrialSpec,
    cluster: Cluster,
    run_id: str,
    request_timeout_s: float,
    crews: CrewSource,
    links: ProxySet | None,
    schedule: Schedule,
) -> TrialResult:
    reachable = health.prepare(cluster, node_count=spec.node_count)
    prefix = f"lockcompare:{run_id}:{spec.trial_id}"
    config = BackendConfig(
        node_urls=session_urls(cluster.node_urls, spec=spec),
        request_timeout_s=link_timeout_s(spec) or request_timeout_s,
        node_count=spec.node_count,
        wait_replicas=spec.wait_replicas,
        retry_delay_ms=spec.retry_delay_ms,
    )
    pauses = plan.worker_pauses(schedule, time_scale=spec.time_scale)
    plans = [
        WorkerPlan(
            index=w,
            backend=spec.backend,
            backend_config=config
            if links is None
            else replace(config, node_urls=session_urls(links.node_urls(worker=w), spec=spec)),
            resource_url=cluster.resource_url,
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
    steps = plan.with_lease_declaration(fault_plan(spec, lock_key=f"{prefix}:lock"), backend=load_backend(spec.backend))
    faults = (
        FaultScheduler(
            steps=steps,
            cluster=cluster,
            node_count=len(cluster.node_urls),
            workers=spec.workers,
            links=links,
            holders=_lock_holders(cluster, lock_key=f"{prefix}:lock", backend=load_backend(spec.backend)),
        )
        if steps
        else None
    )
    resource = open_resource(url=cluster.resource_url, prefix=prefix)
    try:
        # Keys on servers we do not own must not outlive a killed run: they expire on their own.
        resource.prepare(expire_s=worst_case_duration_s(spec) + 3600)
        started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        load_avg, others = os.getloadavg()[0], provenance.other_runs()
        wall_start = time.monotonic()
        freezer = Freezer()  # its pause events join the history
        with StopWatch() as stops:
            events, failure, isolation = _run_workers(
                plans,
                timeout_s=worst_case_duration_s(spec),
                call_timeout_s=call_deadline_s(spec),
                backend=spec.backend,
                faults=faults,
                crews=crews,
                freezer=freezer,
                freezes=_freezes(plans, faults),
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
            else check(events, counters, entries_planned=spec.entries_planned)
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
            timing=_judge_timing(spec, events),
            isolation=isolation,
        )
    finally:
        delete_keys_containing((*cluster.node_urls, cluster.resource_url), prefix)
        resource.close()


def timing_plan(spec: TrialSpec) -> TimingPlan:
    """What the trial's timing rests on, for the sentinel: its settings, the earliest offset of a
    schedule step that follows a lease, and a slow link's delay past the TTL."""
    schedule = parse_schedule(spec.faults)
    extra: dict[str, object] = {}
    offsets = [s.after_ms for s in schedule.steps if s.at == "after-acquire" and s.kind != "pause"]
    if offsets:  # at=start and at=acquire steps follow no lease
        extra["fault_offset_ms"] = min(offsets) * spec.time_scale
    slow = schedule.of_kind("slow")
    if slow:
        delay_ms = max(step.number("delay") for step in slow) * spec.time_scale
        extra["extra_margins"] = (("reply delay - TTL", delay_ms - spec.ttl_ms),)
    # A lock-free design has no lease: a TTL margin is not its margin (nor is a slow acquire's).
    cls = load_backend(spec.backend, check_viable=False)  # judging is not running
    leased = traits_of(cls).exclusive
    if not leased:
        extra.pop("extra_margins", None)
    acquire_waits = traits_of(cls).acquire_waits
    return plan_from_settings(spec.settings(), leased=leased, acquire_waits=acquire_waits, **extra)


def _judge_timing(spec: TrialSpec, events: list[Event]) -> TimingVerdict | None:
    """The sentinel's verdict; None (empty columns) for a history it cannot read: it never fails a trial."""
    try:
        return judge_timing(events, timing_plan(spec))
    except (KeyError, TypeError, ValueError):
        return None


#: How long a lock server silent at a trial's end may take to answer before the trial counts it as
#: died: a consensus member rejoining after a healed partition re-elects first (health.dead_nodes).
REJOIN_S = 10.0

#: The deadline on a backend's construct(), when the per-call deadline is shorter: an external client
#: (backends/external) starts a runtime there — Node took 1-5 s on a 2-core machine at load 15.
CONSTRUCT_TIMEOUT_S = 20.0

#: A runner thread that could not run for this long was stopped (SIGSTOP, Ctrl-Z, a frozen VM),
#: not merely busy: measured stalls on a loaded 2-core machine stay far below a second.
STOPPED_GAP_S = 3.0


class StopWatch:
    """Measures the longest time a ticking daemon thread of this process could not run.

    The trial's wall time alone cannot tell a long trial from a stopped one; a tick every 0.1 s
    that comes seconds late can. CLOCK_MONOTONIC goes on while a process is stopped.
    """

    TICK_S = 0.1

    def __init__(self) -> None:
        self.longest_s = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="stopwatch", daemon=True)

    def _tick(self) -> None:
        last = time.monotonic()
        while not self._done.wait(self.TICK_S):
            now = time.monotonic()
            self.longest_s = max(self.longest_s, now - last - self.TICK_S)
            last = now

    def __enter__(self) -> StopWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def _read_counters(resource: Resource | PgResource) -> tuple[ResourceCounters | None, str]:
    """The resource's counters, or None and why not: a resource that died is an unknown trial, as a
    dead lock node is, and the matrix goes on (an unusable one is refused by the next health check)."""
    try:
        return resource.counters(), ""
    except (redis.RedisError, ResourceError) as exc:
        return None, f"cannot read the resource's counters: {exc}"


def _lock_holders(cluster: Cluster, *, lock_key: str, backend: type) -> LockHolders | None:
    """What reads the lock's holders before a node fault: embedded Redis nodes only (faults/holders.py).

    Where the backend says its key lives (``key_pattern``, ``key_type``: an external client's
    manifest), else as ``*<lock key>``: a library stores the harness's key under a prefix of its
    own (pottery: ``redlock:``, python-redis-lock: ``lock:``).
    """
    # The kinds say whether their holders can be read (Capability.LEASE_HOLDERS), not URL schemes.
    if not cluster.embedded or any(lacks(kind_of_url(url), Capability.LEASE_HOLDERS) for url in cluster.node_urls):
        return None
    traits = traits_of(backend)
    return LockHolders(
        node_urls=cluster.node_urls,
        key_pattern=key_glob(lock_key, pattern=traits.key_pattern),
        key_type=traits.key_type,
    )


def session_urls(urls: tuple[str, ...], *, spec: TrialSpec) -> tuple[str, ...]:
    """The lock nodes' URLs as workers use them: a PostgreSQL session carries the trial's
    ``idle_session_timeout`` (a session setting, so the pooled server stays as it is)."""
    if not spec.idle_session_timeout_ms:
        return urls
    settings = {"idle_session_timeout": f"{max(1, round(spec.idle_session_timeout_ms))}ms"}
    return tuple(with_session_settings(url, settings) if is_postgres_url(url) else url for url in urls)


def fault_plan(spec: TrialSpec, *, lock_key: str = "") -> list[PlannedStep]:
    """The steps the runner injects and heals in a trial (its schedule's pauses are the workers' own);
    ``lock_key``: the trial's lock, which a session-kill step looks up on the server."""
    return plan.planned_steps(
        parse_schedule(spec.faults), time_scale=spec.time_scale, ttl_ms=spec.ttl_ms, lock_key=lock_key
    )


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


def _run_workers(
    plans: list[WorkerPlan],
    *,
    timeout_s: float,
    call_timeout_s: float,
    backend: str,
    faults: FaultScheduler | None = None,
    crews: CrewSource = spawn_crew,
    freezer: Freezer | None = None,
    freezes: bool = False,
) -> tuple[list[Event], str, str]:
    """Start one process per plan, release them together, gather their histories.

    The start barrier is a handshake: each worker connects, reports ``ready``, and waits for
    ``go``, sent down every pipe once every worker is ready (a worker that dies during start-up is
    noticed at once, not after a barrier timeout). Returns the merged history and "" — or what
    went wrong: a worker that failed, a backend call past ``call_timeout_s``, a trial past
    ``timeout_s``, a client that hit its process limit — and the isolation the workers had
    (infra/cgroup.py). Workers are stopped in ``finally`` whatever happens.

    A helper process that left its worker's process group is named once (a warning and an
    ``escaped`` event in the history); in a trial that ``freezes`` its workers (a SIGSTOP pause,
    a strobe) the verdict is then unknown: the freeze did not stop the whole client.
    """
    freezer = freezer or Freezer()
    crew = crews(plans)
    isolation = getattr(crew, "isolation", cgroup.PROCESS_GROUP)
    if faults is not None:
        faults.attach_workers(pids=tuple(crew.pids[c] for c in crew.conns), freezer=freezer)
    try:
        pids = [crew.pids[c] for c in crew.conns]
        watch = _Watch(
            conns=crew.conns, slots=crew.slots, freezer=freezer, pids=pids, call_timeout_s=call_timeout_s,
            backend=backend, faults=faults, groups=GroupView(leaders=pids, cgroup_members=cgroup.cgroup_members),
        )  # fmt: skip
        ready, problem = watch.collect(timeout_s=START_TIMEOUT_S, what="start")
        if problem or any(status != "ready" for status, _, _ in ready):
            events, failure = _outcome(ready, problem)
            return events, "; ".join(filter(None, [failure, cgroup.limit_problem(pids)])), isolation
        watch.name_escaped(force=True)  # every backend is constructed: its helpers have started
        if faults is not None:
            # Standing faults (a partition, a slow link) are there from the first round; a fault's
            # preparation (e.g. a replication link held back) precedes every write.
            faults.start()
        crew.go()
        events, failure = _outcome(*watch.collect(timeout_s=timeout_s, what="finish"))
        if watch.escaped and freezes:
            failure = "; ".join(filter(None, [failure, _escape_problem(watch.escaped)]))
        failure = "; ".join(filter(None, [failure, cgroup.limit_problem(pids)]))  # a fork loop: bounded, named
        return history_io.merge([events, watch.escaped]), failure, isolation
    finally:
        try:
            if faults is not None:
                faults.heal_all()  # no node stays down, no clock stays moved, no strobe runs on
        finally:
            try:
                freezer.thaw_all()  # before the crew stops or reuses its processes: a stopped one ignores SIGTERM
            finally:
                crew.close()


#: How often the runner looks at the workers' call slots while it waits for them.
_WATCH_INTERVAL_S = 0.05


@dataclass(kw_only=True)
class _Watch:
    """Waits for one final message per worker, serving freeze requests and enforcing deadlines."""

    conns: list[Connection]
    slots: list[CallSlot]
    freezer: Freezer
    pids: list[int]
    call_timeout_s: float
    backend: str
    faults: FaultScheduler | None = None
    #: The workers' process groups (infra/procgroup.py): the stopped-check and escaped helpers.
    groups: GroupView | None = None
    #: One ``escaped`` event per helper process seen outside its worker's group.
    escaped: list[Event] = field(default_factory=list)
    _stopped_since: dict[int, int] = field(default_factory=dict)
    _done: DoneTracker = field(init=False)  # the contend workload's "done"/"stop" (contend.py)

    def __post_init__(self) -> None:
        self._done = DoneTracker(conns=self.conns)

    def collect(self, *, timeout_s: float, what: str) -> tuple[list[tuple[str, str, list[Event]]], str]:
        """``(status, message, events)`` from every worker (a dead one reports ``error``), and a
        problem ("" if none) when the wait had to be cut short."""
        messages: list[tuple[str, str, list[Event]]] = []
        deadline = time.monotonic() + timeout_s
        pending = list(self.conns)
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return messages, f"workers did not {what} within {timeout_s:.0f} s; workers stopped"
            stuck = self._stuck_call()
            if stuck:
                return messages, stuck
            wait_s = min(remaining, _WATCH_INTERVAL_S)
            if self.faults is not None:
                self.faults.run_due()
                next_fault = self.faults.seconds_to_next()
                wait_s = wait_s if next_fault is None else min(wait_s, next_fault)
            for conn in cast(list[Connection], wait_for_connections(pending, timeout=wait_s)):  # a subset of pending
                try:
                    message = conn.recv()
                except EOFError:
                    message = ("error", f"worker {self.conns.index(conn)} exited without reporting", [])
                payload: list[Any] = cast(list[Any], message[2]) if len(message) > 2 else []
                if message[0] == "freeze":
                    index = self.conns.index(conn)
                    round_ = int(payload[0]) if payload else -1
                    self.freezer.freeze(
                        pid=self.pids[index], conn=conn, pause_s=float(message[1]), worker=index, round_=round_
                    )
                    continue
                if message[0] in ("acquiring", "acquire-done"):
                    # The worker waits for "go-on": the fault is in place (or healed) before it goes on.
                    if self.faults is not None:
                        self.faults.on_acquire_turn(
                            worker=self.conns.index(conn), round_=int(message[1]), starting=message[0] == "acquiring"
                        )
                    conn.send(("go-on", "", []))
                    continue
                if message[0] == "acquired":
                    if self.faults is not None:
                        self.faults.on_acquired(
                            worker=self.conns.index(conn), round_=int(message[1]), t_ns=payload[0],
                            owner=payload[1] if len(payload) > 1 else None,
                            session=payload[2] if len(payload) > 2 else None,
                        )  # fmt: skip
                        self.faults.run_due()  # a fault due at once lands before anything else is read
                    continue
                if message[0] == "done":
                    self._done.on_done(conn)
                    continue
                pending.remove(conn)
                messages.append(message)
                if message[0] != "ready":  # its final message: a worker that ended is done
                    self._done.on_ended(conn)
        return messages, ""

    def _stuck_call(self) -> str:
        """Why the trial cannot go on ("" if it can): a worker stopped from outside the harness,
        or a backend call past its deadline (a stopped worker's call is its stop, not the backend's)."""
        now = time.monotonic_ns()
        self.name_escaped()
        for index, (pid, slot) in enumerate(zip(self.pids, self.slots, strict=True)):
            if not self.freezer.is_frozen(pid) and self._stopped(pid):
                since = self._stopped_since.setdefault(pid, now)
                if now - since > self.call_timeout_s * 1e9:
                    return (
                        f"worker {index} was stopped from outside the harness for more than {self.call_timeout_s:g} s"
                    )
                continue
            self._stopped_since.pop(pid, None)
            call, started_ns = slot.current()
            # construct() is start-up, like the worker's own: an external client starts its runtime there.
            limit_s = max(self.call_timeout_s, CONSTRUCT_TIMEOUT_S) if call == "construct" else self.call_timeout_s
            if call and now - started_ns > limit_s * 1e9:
                return (
                    f"worker {index}: backend {self.backend!r} {call}() did not return within "
                    f"{limit_s:g} s; workers stopped"
                )
        return ""

    def _stopped(self, pid: int) -> bool:
        """True if any process of the worker's group is stopped (``T``): a helper stopped from
        outside stops the client as surely as its worker."""
        return self.groups.stopped(pid) if self.groups is not None else any_stopped([pid])

    def name_escaped(self, *, force: bool = False) -> None:
        """Name, once each, the helper processes that left their worker's group (a warning line and
        an ``escaped`` event); the groups are re-read from /proc at most once a second unless ``force``."""
        if self.groups is None:
            return
        self.groups.refresh(force=force)
        for leader, proc in self.groups.newly_escaped():
            worker = self.pids.index(leader)
            helper = describe_escaped(proc)
            _log.warning(
                "worker %d: helper process %s left the worker's %s: a pause or strobe of the worker does not stop it",
                worker,
                helper,
                "process group (setsid/setpgid)" if cgroup.of(leader) is None else "cgroup",
            )
            self.escaped.append(
                {"worker": -1, "round": -1, "kind": "escaped", "t0": now_ns(), "t1": now_ns(),
                 "target_worker": worker, "pid": proc.pid, "helper": helper}
            )  # fmt: skip


def _escape_problem(escaped: list[Event]) -> str:
    """The ``problem`` of a freezing trial with helpers outside their workers' groups."""
    named = ", ".join(f"worker {e['target_worker']}'s {e['helper']}" for e in escaped)
    return f"a helper process left its worker's process group, so the freeze did not stop it: {named}"


def _freezes(plans: list[WorkerPlan], faults: FaultScheduler | None) -> bool:
    """Whether the trial stops worker processes from outside (a SIGSTOP pause, a starvation strobe)."""
    paused = any(p.pause_rounds and p.pause_how is PauseHow.SIGSTOP for p in plans)
    return paused or (faults is not None and any(s.step.kind == "starve" for s in faults.steps))


def _outcome(messages: list[tuple[str, str, list[Event]]], problem: str = "") -> tuple[list[Event], str]:
    failures = [message for status, message, _ in messages if status == "error"]
    return history_io.merge(events for _, _, events in messages), "; ".join(filter(None, [*failures, problem]))


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
        conn.send("constructing")
        cls(config=config).close()
        conn.send("")
    except BaseException as exc:  # noqa: BLE001 - reported as data
        conn.send(f"{type(exc).__name__}: {exc}")
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
