"""Where a local run's trials get their clusters: a pool of embedded ones, or the user's servers.

Whose servers a trial gets is asked of the one option (``options.lock_servers``), as each kind's
route declares (runner/lock_servers.py routes()): the user's shared nodes (Redis-protocol) are every
trial's cluster; servers beside them (PostgreSQL) serve the trials on their protocol; the other
user's servers (a ZooKeeper ensemble) are the lock nodes of the pool's clusters of their protocol.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from lockcompare.errors import ConfigError, RedisServerNotFoundError
from lockcompare.infra.cluster import Cluster, ClusterShape, connect_external, start_embedded
from lockcompare.infra.kinds import get_kind, server_for
from lockcompare.infra.pool import SharedCluster, WithPostgres
from lockcompare.infra.warm_pool import WarmPool
from lockcompare.protocols import SERVER_OPTION_PROTOCOL
from lockcompare.runner.plan import ClusterOptions
from lockcompare.scenario.trialspec import TrialSpec

#: Clusters kept warm beyond one per job slot, for the trials about to start (issue 44).
SPARE_CLUSTERS = 2


@contextlib.contextmanager
def cluster_source(options: ClusterOptions, *, jobs: int, specs: Sequence[TrialSpec]) -> Iterator[WithPostgres]:
    """A pool of embedded clusters (one per trial in flight), or the user's servers shared by all."""
    shared = options.lock_servers.shared()
    if (shared is None) != (options.resource is None):
        raise ConfigError(
            "--nodes and --resource go together (--resource goes with Redis-protocol --lock-servers): give both, "
            "or neither for the embedded cluster"
        )
    if shared is None:  # no binary for the chosen Redis-protocol server: one clear error before anything starts
        # (only for trials that run one: a trial on PostgreSQL alone records the neutral --server)
        speaking = [spec for spec in specs if SERVER_OPTION_PROTOCOL in (spec.lock_servers, spec.resource_kind)]
        for kind in {server_for(SERVER_OPTION_PROTOCOL, choice=spec.server) for spec in speaking}:
            problem = kind.problem(binary=options.redis_server)
            if problem:
                raise RedisServerNotFoundError(problem)
    database = options.lock_servers.beside_shared()  # one server: the lock and the resource
    postgres = SharedCluster(connect_external(nodes=database, resource=database[0])) if database else None
    if shared is not None and options.resource is not None:
        yield WithPostgres(SharedCluster(connect_external(nodes=shared, resource=options.resource)), postgres)
        return

    def build(shape: ClusterShape) -> Cluster:
        users = options.lock_servers.pooled(get_kind(shape.lock_servers).speaks)  # the user's lock nodes, if any
        return start_embedded(shape, redis_server=options.redis_server, user_nodes=users)

    # Clusters start and reset on the pool's threads, SPARE_CLUSTERS ahead of the trials (warm_pool.py).
    with WarmPool(build=build, limit=jobs + SPARE_CLUSTERS) as pool:
        yield WithPostgres(pool, postgres)
