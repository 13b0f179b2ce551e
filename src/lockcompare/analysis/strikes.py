"""Did the trial's fault happen? Counted from the runner's own fault events in the history.

An experiment's claim is about a lock *under a fault*. A trial whose schedule never struck (every
step skipped because its target could not be resolved, or a session-kill that found no session to
end, or a fault aimed at a lease that had ended when it landed) measured the lock without its
fault: its "exclusive" would be vacuous. So the checker counts, per trial, the injections the
schedule planned and those that struck (faults/schedule.py writes them):

- *planned*: every injection the runner attempted — an ``inject`` event, or a ``skipped`` one
  (a ``prepare`` that was skipped is not an injection: the step may still inject later);
- *struck*: an ``inject`` whose fault acted on its target, as the history shows it: not one whose
  fault reports it did nothing (``struck: false``, or before that field a ``detail`` beginning
  "skipped"), not one whose aim ``missed`` or ``raced``, and — for a lease-aimed step, whose event
  names the lease it hit (faults/aim.py) — only one whose ``lease_held`` says that lease was still
  held, by its worker's own account, at the moment the fault acted;
- *missed*: aimed at the lease of the acquire that triggered it, and that lease had ended when it
  landed, with nothing else it could be aimed at (``"aim": "missed"``): the fault is not injected
  (or, for a session kill, the session it found was no worker's current lease: nothing was ended);
- *retargeted*: that lease had ended, but another was held when it landed, and the servers had been
  read since it was granted: the fault struck the current lease instead (``"aim": "retargeted"``),
  which counts as struck when ``lease_held`` says so;
- *raced*: the lease it struck ended while the fault acted (``"aim": "raced"``, ``lease_held``
  false or unknown): which came first is not known, so it is not counted as struck.

Pauses are the workers' own (``pause`` events), always taken: they are not counted here.

>>> events = [
...     {"worker": -1, "kind": "fault", "action": "inject", "detail": "SIGKILL"},
...     {"worker": -1, "kind": "fault", "action": "skipped", "reason": "nodes=holders:1: no lease on any node"},
...     {"worker": -1, "kind": "fault", "action": "heal", "detail": "restarted"},
... ]
>>> fault_strikes(events)
FaultStrikes(planned=2, struck=1, missed=0, retargeted=0, reasons=('nodes=holders:1: no lease on any node',))
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lockcompare.analysis.history import Event


@dataclass(frozen=True)
class FaultStrikes:
    planned: int
    struck: int
    missed: int
    retargeted: int
    #: Why the injections that did not strike did not, most frequent first (distinct texts).
    reasons: tuple[str, ...] = ()

    @property
    def none_struck(self) -> bool:
        """A schedule that planned injections and struck with none of them."""
        return self.planned > 0 and self.struck == 0

    def summary(self) -> str:
        """One line for a row's ``problem``: how many struck, and why the others did not."""
        why = f" ({'; '.join(self.reasons[:3])})" if self.reasons else ""
        missed = f", {self.missed} missed (the lease it was aimed at had ended)" if self.missed else ""
        return f"the fault struck {self.struck} of {self.planned} injections{missed}{why}"


def is_injection(event: Event) -> bool:
    return (
        event.get("worker") == -1
        and event.get("kind") == "fault"
        and (
            event.get("action") == "inject" or (event.get("action") == "skipped" and event.get("skipped") != "prepare")
        )
    )


def struck(event: Event) -> bool:
    """Did this injection act on its target? (See the module docstring.)"""
    if event.get("action") != "inject" or event.get("aim") in ("missed", "raced"):
        return False
    if "lease_held" in event and event["lease_held"] is not True:
        return False  # the lease it was aimed at is not shown held when it acted
    if "struck" in event:
        return bool(event["struck"])
    return not str(event.get("detail") or "").startswith("skipped")


def why_not(event: Event) -> str:
    if event.get("action") == "skipped":
        return str(event.get("reason") or "skipped")
    if event.get("aim") == "raced" or ("lease_held" in event and event["lease_held"] is not True):
        return "raced: the lease it struck ended while the fault acted"
    detail = str(event.get("detail") or "")
    return detail.removeprefix("skipped: ") or "did not strike"


def fault_strikes(history: Sequence[Event]) -> FaultStrikes:
    """The trial's injections: how many were planned, struck, missed or retargeted (module docstring)."""
    injections = [e for e in history if is_injection(e)]
    hits = [e for e in injections if struck(e)]
    reasons = Counter(why_not(e) for e in injections if not struck(e))
    return FaultStrikes(
        planned=len(injections),
        struck=len(hits),
        missed=sum(1 for e in injections if e.get("aim") == "missed"),
        retargeted=sum(1 for e in hits if e.get("aim") == "retargeted"),
        reasons=tuple(reason for reason, _ in reasons.most_common()),
    )


def strikes_line(rows: Sequence[Mapping[str, object]]) -> str:
    """One line over a results file's rows: the injections planned, struck and missed ("" when no
    row planned any, or only rows from before they were counted)."""

    def total(column: str) -> int:
        return sum(v for r in rows if isinstance(v := r.get(column), int) and v > 0)

    planned = total("fault_steps_planned")
    if not planned:
        return ""
    unstruck = sum(
        1
        for r in rows
        if isinstance(p := r.get("fault_steps_planned"), int) and p > 0 and r.get("fault_steps_struck") == 0
    )
    return (
        f"faults: {total('fault_steps_struck')} of {planned} injections struck, {total('fault_steps_missed')} missed "
        f"(aimed at a lease that had ended when they landed); {unstruck} trial(s) whose fault never struck"
    )
