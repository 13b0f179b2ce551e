"""``CarelessLock``: the lesson's lock with one part left out — it releases with a plain DEL.

Acquire is correct (SET key token NX PX ttl, a random token). Release deletes the key whoever holds
it: a holder whose lease expired while it was paused deletes its *successor's* key on the way out,
and a third client walks in beside the successor (lesson 10, section 10.2: "the token must be
checked on release"). A worked example of a plug-in, and of a lock the conformance battery fails::

    lockcompare evaluate examples.careless_lock:CarelessLock --quick     # from the repository root
    lockcompare --plugin-path examples evaluate careless_lock:CarelessLock --quick
"""

from __future__ import annotations

import secrets
import time
from typing import ClassVar

import redis

from lockcompare.backends import BackendConfig, Lease, Refusal
from lockcompare.infra.redis.client import connect


class CarelessLock:
    """SET NX PX with a random token on lock node 0; release is a plain DEL (the bug)."""

    summary: ClassVar[str] = "SET NX PX on one node, released with a plain DEL (deletes whoever's key is there)"
    exclusive: ClassVar[bool] = True
    issues_fencing_tokens: ClassVar[bool] = False

    def __init__(self, *, config: BackendConfig) -> None:
        # lockcompare.infra.redis.client.connect: no hidden retries, short timeouts (a dead node fails fast).
        self._client = connect(config.node_urls[0], timeout_s=config.request_timeout_s)

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        owner = secrets.token_hex(16)
        started_ns = time.monotonic_ns()
        try:
            granted = self._client.set(key, owner, nx=True, px=ttl_ms)
        except redis.RedisError:
            return Refusal("error")  # a node that cannot be reached is a refusal, not an exception
        if not granted:
            return Refusal("held")
        return Lease(key=key, owner=owner, valid_until_ns=started_ns + ttl_ms * 1_000_000)

    def release(self, lease: Lease) -> bool:
        try:
            return bool(self._client.delete(lease.key))  # BUG: never checks lease.owner
        except redis.RedisError:
            return False

    def close(self) -> None:
        self._client.close()
