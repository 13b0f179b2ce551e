"""Sentinel-managed lock nodes: each a master + replica that three real sentinels fail over.

See infra/sentinel/server.py for the deployment (URLs, the sentinel processes, the election listener).
Here: :class:`SentinelPair` (one monitored master and its replica on two pinned ports; which of
the two is master is whatever the sentinels say), :class:`SentinelNodes` (the pairs and the three
sentinels, as the cluster's ``replication``); the server kind is kind.py's :data:`SENTINEL`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from lockcompare.errors import ReplicationError
from lockcompare.infra.kinds import Server
from lockcompare.infra.proxy import LinkProxy, ProxyHost
from lockcompare.infra.redis.client import sentinel_url
from lockcompare.infra.redis.failover_pair import REPLICATION_ARGS, replication_info
from lockcompare.infra.redis.server import RedisServer
from lockcompare.infra.replication import ReplicatedNodes
from lockcompare.infra.sentinel.server import (
    FAILOVER_TIMEOUT_MS,
    FAILOVER_WAIT_S,
    GUARD_TIMEOUT_MS,
    SENTINELS,
    SYNC_TIMEOUT_S,
    ElectionListener,
    SentinelServer,
    admin_client,
    master_address,
)
from lockcompare.infra.spawned import free_port

if TYPE_CHECKING:
    pass


class SentinelPair:
    """One monitored master (service ``name``) and its replica; the replica's link through a proxy."""

    def __init__(self, *, name: str, binary: Path, host: ProxyHost, sentinel_ports: Sequence[int]) -> None:
        self.name = name
        self._host = host
        self._sentinel_ports = tuple(sentinel_ports)
        self._servers = tuple(
            RedisServer(binary=binary, name=f"{name}-{tag}", port=free_port(), extra_args=list(REPLICATION_ARGS))
            for tag in ("a", "b")
        )
        self._master, self._replica = self._servers
        self.link: LinkProxy | None = None
        self.failed_over = False
        self.held_back = False
        self._record: dict[str, object] = {}

    @property
    def master_port(self) -> int:
        assert self._master.port is not None
        return self._master.port

    @property
    def master(self) -> RedisServer:
        """What a node fault acts on: the server the sentinels name as master now — but while one of
        the two is down (a crash, before its heal), that one, so the heal starts what the fault took down."""
        down = [server for server in self._servers if server.port is not None and not server.is_running()]
        if down:
            return down[0]
        found = master_address(self.url)
        for server in self._servers:
            if found is not None and server.port == found[1]:
                return server
        return self._master

    @property
    def url(self) -> str:
        return sentinel_url(service=self.name, ports=self._sentinel_ports)

    def servers(self) -> tuple[RedisServer, ...]:
        return self._servers

    def start(self, *, wait: bool = True) -> None:
        self._master.start()
        self._start_replica()
        if wait:
            self.wait_in_sync()

    def _start_replica(self) -> None:
        """(Re)start the replica of the current master, its replication link through a new proxy link."""
        self._new_link()
        self._replica.start()
        self.held_back = False

    def _new_link(self) -> int:
        """A new proxy link to the current master (the old one stopped) for the replica's replication,
        named in its arguments for its next start; returns the link's port."""
        if self.link is not None:
            self.link.stop()
        self.link = LinkProxy(target_port=self.master_port, name=f"{self.name}-replication", host=self._host)
        self.link.start()
        assert self.link.port is not None
        self._replica.extra_args = [*REPLICATION_ARGS, "--replicaof", "127.0.0.1", str(self.link.port)]
        return self.link.port

    def _replicate_through(self, link_port: int) -> None:
        """Point the running replica at the master through our link (REPLICAOF the link's port)."""
        assert self._replica.port is not None
        client = admin_client(self._replica.port)
        try:
            client.execute_command("REPLICAOF", "127.0.0.1", str(link_port))
        finally:
            client.close()

    def wait_in_sync(self, *, timeout_s: float = SYNC_TIMEOUT_S) -> None:
        """Until the replica is in sync and every sentinel knows the master, the replica and its peers
        (a failover needs all three: a replica no sentinel has seen yet cannot be promoted)."""
        deadline = time.monotonic() + timeout_s
        why = "not checked"
        while time.monotonic() < deadline:
            try:
                self._adopt_roles()
                why = self._not_ready()
            except redis.RedisError as exc:
                why = str(exc)
            if not why:
                return
            time.sleep(0.02)
        raise ReplicationError(f"{self.name}: not ready within {timeout_s:g} s: {why}")

    def _adopt_roles(self) -> None:
        """After a failover the sentinels ran on their own (a crash fault, not :meth:`fail_over`): take
        their word for which server is master now, and put the other, running again, on a new link of
        ours to it (the sentinels would re-point it only seconds later, and not through the link)."""
        found = master_address(self.url)
        if found is None or found[1] == self.master_port or not self._replica.is_running() or self.held_back:
            return
        self._master, self._replica = self._replica, self._master
        self._replicate_through(self._new_link())

    def _not_ready(self) -> str:
        offset = int(replication_info(self._master.url)["master_repl_offset"])
        replica = replication_info(self._replica.url)
        if replica.get("master_link_status") != "up" or int(replica.get("slave_repl_offset", -1)) < offset:
            return "replica not in sync"
        for port in self._sentinel_ports:
            client = admin_client(port)
            try:
                state: dict[str, Any] = client.sentinel_master(self.name)  # type: ignore[assignment]  # parsed
                replicas = client.sentinel_slaves(self.name)
            finally:
                client.close()
            if (
                int(state.get("port", 0)) != self.master_port
                or int(state.get("num-other-sentinels", 0)) < SENTINELS - 1
            ):
                return f"sentinel on {port} does not know the master and its peers yet"
            seen = [r for r in replicas if int(r.get("port", 0)) == self._replica.port]
            if not seen or seen[0].get("is_sdown") or seen[0].get("is_disconnected"):
                return f"sentinel on {port} does not see the replica up yet"
        return ""

    def hold_back(self) -> None:
        """Cut the replica's link; first put it back on the link if a sentinel re-pointed it."""
        assert self._replica.port is not None and self.link is not None and self.link.port is not None
        self._set_failover_timeout(GUARD_TIMEOUT_MS)  # no sentinel re-points it from now on (sentinel.py)
        if int(replication_info(self._replica.url).get("master_port", 0)) != self.link.port:
            self._replicate_through(self.link.port)
            self.wait_in_sync(timeout_s=5.0)
        self.link.blackhole()
        self.held_back = True

    def let_through(self) -> None:
        if self.link is not None:
            self.link.heal()
        self.held_back = False
        self._set_failover_timeout(FAILOVER_TIMEOUT_MS)

    def fail_over(self) -> str:
        """SIGKILL the master and wait for the sentinels to elect a leader and promote the replica."""
        if self.failed_over:
            raise ReplicationError(f"{self.name}: already failed over")
        assert self._replica.port is not None
        on_link = (
            self.link is not None and int(replication_info(self._replica.url).get("master_port", 0)) == self.link.port
        )
        self._set_failover_timeout(FAILOVER_TIMEOUT_MS)  # a failover may start now (see sentinel.py)
        listener = ElectionListener(ports=self._sentinel_ports, service=self.name)
        listener.start()
        t0 = time.monotonic()
        before, after = self._master, self._replica
        before.crash()
        deadline = t0 + FAILOVER_WAIT_S
        switched_ms = None
        while time.monotonic() < deadline:
            said = [master_address(sentinel_url(service=self.name, ports=[p])) for p in self._sentinel_ports]
            if sum(1 for a in said if a is not None and a[1] == after.port) >= len(said) // 2 + 1:
                switched_ms = round((time.monotonic() - t0) * 1000, 1)
                break
            time.sleep(0.02)
        time.sleep(0.1)  # the events that follow the switch (+failover-end) belong to the record
        events = listener.stop()
        self._record = {
            "master_before": before.name,
            "master_after": after.name if switched_ms is not None else None,
            # Where each listens: what a lock's lease names as the server that granted it (Lease.server).
            "server_before": f"127.0.0.1:{before.port}",
            "server_after": f"127.0.0.1:{after.port}" if switched_ms is not None else None,
            "promoted_by": _leader(events),
            "switch_ms": switched_ms,
            "replica_on_held_link": on_link,
            "election": events,
        }
        if switched_ms is None:
            raise ReplicationError(f"{self.name}: the sentinels promoted nobody within {FAILOVER_WAIT_S:g} s")
        self._master, self._replica = after, before
        self.failed_over = True
        return self.url

    def failover_record(self) -> dict[str, object]:
        return dict(self._record)

    def rebuild_replica(self, *, timeout_s: float = SYNC_TIMEOUT_S) -> None:
        """The dead master comes back, empty, as the new master's replica (Sentinel lists it as one)."""
        if not self.failed_over:
            raise ReplicationError(f"{self.name}: nothing to rebuild (no failover)")
        self._replica.crash()
        self._start_replica()
        self.failed_over = False
        self.wait_in_sync(timeout_s=timeout_s)

    def _set_failover_timeout(self, ms: int) -> None:
        for port in self._sentinel_ports:
            client = admin_client(port)
            try:
                client.sentinel_set(self.name, "failover-timeout", ms)
            except redis.RedisError as exc:
                raise ReplicationError(f"{self.name}: SENTINEL SET failover-timeout on port {port}: {exc}") from None
            finally:
                client.close()

    def close(self) -> None:
        if self.link is not None:
            self.link.stop()
        for server in self._servers:
            server.cleanup()


