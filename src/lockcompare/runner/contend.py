"""The ``contend`` workload: no worker ever runs alone, so a lock cannot look better by letting one
worker finish early.

Why: in the lesson's workload each worker runs its planned rounds and stops. A careless lock
(release = plain DEL, deleting whoever's key is there) let its rival through faster under
``client-pause``; the rival finished its 40 rounds early, the paused worker then ran alone, and
the lock measured *fewer* conflicts than ``single`` (18/80 against 39/80). Its bug had shortened
the contention, not removed the damage.

The design: a worker that has run its planned rounds says ``done`` to the runner and, while some
other worker still has planned rounds to run, keeps contending with *extra* rounds — the same round
(acquire, pause if the seeded schedule says so, critical section with its write, release, think),
the same timings. Once every worker has said ``done`` (or ended), the runner says ``stop`` and each
worker ends after at most its current extra round (an extra round that has not yet entered its
section is abandoned: nobody's planned work is left to contend with).

The extra sections take the real lock and write the real balance: a careless release by an
extra-round worker still deletes a planned holder's key, and its stale write still erases a planned
increment. Every event of an extra round carries ``"extra": true`` and the round numbers go on
past the planned ones (round ``rounds + k``), so histories stay honest and the checker can tell
them apart (see checker.py for what it counts where: exclusion and progress are judged on the
planned sections, damage at the resource on all of them).

Messages on the worker's pipe (besides ``ready``/``go``, ``freeze``/``thawed``, ``acquired`` and
the final ``ok``/``error``): worker → runner ``("done", round, [])``; runner → worker
``("continue", "", [])`` or ``("stop", "", [])`` as the answer, and ``("stop", "", [])`` later to a
worker that was told to continue. A worker told to continue always waits for its ``stop`` before it
ends (a warm worker must not leave a message unread in its pipe for the next trial).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from lockcompare.infra.messages import send

#: The workloads: ``lesson`` (each worker runs its rounds and stops: the lesson's table, the
#: default) and ``contend`` (see the module docstring; what ``lockcompare evaluate`` uses).

#: How long a worker that said ``done`` waits for the runner's answer (the runner answers at once).
ANSWER_TIMEOUT_S = 60.0


class Inbox:
    """The worker's side of the pipe once rounds run: remembers a ``stop`` whenever it arrives
    (it may come while the worker waits for something else, e.g. its thaw after a freeze)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.stopped = False

    def wait_for(self, *kinds: str, timeout_s: float | None = None) -> str:
        """Block until a message of one of ``kinds`` arrives; return its kind."""
        while True:
            if timeout_s is not None and not self._conn.poll(timeout_s):
                raise TimeoutError(f"the runner did not answer ({' or '.join(kinds)}) within {timeout_s:g} s")
            kind = self._take(self._conn.recv())
            if kind in kinds:
                return kind

    def stop_requested(self) -> bool:
        """True once the runner said ``stop`` (reads whatever is waiting, without blocking)."""
        while not self.stopped and self._conn.poll(0):
            self._take(self._conn.recv())
        return self.stopped

    def _take(self, message: tuple[str, str, list[Any]]) -> str:
        kind = message[0]
        if kind == "stop":
            self.stopped = True
        elif kind not in ("thawed", "continue", "go-on"):
            raise ValueError(f"unexpected message from the runner: {kind!r}")
        return kind


@dataclass(kw_only=True)
class DoneTracker:
    """The runner's side: which workers are done with their planned rounds, and when to say ``stop``.

    A worker that ended (its final message arrived, or its pipe closed) counts as done: nobody
    waits for a worker that cannot run any more rounds.
    """

    conns: list[Connection]
    _done: set[int] = field(default_factory=set)  # ids of the conns that said done or ended
    _continuing: set[int] = field(default_factory=set)  # told to continue, not yet told to stop

    def on_done(self, conn: Connection) -> None:
        """A worker said ``done``: answer ``stop`` if it was the last, else ``continue``."""
        self._done.add(id(conn))
        if self._all_done():
            _send(conn, "stop")
            self._stop_the_others()
        else:
            self._continuing.add(id(conn))
            _send(conn, "continue")

    def on_ended(self, conn: Connection) -> None:
        """A worker ended (final message or closed pipe): it may have been the last one running."""
        self._done.add(id(conn))
        self._continuing.discard(id(conn))
        if self._all_done():
            self._stop_the_others()

    def _all_done(self) -> bool:
        return all(id(c) in self._done for c in self.conns)

    def _stop_the_others(self) -> None:
        for conn in self.conns:
            if id(conn) in self._continuing:
                self._continuing.discard(id(conn))
                _send(conn, "stop")


def _send(conn: Connection, kind: str) -> None:
    try:
        send(conn, (kind, "", []))
    except (OSError, ValueError):
        pass  # the worker is gone: its end is reported by its own pipe
