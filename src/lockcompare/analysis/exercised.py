"""Did the trial keep exercising its lock? A lock that stops granting after a fault, refused with
``error`` only until its workers gave up, was not measured from then on: what its verdict would
say (``degraded``: "exclusion held only over what ran") reads like a property of the lock, while
the history shows only that every request failed — a harness that lost its way to the servers
(issue 48.1: Sentinel locks that never reached the promoted master) looks the same as a lock that
rightly stays down. Pure functions over the history.

The stretch judged: every acquire that began after the lock's last grant and after the first
fault injection. The rule applies when a worker gave up (``gave-up``: the lock was taken to be
gone), the stretch holds at least one acquire, and every one of them was refused for ``error``
only — except that each worker's first acquire of the stretch may also hold other refusals, as
long as it met an error: it straddles the moment the fault took effect (a failover's injection
lasts seconds; the master crashes somewhere inside it, and until then the lock answered ``held``).
Its fault is the latest injection in play when the stretch's first acquire ended.

A backend may declare that such unavailability is its behaviour (``unavailable_under``: the fault
kinds that leave it without a server, e.g. a single-node lock's one node crashed, a PostgreSQL
primary with no failover): then the stretch is the lock's, as long as that fault was not healed
meanwhile (a node that came back and still refuses is not what was declared).

>>> history = [
...     {"worker": 0, "round": 0, "kind": "acquire", "ok": True, "t0": 0, "t1": 10},
...     {"worker": -1, "round": 0, "kind": "fault", "fault": "failover", "action": "inject", "step": 0,
...      "t0": 20, "t1": 30},
...     {"worker": 0, "round": 1, "kind": "acquire", "ok": False, "t0": 40, "t1": 90, "refusals": {"error": 9},
...      "errors": ["error: ConnectionError: Error 111 connecting"]},
...     {"worker": -1, "round": 0, "kind": "fault", "fault": "failover", "action": "heal", "step": 0,
...      "t0": 60, "t1": 70},
...     {"worker": 0, "round": 2, "kind": "gave-up", "t0": 100, "t1": 100, "rounds_skipped": 38},
... ]
>>> stop = stopped_after_fault(history)
>>> stop.fault, stop.refused, stop.healed
('failover', 1, True)
>>> for part in stop.problem(origin_ns=0).split("; "):
...     print(part)
the lock stopped being exercised: never granted again after the failover at 0.0 ms (healed at 0.0 ms)
1 acquire(s) refused with errors only (error: ConnectionError: Error 111 connecting): no verdict about the lock
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lockcompare.analysis.history import Event
from lockcompare.analysis.rules import implements
from lockcompare.scenario import faultkinds

#: How many distinct messages a ``problem`` quotes.
QUOTED = 2


@dataclass(frozen=True, kw_only=True)
class Stopped:
    fault: str  # the injection's kind (its one name)
    fault_t0: int
    refused: int  # acquires refused, with errors only, in the stretch
    messages: tuple[str, ...]  # the error details the workers recorded, first seen first
    healed: bool  # the fault was healed before the stretch's last refusal
    healed_t1: int | None = None

    def problem(self, *, origin_ns: int, violation: bool = False) -> str:
        """The ``problem`` of a trial judged ``unknown`` by this rule (times after ``origin_ns``); with
        ``violation``, the note of a trial whose violation, seen before, keeps its verdict."""
        healed = f" (healed at {(self.healed_t1 - origin_ns) / 1e6:.1f} ms)" if self.healed_t1 is not None else ""
        said = "; ".join(self.messages[:QUOTED]) or "the history records no message"
        return (
            f"the lock stopped being exercised: never granted again after the {self.fault} at "
            f"{(self.fault_t0 - origin_ns) / 1e6:.1f} ms{healed}; {self.refused} acquire(s) refused with errors only "
            f"({said}): {'the violation was seen before' if violation else 'no verdict about the lock'}"
        )

    def declared_note(self) -> str:
        """The note of a trial whose backend declares this unavailability (its verdict stands)."""
        return f"unavailable after the {self.fault}, as the backend declares (unavailable_under: {self.fault})"


def _is_injection(event: Event) -> bool:
    return event.get("worker") == -1 and event.get("kind") == "fault" and event.get("action") == "inject"


def _first_of(worker: int, stretch: Sequence[Event]) -> Event:
    return next(e for e in stretch if e["worker"] == worker)


def _errors_only(acquire: Event, *, straddles: bool) -> bool:
    """Refused for ``error`` only; a worker's first acquire of the stretch may straddle the moment
    the fault took effect (a failover's crash comes somewhere inside its injection): refused ``held``
    before it and ``error`` after, so it needs some ``error`` but may hold other refusals."""
    reasons = set((acquire.get("refusals") or {}).keys())
    if acquire.get("ok") or "error" not in reasons:
        return False
    return straddles or reasons == {"error"}


@implements("stopped-being-exercised")
def stopped_after_fault(history: Sequence[Event]) -> Stopped | None:
    """The stretch in which the lock, after a fault, refused with errors only until its workers
    gave up; None when the trial went on being exercised (module docstring)."""
    if not any(e.get("kind") == "gave-up" for e in history):
        return None
    injections = sorted((e for e in history if _is_injection(e)), key=lambda e: e["t0"])
    if not injections:
        return None
    acquires = sorted(
        (e for e in history if e.get("kind") == "acquire" and e.get("worker", -1) >= 0), key=lambda e: e["t0"]
    )
    last_grant = max((int(e["t1"]) for e in acquires if e.get("ok")), default=None)
    start = max(int(injections[0]["t0"]), last_grant if last_grant is not None else int(injections[0]["t0"]))
    stretch = [e for e in acquires if e["t0"] >= start]
    if not stretch or not all(_errors_only(e, straddles=e is _first_of(e["worker"], stretch)) for e in stretch):
        return None
    in_play = [e for e in injections if e["t0"] <= stretch[0]["t1"]]
    if not in_play:
        return None
    fault = in_play[-1]
    heals = [
        int(e["t1"])
        for e in history
        if e.get("worker") == -1 and e.get("kind") == "fault" and e.get("action") == "heal"
        and e.get("fault") == fault.get("fault") and e.get("step") == fault.get("step") and e["t0"] >= fault["t0"]
    ]  # fmt: skip
    healed_t1 = min(heals, default=None)
    last_refusal = max(int(e["t1"]) for e in stretch)
    messages: list[str] = []
    for event in acquires:  # a worker records a message once: perhaps before the stretch began
        for text in event.get("errors") or ():
            if str(text).startswith("error") and text not in messages:
                messages.append(str(text))
    return Stopped(
        fault=faultkinds.event_fault(fault.get("fault")),
        fault_t0=int(fault["t0"]),
        refused=len(stretch),
        messages=tuple(messages),
        healed=healed_t1 is not None and healed_t1 < last_refusal,
        healed_t1=healed_t1 if healed_t1 is not None and healed_t1 < last_refusal else None,
    )
