"""A process of its own that continues paused workers on time, without the runner's GIL.

A pause ends when its worker is continued (faults/freeze.py). A timer thread in the runner did
that, and a thread of the runner needs the GIL: with eight trials' runner threads in one process
(scanning /proc, reading pipes, checking histories) the README's main command continued its
paused workers late by p50 1.4, p90 6.0 and p99 21.8 ms, once by 110 ms, and "pause length" was
what marked most of its client-pause trials (issue 54). The lateness is the runner's, not the
machine's: it is not what a pause measures.

So the continue is made by this module's child process: the stdlib only, started once per runner
process (:func:`shared`), asleep in ``select`` until the next deadline, then ``SIGCONT`` to the
worker's process group and the thaw of its cgroup's freezer — what :meth:`Freezer._let_go` does for
a stop the worker made itself. It asks the kernel for a real-time scheduling class
(``SCHED_FIFO``, priority 1: it wakes ahead of every ordinary process, and the kernel's RT
throttling keeps even a runaway one from more than 95% of a core), else ``nice -10``, else runs as
it is (not root): it says which on its first line, and that is recorded in the pause's heal event.

The protocol is one line per message, on its stdin and stdout:

- ``at ID DEADLINE_NS PGID FILE VALUE``: at CLOCK_MONOTONIC ``DEADLINE_NS`` (the runner's
  ``now_ns``), SIGCONT group ``PGID`` (the pid alone if it leads none), then write ``VALUE`` into
  the freezer file ``FILE`` (``-`` for none); answers ``done ID T_NS ERROR`` where ``T_NS`` was
  read just before the SIGCONT (nothing of the worker ran before it) and ``ERROR`` is ``-`` or
  what failed (the process or cgroup gone: a worker killed while paused);
- ``cancel ID``: answers ``cancelled ID`` if it had not acted yet, else ``gone ID`` (its ``done``
  came before, in stream order).

It exits when its stdin closes: a runner that dies, however, leaves no continuer behind.
"""

from __future__ import annotations

import atexit
import heapq
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: How long :meth:`Continuer.cancel` waits for the child's answer before it gives up on it.
CANCEL_WAIT_S = 2.0


@dataclass(frozen=True, kw_only=True)
class Continued:
    """What the child reported for one ``at``: when it continued the worker, and what failed."""

    t_ns: int
    error: str  # "" when both the SIGCONT and the thaw were made


class Continuer:
    """The runner's side of the child process: schedule a continue, cancel one, read the reports.

    Each report is handed to the callback given with its ``at``, in a reader thread of this process
    (bookkeeping only: the continue itself was made on time by the child)."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(Path(__file__).resolve())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
            close_fds=True,
            env={},  # it needs nothing of the runner's: no LD_PRELOAD (libfaketime), no marker of a trial's
            # Not in the runner's process group: a Ctrl-C or a SIGTERM to the group is the runner's to
            # handle, and its teardown still cancels the pending continues; the child ends at its EOF.
            start_new_session=True,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._stdin = self._proc.stdin
        self._stdout = self._proc.stdout
        self.scheduling = self._stdout.readline().strip().removeprefix("ready ") or "unknown"
        self._lock = threading.Lock()
        self._ids = 0
        self._on_done: dict[int, Callable[[int, Continued], None]] = {}
        self._answers: dict[int, tuple[threading.Event, list[bool]]] = {}
        self._reader = threading.Thread(target=self._read, name="continuer-reader", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def at(
        self, *, deadline_ns: int, pgid: int, freezer: tuple[str, str] | None, on_done: Callable[[int, Continued], None]
    ) -> int:
        """Continue group ``pgid`` at ``deadline_ns`` (and write ``freezer``'s value into its file);
        returns the ticket to :meth:`cancel` it with, which ``on_done(ticket, report)`` is also given.
        OSError if the child is gone."""
        path, value = freezer if freezer is not None else ("-", "-")
        if " " in path or "\n" in path:
            raise ValueError(f"a freezer path the protocol cannot carry: {path!r}")
        with self._lock:
            self._ids += 1
            ticket = self._ids
            self._on_done[ticket] = on_done
            self._stdin.write(f"at {ticket} {deadline_ns} {pgid} {path} {value}\n")
        return ticket

    def cancel(self, ticket: int) -> bool:
        """True if the continue of ``ticket`` will not happen (it had not acted), False if it has
        (its callback has run by the time this returns) or the child did not answer."""
        event = threading.Event()
        answer: list[bool] = []
        with self._lock:
            if ticket not in self._on_done:
                return False  # reported already
            self._answers[ticket] = (event, answer)
            try:
                self._stdin.write(f"cancel {ticket}\n")
            except (OSError, ValueError):
                return False
        event.wait(CANCEL_WAIT_S)
        return bool(answer and answer[0])

    def close(self) -> None:
        """End the child (it exits when its stdin closes) and reap it."""
        try:
            self._stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def _read(self) -> None:
        for line in self._stdout:
            kind, _, rest = line.strip().partition(" ")
            if kind == "done":
                ticket_text, t_text, error = rest.split(" ", 2)
                with self._lock:
                    on_done = self._on_done.pop(int(ticket_text), None)
                if on_done is not None:
                    on_done(int(ticket_text), Continued(t_ns=int(t_text), error="" if error == "-" else error))
            elif kind in ("cancelled", "gone"):
                ticket = int(rest)
                with self._lock:
                    if kind == "cancelled":
                        self._on_done.pop(ticket, None)
                    event, answer = self._answers.pop(ticket, (None, []))
                answer.append(kind == "cancelled")
                if event is not None:
                    event.set()
        with self._lock:  # the child is gone: no cancel waits for an answer that cannot come
            answers, self._answers = self._answers, {}
        for event, _answer in answers.values():
            event.set()


_shared_lock = threading.Lock()
_shared: list[Continuer] = []  # this process's one continuer, once started


def shared() -> Continuer | None:
    """This process's continuer, started on first use (again if it died); None when it cannot be
    started (the caller continues its workers from a timer thread, as before)."""
    with _shared_lock:
        if _shared and _shared[0].alive:
            return _shared[0]
        try:
            made = Continuer()
        except OSError:
            return None
        atexit.register(made.close)
        _shared[:] = [made]
        return made


# --- the child --------------------------------------------------------------------------------------


def _raise_priority() -> str:
    """The scheduling this process got: a real-time class if the kernel allows it, else a lower
    nice value, else none (not root)."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        return "SCHED_FIFO"
    except (OSError, AttributeError):
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)
        return "nice -10"
    except OSError:
        return "default"


