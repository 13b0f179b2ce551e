"""The worker processes of one trial (its crew): spawned for the trial, or warm ones reused.

A spawned worker costs ~0.35 s of CPU before its first round (a fresh interpreter importing
redis-py, the backends, and the runner's own ``__main__``): measured on 2 cores, a
``--time-scale 0.1`` trial spent ~0.38 s of its ~3.0 s wall time and ~0.7 s of its ~1.4 s CPU
starting its two workers. A :class:`WorkerPool` keeps worker processes alive between trials: each
runs :func:`serve`, a loop that takes one trial's plan at a time and runs the unchanged
:func:`~lockcompare.runner.worker.worker_main` on it. A process goes back to the pool only after a clean
trial (its final message was ``ok`` and it said ``idle``); any other is killed, never reused.

The crew's contract with the runner (trial.py) is the worker protocol unchanged: one duplex
connection per worker carrying ``ready``, freeze requests and the final ``ok``/``error``, plus
:meth:`Crew.go` for the start barrier and :meth:`Crew.close` in the runner's ``finally``.
Every crew also adds its processes' CPU time (user + sys) to the calling thread's
:data:`cpu_meter`, which the scheduler reads to learn how busy a trial keeps the CPUs.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Protocol

from lockcompare.errors import TrialError
from lockcompare.infra import cgroup
from lockcompare.infra.cgroup import start_in_cgroup
from lockcompare.infra.lifecycle import (
    SPAWN,
    die_with_parent,
    kill_and_reap_group,
    reap_group,
    terminate_group,
)
from lockcompare.infra.messages import send
from lockcompare.infra.procgroup import boot_ticks, end_descendants, kill_group
from lockcompare.runner.backend_calls import SHARED_WORDS, CallSlot
from lockcompare.runner.worker import START_TIMEOUT_S, WorkerPlan, worker_main

#: How long a worker that sent its final message may take to say it is idle again.
_IDLE_TIMEOUT_S = 2.0
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of a live process and of its children it has reaped (0.0 when it is
    gone), from /proc. The children count because a PostgreSQL server's work is done by one child per
    session: its postmaster alone does almost nothing (measured: 0.04 CPU per pg trial without them)."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(v) for v in fields[11:15]) / _TICKS_PER_S  # utime, stime, cutime, cstime (fields 14-17)


class CpuMeter(threading.local):
    """CPU seconds spent by the processes of the trial the current thread runs."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def add(self, seconds: float) -> None:
        self.seconds += max(0.0, seconds)

    def take(self) -> float:
        seconds, self.seconds = self.seconds, 0.0
        return seconds


cpu_meter = CpuMeter()


class Crew(Protocol):
    """One trial's workers: a connection each (``pids`` maps it to the process), a call slot each
    (the backend call in progress, for the runner's deadline), the start signal, and ``close``
    (stops the processes, or returns clean ones to their pool)."""

    conns: list[Connection]
    pids: dict[Connection, int]
    slots: list[CallSlot]
    isolation: str  # infra/cgroup.py: cgroup-v1, cgroup-v2 or process-group

    def go(self) -> None: ...

    def close(self) -> None: ...


CrewSource = Callable[[list[WorkerPlan]], Crew]


# --- fresh workers: one spawned process per worker per trial (the runner's default) -----------


def send_go(conns: list[Connection]) -> None:
    """The start barrier: ``go`` down every pipe, microseconds apart (the same skew as waking the
    waiters of one shared event; a shared event could be left locked by a worker stopped in it)."""
    for conn in conns:
        send(conn, ("go", "", []))


def started_pid(proc: BaseProcess) -> int:
    """A started process's pid (multiprocessing types ``pid`` Optional: it is None before start)."""
    assert proc.pid is not None, "the worker process was never started"
    return proc.pid


class SpawnedCrew:
    """Spawn one process per plan, released together by ``go``; stopped in close()."""

    def __init__(self, plans: list[WorkerPlan]) -> None:
        self._procs: list[BaseProcess] = []
        self.conns: list[Connection] = []
        self.slots: list[CallSlot] = []
        try:
            for plan in plans:
                parent_end, child_end = SPAWN.Pipe(duplex=True)  # duplex: go, freeze requests and thaws
                shared = SPAWN.Array("q", SHARED_WORDS, lock=False)
                self._procs.append(start_in_cgroup(target=worker_main, args=(plan, child_end, shared)))
                child_end.close()
                self.conns.append(parent_end)
                self.slots.append(CallSlot(shared))
        except BaseException:
            self.close()
            raise
        self.pids = {conn: started_pid(proc) for conn, proc in zip(self.conns, self._procs, strict=True)}
        self.isolation = cgroup.isolation_of(list(self.pids.values()))

    def go(self) -> None:
        send_go(self.conns)

    def close(self) -> None:
        cpu_meter.add(sum(process_cpu_s(proc.pid) for proc in self._procs))
        for proc in self._procs:
            _end_escaped_without_cgroup(started_pid(proc))  # while they are still its descendants
        for proc in self._procs:
            terminate_group(proc)  # the worker and every helper process in its group
        for proc in self._procs:
            reap_group(proc)
            cgroup.release(proc.pid)  # and whatever left the group (setsid, a double fork): its cgroup's
        for conn in self.conns:
            conn.close()


