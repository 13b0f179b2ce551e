"""``idempotent``: no lock — an atomic increment that carries an idempotency key.

Like ``atomic`` (one INCRBY at the resource), but each increment carries its request id (worker
and round) and the resource remembers the ids it applied: a request sent again — because its
reply was lost and the client, which cannot know whether it was processed, retried — is
acknowledged and not applied twice. The ``lost-reply`` experiment measures the difference.
"""

from __future__ import annotations

from typing import ClassVar

from lockcompare.backends.no_lock import NoLock


class IdempotentIncrement(NoLock):
    """Lock-free: ``INCRBY`` once per request id (the resource remembers applied ids)."""

    summary: ClassVar[str] = "lock-free: atomic INCRBY with an idempotency key (a repeated request is not re-applied)"
    in_default_matrix: ClassVar[bool] = (
        False  # the lock-free alternatives have their own comparison (docs/lock-free.md)
    )
    resource_check: ClassVar[str] = "idempotent"
