"""Notices when the runner itself was stopped from outside (SIGSTOP, Ctrl-Z, a frozen VM) during a
trial, which the trial's wall time alone cannot tell from a long trial."""

from __future__ import annotations

import threading
import time

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
