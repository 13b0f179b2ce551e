"""Faults the runner applies to worker processes from outside.

A *real freeze* is ``SIGSTOP`` then ``SIGCONT``: every thread of the worker stops (a lock library's
renewal thread too), as in a stop-the-world GC pause or a suspended VM — unlike an in-process
``sleep``, which only the sleeping thread notices. The worker asks to be frozen at its pause point
and blocks until told it has been thawed; the runner stops it, and a timer continues it after the
pause. Every freeze heals in :meth:`Freezer.thaw_all`, called from the runner's ``finally``.
"""

from __future__ import annotations

import os
import signal
import threading
from multiprocessing.connection import Connection


class Freezer:
    """SIGSTOP a worker now, SIGCONT it after ``pause_s``; nothing stays stopped past thaw_all()."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._frozen: set[int] = set()
        self._timers: list[threading.Timer] = []

    def freeze(self, *, pid: int, conn: Connection, pause_s: float) -> None:
        with self._lock:
            os.kill(pid, signal.SIGSTOP)
            self._frozen.add(pid)
        timer = threading.Timer(pause_s, self._thaw, args=(pid, conn))
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def is_frozen(self, pid: int) -> bool:
        """True while this freezer holds ``pid`` stopped (a stop it did not make is someone else's)."""
        with self._lock:
            return pid in self._frozen

    def _thaw(self, pid: int, conn: Connection) -> None:
        with self._lock:
            if pid not in self._frozen:
                return
            self._frozen.discard(pid)
            os.kill(pid, signal.SIGCONT)
        try:
            conn.send(("thawed", "", []))
        except (OSError, ValueError):
            pass  # the trial is already being torn down

    def thaw_all(self) -> None:
        """Cancel pending thaws and continue every frozen worker (a stopped process ignores SIGTERM)."""
        for timer in self._timers:
            timer.cancel()
        with self._lock:
            for pid in self._frozen:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            self._frozen.clear()
