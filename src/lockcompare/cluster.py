"""The Redis servers a run uses: N lock nodes and one resource, embedded (spawned) or external.

The embedded cluster is the default: lockcompare starts its own redis-server processes on free
loopback ports and always stops them. An external cluster is a set of URLs the user gives
(``--nodes``, ``--resource``), e.g. the containers ``docker-compose.yml`` starts; lockcompare only
reads and writes its own keys there and never flushes anything.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import redis

from lockcompare.errors import ConfigError, InvalidValueError
from lockcompare.lifecycle import sigterm_unwinds
from lockcompare.redisconn import connect, ping, server_version
from lockcompare.fakeclock import FakeClock, check_fake_clock_support
from lockcompare.server import RedisServer, find_redis_server

DEFAULT_NODES = 5


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """Where the lock nodes and the resource are. ``servers`` is empty for an external cluster."""

    node_urls: tuple[str, ...]
    resource_url: str
    embedded: bool
    redis_version: str
    servers: tuple[RedisServer, ...] = ()
    resource_server: RedisServer | None = None
    clocks: tuple[FakeClock, ...] = ()  # one per lock node when built with fake clocks

    def node_server(self, index: int) -> RedisServer:
        """The spawned server behind lock node ``index`` (for faults that crash or restart it)."""
        if not self.embedded:
            raise ConfigError("this fault needs the embedded cluster: lockcompare cannot restart external servers")
        return self.servers[index]

    def node_clock(self, index: int) -> FakeClock:
        """The fake wall clock of lock node ``index`` (for clock jumps)."""
        if not self.clocks:
            raise ConfigError("clock jumps need a cluster built with fake clocks (libfaketime)")
        return self.clocks[index]

    def reset_clocks(self) -> None:
        for clock in self.clocks:
            clock.reset()


@contextlib.contextmanager
def open_cluster(
    *,
    nodes: Sequence[str] | None = None,
    resource: str | None = None,
    node_count: int = DEFAULT_NODES,
    redis_server: str | None = None,
    persistence: str = "none",
    fake_clocks: bool = False,
) -> Iterator[Cluster]:
    """Yield a ready :class:`Cluster`; spawned servers are stopped however the block ends.

    With ``nodes`` and ``resource`` (validated URLs) the cluster is external and only checked
    with PING. Otherwise ``node_count`` lock nodes and one resource are spawned.
    """
    if (nodes is None) != (resource is None):
        raise ConfigError("--nodes and --resource go together: give both, or neither for the embedded cluster")
    if nodes is not None and resource is not None:
        for url in (*nodes, resource):
            ping(url)
        yield Cluster(
            node_urls=tuple(nodes), resource_url=resource, embedded=False, redis_version=server_version(nodes[0])
        )
        return
    if node_count < 1:
        raise InvalidValueError(f"need at least one lock node, got {node_count}")
    binary = find_redis_server(redis_server)
    if fake_clocks:
        check_fake_clock_support(binary)  # one clear line now, never a hang mid-matrix
    clocks = [FakeClock() for _ in range(node_count)] if fake_clocks else []
    servers = [
        RedisServer(binary=binary, name=f"node{i}", persistence=persistence, env=clocks[i].env() if clocks else None)
        for i in range(node_count)
    ]
    servers.append(RedisServer(binary=binary, name="resource"))
    with sigterm_unwinds():
        try:
            for server in servers:
                server.start()
            yield Cluster(
                node_urls=tuple(s.url for s in servers[:-1]),
                resource_url=servers[-1].url,
                embedded=True,
                redis_version=server_version(servers[-1].url),
                servers=tuple(servers[:-1]),
                resource_server=servers[-1],
                clocks=tuple(clocks),
            )
        finally:
            for server in servers:
                server.cleanup()
            for clock in clocks:
                clock.close()


def delete_keys_containing(urls: Sequence[str], prefix: str) -> None:
    """Delete the keys whose names contain ``prefix`` (a run's own, whatever a library wraps them
    in) from every server in ``urls``; never FLUSH anything, a node that is down is skipped."""
    for url in urls:
        client = connect(url, timeout_s=1.0)
        try:
            keys = list(client.scan_iter(match=f"*{prefix}*", count=1000))
            if keys:
                client.delete(*keys)
        except redis.RedisError:
            pass  # a node that is down has no keys left to clean
        finally:
            client.close()


def describe(cluster: Cluster) -> str:
    kind = "embedded" if cluster.embedded else "external"
    return f"{kind} cluster: {len(cluster.node_urls)} lock nodes + 1 resource, redis {cluster.redis_version}"

