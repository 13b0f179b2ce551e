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

from typing import ClassVar

from lockcompare.backends.fenced import FencedLock
from lockcompare.backends.redis_py_lock import RedisPyLock
from lockcompare.backends.single import SingleNodeLock


class SentinelSingle(SingleNodeLock):
    summary: ClassVar[str] = "single (SET NX PX, compare-and-delete) on the master Sentinel names"
    servers: ClassVar[str] = "sentinel"


class SentinelFenced(FencedLock):
    summary: ClassVar[str] = "fenced (SET NX PX + INCR token in one script) on the master Sentinel names"
    servers: ClassVar[str] = "sentinel"


class SentinelRedisPy(RedisPyLock):
    summary: ClassVar[str] = "redis.lock.Lock on the master Sentinel names (redis.sentinel.Sentinel.master_for)"
    servers: ClassVar[str] = "sentinel"
