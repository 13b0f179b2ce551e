"""Faults at run time: how the runner lands a trial's fault schedule (Jepsen's nemesis and generator).

What each kind of fault is — its name, parameters, targets, inject and heal — is one module of
:mod:`lockcompare.scenario.faultkinds`; the schedule's text is :mod:`lockcompare.scenario.schedule`. Here:

- :mod:`~lockcompare.faults.targets` — whom a step hits, resolved from the lease the nodes hold (pure);
- :mod:`~lockcompare.faults.plan` — from a schedule to the runner's steps, the workers' pauses and
  the servers a trial needs;
- :mod:`~lockcompare.faults.freeze` — a real freeze of a worker process (SIGSTOP/SIGCONT);
- :mod:`~lockcompare.faults.continuer` — the process that ends a pause on time, outside the runner's GIL;
- :mod:`~lockcompare.faults.holders` — who holds the lock on each node, read ahead of a step;
- :mod:`~lockcompare.faults.leases` — which lease each worker holds, in shared memory: the confirm
  a lease-aimed step makes when it acts;
- :mod:`~lockcompare.faults.aim` — the reads made ahead of a step, the confirm, what a fault hit;
- :mod:`~lockcompare.faults.resolve` — a step's targets from what was read ahead;
- :mod:`~lockcompare.faults.network` — the per-trial links the link faults act on;
- :mod:`~lockcompare.faults.schedule` — the schedule runner: when it injects, heals or skips each
  step during a trial, and how it writes them into the history.
"""
