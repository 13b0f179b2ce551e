"""What each worker holds, in shared memory: the cheap confirm of a lease-aimed fault step.

A step aimed at a lease (``holders:K``, ``others:K``, ``worker=holder``, ``holder-member``, a
session-kill) must strike the lease it was aimed at *when it acts*. Reading the lock servers at that
moment made the step late by the read (100-900 ms on a loaded machine for five Redis nodes), and a
read made earlier may be stale. So every worker writes, in a few words of shared memory beside its
call slot, which round's lease it holds and until when: set when its acquire returns, ended (with
the time) *before* its release call starts — before its ``release`` event's ``t0``. The runner reads
the words at the moment it acts (nanoseconds, no server, no message), and again once the fault has
acted, to say whether the lease was still held then.

Words (int64, written by the worker, read by the runner; each a single aligned store):

* ``state``: ``round + 1`` while that round's lease is held, ``-(round + 1)`` once its release began,
  0 before the first lease;
* ``valid_until``: the held lease's deadline on the shared monotonic clock (0: none, a session lock);
* ``ended[round % RING]``: when that round's release began (0: not yet), for the last :data:`RING`
  rounds — so a fault whose action took a while (a session kill that waits for the server process to
  exit) can still tell whether the lease ended before or after it acted.

Order of writes: an acquire clears its ring entry, then the deadline, then ``state``; a release writes
its ring entry, then ``state``. A reader that sees ``state == round + 1`` saw the lease held at that
instant; one that sees ``-(round + 1)`` finds the ring entry already written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lockcompare.analysis.history import now_ns

#: Rounds whose release time is kept (a fault's action is checked against them).
RING = 8
#: Shared words a lease slot takes: state, valid_until, the ring.
WORDS = 2 + RING


@dataclass(frozen=True)
class Held:
    """What a worker's slot says of one round's lease at a moment."""

    held: bool
    #: When its release began (ns), if it has; None while held, or when no longer known.
    ended_ns: int | None = None

    def held_at(self, t_ns: int) -> bool | None:
        """Was the lease held at ``t_ns`` (a moment at or after it was seen held)? None: unknown."""
        if self.held:
            return True
        return None if self.ended_ns is None else self.ended_ns > t_ns


class LeaseSlot:
    """One worker's lease words inside a shared int64 array, from ``offset`` on."""

    def __init__(self, shared: Any, *, offset: int) -> None:
        self._shared = shared
        self._at = offset

    # -- the worker's side --------------------------------------------------------------------

    def reset(self) -> None:
        """A new trial on a reused worker process: nothing held, no round ended."""
        for i in range(WORDS):
            self._shared[self._at + i] = 0

    def hold(self, *, round_: int, valid_until_ns: int | None) -> None:
        self._shared[self._at + 2 + round_ % RING] = 0
        self._shared[self._at + 1] = valid_until_ns or 0
        self._shared[self._at] = round_ + 1

    def end(self, *, round_: int) -> None:
        """Called before the release call starts (so before its ``release`` event's t0)."""
        if self._shared[self._at] != round_ + 1:
            return
        self._shared[self._at + 2 + round_ % RING] = now_ns()
        self._shared[self._at] = -(round_ + 1)

    # -- the runner's side --------------------------------------------------------------------

    def holding(self) -> tuple[int, int | None] | None:
        """(round, deadline or None) of the lease held now; None when none is (or it is past its deadline)."""
        state = int(self._shared[self._at])
        if state <= 0:
            return None
        deadline = int(self._shared[self._at + 1]) or None
        if deadline is not None and now_ns() >= deadline:
            return None
        return state - 1, deadline

    def of_round(self, round_: int) -> Held:
        """What the slot says now of round ``round_``'s lease (see :class:`Held`)."""
        state = int(self._shared[self._at])
        if state == round_ + 1:
            deadline = int(self._shared[self._at + 1])
            if deadline and now_ns() >= deadline:
                return Held(held=False, ended_ns=deadline)  # expired on the servers at its deadline
            return Held(held=True)
        if abs(state) < round_ + 1 or abs(state) >= round_ + 1 + RING:
            return Held(held=False)  # not this round's (or too long ago to tell when it ended)
        ended = int(self._shared[self._at + 2 + round_ % RING])
        return Held(held=False, ended_ns=ended or None)
