"""``none``: no lock at all — the baseline every lock is compared with.

Every acquire succeeds at once with a lease that never expires, so workers run the critical
section whenever they like.
"""

from __future__ import annotations

from typing import ClassVar

from lockcompare.backends.base import BackendConfig, Lease, Refusal
from lockcompare.backends.single import new_owner_token


class NoLock:
    """Grants every request: measures what happens without mutual exclusion."""

    summary: ClassVar[str] = "no lock: every acquire succeeds at once (the baseline)"
    exclusive: ClassVar[bool] = False
    issues_fencing_tokens: ClassVar[bool] = False

    def __init__(self, *, config: BackendConfig) -> None:
        del config  # nothing to connect to

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        return Lease(key=key, owner=new_owner_token())

    def release(self, lease: Lease) -> bool:
        return True

    def close(self) -> None:
        pass
