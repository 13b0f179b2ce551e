"""Faults: what the harness does to the world during a trial (Jepsen's nemesis and generator).

- :mod:`~lockcompare.faults.steps` — fault schedules as text: what, whom, when, how long (pure);
- :mod:`~lockcompare.faults.targets` — whom a step hits, resolved from the lease the nodes hold (pure);
- :mod:`~lockcompare.faults.plan` — from a schedule to the runner's steps, the workers' pauses and
  the servers a trial needs;
- :mod:`~lockcompare.faults.freeze` — a real freeze of a worker process (SIGSTOP/SIGCONT), and the
  stop/continue strobe that starves one (``starve``);
- :mod:`~lockcompare.faults.node` — lock nodes that crash, restart (empty, after a delay, or with
  their AOF) and whose wall clocks jump;
- :mod:`~lockcompare.faults.failover` — a master dies before its replica saw the lock, and the
  replica is promoted in its place;
- :mod:`~lockcompare.faults.network` — slow and cut links between a worker and lock nodes;
- :mod:`~lockcompare.faults.schedule` — the schedule runner: when it injects, heals or skips each
  step during a trial, and how it writes them into the history.
"""

from lockcompare.faults.freeze import Freezer

__all__ = ["Freezer"]