def spawn_crew(plans: list[WorkerPlan]) -> Crew:
    return SpawnedCrew(plans)


def _end_escaped_without_cgroup(pid: int, *, everything: bool = False) -> None:
    """Without a cgroup (process-group isolation) nothing ends a helper that left worker ``pid``'s
    group when the group is signalled: SIGKILL those below it now (``everything``: every process
    below it, a reused warm worker's leftovers in its group too). With a cgroup, cgroup.release and
    cgroup.end_leftovers end them; nothing to do here."""
    if cgroup.of(pid) is None:
        end_descendants(pid, escaped_only=not everything)


# --- warm workers: processes reused across trials -----------------------------------------------


class _KeepOpen:
    """The worker's end of the control pipe, lent to one trial: ``close`` does not close it."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def send_bytes(self, data: bytes) -> None:  # what infra.messages.send writes with
        self._conn.send_bytes(data)

    def recv(self) -> Any:
        return self._conn.recv()

    def poll(self, timeout: float | None = None) -> bool:
        return self._conn.poll(timeout)

    def close(self) -> None:
        pass


def serve(conn: Connection, shared_slot: Any) -> None:
    """A warm worker's main loop: ``("run", plan)`` → one trial's rounds → ``("idle", ...)``.

    Anything else (``stop``, a closed pipe) ends the process; so does a trial that ended in an
    error, since its state is unknown.
    """
    die_with_parent()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # the runner alone handles Ctrl-C
    send(conn, ("idle", "", []))  # imported and ready for a first trial
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] != "run":
            return
        lent = _KeepOpen(conn)
        if not worker_main(message[1], lent, shared_slot):  # type: ignore[arg-type]  # _KeepOpen: the calls it makes
            return  # the trial ended in an error: this worker's state is unknown
        send(conn, ("idle", "", []))


class _WarmWorker:
    def __init__(self) -> None:
        # The first spawn also starts multiprocessing's resource tracker, whose start-up unblocks
        # SIGINT in the calling thread (Python 3.11) just before our worker is forked: a warm
        # worker, which lives for the whole run, then died of Ctrl-C with a traceback. Start the
        # tracker first, so that start_worker_process's mask holds.
        resource_tracker.ensure_running()
        parent_end, child_end = SPAWN.Pipe(duplex=True)
        shared = SPAWN.Array("q", SHARED_WORDS, lock=False)
        self.proc = start_in_cgroup(target=serve, args=(child_end, shared))
        child_end.close()
        self.conn = parent_end
        self.slot = CallSlot(shared)
        self.trials = 0

    def wait_until_started(self) -> None:
        """Block until the process has imported everything and waits for its first trial."""
        try:
            if self.conn.poll(START_TIMEOUT_S) and self.conn.recv()[0] == "idle":
                return
        except (EOFError, OSError):
            pass
        self.stop()
        raise TrialError("a worker process did not start")

    def is_idle_again(self) -> bool:
        """True once the worker said ``idle`` after its trial (it may then be reused)."""
        try:
            if not self.conn.poll(_IDLE_TIMEOUT_S):
                return False
            return self.conn.recv()[0] == "idle"
        except (EOFError, OSError):
            return False

    def kill(self) -> None:
        if self.proc.is_alive():
            kill_group(self.proc.pid)  # SIGKILL, helpers too: also ends a worker that a fault left SIGSTOPped

    def stop(self) -> None:
        if self.proc.is_alive():
            _end_escaped_without_cgroup(started_pid(self.proc))
        kill_and_reap_group(self.proc)
        cgroup.release(self.proc.pid)
        self.conn.close()


class WarmCrew:
    """Warm workers lent to one trial by a :class:`WorkerPool`."""

    def __init__(self, pool: WorkerPool, workers: list[_WarmWorker], plans: list[WorkerPlan]) -> None:
        self._pool = pool
        self._workers = workers
        self._went = False
        #: This trial began now: a process below these workers that started earlier is an earlier
        #: trial's (procgroup.GroupView names only this trial's escaped helpers).
        self.since_ticks = boot_ticks()
        self._cpu_start = [process_cpu_s(w.proc.pid) for w in workers]
        self.conns = [w.conn for w in workers]
        self.pids = {w.conn: started_pid(w.proc) for w in workers}
        self.slots = [w.slot for w in workers]
        self.isolation = cgroup.isolation_of(list(self.pids.values()))
        try:
            for worker, plan in zip(workers, plans, strict=True):
                send(worker.conn, ("run", plan))
        except (OSError, ValueError):
            self.close()
            raise TrialError("a warm worker process died before its trial") from None

    def go(self) -> None:
        send_go(self.conns)
        self._went = True

    def close(self) -> None:
        cpu = [process_cpu_s(w.proc.pid) - start for w, start in zip(self._workers, self._cpu_start, strict=True)]
        cpu_meter.add(sum(cpu))
        for worker in self._workers:
            reusable = self._went and worker.is_idle_again()
            if reusable:  # the process stays for the next trial; what its trial started does not
                cgroup.end_leftovers(started_pid(worker.proc))
                _end_escaped_without_cgroup(started_pid(worker.proc), everything=True)
            self._pool._give_back(worker, reusable=reusable)


class WorkerPool:
    """Worker processes kept between trials; ``start`` is a :data:`CrewSource` for run_trial.

    A worker dies with the thread that spawned it (``die_with_parent``: the kernel's parent-death
    signal follows the forking thread, not the process). So every worker is spawned by one thread
    the pool owns and keeps until it closes — not by the trial thread that first needed it: a
    scheduler's threads end with its pass, and the workers they had spawned, idle in the pool, were
    dead when the marked trials' reruns (a second pass) took them ("a warm worker process died
    before its trial").
    """

    def __init__(self) -> None:
        self._parent = ThreadPoolExecutor(max_workers=1, thread_name_prefix="warm-workers-parent")
        self._lock = threading.Lock()
        self._idle: list[_WarmWorker] = []
        self._all: set[_WarmWorker] = set()
        self._closed = False
        self.spawned = 0

    def start(self, plans: list[WorkerPlan]) -> Crew:
        workers: list[_WarmWorker] = []
        try:
            for _ in plans:
                workers.append(self._take())
        except BaseException:
            for worker in workers:
                self._give_back(worker, reusable=False)
            raise
        return WarmCrew(self, workers, plans)

    def _take(self) -> _WarmWorker:
        with self._lock:
            if self._closed:
                raise TrialError("the worker pool is closed (the run is stopping)")
            if self._idle:
                return self._idle.pop()
        worker = self._spawn()
        worker.wait_until_started()
        return worker

    def _spawn(self) -> _WarmWorker:
        try:
            worker = self._parent.submit(_WarmWorker).result()
        except RuntimeError:  # the parent thread was shut down: the pool closed meanwhile
            raise TrialError("the worker pool is closed (the run is stopping)") from None
        with self._lock:
            self._all.add(worker)
            self.spawned += 1
            closed = self._closed
        if closed:  # closed while this one was spawning: it must not outlive the pool
            self._give_back(worker, reusable=False)
            raise TrialError("the worker pool is closed (the run is stopping)")
        return worker

    def prestart(self, count: int) -> None:
        """Start ``count`` idle workers now, all at once, and wait until they are ready.

        Called before the first trial: a worker's start-up is ~0.35 s of CPU, and spawned on
        demand in the middle of a run, a burst of them starved running trials' workers (a
        0.1-scale redlock trial saw one 90 ms read and a lease expire under it).
        """
        fresh = [self._spawn() for _ in range(count)]
        for worker in fresh:
            worker.wait_until_started()
        with self._lock:
            self._idle.extend(fresh)

    def _give_back(self, worker: _WarmWorker, *, reusable: bool) -> None:
        with self._lock:
            if reusable and not self._closed and worker.proc.is_alive():
                worker.trials += 1
                self._idle.append(worker)
                return
            self._all.discard(worker)
        worker.stop()

    def kill_all(self) -> None:
        """SIGKILL every worker, busy ones too, so that trials in flight end at once (interrupt)."""
        with self._lock:
            self._closed = True
            workers = list(self._all)
        for worker in workers:
            worker.kill()

    def close(self) -> None:
        """Stop every worker process and reap it; further ``start`` calls raise TrialError."""
        self.kill_all()
        with self._lock:
            workers = list(self._all)
            self._all.clear()
            self._idle.clear()
        for worker in workers:
            worker.stop()
        self._parent.shutdown(wait=True)  # after its children: none may outlive the pool
