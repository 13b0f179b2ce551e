"""Background start-ups yield the CPU to the trials running beside them.

The warm pool (infra/warm_pool.py) starts clusters ahead, beside trials whose workers must wake on
time. A ZooKeeper ensemble's three JVMs burn about 1.1 CPU-seconds in their first 0.9 s (measured
alone, three starts): on 2 cores that is the whole machine for half a second. With a 10 Hz canary
beside 12 backends x leader-freeze, failover at ``--jobs 16`` (issue 55), the ZooKeeper servers took
12% of the CPU over the run but 34% in the second before each tick that woke over 50 ms late, and 26
of the processes born in those seconds were ZooKeeper JVMs: the stalls that mark trials came with
ensembles starting.

So a server spawned on a thread that yields (:func:`yield_startups`, the pool's starter threads) is
born at nice :data:`STARTUP_NICE`, and once it serves (:meth:`SpawnedServer.now_serving`) every
thread of every process in its session is brought back to nice 0: during the trials that use it, it
competes for the CPU as any server does. Only where that can be done (root, or an RLIMIT_NICE that
allows nice 0): an unprivileged process may lower a priority and never raise it again, and servers
left at nice 10 would answer late under load. Elsewhere start-ups run as before.
"""

from __future__ import annotations

import contextlib
import os
import resource
import threading
from collections.abc import Callable

#: The nice value a background start-up runs at until its server serves.
STARTUP_NICE = 10

_thread = threading.local()


def can_restore() -> bool:
    """True if this process may bring a niced process back to nice 0."""
    if os.geteuid() == 0:
        return True
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    return soft == resource.RLIM_INFINITY or soft >= 20  # the ceiling is 20 - soft: 0 at 20


def yield_startups() -> None:
    """Servers this thread spawns from now on start at :data:`STARTUP_NICE` (a thread initializer)."""
    _thread.yielding = can_restore()


def startup_nice() -> int:
    """The nice value a server spawned on this thread starts at (0: as the runner)."""
    return STARTUP_NICE if getattr(_thread, "yielding", False) else 0


def niced(preexec: Callable[[], object], nice: int) -> Callable[[], None]:
    """``preexec`` (run in the child before exec), then the child's nice raised by ``nice``."""

    def run() -> None:
        preexec()
        os.nice(nice)

    return run


def restore(session: int) -> None:
    """Every thread of every process in ``session`` (a server's, led by its pid) back to nice 0.

    Twice over: a thread created from one still niced while the first pass ran inherits its nice.
    """
    for _ in range(2):
        for pid in _session_members(session):
            with contextlib.suppress(OSError):  # gone meanwhile
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with contextlib.suppress(OSError):
                        if os.getpriority(os.PRIO_PROCESS, int(tid)) > 0:
                            os.setpriority(os.PRIO_PROCESS, int(tid), 0)


def _session_members(session: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session:  # state, ppid, pgrp, session
            members.append(int(entry))
    return members
