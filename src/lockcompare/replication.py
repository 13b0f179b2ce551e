"""A master with one asynchronous replica, and the failover that loses what had not replicated.

The mechanism behind the ``failover`` experiment (why Redlock exists): a lock key written to a
master that dies before the key reached its replica is gone once the replica is promoted, and a
second client then acquires the "same" lock. To make "before the key reached the replica" a
certainty rather than a race, the replica's replication link runs through a :class:`LinkProxy`:
:meth:`FailoverPair.hold_back` blackholes it, so writes stop reaching the replica while the master
still acknowledges them.

Why the link and not the replica process: a SIGSTOPped replica does NOT lose the key, because the
bytes wait in the kernel's socket buffer and arrive after SIGCONT (FIELD-NOTES.md, "Failover").
Promotion is what Sentinel does: ``REPLICAOF NO ONE`` on the replica once the master is gone.
``WAIT`` counts acknowledgements only for writes made on its own connection: a client that wants
``WAIT`` must send it on the connection that wrote the key.

Example::

    >>> with FailoverPair(binary=find_redis_server()) as pair:           # doctest: +SKIP
    ...     client = connect(pair.master_url)
    ...     pair.hold_back()
    ...     client.set("lock", "me", nx=True, px=10_000)                   # acknowledged by the master
    ...     new_url = pair.fail_over()                                     # the replica never saw it
"""

from __future__ import annotations

import time
from pathlib import Path
from types import TracebackType
from typing import Self

import redis

from lockcompare.errors import ClusterError
from lockcompare.proxy import LinkProxy
from lockcompare.redisconn import connect
from lockcompare.server import RedisServer, find_redis_server

#: How long :meth:`FailoverPair.start` waits for the replica to finish its first full sync.
SYNC_TIMEOUT_S = 10.0


class ReplicationError(ClusterError):
    """The replica did not connect or catch up, or a failover could not be completed."""


def replication_info(url: str) -> dict[str, object]:
    """``INFO replication`` of the server at ``url``."""
    client = connect(url, timeout_s=1.0)
    try:
        return dict(client.info("replication"))
    finally:
        client.close()


class FailoverPair:
    """A master and one replica (two spawned redis-servers); the replication link goes through a proxy.

    ``url`` is the current master's: the original master until :meth:`fail_over`, the promoted
    replica after. ``extra_args`` go to both servers (e.g. ``["--appendonly", "yes"]``).
    """

    def __init__(self, *, binary: Path | None = None, name: str = "pair", extra_args: list[str] | None = None) -> None:
        self.name = name
        self._binary = binary if binary is not None else find_redis_server()
        self._extra_args = list(extra_args or [])
        self.master = RedisServer(binary=self._binary, name=f"{name}-master", extra_args=self._extra_args)
        self.replica: RedisServer | None = None
        self.link: LinkProxy | None = None
        self.failed_over = False

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
        """The URL clients should use for the lock now: the promoted replica after a failover."""
        return self.replica_url if self.failed_over else self.master_url

    def start(self) -> None:
        """Start master, link proxy and replica; return once the replica is in sync."""
        try:
            self.master.start()
            assert self.master.port is not None
            self.link = LinkProxy(target_port=self.master.port, name=f"{self.name}-replication")
            self.link.start()
            assert self.link.port is not None
            self.replica = RedisServer(
                binary=self._binary,
                name=f"{self.name}-replica",
                extra_args=[*self._extra_args, "--replicaof", "127.0.0.1", str(self.link.port)],
            )
            self.replica.start()
            self.wait_in_sync(timeout_s=SYNC_TIMEOUT_S)
        except BaseException:
            self.close()
            raise

    def wait_in_sync(self, *, timeout_s: float = SYNC_TIMEOUT_S) -> None:
        """Block until the replica's link is up and its offset has reached the master's."""
        deadline = time.monotonic() + timeout_s
        last: dict[str, object] = {}
        while time.monotonic() < deadline:
            try:
                master_offset = int(replication_info(self.master_url)["master_repl_offset"])  # type: ignore[call-overload]
                last = replication_info(self.replica_url)
            except redis.RedisError:
                time.sleep(0.01)
                continue
            if last.get("master_link_status") == "up" and int(last.get("slave_repl_offset", -1)) >= master_offset:  # type: ignore[call-overload]
                return
            time.sleep(0.005)
        raise ReplicationError(
            f"{self.name}: replica not in sync within {timeout_s:.0f} s "
            f"(link {last.get('master_link_status', 'unknown')}, offset {last.get('slave_repl_offset', '?')})"
        )

    def hold_back(self) -> None:
        """Cut the replication link: from now on, writes to the master do not reach the replica."""
        self._link().blackhole()

    def let_through(self) -> None:
        """Heal the replication link (the replica reconnects and resyncs; see proxy.heal)."""
        self._link().heal()

    def fail_over(self) -> str:
        """SIGKILL the master, promote the replica (``REPLICAOF NO ONE``); return the new master's URL."""
        if self.failed_over:
            raise ReplicationError(f"{self.name}: already failed over")
        self.master.crash()
        client = connect(self.replica_url, timeout_s=2.0)
        try:
            client.execute_command("REPLICAOF", "NO", "ONE")
        except redis.RedisError as exc:
            raise ReplicationError(f"{self.name}: promoting the replica failed: {exc}") from None
        finally:
            client.close()
        self.failed_over = True
        return self.replica_url

    def close(self) -> None:
        """Stop the proxy and both servers, remove their directories. Safe to call twice."""
        if self.link is not None:
            self.link.stop()
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
