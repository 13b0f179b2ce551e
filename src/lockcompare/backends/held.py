"""The library lock objects an adapter has handed out, one per lease.

A library lock object (``pottery.Redlock``, ``redis.lock.Lock``) holds a single token. An adapter
must keep one object per lease: a holder whose release failed (its lease had expired) must not
have that token overwritten by its next acquire. Shared by the third-party adapters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from lockcompare.backends.base import Lease

L = TypeVar("L")


class HeldLocks(Generic[L]):
    """Library lock objects by lease owner."""

    def __init__(self) -> None:
        self._by_owner: dict[str, L] = {}

    def hold(self, owner: str, lock: L) -> None:
        self._by_owner[owner] = lock

    def __getitem__(self, owner: str) -> L:
        """The library object behind a lease still held (for inspecting the library's own view)."""
        return self._by_owner[owner]

    def release(self, lease: Lease, *, release: Callable[[L], object], errors: tuple[type[BaseException], ...]) -> bool:
        """Release the object behind ``lease``; False if this adapter never handed it out (or
        already released it) or if the library raised one of ``errors`` (the lease had lapsed)."""
        lock = self._by_owner.pop(lease.owner, None)
        if lock is None:
            return False
        try:
            release(lock)
        except errors:
            return False
        return True

    def clear(self) -> None:
        self._by_owner.clear()
