"""The ``etcd`` server kind: the members of one cluster (server.py), spoken to over its v3 JSON API (client.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lockcompare.errors import ClusterError
from lockcompare.infra.etcd.client import delete_prefix, is_healthy
from lockcompare.infra.etcd.server import (
    FAULT_MEMBERS,
    etcd_version,
    find_etcd,
    is_etcd_url,
    member_status,
    start_members,
)
from lockcompare.infra.kinds import ETCD_PROTOCOL, NO_SESSION, Capabilities, Capability, LockNodes, Roles, Server
from lockcompare.infra.own_servers import OwnServersKind
from lockcompare.redaction import redact

if TYPE_CHECKING:
    from lockcompare.infra.cluster import Cluster


@dataclass(frozen=True, kw_only=True)
class EtcdKind(OwnServersKind):
    """etcd: members of one cluster, always persisting (a restarted member keeps what it committed),
    real clocks, replication by consensus only (no asynchronous replica to promote)."""

    name: str = "etcd"
    speaks: str = ETCD_PROTOCOL
    capabilities: Capabilities = field(
        default_factory=lambda: Capabilities(
            offers=frozenset({Capability.ROLES, Capability.PEER_LINKS}),
            reasons={
                Capability.SESSION_CONTROL: NO_SESSION,
                Capability.CLOCK_CONTROL: "etcd is a statically linked Go binary: LD_PRELOAD (libfaketime) cannot move "
                "its clock, and its leases are timed on the leader's monotonic clock anyway",
                Capability.REPLICATION: "etcd replicates by consensus: there is no asynchronous replica to promote",
                Capability.LEASE_HOLDERS: "lockcompare cannot read which etcd member holds a lease (nodes=holders:K "
                "and others:K never resolve; name the members, e.g. nodes=0)",
            },
            # One member, or three when a fault crashes, restarts or cuts off members.
            lock_nodes=LockNodes(default=1, under_faults=FAULT_MEMBERS),
        )
    )

    refuses_clocks = "etcd members run with real clocks and always persist: no fake clocks or --persistence"
    never_alone = "an etcd member is started with its cluster (start_nodes), never alone"

    def require(self) -> None:
        find_etcd()

    def start_servers(self, *, count: int) -> Sequence[Server]:
        return start_members(count=count)

    def read_roles(self, cluster: Cluster, *, timeout_s: float = 0.5) -> Roles:
        """Each member's own status (``/v3/maintenance/status``, answered locally, no quorum needed):
        the member whose id is the leader it names leads; of two such (an old leader not yet
        stepped down), the one with the higher raft term."""
        statuses = [member_status(url, timeout_s=timeout_s) for url in cluster.node_urls]
        modes, claims = [], []
        for index, status in enumerate(statuses):
            if status is None:
                modes.append("down")
                continue
            me, leader = status["member_id"], status["leader"]
            if leader in ("", "0"):
                modes.append("no leader")
            elif leader == me:
                modes.append("leader")
                claims.append((int(status["term"]), index))
            else:
                modes.append("follower")
        term, leader_index = max(claims) if claims else (0, None)
        return Roles(leader=leader_index, modes=tuple(modes), term=term)

    def owns(self, url: str) -> bool:
        return is_etcd_url(url)

    def answers(self, url: str, *, timeout_s: float) -> bool:
        return is_healthy(url, timeout_s=timeout_s)

    def unusable(self, url: str, *, timeout_s: float) -> str:
        return "" if self.answers(url, timeout_s=timeout_s) else f"etcd member {redact(url)} is not healthy"

    def version(self, url: str) -> str:
        return f"etcd {etcd_version(url)}"

    def empty(self, urls: Sequence[str]) -> str:
        try:
            delete_prefix(urls, "")  # every key and lease; the revision counter goes on
        except ClusterError as exc:
            return f"emptying etcd failed: {exc}"
        return ""

    def delete_keys(self, urls: Sequence[str], prefix: str) -> None:
        for url in dict.fromkeys(urls):
            try:
                delete_prefix([url], prefix)  # an etcd backend's keys start with the trial's prefix
            except ClusterError:
                pass  # a member that is down, or a cluster without quorum: its leases end anyway


ETCD = EtcdKind()
