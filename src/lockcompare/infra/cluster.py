"""The Redis servers a run uses: N lock nodes and one resource, embedded (spawned) or external.

The embedded cluster is the default: lockcompare starts its own redis-server processes on free
loopback ports and always stops them. An external cluster is a set of URLs the user gives
(``--nodes``, ``--resource``), e.g. the containers ``docker-compose.yml`` starts; lockcompare only
reads and writes its own keys there and never flushes anything.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis

from lockcompare.errors import ClusterError, ConfigError, InvalidURLError, InvalidValueError, NodeUnreachableError
from lockcompare.infra.etcd_client import delete_prefix, is_healthy
from lockcompare.infra.etcd_server import is_etcd_url, start_members
from lockcompare.infra.fakeclock import FakeClock, check_fake_clock_support
from lockcompare.infra.lifecycle import sigterm_unwinds
from lockcompare.infra.pg_client import answers as pg_answers
from lockcompare.infra.pg_client import delete_own_rows, is_postgres_url, pg_server_version, reset_database
from lockcompare.infra.pg_client import problem as pg_problem
from lockcompare.infra.postgres_server import PostgresServer
from lockcompare.infra.redisconn import connect, ping, redact, server_run_id, server_version
from lockcompare.infra.replication import (
    FailoverPair,
    ReplicatedNodes,
    ReplicationError,
)
from lockcompare.infra.server import PERSISTENCE_ARGS, RedisServer, find_redis_server

DEFAULT_NODES = 5


@dataclass(frozen=True, kw_only=True)
class ClusterShape:
    """What kind of servers a trial needs. The pool keeps clusters of different shapes apart.

    ``persistence``: "none" (the default: a restarted node has lost every key) or "aof-always"
    (AOF, fsync on every write; see server.PERSISTENCE_ARGS). ``fake_clocks``: nodes run under
    libfaketime so a fault can jump their clocks. ``replicas``: 1 makes every lock node a master
    with one replica behind a stable address (replication.ReplicatedNodes), for the failover fault.
    ``lock_servers``: what the lock nodes are, "redis", "etcd" (members of one etcd cluster, see
    etcd_server.py) or "postgres" (PostgreSQL servers, postgres_server.py); a backend declares it
    with its ``servers`` attribute. ``resource_kind``: what the resource is, a redis-server or a
    PostgreSQL server ("postgres": the balance in a table, runner/resource_pg.py).
    """

    node_count: int = DEFAULT_NODES
    persistence: str = "none"
    fake_clocks: bool = False
    replicas: int = 0
    lock_servers: str = "redis"
    resource_kind: str = "redis"


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
    redis_version: str
    servers: tuple[RedisServer, ...] = ()  # the lock nodes' servers, in node order
    resource_server: RedisServer | None = None
    shape: ClusterShape | None = None  # None: external (its shape is whatever the user runs)
    clocks: tuple[FakeClock, ...] = ()  # one per lock node when the shape has fake clocks
    #: Master + replica per lock node when the shape has replicas. ``node_urls`` are then the
    #: nodes' stable addresses (proxies a failover re-points, like a virtual IP), used by workers
    #: and harness alike: they always reach the node's current master. Only the fault itself
    #: (kill, promote, cut the replication link) acts on the servers directly.
    replication: ReplicatedNodes | None = None
    _health: _Health = field(default_factory=_Health, repr=False, compare=False)

    def node_server(self, index: int) -> RedisServer:
        """The spawned server behind lock node ``index`` (for faults that crash or restart it)."""
        if not self.embedded:
            raise ConfigError("this fault needs the embedded cluster: lockcompare cannot restart external servers")
        if self.replication is not None:
            return self.replication.pairs[index].master
        return self.servers[index]

    def node_pair(self, index: int) -> FailoverPair:
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

    def all_servers(self) -> tuple[RedisServer, ...]:
        nodes = self.replication.servers() if self.replication is not None else self.servers
        return (*nodes, self.resource_server) if self.resource_server is not None else nodes

    def mark_broken(self, reason: str) -> None:
        """Tell the pool not to hand this cluster to another trial (e.g. a fault left a node odd)."""
        self._health.broken_reason = reason or "marked broken"

    def problem(self) -> str:
        """Why this cluster cannot serve another trial, or "" (marked broken, a node down or silent)."""
        if self._health.broken_reason:
            return self._health.broken_reason
        if self.replication is not None and self.replication.problem():
            return self.replication.problem()
        for server in self.all_servers():
            if not server.is_running():
                return f"{server.name} is not running"
        for url in (*self.node_urls, self.resource_url):
            if is_etcd_url(url):
                if not is_healthy(url):
                    return f"etcd member {redact(url)} is not healthy"
                continue
            if is_postgres_url(url):
                if not pg_answers(url, timeout_s=0.5):
                    return f"PostgreSQL server {redact(url)} does not answer"
                continue
            try:
                ping(url, timeout_s=0.5)
            except ClusterError as exc:
                return str(exc)
        return ""

    def reset(self) -> None:
        """Empty every server of an embedded cluster (FLUSHALL) and put its clocks back. External
        servers are never flushed."""
        if not self.embedded:
            return
        self.reset_clocks()
        etcd = [url for url in self.node_urls if is_etcd_url(url)]
        if etcd:
            try:
                delete_prefix(etcd, "")  # every key and lease; the revision counter goes on
            except ClusterError as exc:
                self.mark_broken(f"emptying etcd failed: {exc}")
        for url in dict.fromkeys((*self.node_urls, self.resource_url)):
            if is_etcd_url(url):
                continue
            if is_postgres_url(url):
                problem = reset_database(url)  # every other session ended, lockcompare's tables emptied
                if problem:
                    self.mark_broken(f"emptying {redact(url)} failed: {problem}")
                continue
            client = connect(url, timeout_s=1.0)
            try:
                client.flushall()
            except redis.RedisError as exc:
                self.mark_broken(f"FLUSHALL failed on {redact(url)}: {exc}")
            finally:
                client.close()
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


def start_embedded(shape: ClusterShape, *, redis_server: str | None = None) -> Cluster:
    """Spawn ``shape.node_count`` lock nodes and one resource; all stopped again if any fails.

    Call from a thread that outlives the cluster (the main thread): each server dies with the
    thread that spawned it (PR_SET_PDEATHSIG follows the spawning thread, not the process).
    """
    if shape.node_count < 1:
        raise InvalidValueError(f"need at least one lock node, got {shape.node_count}")
    if shape.persistence not in PERSISTENCE_ARGS:
        known = ", ".join(PERSISTENCE_ARGS)
        raise InvalidValueError(f"unknown persistence {shape.persistence!r} (known: {known})")
    if shape.lock_servers == "etcd":
        if shape.replicas:
            raise ConfigError("etcd members replicate by consensus: no --wait-replicas/failover replicas")
        return _start_etcd(shape, redis_server=redis_server)
    if shape.lock_servers == "postgres":
        return _start_postgres(shape)
    if shape.lock_servers != "redis":
        raise InvalidValueError(f"unknown lock servers {shape.lock_servers!r} (known: redis, etcd, postgres)")
    binary = find_redis_server(redis_server)
    if shape.replicas:
        if shape.resource_kind != "redis":
            raise ConfigError("failover clusters keep their resource on a redis-server")
        return _start_replicated(shape, binary=binary)
    if shape.fake_clocks:
        check_fake_clock_support(binary)  # one clear line now, never a hang mid-matrix
    clocks = [FakeClock() for _ in range(shape.node_count)] if shape.fake_clocks else []
    nodes = [
        RedisServer(
            binary=binary, name=f"node{i}", persistence=shape.persistence, env=clocks[i].env() if clocks else None
        )
        for i in range(shape.node_count)
    ]
    resource = _resource_server(shape, binary=binary)
    try:
        for server in (*nodes, resource):
            server.start()
        return Cluster(
            node_urls=tuple(s.url for s in nodes),
            resource_url=resource.url,
            embedded=True,
            redis_version=server_version(nodes[0].url),
            servers=tuple(nodes),
            resource_server=resource,
            shape=shape,
            clocks=tuple(clocks),
        )
    except BaseException:
        for server in (*nodes, resource):
            server.cleanup()
        for clock in clocks:
            clock.close()
        raise


def _start_replicated(shape: ClusterShape, *, binary: Path) -> Cluster:
    """``shape.node_count`` master + replica pairs behind stable addresses, and one resource."""
    if shape.replicas != 1 or shape.fake_clocks or shape.persistence != "none":
        raise ConfigError(f"{shape}: replicated lock nodes have exactly one replica, no fake clocks, no persistence")
    nodes = ReplicatedNodes(count=shape.node_count, binary=binary)
    resource = RedisServer(binary=binary, name="resource")
    try:
        nodes.start()
        resource.start()
        return Cluster(
            node_urls=nodes.urls,
            resource_url=resource.url,
            embedded=True,
            redis_version=server_version(resource.url),
            servers=tuple(pair.master for pair in nodes.pairs),
            resource_server=resource,
            shape=shape,
            replication=nodes,
        )
    except BaseException:
        nodes.close()
        resource.cleanup()
        raise


def _start_etcd(shape: ClusterShape, *, redis_server: str | None) -> Cluster:
    """``shape.node_count`` etcd members as the lock nodes, and a redis-server as the resource."""
    if shape.fake_clocks or shape.persistence != "none":
        raise ConfigError("etcd members run with real clocks and always persist: no fake clocks or --persistence")
    binary = find_redis_server(redis_server) if shape.resource_kind == "redis" else None
    members = start_members(count=shape.node_count)
    resource = _resource_server(shape, binary=binary)
    try:
        resource.start()
        return Cluster(
            node_urls=tuple(m.url for m in members),
            resource_url=resource.url,
            embedded=True,
            redis_version=_version(resource.url),
            servers=tuple(members),  # type: ignore[arg-type]  # EtcdServer has RedisServer's interface
            resource_server=resource,
            shape=shape,
        )
    except BaseException:
        for member in members:
            member.cleanup()
        resource.cleanup()
        raise


def _resource_server(shape: ClusterShape, *, binary: Path | None) -> RedisServer:
    """The resource's server, not started: a redis-server, or a PostgreSQL server (``resource_kind``)."""
    if shape.resource_kind == "postgres":
        return PostgresServer(name="resource")  # type: ignore[return-value]  # the same interface
    if shape.resource_kind != "redis":
        raise InvalidValueError(f"unknown resource kind {shape.resource_kind!r} (known: redis, postgres)")
    assert binary is not None
    return RedisServer(binary=binary, name="resource")


