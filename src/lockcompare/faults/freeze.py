"""Faults the runner applies to worker processes from outside: stop-the-world pauses and starvation.

A *real freeze* stops the worker's whole client: its cgroup is frozen where the machine offers one
(infra/cgroup.py: atomic, and no ``setsid`` or double fork escapes it), else ``SIGSTOP`` then
``SIGCONT`` go to the worker's process group. Either way every thread of the
worker stops (a lock library's renewal thread too), and so does every helper process its backend
started (a lock client in another language driven over a pipe), as in a stop-the-world GC pause
or a suspended VM — unlike an in-process ``sleep``, which only the sleeping thread notices. Each
worker leads its own group (infra/lifecycle.py); a helper that left it is named by the runner.
The worker asks to be frozen at its pause point and blocks until told it has been thawed. Where
nothing else in the trial stops workers, the worker stops itself as it asks (``SIGSTOP`` to its own
process group: :func:`~lockcompare.infra.cgroup.stop_own_client`) and the runner, once it sees it
stopped, freezes its cgroup as well, and a process of its own continues both after the pause
(:meth:`Freezer.adopt_stop`, faults/continuer.py: not a timer thread that needs the runner's GIL);
elsewhere the runner stops it when it reads the request (:meth:`Freezer.freeze`). The pause is
counted from the worker's request either way: a stop made by the runner begins when the runner
gets to it — on a loaded 2-core machine 0.2-12.9 ms later, while the client's other threads (a
renewal thread, a Node client) ran on — and its ``thawed`` message took another 0.1-4.5 ms to be
read after the continue (issue 54: the lateness of the README command's client-pause trials, split
from their histories); a stop the worker made itself has its ``thawed`` queued before the continue.
Every freeze is recorded as the runner's own fault events (``pause`` inject / heal, with the time
it was planned) and heals in :meth:`Freezer.thaw_all`, called from the runner's ``finally``.

:class:`~lockcompare.scenario.faultkinds.starve.Strobe` (``starve``) stops and continues one worker's
group in a loop through :meth:`Freezer.hold` and :meth:`Freezer.release`: it may run ``duty`` of
every ``period`` — a process starved of CPU, whose watchdog thread gets no time to renew.
"""

from __future__ import annotations

import signal
import threading
import time
from multiprocessing.connection import Connection

from lockcompare.analysis.history import Event, now_ns
from lockcompare.faults import continuer as continuers
from lockcompare.infra.cgroup import client_members, continue_client, stop_client, thaw_write_of
from lockcompare.infra.cgroup import of as cgroup_of
from lockcompare.infra.messages import send
from lockcompare.infra.procgroup import any_stopped, signal_group

#: How long the runner waits for a worker that asked to stop itself to be seen stopped (it sent its
#: request, then was descheduled before its SIGSTOP): past it, the pause goes on unconfirmed (said in
#: its inject event) and a stop that lands later is the trial's stuck-worker deadline's to catch.
_SELF_STOP_WAIT_S = 2.0


def _wait_until_stopped(pid: int) -> bool:
    """True once process ``pid`` is in the stopped state (``T``), False after :data:`_SELF_STOP_WAIT_S`."""
    deadline = now_ns() + int(_SELF_STOP_WAIT_S * 1e9)
    while not any_stopped([pid]):
        if now_ns() > deadline:
            return False
        time.sleep(0.0002)
    return True


