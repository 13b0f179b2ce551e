"""A pool of clusters, so that every running trial owns its servers and servers outlive a trial.

Faults kill, restart, re-clock and cut nodes, so two trials must never share an embedded cluster.
Starting six servers per trial would cost more than a short trial's critical sections, so a
cluster goes back to the pool after its trial: checked (every server running and answering its
kind's health check, not marked broken by the trial), emptied by its kind (FLUSHALL, every etcd key,
lockcompare's tables; our own embedded servers only), and handed to the next trial of the same
:class:`~lockcompare.infra.cluster.ClusterShape` (which names the kinds: a Redis and a Valkey
cluster are never swapped). A cluster that fails the
check is stopped and a fresh one is built the next time one is needed.

A cluster that fails to *start* is replaced the same way: a server that exits during start-up (a
Sentinel did, and stopped a whole reproduction) is a broken cluster, not a broken run. The pool
starts a fresh one, up to :data:`START_ATTEMPTS` times (:func:`start_retrying`), and only then
raises :class:`~lockcompare.errors.ClusterStartFailed`, after which the matrix skips that trial's
cell with one line (runner/scheduler.py). A missing binary is not retried: no attempt can succeed.

Clusters are built lazily by a ``build(shape)`` callable, so new shapes (persistence, fake clocks,
replicas) need a new builder, not a pool change. An external cluster is handed to every trial at
once: lockcompare never flushes, stops or replaces the user's servers, and trials there are kept
apart by their per-trial key prefix (faults that need their own servers refuse external ones).

Call :meth:`ClusterPool.acquire` and :meth:`ClusterPool.release` from the main thread: a spawned
server dies with the thread that spawned it (PR_SET_PDEATHSIG follows the thread).

>>> from lockcompare.infra.cluster import ClusterShape, start_embedded
>>> with ClusterPool(build=start_embedded) as pool:                     # doctest: +SKIP
...     cluster = pool.acquire(ClusterShape(node_count=5))
...     pool.release(cluster)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING

from lockcompare.errors import ClusterError, ClusterStartFailed, RedisServerNotFoundError
from lockcompare.infra.cluster import Cluster, ClusterShape
from lockcompare.infra.kinds import get_kind

if TYPE_CHECKING:
    from lockcompare.infra.warm_pool import WarmPool


log = logging.getLogger("lockcompare")

#: How many times a cluster that fails to start is started afresh for one trial before it is given up.
START_ATTEMPTS = 3
#: The pause before the next attempt, times the attempts so far: a start-up that failed under a
#: burst of load (JVMs starting beside running trials) gets a moment for the burst to pass.
RETRY_PAUSE_S = 0.5


def start_retrying(
    build: Callable[[ClusterShape], Cluster],
    shape: ClusterShape,
    *,
    failures: list[str],
    attempts: int = START_ATTEMPTS,
) -> Cluster:
    """``build(shape)``, started afresh after each failure to start, ``attempts`` times in all.

    Each failure is appended to ``failures`` (the pool's ``replaced``) and said in one warning
    line. A failure no new start can cure (no server binary) is raised at once; after the last
    attempt, :class:`ClusterStartFailed` names the attempts and the last error.
    """
    for attempt in range(1, attempts + 1):
        try:
            return build(shape)
        except RedisServerNotFoundError:
            raise
        except ClusterError as exc:
            failures.append(f"could not start: {exc}")
            if attempt == attempts:
                raise ClusterStartFailed(f"its servers failed to start {attempts} times; the last time: {exc}") from exc
            log.warning(
                "a cluster failed to start (%s); starting a fresh one (attempt %d of %d)", exc, attempt + 1, attempts
            )
            time.sleep(RETRY_PAUSE_S * attempt)
    raise AssertionError("unreachable: attempts >= 1")


class ClusterPool:
    """Idle clusters by shape; at most ``limit`` clusters alive at once (None: no limit)."""

    def __init__(self, *, build: Callable[[ClusterShape], Cluster], limit: int | None = None) -> None:
        self._build = build
        self._limit = limit
        self._idle: dict[ClusterShape, list[Cluster]] = {}
        self._busy: list[Cluster] = []
        self.built = 0  # how many clusters were started (replacements included)
        self.replaced: list[str] = []  # why each discarded cluster was discarded

    def acquire(self, shape: ClusterShape) -> Cluster:
        """An idle cluster of ``shape``, or a newly built one (an idle one of another shape is
        stopped first when the pool is at its limit)."""
        idle = self._idle.get(shape)
        if idle:
            cluster = idle.pop()
        else:
            if self._limit is not None and self._alive() >= self._limit:
                self._evict_one()
            cluster = start_retrying(self._build, shape, failures=self.replaced)
            self.built += 1
        self._busy.append(cluster)
        return cluster

    def release(self, cluster: Cluster) -> None:
        """Take a cluster back after its trial: reset it for the next one, or stop it if broken."""
        self._busy.remove(cluster)
        problem = cluster.problem()
        if not problem:
            cluster.reset()
            problem = cluster.problem()  # a failed FLUSHALL marks the cluster broken
        if problem:
            self.replaced.append(problem)
            cluster.stop()
            return
        self._idle.setdefault(self._shape_of(cluster), []).append(cluster)

    def close(self) -> None:
        """Stop every cluster, idle or still in use (after an interrupt)."""
        clusters = [c for idle in self._idle.values() for c in idle] + self._busy
        self._idle.clear()
        self._busy.clear()
        for cluster in clusters:
            cluster.stop()

    def __enter__(self) -> ClusterPool:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _alive(self) -> int:
        return len(self._busy) + sum(len(idle) for idle in self._idle.values())

    def _evict_one(self) -> None:
        for idle in self._idle.values():
            if idle:
                idle.pop().stop()
                return

    @staticmethod
    def _shape_of(cluster: Cluster) -> ClusterShape:
        return cluster.shape if cluster.shape is not None else ClusterShape(node_count=len(cluster.node_urls))


class SharedCluster:
    """The pool's interface over one external cluster: every trial gets it, nothing is reset."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def acquire(self, shape: ClusterShape) -> Cluster:  # the user's servers have one shape
        return self.cluster

    def release(self, cluster: Cluster) -> None:
        pass  # per-trial keys were deleted by the trial itself; never FLUSH the user's servers

    def close(self) -> None:
        pass


class WithPostgres:
    """A cluster source that hands the user's PostgreSQL server (``--postgres``) to trials whose lock
    nodes speak PostgreSQL, and asks ``inner`` for every other cluster."""

    def __init__(self, inner: ClusterPool | SharedCluster | WarmPool, postgres: SharedCluster | None) -> None:
        self.inner, self.postgres = inner, postgres

    def acquire(self, shape: ClusterShape) -> Cluster:
        if self.postgres is not None and get_kind(shape.lock_servers).speaks == "postgres":
            return self.postgres.cluster
        return self.inner.acquire(shape)

    def release(self, cluster: Cluster) -> None:
        if self.postgres is None or cluster is not self.postgres.cluster:
            self.inner.release(cluster)

    def expect(self, shapes: Sequence[ClusterShape]) -> None:
        """Pass the shapes of the trials to come to a pool that starts clusters ahead (warm_pool.py)."""
        ahead = getattr(self.inner, "expect", None)
        if ahead is not None:
            ahead(shapes)

    def close(self) -> None:
        self.inner.close()
