"""The ``sentinel`` server kind: Redis behind Sentinel (the lock nodes: nodes.py; the sentinels: server.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lockcompare.errors import ConfigError
from lockcompare.infra.kinds import NO_SESSION, REDIS_PROTOCOL, Capabilities, Capability, Roles, Server, kinds_speaking
from lockcompare.infra.redis.kind import redis_protocol_binary
from lockcompare.infra.redis.server import RedisServer, delete_keys_naming, describe_version, flush_all, pings
from lockcompare.infra.replication import ReplicatedNodes
from lockcompare.infra.sentinel.nodes import SentinelNodes
from lockcompare.infra.sentinel.server import master_address

if TYPE_CHECKING:
    from lockcompare.infra.cluster import Cluster
    from lockcompare.infra.fakeclock import FakeClock


@dataclass(frozen=True, kw_only=True)
class SentinelKind:
    """Redis behind Sentinel: every lock node a master + replica, three sentinels, clients by discovery."""

    name: str = "sentinel"
    speaks: str = "sentinel"
    capabilities: Capabilities = field(
        default_factory=lambda: Capabilities(
            offers=frozenset({Capability.REPLICATION, Capability.LEASE_HOLDERS, Capability.ROLES}),
            # Lock nodes are always pairs under sentinels (cluster.py builds them with replicated_nodes).
            always_replicated=True,
            reasons={
                Capability.CLOCK_CONTROL: "Sentinel-managed Redis nodes run with real clocks (clock jumps are "
                "aimed at plain Redis nodes)",
                Capability.SESSION_CONTROL: NO_SESSION,
                Capability.PEER_LINKS: "only the replication link of a Sentinel-managed node is proxied (the "
                "failover fault cuts it); the sentinels' own links are not",
                Capability.PROXIED_LINKS: "a Sentinel client connects to whatever master the sentinels name, "
                "past any proxy on the node's address: its links cannot be cut or slowed",
            },
        )
    )

    def problem(self, *, binary: str | None = None) -> str:
        # A question with no side effect: asking it (the backends' viability asks every kind) must
        # print nothing, so not redis_protocol_binary, whose choice of Valkey says so in a line.
        problems = [kind.problem(binary=binary) for kind in kinds_speaking(REDIS_PROTOCOL)]
        return "" if "" in problems else problems[0]

    def start_nodes(
        self, *, count: int, persistence: str = "none", clocks: Sequence[FakeClock] = (), binary: str | None = None
    ) -> list[Server]:
        raise ConfigError("Sentinel-managed lock nodes are started as replicated pairs (replicated_nodes)")

    def replicated_nodes(self, *, count: int, binary: str | None = None) -> ReplicatedNodes:
        return SentinelNodes(count=count, binary=redis_protocol_binary(binary))

    def new_server(self, *, name: str, binary: str | None = None) -> Server:
        return RedisServer(binary=redis_protocol_binary(binary), name=name)

    def owns(self, url: str) -> bool:
        return url.startswith("redis+sentinel://")

    def answers(self, url: str, *, timeout_s: float) -> bool:
        return pings(url, timeout_s=timeout_s)

    def unusable(self, url: str, *, timeout_s: float) -> str:
        return "" if self.answers(url, timeout_s=timeout_s) else f"no master answers behind {url}"

    def version(self, url: str) -> str:
        found = master_address(url)
        return f"{describe_version(f'redis://{found[0]}:{found[1]}/0')} (sentinel)" if found else "unknown (sentinel)"

    def empty(self, urls: Sequence[str]) -> str:
        return flush_all(urls)  # connect() follows a redis+sentinel URL to its master

    def delete_keys(self, urls: Sequence[str], prefix: str) -> None:
        delete_keys_naming(urls, prefix)

    def read_roles(self, cluster: Cluster, *, timeout_s: float = 0.5) -> Roles:
        """Each lock node's master as the sentinels name it ("master node0-b" after a failover); the
        "leader" is node 0 (the node single-node backends use) when the sentinels name a master for it."""
        pairs = cluster.replication.pairs if cluster.replication is not None else ()
        modes = []
        for i, url in enumerate(cluster.node_urls):
            found = master_address(url, timeout_s=timeout_s)
            names = [s.name for s in (pairs[i].servers() if i < len(pairs) else ()) if found and s.port == found[1]]
            modes.append("no master" if found is None else f"master {names[0] if names else found[1]}")
        leader = 0 if modes and modes[0] != "no master" else None
        return Roles(leader=leader, modes=tuple(modes))


SENTINEL = SentinelKind()
