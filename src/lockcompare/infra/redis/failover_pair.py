"""A master with one asynchronous replica, and the failover that loses what had not replicated.

The mechanism behind the ``failover`` experiment (why Redlock exists): a lock key written to a
master that dies before the key reached its replica is gone once the replica is promoted, and a
second client then acquires the "same" lock. To make "before the key reached the replica" a
certainty rather than a race, the replica's replication link runs through a :class:`LinkProxy`:
:meth:`FailoverPair.hold_back` blackholes it, so writes stop reaching the replica while the master
still acknowledges them.

Why the link and not the replica process: a SIGSTOPped replica does NOT lose the key, because the
bytes wait in the kernel's socket buffer and arrive after SIGCONT (measured: the key survived a SIGSTOP of the replica).
Promotion is what Sentinel does: ``REPLICAOF NO ONE`` on the replica once the master is gone.
``WAIT`` counts acknowledgements only for writes made on its own connection: a client that wants
``WAIT`` must send it on the connection that wrote the key.

A pair can have a *front*: a stable address (a :class:`LinkProxy` in front of the master) that
:meth:`FailoverPair.fail_over` re-points at the promoted replica, as a virtual IP is moved on a
failover. Clients that use the front follow the failover without knowing about it; after
:meth:`FailoverPair.rebuild_replica` the promoted node has a fresh replica of its own and the pair
can fail over again. :class:`~lockcompare.infra.replication.ReplicatedNodes` holds N such pairs
(their links all in one proxy process): the lock nodes of the ``failover`` experiment.

Full syncs are diskless (``repl-diskless-sync yes``, no delay): a fresh replica was in sync 13-18 ms
after it started, against 70-100 ms with the default RDB-on-disk transfer (measured here, n=3).

Example::

    >>> with FailoverPair(binary=find_redis_server()) as pair:               # doctest: +SKIP
    ...     client = connect(pair.master_url)
    ...     pair.hold_back()
    ...     client.set("lock", "me", nx=True, px=10_000)                   # acknowledged by the master
    ...     new_url = pair.fail_over()                                     # the replica never saw it
"""

from __future__ import annotations

import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import redis

from lockcompare.errors import ReplicationError
from lockcompare.infra.proxy import LinkProxy, ProxyHost
from lockcompare.infra.redis.client import connect
from lockcompare.infra.redis.server import RedisServer
from lockcompare.infra.replication import SYNC_TIMEOUT_S

if TYPE_CHECKING:
    pass

#: Given to every server of a pair (each may become a master): stream full syncs, without delay.
REPLICATION_ARGS = ("--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")


def replication_info(url: str) -> dict[str, Any]:
    """``INFO replication`` of the server at ``url`` (redis-py parses each value to int, float or str)."""
    client = connect(url, timeout_s=1.0)
    try:
        return dict(client.info("replication"))
    finally:
        client.close()


