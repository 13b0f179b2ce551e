"""What one check of the conformance battery did, as a history in the trials' own format.

A FAIL on a report card is a claim about the lock; without a record of the calls behind it nobody can
tell whether the lock or the battery was wrong (issue 48.3: zk-lock's card failed three claims that
its trials contradicted, and nothing showed why). So every check keeps the history a trial keeps
(analysis/history.py: flat events on the shared monotonic clock, gzipped JSON lines) and
``lockcompare history FILE`` reads it like a trial's:

- each client the check makes is a *worker* (0, 1, ... in the order made); its ``round`` counts its
  acquires, so an acquire and the release of its lease share a round;
- ``acquire`` (``ok``, ``attempts`` 1, ``refusals``, ``owner``, ``fence``, ``valid_until``,
  ``ttl_ms``), ``release`` (``released``), ``lease`` (a ``before_write`` answer), ``error`` (a call
  that raised, timed out or returned something else: ``message``), and what a renewing client
  reports of itself (``renew``: a ZooKeeper client's session states), each timed in the backend's
  process;
- the battery's own steps are the runner's (worker -1): ``fault`` events for freezing and continuing
  a client's process and for crashing lock nodes, and ``check`` events opening and closing the check
  (``property``, and at the end ``status`` and ``evidence``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockcompare.analysis import history as history_io
from lockcompare.analysis.history import Event

#: The worker number of the battery's own steps (the runner's, in a trial's history).
BATTERY = -1


@dataclass
class BatteryLog:
    """The events of one check, in the order they were recorded."""

    events: list[Event] = field(default_factory=list)
    clients: int = 0

    def new_client(self) -> int:
        """The worker number of the next client the check makes."""
        self.clients += 1
        return self.clients - 1

    def add(self, kind: str, *, worker: int, round_: int = 0, t0: int, t1: int | None = None, **fields: Any) -> None:
        event: Event = {"worker": worker, "round": round_, "kind": kind, "t0": t0, "t1": t0 if t1 is None else t1}
        event.update({name: value for name, value in fields.items() if value is not None})
        self.events.append(event)

    def step(self, kind: str = "fault", *, t0: int | None = None, **fields: Any) -> None:
        """One of the battery's own steps, now (or from ``t0`` to now)."""
        now = time.monotonic_ns()
        self.add(kind, worker=BATTERY, t0=now if t0 is None else t0, t1=now, **fields)

    def renewals(self, records: Iterable[dict[str, Any]], *, worker: int, round_: int) -> None:
        """A renewing client's own records, as a trial's worker writes them (runner/backend_calls.py
        record_renewals: a record with a ``kind`` is an event of that kind, else ``renew``)."""
        for record in records:
            fields = dict(record)
            if not isinstance(fields.get("t0"), int):
                continue  # not a record of a time: nothing to place on the timeline
            kind = str(fields.pop("kind", "renew"))
            t0 = int(fields.pop("t0"))
            t1 = fields.pop("t1", None)
            self.add(kind, worker=worker, round_=round_, t0=t0, t1=t1 if isinstance(t1, int) and t1 else None, **fields)

    def save(self, path: Path) -> Path:
        history_io.save(history_io.merge([self.events]), path)
        return path