def _version(url: str) -> str:
    """The version the results record for a cluster (the CSV's ``redis_version`` column)."""
    return f"postgresql {pg_server_version(url)}" if is_postgres_url(url) else server_version(url)


def _start_postgres(shape: ClusterShape) -> Cluster:
    """``shape.node_count`` PostgreSQL servers as the lock nodes, and the resource (either kind)."""
    if shape.fake_clocks or shape.persistence != "none" or shape.replicas:
        raise ConfigError("PostgreSQL lock nodes run with real clocks, persist on their own and have no replicas")
    binary = find_redis_server(None) if shape.resource_kind == "redis" else None
    nodes = [PostgresServer(name=f"pg{i}") for i in range(shape.node_count)]
    resource = _resource_server(shape, binary=binary)
    servers: tuple[PostgresServer | RedisServer, ...] = (*nodes, resource)
    try:
        for server in servers:
            server.start()
        return Cluster(
            node_urls=tuple(s.url for s in nodes),
            resource_url=resource.url,
            embedded=True,
            redis_version=_version(resource.url),
            servers=tuple(nodes),  # type: ignore[arg-type]  # PostgresServer has RedisServer's interface
            resource_server=resource,
            shape=shape,
        )
    except BaseException:
        for server in servers:
            server.cleanup()
        raise


