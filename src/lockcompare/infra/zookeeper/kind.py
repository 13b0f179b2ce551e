"""The ``zookeeper`` server kind: a standalone server or an ensemble (server.py), spoken to through
kazoo (client.py), whose sessions it can end from the server side (sessions.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lockcompare.errors import ClusterError
from lockcompare.infra.kinds import ZOOKEEPER_PROTOCOL, Capabilities, Capability, LockNodes, Roles, Server, UserServers
from lockcompare.infra.own_servers import OwnServersKind
from lockcompare.infra.zookeeper.client import delete_children_containing, kazoo_client_class
from lockcompare.infra.zookeeper.server import (
    RECONNECT_MS,
    RECOVERY_MS,
    find_zookeeper,
    four_letter,
    is_zookeeper_url,
    mode_and_epoch,
    mode_of,
    start_servers,
    zookeeper_urls,
    zookeeper_version,
)
from lockcompare.infra.zookeeper.sessions import expire_holder_session

if TYPE_CHECKING:
    from lockcompare.infra.cluster import Cluster


@dataclass(frozen=True, kw_only=True)
class ZooKeeperKind(OwnServersKind):
    """ZooKeeper: a standalone server or an ensemble (leader first), always persisting (a restarted
    server keeps its znodes and sessions), real clocks, replication by consensus only. It can end a
    client's session from the server side (sessions.py), so it takes session-kill
    (:class:`~lockcompare.infra.kinds.SessionKind`)."""

    name: str = "zookeeper"
    speaks: str = ZOOKEEPER_PROTOCOL
    session_reopens: str = "kazoo opens a new one at its next reconnect"
    capabilities: Capabilities = field(
        default_factory=lambda: Capabilities(
            offers=frozenset({Capability.SESSION_CONTROL, Capability.ROLES, Capability.PEER_LINKS}),
            reasons={
                Capability.CLOCK_CONTROL: "ZooKeeper times sessions on the leader's monotonic clock, not the wall "
                "clock (and libfaketime is applied to Redis-protocol servers only)",
                Capability.REPLICATION: "a ZooKeeper ensemble replicates by consensus: there is no asynchronous "
                "replica to promote",
                Capability.LEASE_HOLDERS: "lockcompare cannot read which ZooKeeper server holds a lock "
                "(nodes=holders:K and others:K never resolve; name the servers, e.g. nodes=0)",
            },
            # A standalone server (restarted in place by the server restart), else an ensemble of three
            # (faults/plan.py restarts_node_0_only: a leader crash, a partition that leaves the holder in the minority).
            lock_nodes=LockNodes(default=1, under_faults=3, restart_in_place=True),
            # zk://HOST:PORT, or HOST:PORT as --zookeeper takes it
            user_servers=UserServers(
                alias="--zookeeper",
                use="the lock nodes of the backends on it",
                parse=lambda texts, _flag: zookeeper_urls(",".join(texts)),
            ),
            # ZooKeeper's Java client (Curator's too) waits a random 0-1000 ms before it reconnects
            # (ClientCnxn.startConnect); kazoo backs off from 100 ms, doubling, with jitter.
            reconnect_ms=RECONNECT_MS,
            recovery_ms=RECOVERY_MS,
        )
    )

    refuses_clocks = "ZooKeeper servers run with real clocks and always persist: no fake clocks or --persistence"
    never_alone = "a ZooKeeper server is started with its ensemble (start_nodes), never alone"

    def require(self) -> None:
        # The harness itself speaks to these servers through kazoo (cleanup between trials, lease
        # holders, health): without it no lock of any language can be measured on them.
        find_zookeeper()
        kazoo_client_class()

    def start_servers(self, *, count: int) -> Sequence[Server]:
        return start_servers(count=count)

    def end_holder_sessions(
        self,
        urls: Sequence[str],
        *,
        nodes: Sequence[int],
        lock_key: str,
        lease_znodes: object = None,
        holds: Callable[[object], bool] | None = None,
    ) -> tuple[str, dict[str, object]]:
        """Close the session holding ``lock_key`` (sessions.py): a session is the
        ensemble's, not one server's, so ``nodes`` does not narrow it (all of ``urls`` are its hosts).
        ``sessions_ended``: ZooKeeper session ids; ``session_owner``: the holder's identifier;
        ``holds`` confirms the holder's identifier against the workers' current leases at kill time."""
        detail, sessions, whose = expire_holder_session(
            list(urls),
            lock_key=lock_key,
            lease_znodes=lease_znodes,  # type: ignore[arg-type]  # checked by the backend loader
            holds=holds,
        )
        return detail, {"sessions_ended": sessions, **whose}

    def read_roles(self, cluster: Cluster, *, timeout_s: float = 0.5) -> Roles:
        """Each server's ``srvr`` Mode (leader, follower, standalone; "not serving" while it looks for a
        leader, "down" when it does not answer); of two leaders (an old one not yet stepped down),
        the one with the higher epoch."""
        modes, claims = [], []
        for index, url in enumerate(cluster.node_urls):
            host, _, port = url.removeprefix("zk://").rstrip("/").rpartition(":")
            if not four_letter(host, int(port), "ruok", timeout_s=timeout_s):
                modes.append("down")
                continue
            mode, epoch = mode_and_epoch(url, timeout_s=timeout_s)
            modes.append(mode or "not serving")
            if mode in ("leader", "standalone"):
                claims.append((epoch, index))
        epoch, leader = max(claims) if claims else (0, None)
        return Roles(leader=leader, modes=tuple(modes), term=epoch)

    def owns(self, url: str) -> bool:
        return is_zookeeper_url(url)

    def answers(self, url: str, *, timeout_s: float) -> bool:
        return bool(mode_of(url, timeout_s=timeout_s))

    def unusable(self, url: str, *, timeout_s: float) -> str:
        return "" if self.answers(url, timeout_s=timeout_s) else f"ZooKeeper server {url} does not serve (no mode)"

    def version(self, url: str) -> str:
        return f"zookeeper {zookeeper_version(url)}"

    def empty(self, urls: Sequence[str]) -> str:
        try:
            delete_children_containing(urls, "")  # lockcompare's own path, emptied
        except ClusterError as exc:
            return f"emptying ZooKeeper failed: {exc}"
        if len(urls) > 1 and mode_of(urls[0]) != "leader":
            # The catalogue's leader crash strikes node 0: an ensemble whose leader moved is rebuilt.
            return "the ZooKeeper ensemble's leader is no longer node 0"
        return ""

    def delete_keys(self, urls: Sequence[str], prefix: str) -> None:
        for url in dict.fromkeys(urls):
            try:
                delete_children_containing([url], prefix)  # only the trial's own znodes
            except ClusterError:
                pass  # a server that is down: its sessions end, and their ephemeral znodes with them


ZOOKEEPER = ZooKeeperKind()
