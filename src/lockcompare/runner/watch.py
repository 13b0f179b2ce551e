"""A trial's worker processes, started together and watched to their end: the start handshake,
freeze requests, fault turns, call deadlines and helpers that left their worker's group.

The trial (trial.py) hands over the plans and its fault scheduler; what comes back is the merged
history, what went wrong ("" if nothing) and the isolation the workers had.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for_connections
from typing import Any, cast

from lockcompare.analysis import history as history_io
from lockcompare.analysis.history import Event, now_ns
from lockcompare.faults.freeze import Freezer
from lockcompare.faults.schedule import FaultScheduler
from lockcompare.infra import cgroup
from lockcompare.infra.messages import send
from lockcompare.infra.procgroup import GroupView, any_stopped, describe_escaped
from lockcompare.runner.backend_calls import CallSlot
from lockcompare.runner.contend import DoneTracker
from lockcompare.runner.crew import CrewSource, spawn_crew
from lockcompare.runner.worker import START_TIMEOUT_S, WorkerPlan
from lockcompare.scenario.choices import PauseHow

_log = logging.getLogger(__name__)

#: The deadline on a backend's construct(), when the per-call deadline is shorter: an external client
#: (backends/external) starts a runtime there — Node took 1-5 s on a 2-core machine at load 15.
CONSTRUCT_TIMEOUT_S = 20.0


def run_workers(
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
    pids = [crew.pids[c] for c in crew.conns]
    # A reused warm worker's crew says when its trial began: what started below it before is not this trial's.
    groups = GroupView(leaders=pids, cgroup_members=cgroup.cgroup_members, since_ticks=getattr(crew, "since_ticks", 0))
    if faults is not None:
        faults.attach_workers(
            pids=tuple(pids),
            freezer=freezer,
            leases=tuple(slot.lease for slot in crew.slots),  # what a lease-aimed step confirms (faults/leases.py)
        )
    try:
        watch = _Watch(
            conns=crew.conns, slots=crew.slots, freezer=freezer, pids=pids, call_timeout_s=call_timeout_s,
            backend=backend, faults=faults, groups=groups,
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
                try:
                    groups.end_escaped()  # the helpers named in this trial end with it (even left to init)
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
                    if len(payload) > 1:  # it stopped itself at that instant: continue it on time
                        self.freezer.adopt_stop(
                            pid=self.pids[index], conn=conn, pause_s=float(message[1]), requested_ns=int(payload[1]),
                            worker=index, round_=round_,
                        )  # fmt: skip
                    else:
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
                    send(conn, ("go-on", "", []))
                    continue
                if message[0] == "acquired":
                    if self.faults is not None:
                        self.faults.on_acquired(
                            worker=self.conns.index(conn), round_=int(message[1]), t_ns=payload[0],
                            owner=payload[1] if len(payload) > 1 else None,
                            session=payload[2] if len(payload) > 2 else None,
                            granted_by=payload[3] if len(payload) > 3 else None,
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


def freezes_workers(plans: list[WorkerPlan], faults: FaultScheduler | None) -> bool:
    """Whether the trial stops worker processes from outside (a SIGSTOP pause, a starvation strobe)."""
    paused = any(p.pause_rounds and p.pause_how is PauseHow.SIGSTOP for p in plans)
    return paused or (faults is not None and faults.freezes_workers())


def _outcome(messages: list[tuple[str, str, list[Event]]], problem: str = "") -> tuple[list[Event], str]:
    failures = [message for status, message, _ in messages if status == "error"]
    return history_io.merge(events for _, _, events in messages), "; ".join(filter(None, [*failures, problem]))
