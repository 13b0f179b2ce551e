"""Faults: what the harness does to the world during a trial (Jepsen's nemesis).

- :mod:`~lockcompare.faults.freeze` — a real freeze of a worker process (SIGSTOP/SIGCONT);
- :mod:`~lockcompare.faults.node` — lock nodes that crash, restart (empty, after a delay, or with
  their AOF) and whose wall clocks jump;
- :mod:`~lockcompare.faults.failover` — a master dies before its replica saw the lock, and the
  replica is promoted in its place;
- :mod:`~lockcompare.faults.schedule` — when the runner injects and heals them during a trial, and
  how it writes them into the history.
"""

from lockcompare.faults.freeze import Freezer

__all__ = ["Freezer"]
