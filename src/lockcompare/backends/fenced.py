"""``fenced``: the single-node lock plus a fencing token (lesson 10, section 10.4).

The token comes from INCR on the lock node, taken *after* the lock is acquired so that token order
follows acquisition order. The lock alone still lets a paused holder back in; the token lets the
resource refuse its stale write.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import redis

from lockcompare.backends.base import Lease, Refusal
from lockcompare.backends.single import SingleNodeLock


def fence_counter_key(lock_key: str) -> str:
    return f"{lock_key}:fence-seq"


class FencedLock(SingleNodeLock):
    """``single`` + a strictly increasing fencing token from INCR, issued after acquiring."""

    summary: ClassVar[str] = "single + fencing token (INCR after acquiring), checked by the resource"
    issues_fencing_tokens: ClassVar[bool] = True

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        lease = super().acquire(key=key, ttl_ms=ttl_ms)
        if not lease:
            return lease
        try:
            token = int(self._client.incr(fence_counter_key(key)))
        except redis.RedisError:
            self.release(lease)
            return Refusal("error")
        return dataclasses.replace(lease, fencing_token=token)