def connect_external(*, nodes: Sequence[str], resource: str) -> Cluster:
    """The user's servers (validated URLs), checked with PING; lockcompare never flushes them."""
    for url in (*nodes, resource):
        if is_postgres_url(url):
            problem = pg_problem(url, timeout_s=2.0)
            if problem:  # a wrong password or a missing database is said as such, not "does not answer"
                raise NodeUnreachableError(
                    f"PostgreSQL server {redact(url)} cannot be used: {redact(problem, passwords_of=(url,))}"
                )
            continue
        ping(url)
    check_distinct_servers([url for url in nodes if not is_postgres_url(url)])
    version = _version(nodes[0])
    return Cluster(node_urls=tuple(nodes), resource_url=resource, embedded=False, redis_version=version)


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
) -> Iterator[Cluster]:
    """Yield a ready :class:`Cluster`; spawned servers are stopped however the block ends.

    With ``nodes`` and ``resource`` (validated URLs) the cluster is external and only checked
    with PING. Otherwise ``node_count`` lock nodes and one resource are spawned.
    """
    if (nodes is None) != (resource is None):
        raise ConfigError("--nodes and --resource go together: give both, or neither for the embedded cluster")
    if nodes is not None and resource is not None:
        yield connect_external(nodes=nodes, resource=resource)
        return
    with sigterm_unwinds():
        shape = ClusterShape(
            node_count=node_count,
            persistence=persistence,
            fake_clocks=fake_clocks,
            replicas=replicas,
            lock_servers=lock_servers,
            resource_kind=resource_kind,
        )
        cluster = start_embedded(shape, redis_server=redis_server)
        try:
            yield cluster
        finally:
            cluster.stop()


def delete_keys_containing(urls: Sequence[str], prefix: str) -> None:
    """Delete the keys whose names contain ``prefix`` (a run's own, whatever a library wraps them
    in) from every server in ``urls``; never FLUSH anything, a node that is down is skipped."""
    for url in dict.fromkeys(urls):
        if is_postgres_url(url):
            delete_own_rows(url, prefix)  # only rows of lockcompare's own tables that name the prefix
            continue
        if is_etcd_url(url):
            try:
                delete_prefix([url], prefix)  # an etcd backend's keys start with the trial's prefix
            except ClusterError:
                pass  # a member that is down, or a cluster without quorum: its leases end anyway
            continue
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
    first = cluster.node_urls[0] if cluster.node_urls else ""
    nodes = "etcd members" if is_etcd_url(first) else "PostgreSQL servers" if is_postgres_url(first) else "lock nodes"
    resource = "PostgreSQL resource" if is_postgres_url(cluster.resource_url) else "resource"
    return f"{kind} cluster: {len(cluster.node_urls)} {nodes} + 1 {resource}, redis {cluster.redis_version}"