def _leader(events: list[dict[str, Any]]) -> str:
    """Who ran the failover, from the sentinels' own events: the one that published +elected-leader."""
    won = [e for e in events if e["event"] == "+elected-leader"]
    if not won:
        return "no sentinel was seen elected"
    epoch = next(
        (e["data"].split()[-1] for e in events if e["event"] == "+new-epoch" and e["sentinel"] == won[0]["sentinel"]),
        "?",
    )
    return f"sentinel {won[0]['sentinel']} (elected leader, epoch {epoch})"


class SentinelNodes(ReplicatedNodes):
    """``count`` Sentinel-managed pairs and the three sentinels watching all of them."""

    def __init__(self, *, count: int, binary: Path) -> None:
        self._sentinel_ports = [free_port() for _ in range(SENTINELS)]
        super().__init__(
            count=count,
            name="node",
            make_pair=lambda name, host: SentinelPair(
                name=name, binary=binary, host=host, sentinel_ports=self._sentinel_ports
            ),
        )
        masters = {pair.name: pair.master_port for pair in self._pairs}
        self.sentinels = tuple(
            SentinelServer(binary=binary, name=f"sentinel{i}", port=port, masters=masters)
            for i, port in enumerate(self._sentinel_ports)
        )

    @property
    def _pairs(self) -> tuple[SentinelPair, ...]:
        return tuple(pair for pair in self.pairs if isinstance(pair, SentinelPair))

    def start(self) -> None:
        try:
            self.host.start()
            for pair in self.pairs:
                pair.start(wait=False)
            for sentinel in self.sentinels:
                sentinel.start()
            self.wait_in_sync()
        except BaseException:
            self.close()
            raise

    def servers(self) -> tuple[Server, ...]:
        return (*super().servers(), *self.sentinels)

    def problem(self) -> str:
        down = [s.name for s in self.sentinels if not s.is_running()]
        return f"{', '.join(down)} not running" if down else super().problem()

    def close(self) -> None:
        super().close()
        for sentinel in self.sentinels:
            sentinel.cleanup()
