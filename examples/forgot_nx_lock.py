"""``ForgotNxLock``: the lesson's lock with NX left out — ``SET key token PX ttl`` always succeeds.

Every acquire overwrites whoever holds the key, so two workers hold valid leases at once from the
first round on, with no fault at all. A worked example of a lock that ``explore`` reports as
failing "with no fault: the lock itself" (the shrinker tries the empty schedule first)::

    lockcompare --plugin-path examples explore forgot_nx_lock:ForgotNxLock --property no-grant-over-valid-lease
"""

from __future__ import annotations

import secrets
import time
from typing import ClassVar

import redis

from lockcompare.backends import BackendConfig, Lease, Refusal
from lockcompare.infra.redis.client import connect

RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


class ForgotNxLock:
    """SET PX (no NX: the bug) with a random token on lock node 0; compare-and-delete release."""

    summary: ClassVar[str] = "SET PX without NX on one node: every acquire takes the key, held or not"
    exclusive: ClassVar[bool] = True
    issues_fencing_tokens: ClassVar[bool] = False

    def __init__(self, *, config: BackendConfig) -> None:
        self._client = connect(config.node_urls[0], timeout_s=config.request_timeout_s)

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        owner = secrets.token_hex(16)
        started_ns = time.monotonic_ns()
        try:
            self._client.set(key, owner, px=ttl_ms)  # BUG: no nx=True
        except redis.RedisError:
            return Refusal("error")
        return Lease(key=key, owner=owner, valid_until_ns=started_ns + ttl_ms * 1_000_000)

    def release(self, lease: Lease) -> bool:
        try:
            return bool(self._client.eval(RELEASE, 1, lease.key, lease.owner))
        except redis.RedisError:
            return False

    def close(self) -> None:
        self._client.close()