class Freezer:
    """Stop a worker's client now (its cgroup, else its process group), continue it after
    ``pause_s``; nothing stays stopped past thaw_all(). ``pid`` is always a worker's pid, which is
    its group's id."""

    def __init__(self, *, continuer: continuers.Continuer | None = None) -> None:
        """``continuer`` (faults/continuer.py) ends the pauses workers make themselves; without one,
        or once it has died, a timer thread of the runner does. Given before the trial starts: its
        process must not start while a worker waits to be frozen."""
        self._lock = threading.Lock()
        self._frozen: dict[int, int] = {}  # pid -> how many holds (a pause and a strobe may overlap)
        self._timers: list[threading.Timer] = []
        self.events: list[Event] = []
        self._pauses: dict[int, tuple[int, int, int]] = {}  # pid -> (worker, round, planned heal ns)
        self._stopped_itself: set[int] = set()  # workers whose own SIGSTOP a continue must undo too
        # Pauses the continuer process will end (adopt_stop): ticket -> (pid, worker, round, planned heal ns).
        self._tickets: dict[int, tuple[int, int, int, int]] = {}
        self._continuer = continuer

    def freeze(self, *, pid: int, conn: Connection, pause_s: float, worker: int = -1, round_: int = -1) -> None:
        planned = now_ns()
        with self._lock:
            how = stop_client(pid)
            stopped = now_ns()
            self._frozen[pid] = self._frozen.get(pid, 0) + 1
            self._pauses[pid] = (worker, round_, planned + int(pause_s * 1e9))
        timer = threading.Timer(pause_s, self._thaw, args=(pid, conn))
        timer.daemon = True
        self._timers.append(timer)
        timer.start()
        # Which processes the stop reached, read after it and after the timer started: a scan of
        # /proc (a few ms) must neither delay the stop nor lengthen the pause.
        group = client_members(pid)
        self._record(
            "inject", worker=worker, round_=round_, t0=planned, t1=stopped, planned=planned, group=group, how=how
        )

    def adopt_stop(
        self, *, pid: int, conn: Connection, pause_s: float, requested_ns: int, worker: int = -1, round_: int = -1
    ) -> None:
        """Take over the stop worker ``pid`` made itself at ``requested_ns`` (SIGSTOP of its own
        process group: :func:`~lockcompare.infra.cgroup.stop_own_client`): once it is seen stopped,
        freeze its cgroup too (which reaches a helper that left the group), hold it, queue its
        ``thawed`` (read once it runs again: no message is waited for after the continue), and
        continue it ``pause_s`` after the request.

        The wait comes first: a cgroup frozen, or a SIGCONT sent, before the worker's own SIGSTOP has
        landed would let that SIGSTOP land after the continue, for good. A stopped worker (SIGSTOP,
        never a cgroup freeze of its own making) dies of the SIGKILL that ends a trial cut short
        before its request was read. Only where nothing else stops workers (a strobe's release would
        continue a stop this freezer has not heard of yet): the trial decides (runner/trial.py)."""
        heal_at = requested_ns + int(pause_s * 1e9)
        stopped = _wait_until_stopped(pid)
        # By now the stop has surely landed on the whole group; at requested_ns it had not yet (the
        # worker takes that time, sends its request, then stops itself: a helper of its group may
        # still run in between, more so on a loaded machine). Recorded beside t0/t1, which stay the
        # request's: the pause's length is counted from it.
        seen_stopped_ns = now_ns() if stopped else None
        continuer = self._continuer if self._continuer is not None and self._continuer.alive else None
        with self._lock:
            if stopped and cgroup_of(pid) is not None:
                stop_client(pid)
            self._frozen[pid] = self._frozen.get(pid, 0) + 1
            self._stopped_itself.add(pid)
            if continuer is not None:
                try:
                    ticket = continuer.at(
                        deadline_ns=heal_at, pgid=pid, freezer=thaw_write_of(pid), on_done=self._continued
                    )
                    self._tickets[ticket] = (pid, worker, round_, heal_at)
                except (OSError, ValueError):
                    continuer = None  # it died since: the timer below continues this pause
            if continuer is None:
                self._pauses[pid] = (worker, round_, heal_at)
        try:
            send(conn, ("thawed", "", []))
        except (OSError, ValueError):
            pass  # the trial is already being torn down: thaw_all continues it
        if continuer is None:  # no process of its own could be started: a timer thread of the runner's
            timer = threading.Timer(max(0.0, (heal_at - now_ns()) / 1e9), self._thaw, args=(pid, None))
            timer.daemon = True
            self._timers.append(timer)
            timer.start()
        group = client_members(pid)
        self._record(
            "inject", worker=worker, round_=round_, t0=requested_ns, t1=requested_ns, planned=requested_ns,
            group=group, how=self._how(pid), by="worker" if stopped else "worker (not seen stopped)",
            seen_stopped_ns=seen_stopped_ns,
        )  # fmt: skip

    def hold(self, pid: int) -> None:
        """SIGSTOP ``pid`` (a strobe's stop); undone by :meth:`release` or :meth:`thaw_all`.
        A process that has already exited is left alone (a strobe may outlive its worker)."""
        with self._lock:
            try:
                stop_client(pid)
            except ProcessLookupError:
                return
            self._frozen[pid] = self._frozen.get(pid, 0) + 1

    def release(self, pid: int) -> None:
        with self._lock:
            self._let_go(pid)

    def _let_go(self, pid: int) -> bool:
        """Drop one hold; SIGCONT when none is left. True if it continued the process."""
        holds = self._frozen.get(pid, 0)
        if holds <= 0:
            return False
        if holds > 1:
            self._frozen[pid] = holds - 1
            return False
        del self._frozen[pid]
        try:
            if pid in self._stopped_itself:
                self._stopped_itself.discard(pid)
                signal_group(pid, signal.SIGCONT)  # its own stop; a frozen cgroup holds it until the thaw below
            continue_client(pid)
        except ProcessLookupError:
            pass
        return True

    def is_frozen(self, pid: int) -> bool:
        """True while this freezer holds ``pid`` stopped (a stop it did not make is someone else's)."""
        with self._lock:
            return pid in self._frozen

    def _thaw(self, pid: int, conn: Connection | None) -> None:
        """Continue ``pid`` (its pause is over) and, if ``conn``, tell it (None: adopt_stop queued it)."""
        with self._lock:
            pause = self._pauses.pop(pid, None)
            if pause is None:
                return
            continuing = now_ns()  # the heal's t0 comes before the SIGCONT: nothing ran before it
            self._let_go(pid)
        worker, round_, planned = pause
        self._record("heal", worker=worker, round_=round_, t0=continuing, planned=planned, how=self._how(pid))
        if conn is None:
            return  # adopt_stop queued its "thawed" already
        try:
            send(conn, ("thawed", "", []))
        except (OSError, ValueError):
            pass  # the trial is already being torn down

    def _continued(self, ticket: int, report: continuers.Continued) -> None:
        """The continuer ended the pause of ``ticket`` at ``report.t_ns``: drop its hold (the
        SIGCONT and the thaw were the continuer's) and record the heal, at the continue's time."""
        with self._lock:
            entry = self._tickets.pop(ticket, None)
            if entry is None:
                return  # thaw_all healed it
            pid, worker, round_, planned = entry
            holds = self._frozen.get(pid, 0)
            if holds > 1:
                self._frozen[pid] = holds - 1  # its next pause was adopted before this report was read
            else:
                self._frozen.pop(pid, None)
                self._stopped_itself.discard(pid)
        by = f"continuer ({self._continuer.scheduling})" if self._continuer is not None else "continuer"
        if report.error:
            by += f"; failed: {report.error}"
        self._record("heal", worker=worker, round_=round_, t0=report.t_ns, planned=planned, how=self._how(pid), by=by)

    @staticmethod
    def _how(pid: int) -> str:
        return "SIGSTOP" if cgroup_of(pid) is None else "cgroup freeze"

    def thaw_all(self) -> None:
        """Cancel pending thaws and continue every frozen worker (a stopped process ignores SIGTERM)."""
        for timer in self._timers:
            timer.cancel()
        if self._continuer is not None:
            with self._lock:
                tickets = list(self._tickets)
            for ticket in tickets:  # one that already acted has had its report read when this returns
                self._continuer.cancel(ticket)
        with self._lock:
            continuing = now_ns()
            for pid in list(self._frozen):
                self._frozen[pid] = 1
                self._let_go(pid)
            pauses, self._pauses = self._pauses, {}
            left, self._tickets = self._tickets, {}
        healed = [(pid, *pause) for pid, pause in pauses.items()] + list(left.values())
        for pid, worker, round_, planned in healed:
            self._record("heal", worker=worker, round_=round_, t0=continuing, planned=planned, how=self._how(pid))

    def _record(
        self,
        action: str,
        *,
        worker: int,
        round_: int,
        t0: int,
        planned: int,
        t1: int | None = None,
        group: list[int] | None = None,
        how: str = "SIGSTOP",
        by: str = "runner",
        seen_stopped_ns: int | None = None,
    ) -> None:
        event: Event = {
            "worker": -1, "round": round_, "kind": "fault", "fault": "pause", "action": action, "t0": t0,
            "t1": now_ns() if t1 is None else t1, "planned_ns": planned, "late_ms": (t0 - planned) / 1e6, "nodes": [],
            "target_worker": worker, "detail": _DETAIL[how][action],
        }  # fmt: skip
        if group is not None:
            event["group"] = group  # the pids the stop reached: the worker's cgroup, else its process group
        if by != "runner" and action == "inject":
            event["stopped_by"] = by  # the worker stopped its own client as it asked (adopt_stop)
            if seen_stopped_ns is not None:
                event["seen_stopped_ns"] = seen_stopped_ns  # when the runner saw it stopped
        elif by != "runner":
            event["continued_by"] = by  # the continuer process ended the pause (faults/continuer.py)
        with self._lock:
            self.events.append(event)


#: The ``detail`` of a pause's inject and heal events, by how the client was stopped.
_DETAIL = {
    "SIGSTOP": {"inject": "SIGSTOP", "heal": "SIGCONT"},
    "cgroup freeze": {"inject": "cgroup freeze", "heal": "cgroup thaw"},
}
