"""A plug-in that says, in each lease's owner token, the retry delay its BackendConfig told it."""

from __future__ import annotations

import secrets
import time

import redis

from lockcompare.backends.base import BackendConfig, Lease, Refusal
from lockcompare.backends.single import SingleNodeLock


class RetryAware(SingleNodeLock):
    summary = "single, with BackendConfig.retry_delay_ms in its owner tokens"

    def __init__(self, *, config: BackendConfig) -> None:
        super().__init__(config=config)
        self._told = config.retry_delay_ms

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        owner = f"retry-delay-{self._told}-{secrets.token_hex(8)}"  # the key's value: release still matches
        started_ns = time.monotonic_ns()
        try:
            granted = self._client.set(key, owner, nx=True, px=ttl_ms)
        except redis.RedisError:
            return Refusal("error")
        return Lease(key=key, owner=owner, valid_until_ns=started_ns + ttl_ms * 1_000_000) if granted else Refusal()