class FailoverPair:
    """A master and one replica (two spawned redis-servers); the replication link goes through a proxy.

    ``url`` is where clients should send lock commands: the front's stable address when the pair
    has one (``front=True``), else the current master's (the promoted replica after
    :meth:`fail_over`). ``extra_args`` go to both servers (e.g. ``["--appendonly", "yes"]``).
    ``host``: a running :class:`ProxyHost` to serve the pair's links (default: one of its own).
    """

    def __init__(
        self,
        *,
        binary: Path,
        name: str = "pair",
        extra_args: list[str] | None = None,
        host: ProxyHost | None = None,
        front: bool = False,
    ) -> None:
        self.name = name
        self._binary = binary
        self._extra_args = [*REPLICATION_ARGS, *(extra_args or [])]
        self._host = host
        self._generation = 0  # replicas built so far (names the servers and links)
        self.master = RedisServer(binary=self._binary, name=f"{name}-master", extra_args=self._extra_args)
        self.replica: RedisServer | None = None
        self.link: LinkProxy | None = None
        self.front: LinkProxy | None = LinkProxy(target_port=0, name=f"{name}-front", host=host) if front else None
        self.failed_over = False  # the replica was promoted and has no replica of its own yet
        self.held_back = False  # the replication link is cut
        self._record: dict[str, object] = {}

    @property
    def master_url(self) -> str:
        return self.master.url

    @property
    def replica_url(self) -> str:
        if self.replica is None:
            raise ReplicationError(f"{self.name} has not been started")
        return self.replica.url

    @property
    def url(self) -> str:
        """The URL clients should use for the lock now: the front, else the current master."""
        if self.front is not None:
            return self.front.url
        return self.replica_url if self.failed_over else self.master_url

    def servers(self) -> tuple[RedisServer, ...]:
        """The current master and replica (the killed master of a failover until its rebuild)."""
        return (self.master, self.replica) if self.replica is not None else (self.master,)

    def start(self, *, wait: bool = True) -> None:
        """Start master, link proxy, replica (and front); with ``wait``, return once in sync."""
        try:
            self.master.start()
            assert self.master.port is not None
            if self.front is not None:
                self.front.target_port = self.master.port
                self.front.start()
            self._start_replica()
            if wait:
                self.wait_in_sync(timeout_s=SYNC_TIMEOUT_S)
        except BaseException:
            self.close()
            raise

    def _start_replica(self) -> None:
        """A new replica of the current master, its replication link through a new proxy link."""
        assert self.master.port is not None
        self._generation += 1
        suffix = "" if self._generation == 1 else str(self._generation)
        self.link = LinkProxy(target_port=self.master.port, name=f"{self.name}-replication{suffix}", host=self._host)
        self.link.start()
        assert self.link.port is not None
        self.replica = RedisServer(
            binary=self._binary,
            name=f"{self.name}-replica{suffix}",
            extra_args=[*self._extra_args, "--replicaof", "127.0.0.1", str(self.link.port)],
        )
        self.replica.start()
        self.held_back = False

    def wait_in_sync(self, *, timeout_s: float = SYNC_TIMEOUT_S) -> None:
        """Block until the replica's link is up and its offset has reached the master's."""
        deadline = time.monotonic() + timeout_s
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                master_offset = int(replication_info(self.master_url)["master_repl_offset"])
                last = replication_info(self.replica_url)
            except redis.RedisError:
                time.sleep(0.01)
                continue
            if last.get("master_link_status") == "up" and int(last.get("slave_repl_offset", -1)) >= master_offset:
                return
            time.sleep(0.005)
        raise ReplicationError(
            f"{self.name}: replica not in sync within {timeout_s:.0f} s "
            f"(link {last.get('master_link_status', 'unknown')}, offset {last.get('slave_repl_offset', '?')})"
        )

    def hold_back(self) -> None:
        """Cut the replication link: from now on, writes to the master do not reach the replica."""
        self._link().blackhole()
        self.held_back = True

    def let_through(self) -> None:
        """Heal the replication link (the replica reconnects and resyncs; see proxy.heal)."""
        self._link().heal()
        self.held_back = False

    def fail_over(self) -> str:
        """Cut the link, SIGKILL the master, promote the replica (``REPLICAOF NO ONE``), move the
        front to it; return the new master's URL.

        The link is cut first so that nothing still in flight reaches the replica after its master
        died: what the replica has at this moment is all the promoted node will ever have.
        """
        if self.failed_over:
            raise ReplicationError(f"{self.name}: already failed over")
        self.hold_back()
        self.master.crash()
        client = connect(self.replica_url, timeout_s=2.0)
        try:
            client.execute_command("REPLICAOF", "NO", "ONE")
        except redis.RedisError as exc:
            raise ReplicationError(f"{self.name}: promoting the replica failed: {exc}") from None
        finally:
            client.close()
        self.failed_over = True
        assert self.replica is not None and self.replica.port is not None
        if self.front is not None:
            self.front.retarget(target_port=self.replica.port)
        self._record = {"master_before": self.master.name, "master_after": self.replica.name, "promoted_by": "harness"}
        return self.replica_url

    def failover_record(self) -> dict[str, object]:
        return dict(self._record)

    def rebuild_replica(self, *, timeout_s: float = SYNC_TIMEOUT_S) -> None:
        """After :meth:`fail_over`: the promoted replica is the master now; give it a fresh replica
        (full sync) and remove what is left of the killed master (its data directory, its link)."""
        if not self.failed_over or self.replica is None:
            raise ReplicationError(f"{self.name}: nothing to rebuild (no failover)")
        dead, old_link = self.master, self.link
        self.master, self.replica, self.link = self.replica, None, None
        self.failed_over = False
        dead.cleanup()
        if old_link is not None:
            old_link.stop()
        self._start_replica()
        self.wait_in_sync(timeout_s=timeout_s)

    def close(self) -> None:
        """Stop the proxy links and both servers, remove their directories. Safe to call twice."""
        for link in (self.front, self.link):
            if link is not None:
                link.stop()
        if self.replica is not None:
            self.replica.cleanup()
        self.master.cleanup()

    def _link(self) -> LinkProxy:
        if self.link is None:
            raise ReplicationError(f"{self.name} has not been started")
        return self.link

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
