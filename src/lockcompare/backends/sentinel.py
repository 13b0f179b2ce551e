"""The Redis locks most teams run, on a Sentinel-managed Redis: ``single``, ``fenced`` and redis-py's
``Lock`` with their clients finding the master through three sentinels.

Each is its plain namesake, unchanged, with ``servers = "sentinel"``: the run then gives it lock
nodes of the ``sentinel`` server kind (infra/sentinel_nodes.py: a master + replica per node, three
sentinels watching them), whose URLs (``redis+sentinel://...``) connect through redis-py's
``Sentinel(...).master_for(name)`` (infra/redisconn.py's ``connect``). So the same matrix holds
``single`` and ``sentinel-single`` side by side, and every experiment applies to both: under
``failover`` the plain one is failed over by hand (``REPLICAOF NO ONE``), this one by the
sentinels' own election.
"""

from __future__ import annotations

import contextlib
from typing import ClassVar

import redis

from lockcompare.backends.base import Lease, Refusal
from lockcompare.backends.fenced import ACQUIRE_SCRIPT, FencedLock
from lockcompare.backends.redis_py_lock import RedisPyLock
from lockcompare.backends.single import RELEASE_SCRIPT, SingleNodeLock


class SentinelSingle(SingleNodeLock):
    """With ``--wait-replicas`` the lock runs on one connection (WAIT counts that connection's writes).
    redis-py 8's single-connection client reconnects to the address it had, never asking the sentinels
    again (measured: after a failover every call was refused by the dead master's port), so after a
    failed call it takes a new single connection from the Sentinel pool, which asks them."""

    summary: ClassVar[str] = "single (SET NX PX, compare-and-delete) on the master Sentinel names"
    in_default_matrix: ClassVar[bool] = False  # each trial builds a Sentinel set: run it by name
    unavailable_under: ClassVar[tuple[str, ...]] = ()  # Sentinel promotes a replica: no reason to stay down
    servers: ClassVar[str] = "sentinel"

    _stale: bool = False  # the single connection failed: take a new one before the next call

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        if self._stale and not self._follow_the_master():
            return Refusal("error")  # no master to connect to yet (the sentinels have not agreed)
        result = super().acquire(key=key, ttl_ms=ttl_ms)
        if isinstance(result, Refusal) and result.reason == "error" and self._wait_replicas:
            self._stale = True
        return result

    def _follow_the_master(self) -> bool:
        """A new single connection from the Sentinel pool (which asks the sentinels); False if none now."""
        pool = self._client.connection_pool
        try:
            fresh = redis.Redis(connection_pool=pool).client()  # connects now: raises while no master answers
        except redis.RedisError:
            return False
        with contextlib.suppress(redis.RedisError):
            self._client.close()
        self._client, self._stale = fresh, False
        self._release = self._client.register_script(RELEASE_SCRIPT)
        return True


class SentinelFenced(SentinelSingle, FencedLock):
    summary: ClassVar[str] = "fenced (SET NX PX + INCR token in one script) on the master Sentinel names"
    servers: ClassVar[str] = "sentinel"

    def _follow_the_master(self) -> bool:
        followed = super()._follow_the_master()
        self._acquire = self._client.register_script(ACQUIRE_SCRIPT)
        return followed


class SentinelRedisPy(RedisPyLock):
    summary: ClassVar[str] = "redis.lock.Lock on the master Sentinel names (redis.sentinel.Sentinel.master_for)"
    in_default_matrix: ClassVar[bool] = False  # each trial builds a Sentinel set: run it by name
    unavailable_under: ClassVar[tuple[str, ...]] = ()  # Sentinel promotes a replica: no reason to stay down
    servers: ClassVar[str] = "sentinel"
