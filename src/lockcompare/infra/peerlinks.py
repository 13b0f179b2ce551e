"""Links between a cluster's servers through proxies lockcompare controls: partitions on loopback.

Consensus systems fail by their servers losing each other, not only their clients: a leader cut
off in a minority, a holder's session on the minority side. Jepsen cuts those links with
iptables; without root on loopback, lockcompare puts a proxy (infra/proxy.py's host process) in
front of every server's peer ports and tells the other servers to reach it there:

- etcd: each member listens on its own peer port and *advertises* its proxy's
  (``--initial-advertise-peer-urls``, ``--initial-cluster``): every member dials every peer through
  the peer's proxy (etcd/server.py).
- ZooKeeper: each server's ``zoo.cfg`` names its own quorum and election ports and its peers'
  proxies (zookeeper/server.py). A server that loses the election handshake's tie-break dials back
  the address the other sent in its first bytes, its own real port; the proxy rewrites that
  address to the sender's proxy (:meth:`PeerLinks.rewrite`, equal length: both are 5-digit ports).

A proxy knows which server it fronts, not who calls: the caller's port names a socket of one of
the servers' processes (infra/sockets.py), so a partition is a set of cut *pairs* with the
blackhole semantics of ``cut`` (bytes vanish both ways, connections stay open, a connection that
lost bytes is reset at the heal). :meth:`PeerLinks.partition` takes the sides; a server's links
from every server on another side are cut; :meth:`PeerLinks.heal` forwards everything again.

The proxies live as long as the cluster (pooled with it): one process per cluster, stopped when
the last of its servers is cleaned up.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from lockcompare.errors import ConfigError, ProxyError
from lockcompare.infra.proxy import LinkProxy, ProxyHost
from lockcompare.infra.sockets import sources_by_link

if TYPE_CHECKING:
    from lockcompare.infra.cluster import Cluster
    from lockcompare.infra.kinds import Server


#: How long a peer's connect to a server whose port refuses it is tried again before the proxy
#: closes it. A proxy accepts at once, so without this a refusal reaches the peer as a connection
#: that opened and closed: a ZooKeeper follower that dials its new leader before the leader listens
#: (tens of ms) takes the close for a failed leader and starts an election over, where a refusal
#: would have had it retry its connect (every 100 ms). Five-server ensembles losing their leader
#: and a follower then took 5.6-16.1 s to serve again, in steps of initLimit (5 s), instead of
#: 0.3-0.4 s (results/derived/zk-election.txt). A dead peer's connects are closed after this long.
REFUSED_WAIT_S = 1.0


class PeerLinks:
    """The proxies in front of a cluster's servers' peer ports (member index -> its links)."""

    def __init__(self, *, name: str) -> None:
        self.name = name
        self._host = ProxyHost(name=name)
        self._links: dict[int, list[LinkProxy]] = {}
        self._servers: list[Server] = []
        self._held: set[str] = set()  # the servers not yet cleaned up

    def start(self) -> None:
        self._host.start()

    def add(self, *, member: int, target_port: int) -> int:
        """A proxy in front of ``member``'s peer port ``target_port``; its own port (what peers dial)."""
        link = LinkProxy(
            target_port=target_port, name=f"{self.name}-m{member}-{target_port}", host=self._host,
            refused_wait_s=REFUSED_WAIT_S,
        )  # fmt: skip
        link.start()
        self._links.setdefault(member, []).append(link)
        assert link.port is not None
        return link.port

    def rewrite(self, pairs: Sequence[tuple[str, str]]) -> None:
        """In the first bytes of every connection, replace each ``old`` by ``new`` (same length)."""
        encoded = [(old.encode(), new.encode()) for old, new in pairs]
        if any(len(old) != len(new) for old, new in encoded):
            raise ProxyError(f"{self.name}: a rewritten address must keep its length: {pairs}")
        for link in self.links():
            self._host.call("rewrite", port=link.port, rewrites=encoded)

    def attach(self, servers: Sequence[Server], *, added_as: Sequence[int] | None = None) -> None:
        """The servers in node order (their pids name a connection's source); each holds the proxies.
        ``added_as[i]``: the member number node i's links were added under, when the order changed
        since (a ZooKeeper ensemble is sorted leader first)."""
        if added_as is not None:
            self._links = {node: self._links.get(member, []) for node, member in enumerate(added_as)}
        self._servers = list(servers)
        self._held = {server.name for server in servers}
        for server in servers:
            server.peer_links = self  # type: ignore[attr-defined]  # read back by peer_links_of

    def links(self) -> list[LinkProxy]:
        return [link for member in sorted(self._links) for link in self._links[member]]

    def partition(self, sides: Sequence[Collection[int]]) -> str:
        """Cut every link between servers on different ``sides`` (member indices; a member on no side is
        a side of its own). Returns what it did, for the history."""
        if not self.is_running():
            raise ConfigError(f"{self.name}: the peer links are not running")
        side_of = {member: i for i, side in enumerate(sides) for member in side}
        members = range(len(self._servers))
        for member in members:
            side_of.setdefault(member, len(sides) + member)
        pids = {server.pid: i for i, server in enumerate(self._servers) if server.pid is not None}
        cuts = {
            link.port: [m for m in members if side_of[m] != side_of[member]]
            for member, links in self._links.items()
            for link in links
            if link.port is not None
        }
        unknown = int(self._host.call("partition", cuts=cuts, pids=pids, sources=sources_by_link(cuts, pids)))
        shown = " | ".join(",".join(str(m) for m in sorted(side)) for side in sides)
        # A connection whose source could not be named is cut too (a partition never leaks): said.
        return f"peer links cut between sides {shown}" + (
            f" ({unknown} connection(s) of unknown source cut)" if unknown else ""
        )

    def heal(self) -> str:
        """Forward every peer link again; connections that lost bytes are reset."""
        if not self.is_running():
            return "peer links already gone"
        for link in self.links():
            link.heal()
        return "peer links healed"

    @property
    def pid(self) -> int | None:
        """The proxy process every link of this ensemble runs in."""
        return self._host.pid

    def is_running(self) -> bool:
        return self._host.is_running()

    def release(self, server_name: str) -> None:
        """``server_name`` was cleaned up; the proxies stop with the last one."""
        self._held.discard(server_name)
        if not self._held:
            self.stop()

    def stop(self) -> None:
        for link in self.links():
            link.port = None
        self._host.stop()


def cluster_process_ids(cluster: Cluster) -> list[int]:
    """Every process a cluster runs, whose CPU is its trials' too: its servers, and the proxy
    processes in their paths (a replicated pair's links and fronts, an ensemble's peer links): every
    request of a failover trial crosses a proxy process."""
    pids = [server.pid for server in cluster.all_servers()]
    if cluster.replication is not None:
        pids += cluster.replication.pids()  # its servers again, and its links' proxy process
    links = peer_links_of(cluster)
    if links is not None:
        pids.append(links.pid)
    return sorted({pid for pid in pids if pid is not None})


def peer_links_of(cluster: Cluster) -> PeerLinks | None:
    """The cluster's peer links (None: its servers reach each other directly, or have no peers)."""
    for server in cluster.servers:
        links = getattr(server, "peer_links", None)
        if isinstance(links, PeerLinks):
            return links
    return None
