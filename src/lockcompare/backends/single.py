"""``single``: the lesson's correct single-node lock — SET NX PX with a random token, atomic release.

All three mandatory parts (lesson 10, section 10.2): NX (acquire only if free), PX (a TTL, so a
dead holder cannot deadlock everyone), and a random token checked by a Lua script on release, so
that a holder whose lease expired cannot delete its successor's key.

With ``BackendConfig.wait_replicas`` N > 0 (``--wait-replicas``; the failover experiment) the
write that grants a lease is followed by ``WAIT N <TTL/10>`` on the same connection, and a lease
fewer than N replicas acknowledged is released and refused (``not-replicated``): a failover can
then only lose a lock that was never granted (measured: with the replication link held back,
``SET NX`` + ``WAIT 1 200`` on the same connection returned 0). It does not make the
lock safe in general: WAIT does not make a write durable, and a replica that acknowledged may
still lose the key in a later failover.
"""

from __future__ import annotations

import secrets
import time
from typing import ClassVar

import redis

from lockcompare.backends import pause_point
from lockcompare.backends.base import BackendConfig, Lease, Refusal, first_node
from lockcompare.backends.redis_direct import DirectCommands
from lockcompare.infra.redis.client import connect

#: Compare-and-delete: only the owner's token deletes the key.
RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
else
  return 0
end
"""


#: WAIT's timeout as a share of the TTL: waiting for a replica may cost at most a tenth of the lease.
WAIT_TIMEOUT_SHARE = 0.1


def new_owner_token() -> str:
    return secrets.token_hex(16)


def wait_timeout_ms(ttl_ms: int) -> int:
    """WAIT's timeout for a lease of ``ttl_ms`` (at least 1: ``WAIT n 0`` would block forever).

    Redis wakes a blocked client on its cron (``hz`` 10), so a WAIT that times out returns late:
    with the replication link cut, ``WAIT 1 100`` returned after 148-201 ms here.
    """
    return max(1, round(ttl_ms * WAIT_TIMEOUT_SHARE))


class SingleNodeLock:
    """SET key token NX PX ttl on lock node 0; release by compare-and-delete."""

    summary: ClassVar[str] = "SET NX PX + random token + Lua compare-and-delete, on one node"
    #: The client request timeout (used where links are slowed or cut): lockcompare's own choice for
    #: its built-ins, 2 s (infra.redis.client.DEFAULT_TIMEOUT_S: generous next to a loopback round trip).
    client_timeout_s: ClassVar[float] = 2.0
    exclusive: ClassVar[bool] = True
    issues_fencing_tokens: ClassVar[bool] = False
    #: One server and no failover: when it crashes the lock has none left (analysis/exercised.py).
    unavailable_under: ClassVar[tuple[str, ...]] = ("crash",)
    libraries: ClassVar[tuple[str, ...]] = ("redis",)  # recorded with their versions in every row
    supports_wait_replicas: ClassVar[bool] = True
    #: Its acquire stops at backends/pause_point.py between the SET going out and its reply being read.
    pauses_inside_acquire: ClassVar[bool] = True

    def __init__(self, *, config: BackendConfig) -> None:
        self._client = connect(first_node(config.node_urls), timeout_s=config.request_timeout_s)
        self._wait_replicas = config.wait_replicas
        self._release = self._client.register_script(RELEASE_SCRIPT)
        # Acquire, WAIT and release on the worker's thread go over one held connection without
        # redis-py's per-call layers (a waiting worker retries every ~1 ms at --time-scale 0.1): same
        # connection settings and errors (backends/redis_direct.py). One connection is also what WAIT
        # needs: it counts only its own connection's writes.
        self._direct = DirectCommands(self._client)

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        owner = new_owner_token()
        started_ns = time.monotonic_ns()  # the TTL starts no earlier than the request is sent
        try:
            reply = self._direct.call("SET", key, owner, "NX", "PX", ttl_ms, after_send=pause_point.inside_acquire)
            granted = reply == b"OK"
        except redis.RedisError as exc:
            return Refusal.failed(exc)
        if not granted:
            return Refusal("held")
        lease = Lease(key=key, owner=owner, valid_until_ns=started_ns + ttl_ms * 1_000_000)
        return self.replicated(lease, ttl_ms=ttl_ms)

    def replicated(self, lease: Lease, *, ttl_ms: int) -> Lease | Refusal:
        """``lease`` once ``wait_replicas`` replicas acknowledged its write (always, with 0);
        otherwise it is released and refused."""
        if not self._wait_replicas:
            return lease
        try:
            acknowledged = int(self._direct.call("WAIT", self._wait_replicas, wait_timeout_ms(ttl_ms)))
        except redis.RedisError as exc:
            self.release(lease)
            return Refusal.failed(exc)
        if acknowledged < self._wait_replicas:
            self.release(lease)
            return Refusal("not-replicated")
        return lease

    def release(self, lease: Lease) -> bool:
        try:
            return bool(self._direct.script(self._release, [lease.key], [lease.owner]))
        except redis.RedisError:
            return False

    def close(self) -> None:
        self._direct.close()
        self._client.close()
        self._client.connection_pool.disconnect()
