"""One trial: one backend under one experiment, with N worker processes started together.

The runner prepares the trial's keys, starts the workers (``spawn``: a fresh interpreter each, no
inherited sockets or threads), releases them together once all are ready,
collects their histories, reads the resource's counters, and hands both to the checker. Workers
are stopped in ``finally`` whatever happens; only this trial's own keys are touched.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for_connections
from pathlib import Path

import redis

from lockcompare import history as history_io
from lockcompare.backends import BackendConfig, load_backend
from lockcompare.checker import TrialMetrics, check, unknown
from lockcompare.cluster import Cluster, delete_keys_containing
from lockcompare.crew import CrewSource, spawn_crew
from lockcompare.errors import NodeUnreachableError, TrialError
from lockcompare.experiments import TrialSpec
from lockcompare.faults import Freezer
from lockcompare.history import Event
from lockcompare.resource import Resource, ResourceCounters
from lockcompare.worker import START_TIMEOUT_S, WorkerPlan




@dataclass(frozen=True, kw_only=True)
class TrialResult:
    spec: TrialSpec
    metrics: TrialMetrics
    history: list[Event]
    wall_s: float
    started_at: str  # ISO 8601, UTC


def new_run_id() -> str:
    return uuid.uuid4().hex[:10]


def worst_case_duration_s(spec: TrialSpec) -> float:
    """An upper bound on a healthy trial's length; past it the trial is declared stuck."""
    per_round_ms = spec.acquire_timeout_ms + spec.pause_ms + spec.work_ms + spec.think_ms + 50
    return spec.rounds * per_round_ms / 1000 * 2


def run_trial(
    *, spec: TrialSpec, cluster: Cluster, run_id: str, request_timeout_s: float = 2.0, crews: CrewSource = spawn_crew
) -> TrialResult:
    """Run one trial to the end and judge it. Raises :class:`TrialError` if it cannot finish.

    ``crews`` provides the worker processes: spawned for this trial (default), or warm ones a
    :class:`~lockcompare.crew.WorkerPool` reuses between trials.
    """
    load_backend(spec.backend)  # fail here, once, rather than in every worker
    prefix = f"lockcompare:{run_id}:{spec.trial_id}"
    config = BackendConfig(
        node_urls=cluster.node_urls, request_timeout_s=request_timeout_s, node_count=spec.node_count
    )
    plans = [
        WorkerPlan(
            index=w,
            backend=spec.backend,
            backend_config=config,
            resource_url=cluster.resource_url,
            resource_prefix=prefix,
            lock_key=f"{prefix}:lock",
            rounds=spec.rounds,
            ttl_ms=spec.ttl_ms,
            work_ms=spec.work_ms,
            pause_ms=spec.pause_ms,
            pause_rounds=frozenset(r for (pw, r) in spec.pause_schedule if pw == w),
            pause_point=spec.pause_point,
            pause_how=spec.pause_how,
            check=spec.resource_check,
            acquire_timeout_ms=spec.acquire_timeout_ms,
            retry_delay_ms=spec.retry_delay_ms,
            think_ms=spec.think_ms,
        )
        for w in range(spec.workers)
    ]
    resource = Resource(url=cluster.resource_url, prefix=prefix)
    try:
        started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        wall_start = time.monotonic()
        events, failure = _run_workers(plans, timeout_s=worst_case_duration_s(spec), crews=crews)
        wall_s = time.monotonic() - wall_start
        counters = _read_counters(resource)
        metrics = unknown(counters, problem=failure) if failure else check(events, counters)
        return TrialResult(spec=spec, metrics=metrics, history=events, wall_s=wall_s, started_at=started_at)
    finally:
        delete_keys_containing((*cluster.node_urls, cluster.resource_url), prefix)
        resource.close()


def _read_counters(resource: Resource) -> ResourceCounters:
    try:
        return resource.counters()
    except redis.RedisError as exc:
        raise NodeUnreachableError(f"cannot read the resource's counters: {exc}") from None


def _run_workers(plans: list[WorkerPlan], *, timeout_s: float, crews: CrewSource) -> tuple[list[Event], str]:
    """Get one process per plan from ``crews``, release them together, gather their histories.

    The start barrier is a handshake: each worker connects, reports ``ready``, and waits for the
    crew's ``go``, given once every worker is ready (a worker that dies during start-up is
    noticed at once, not after a barrier timeout). Returns the merged history and "" — or what
    went wrong, when a worker failed.
    """
    freezer = Freezer()
    crew = crews(plans)
    try:
        ready = _collect(crew.conns, timeout_s=START_TIMEOUT_S, what="start")
        if any(status != "ready" for status, _, _ in ready):
            return _outcome(ready)
        crew.go()

        def freeze(conn: Connection, pause_s: float) -> None:
            freezer.freeze(pid=crew.pids[conn], conn=conn, pause_s=pause_s)

        return _outcome(_collect(crew.conns, timeout_s=timeout_s, what="finish", on_freeze=freeze))
    finally:
        freezer.thaw_all()  # before the crew stops or reuses its processes: a stopped one ignores SIGTERM
        crew.close()


def _collect(
    conns: list[Connection],
    *,
    timeout_s: float,
    what: str,
    on_freeze: Callable[[Connection, float], None] | None = None,
) -> list[tuple[str, str, list[Event]]]:
    """One final message from every worker: ``(status, message, events)``; a dead worker reports
    ``error``. Freeze requests (``("freeze", seconds, [])``) on the way are handed to ``on_freeze``."""
    messages = []
    deadline = time.monotonic() + timeout_s
    pending = list(conns)
    while pending:
        ready = wait_for_connections(pending, timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            raise TrialError(f"workers did not {what} within {timeout_s:.0f} s; workers stopped")
        for conn in ready:
            try:
                message = conn.recv()
            except EOFError:
                message = ("error", "a worker exited without reporting", [])
            if message[0] == "freeze" and on_freeze is not None:
                on_freeze(conn, float(message[1]))
                continue
            pending.remove(conn)
            messages.append(message)
    return messages


def _outcome(messages: list[tuple[str, str, list[Event]]]) -> tuple[list[Event], str]:
    failures = [message for status, message, _ in messages if status == "error"]
    return history_io.merge(events for _, _, events in messages), "; ".join(failures)


def save_history(result: TrialResult, directory: Path) -> Path:
    path = directory / f"{result.spec.trial_id}.jsonl.gz"
    history_io.save(result.history, path)
    return path