def _continue(pgid: int, path: str, value: str) -> str:
    """SIGCONT the group (its own stop), then thaw its cgroup; what failed, or ``-``. The same
    continue as :func:`~lockcompare.infra.procgroup.signal_group` and :meth:`ClientCgroup.thaw`
    make (the file and value come from ``ClientCgroup.thaw_write``), written out here because this
    file runs with ``-I -S``, where lockcompare is not importable and a heavier start would delay it."""
    errors = []
    try:
        try:
            os.killpg(pgid, signal.SIGCONT)
        except ProcessLookupError:
            os.kill(pgid, signal.SIGCONT)
    except OSError as exc:
        errors.append(f"SIGCONT:{type(exc).__name__}")
    if path != "-":
        try:
            with open(path, "w") as handle:
                handle.write(value)
        except OSError as exc:
            errors.append(f"thaw:{type(exc).__name__}")
    return ",".join(errors) or "-"


def main() -> None:
    out = sys.stdout
    out.write(f"ready {_raise_priority()}\n")
    out.flush()
    stdin = sys.stdin.fileno()
    pending: list[tuple[int, int, int, str, str]] = []  # (deadline, ticket, pgid, path, value)
    cancelled: set[int] = set()
    buffer = b""
    while True:
        timeout = None
        if pending:
            timeout = max(0.0, (pending[0][0] - time.monotonic_ns()) / 1e9)
        readable, _, _ = select.select([stdin], [], [], timeout)
        if readable:
            chunk = os.read(stdin, 65536)
            if not chunk:
                return  # the runner closed us, or died
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for raw in lines:
                fields = raw.decode().split(" ")
                if fields[0] == "at":
                    ticket, deadline, pgid = int(fields[1]), int(fields[2]), int(fields[3])
                    heapq.heappush(pending, (deadline, ticket, pgid, fields[4], fields[5]))
                elif fields[0] == "cancel":
                    ticket = int(fields[1])
                    if any(entry[1] == ticket for entry in pending):
                        cancelled.add(ticket)
                        out.write(f"cancelled {ticket}\n")
                    else:
                        out.write(f"gone {ticket}\n")
        while pending and pending[0][0] <= time.monotonic_ns():
            deadline, ticket, pgid, path, value = heapq.heappop(pending)
            if ticket in cancelled:
                cancelled.discard(ticket)
                continue
            t_ns = time.monotonic_ns()
            error = _continue(pgid, path, value)
            out.write(f"done {ticket} {t_ns} {error}\n")
        out.flush()


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # the runner exited between our read and our report: nothing is waiting for it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush must not fail again
