"""``partitioned`` and ``partitioned-skew``: no lock — each worker owns its own key.

The lesson's third lock-free alternative. The balance is split into one partition per worker
(``balance:p<worker>`` on the resource, the balance kept as their sum: runner/resource_redis.py); a
worker read-modify-writes only its own partition, so no two workers share a key and there is
nothing to lock. Contention does not vanish, it moves to skew: in ``partitioned-skew`` a share
(:attr:`PartitionedSkew.skew`) of each worker's updates falls on another worker's key, done as
the same unprotected read-modify-write — what happens when traffic does not respect the
partitioning and nobody routes it to the owner. Lost updates then measure what the skew costs.

Conflicts are counted as for ``atomic``: two workers inside their sections at once, whatever key
each touches (the resource's one occupancy counter); the damage shows in lost updates.
"""

from __future__ import annotations

from typing import ClassVar

from lockcompare.backends.no_lock import NoLock


class Partitioned(NoLock):
    """Lock-free: every worker read-modify-writes its own partition of the balance."""

    summary: ClassVar[str] = "lock-free: each worker read-modify-writes its own key (partitioning by key)"
    in_default_matrix: ClassVar[bool] = (
        False  # the lock-free alternatives have their own comparison (docs/lock-free.md)
    )
    resource_check: ClassVar[str] = "partitioned"
    #: The share of a worker's updates that fall on a key another worker owns (drawn per round).
    skew: ClassVar[float] = 0.0


class PartitionedSkew(Partitioned):
    """``partitioned`` with a skewed workload: 20 % of updates hit another worker's key, unprotected."""

    summary: ClassVar[str] = "lock-free: own keys, but 20% of updates hit another worker's key, unlocked (skew)"
    resource_check: ClassVar[str] = "partitioned-skew"
    skew: ClassVar[float] = 0.2
