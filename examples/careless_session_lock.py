"""``CarelessSessionLock``: the careless lock that also says it has no TTL — and still uses one.

It declares ``has_ttl = False`` ("held as long as its holder lives", as a database session lock is)
and hands out leases without a deadline, but its key is a ``SET NX PX ttl`` that expires, and its
release is a plain ``DEL`` that deletes whoever's key is there. Before lockcompare checked claims,
the claim excused the TTL properties (NOT CLAIMED), a lease without a deadline made the release and
search properties vacuous, and the card read "every claimed property holds", exit 0. Now the
battery puts the claim to the test — a second client must still be refused long after the TTL while
the holder lives — and the card fails, naming it::

    lockcompare --plugin-path examples evaluate careless_session_lock:CarelessSessionLock --quick
"""

from __future__ import annotations

from typing import ClassVar

from careless_lock import CarelessLock

from lockcompare.backends import Lease, Refusal


class CarelessSessionLock(CarelessLock):
    """:class:`CarelessLock` (SET NX PX, plain DEL) declaring that its lock has no TTL."""

    summary: ClassVar[str] = "SET NX PX + plain DEL, claiming has_ttl = False (its key expires all the same)"
    has_ttl: ClassVar[bool] = False

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        outcome = super().acquire(key=key, ttl_ms=ttl_ms)
        if isinstance(outcome, Lease):  # what it believes: no deadline
            return Lease(key=outcome.key, owner=outcome.owner)
        return outcome
