"""The Redis locks most teams run, on a Sentinel-managed Redis: ``single``, ``fenced`` and redis-py's
``Lock`` with their clients finding the master through three sentinels.

Each is its plain namesake, unchanged, with ``servers = "sentinel"``: the run then gives it lock
nodes of the ``sentinel`` server kind (infra/sentinel/: a master + replica per node, three
sentinels watching them), whose URLs (``redis+sentinel://...``) connect through redis-py's
``Sentinel(...).master_for(name)`` (infra/redis/client.py's ``connect``). So the same matrix holds
``single`` and ``sentinel-single`` side by side, and every experiment applies to both: under
``failover`` the plain one is failed over by hand (``REPLICAOF NO ONE``), this one by the
sentinels' own election.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from lockcompare.backends.base import Lease, Refusal
from lockcompare.backends.fenced import FencedLock
from lockcompare.backends.redis_py_lock import RedisPyLock
from lockcompare.backends.single import SingleNodeLock


class SentinelSingle(SingleNodeLock):
    """The lock's held connection (backends/redis_direct.py) is a Sentinel-managed one: after a
    failed call it goes back to the pool, and the next call's connection asks the sentinels where
    the master is now (as redis-py's ``master_for`` client does on every new connection). Each lease
    names the server that granted it (``Lease.server``), so a history shows grants after a failover
    going to the promoted replica."""

    summary: ClassVar[str] = "single (SET NX PX, compare-and-delete) on the master Sentinel names"
    in_default_matrix: ClassVar[bool] = False  # each trial builds a Sentinel set: run it by name
    unavailable_under: ClassVar[tuple[str, ...]] = ()  # Sentinel promotes a replica: no reason to stay down
    servers: ClassVar[str] = "sentinel"

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        result = super().acquire(key=key, ttl_ms=ttl_ms)
        if isinstance(result, Lease):
            return replace(result, server=self._direct.server)
        return result


class SentinelFenced(SentinelSingle, FencedLock):
    summary: ClassVar[str] = "fenced (SET NX PX + INCR token in one script) on the master Sentinel names"
    servers: ClassVar[str] = "sentinel"


class SentinelRedisPy(RedisPyLock):
    summary: ClassVar[str] = "redis.lock.Lock on the master Sentinel names (redis.sentinel.Sentinel.master_for)"
    in_default_matrix: ClassVar[bool] = False  # each trial builds a Sentinel set: run it by name
    unavailable_under: ClassVar[tuple[str, ...]] = ()  # Sentinel promotes a replica: no reason to stay down
    servers: ClassVar[str] = "sentinel"
