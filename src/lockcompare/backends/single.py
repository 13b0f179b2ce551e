"""``single``: the lesson's correct single-node lock — SET NX PX with a random token, atomic release.

All three mandatory parts (lesson 10, section 10.2): NX (acquire only if free), PX (a TTL, so a
dead holder cannot deadlock everyone), and a random token checked by a Lua script on release, so
that a holder whose lease expired cannot delete its successor's key.
"""

from __future__ import annotations

import secrets
import time
from typing import ClassVar

import redis

from lockcompare.backends.base import BackendConfig, Lease, Refusal, first_node
from lockcompare.redisconn import connect

#: Compare-and-delete: only the owner's token deletes the key.
RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
else
  return 0
end
"""


def new_owner_token() -> str:
    return secrets.token_hex(16)


class SingleNodeLock:
    """SET key token NX PX ttl on lock node 0; release by compare-and-delete."""

    summary: ClassVar[str] = "SET NX PX + random token + Lua compare-and-delete, on one node"
    exclusive: ClassVar[bool] = True
    issues_fencing_tokens: ClassVar[bool] = False

    def __init__(self, *, config: BackendConfig) -> None:
        self._client = connect(first_node(config.node_urls), timeout_s=config.request_timeout_s)
        self._release = self._client.register_script(RELEASE_SCRIPT)

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        owner = new_owner_token()
        started_ns = time.monotonic_ns()  # the TTL starts no earlier than the request is sent
        try:
            granted = self._client.set(key, owner, nx=True, px=ttl_ms)
        except redis.RedisError:
            return Refusal("error")
        if not granted:
            return Refusal("held")
        return Lease(key=key, owner=owner, valid_until_ns=started_ns + ttl_ms * 1_000_000)

    def release(self, lease: Lease) -> bool:
        try:
            return bool(self._release(keys=[lease.key], args=[lease.owner]))
        except redis.RedisError:
            return False

    def close(self) -> None:
        self._client.close()
