"""One worker process: the same critical-section loop for every backend and experiment.

Each round: acquire (retry until a deadline) → pause (if scheduled ``after-acquire``) → the
critical section (enter, read, work, pause if scheduled ``before-write``, write, exit: see
sections.py) → release → think. Every step is recorded with its start and end on the shared monotonic
clock.

Workers are separate OS processes, never threads of the runner: threads share the GIL and a
CPU-busy neighbour pushed loopback PING from 0.14 ms to 16 ms p50 on the measuring machine.
"""

from __future__ import annotations

import time
import traceback
from collections import Counter
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event as StartSignal

from lockcompare.backends import BackendConfig, Lease, LockBackend, load_backend
from lockcompare.history import Recorder, now_ns
from lockcompare.lifecycle import die_with_parent
from lockcompare.experiments import PauseHow, PausePoint
from lockcompare.resource import Check, Resource
from lockcompare.sections import run_section

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


def acquire_until_deadline(backend: LockBackend, plan: WorkerPlan, rec: Recorder) -> Lease | None:
    """Try to acquire until the acquire deadline; record one ``acquire`` event either way."""
    t0 = now_ns()
    deadline = t0 + int(plan.acquire_timeout_ms * 1e6)
    refusals: Counter[str] = Counter()
    attempts = 0
    while True:
        attempts += 1
        t_attempt = now_ns()
        outcome = backend.acquire(key=plan.lock_key, ttl_ms=plan.ttl_ms)
        if outcome:
            lease: Lease = outcome
            rec.add(
                "acquire",
                t0=t0,
                t1=now_ns(),
                ok=True,
                attempts=attempts,
                refusals=dict(refusals),
                t_attempt=t_attempt,
                owner=lease.owner,
                fence=lease.fencing_token,
                valid_until=lease.valid_until_ns,
            )
            return lease
        refusals[getattr(outcome, "reason", "held")] += 1
        if now_ns() >= deadline:
            rec.add("acquire", t0=t0, t1=now_ns(), ok=False, attempts=attempts, refusals=dict(refusals))
            return None
        time.sleep(plan.retry_delay_ms / 1000)


def no_pause() -> None:
    pass


def run_rounds(plan: WorkerPlan, rec: Recorder, go: StartSignal, conn: Connection) -> None:
    backend_cls = load_backend(plan.backend)
    backend = backend_cls(config=plan.backend_config)
    resource = Resource(url=plan.resource_url, prefix=plan.resource_prefix)

    def freeze() -> None:
        conn.send(("freeze", str(plan.pause_ms / 1000), []))  # the runner SIGSTOPs us...
        conn.recv()  # ...and, once it has SIGCONTed us, says so

    def pause() -> None:
        # The holder freezes without knowing it: a GC pause, a migrated VM, swapping.
        how = freeze if plan.pause_how is PauseHow.SIGSTOP else lambda: time.sleep(plan.pause_ms / 1000)
        rec.timed("pause", how, how=plan.pause_how.value, point=plan.pause_point.value)

    try:
        # The start barrier: process start-up skew, not the lock, would otherwise decide who overlaps.
        conn.send(("ready", "", []))
        if not go.wait(timeout=START_TIMEOUT_S):
            raise TimeoutError("the runner never gave the start signal")
        for round_ in range(plan.rounds):
            rec.round = round_
            lease = acquire_until_deadline(backend, plan, rec)
            if lease is None:
                continue
            pausing = round_ in plan.pause_rounds
            if pausing and plan.pause_point is PausePoint.AFTER_ACQUIRE:
                pause()
            run_section(
                check=plan.check,
                resource=resource,
                lease=lease,
                rec=rec,
                work_s=plan.work_ms / 1000,
                pause_before_write=pause if pausing and plan.pause_point is PausePoint.BEFORE_WRITE else no_pause,
            )
            rec.timed("release", lambda: backend.release(lease), result_as="released")
            time.sleep(plan.think_ms / 1000)  # give a waiting rival its turn (see DEFAULT_THINK_MS)
    finally:
        backend.close()
        resource.close()


def worker_main(plan: WorkerPlan, go: StartSignal, conn: Connection) -> None:
    """Process entry point: run the rounds, then send ``("ok"|"error", message, events)`` back."""
    die_with_parent()
    rec = Recorder(worker=plan.index)
    try:
        run_rounds(plan, rec, go, conn)
        conn.send(("ok", "", rec.events))
    except BaseException as exc:  # noqa: BLE001 - everything must reach the runner as data
        rec.add("error", t0=now_ns(), message=f"{type(exc).__name__}: {exc}")
        try:
            conn.send(("error", f"worker {plan.index}: {type(exc).__name__}: {exc}", rec.events))
        except (OSError, ValueError):
            traceback.print_exc()
    finally:
        conn.close()
