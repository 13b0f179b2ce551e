"""Replicated lock nodes, whatever their kind: each a master with one asynchronous replica, all
replication links in one proxy process (the lock nodes of the ``failover`` experiment).

:class:`ReplicaPair` is what the failover fault and the cluster ask of one such node; a kind builds
its pairs (a Redis :class:`~lockcompare.infra.redis.failover_pair.FailoverPair`, a PostgreSQL
primary + streaming replica, a Sentinel-managed Redis master + replica) and
:class:`ReplicatedNodes` holds them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from lockcompare.infra.proxy import ProxyHost

if TYPE_CHECKING:
    from lockcompare.infra.kinds import Server

#: How long a pair waits for its replica to finish a full sync (its first, or a rebuilt one's).
SYNC_TIMEOUT_S = 10.0


class ReplicaPair(Protocol):
    """What the failover fault and the cluster ask of one replicated lock node, whatever its kind:
    a Redis :class:`~lockcompare.infra.redis.failover_pair.FailoverPair`, a PostgreSQL primary +
    streaming replica (infra/postgres/replication.py), or a Sentinel-managed Redis master + replica
    (infra/sentinel/nodes.py)."""

    name: str
    failed_over: bool
    held_back: bool

    @property
    def master(self) -> Server: ...
    @property
    def url(self) -> str: ...
    def servers(self) -> tuple[Server, ...]: ...
    def start(self, *, wait: bool = True) -> None: ...
    def wait_in_sync(self, *, timeout_s: float = SYNC_TIMEOUT_S) -> None: ...
    def hold_back(self) -> None: ...
    def let_through(self) -> None: ...
    def fail_over(self) -> str: ...
    def failover_record(self) -> dict[str, object]:
        """What the last :meth:`fail_over` did, for its fault event (who was master, who is now, when)."""
        ...

    def rebuild_replica(self, *, timeout_s: float = SYNC_TIMEOUT_S) -> None: ...
    def close(self) -> None: ...


class ReplicatedNodes:
    """``count`` lock nodes, each a replicated pair, all replication links in one proxy process.

    ``urls`` are the nodes' stable addresses, which every client uses (the harness too: they always
    reach whichever server is the node's master now, see cluster.py): a Redis pair's front proxy, a
    PostgreSQL pair's multi-host URL. ``make_pair(name, host)`` builds one pair (the kind's: a Redis
    :class:`~lockcompare.infra.redis.failover_pair.FailoverPair` with a front, for one).
    """

    def __init__(
        self,
        *,
        count: int,
        make_pair: Callable[[str, ProxyHost], ReplicaPair],
        name: str = "node",
    ) -> None:
        self.host = ProxyHost(name=f"{name}-links")
        self.pairs: tuple[ReplicaPair, ...] = tuple(make_pair(f"{name}{i}", self.host) for i in range(count))

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(pair.url for pair in self.pairs)

    def start(self) -> None:
        """Start every pair, then wait until every replica is in sync; all stopped if any fails."""
        try:
            self.host.start()
            for pair in self.pairs:
                pair.start(wait=False)
            self.wait_in_sync()
        except BaseException:
            self.close()
            raise

    def wait_in_sync(self, *, timeout_s: float = SYNC_TIMEOUT_S) -> None:
        for pair in self.pairs:
            pair.wait_in_sync(timeout_s=timeout_s)

    def servers(self) -> tuple[Server, ...]:
        return tuple(server for pair in self.pairs for server in pair.servers())

    def problem(self) -> str:
        """Why these nodes cannot serve another trial ("" if they can)."""
        if not self.host.is_running():
            return f"the proxy process of {self.host.name} is not running"
        bad = [pair.name for pair in self.pairs if pair.failed_over]
        return f"{', '.join(bad)}: failed over, no replica rebuilt" if bad else ""

    def close(self) -> None:
        """Stop every pair and the proxy process. Safe to call twice."""
        for pair in self.pairs:
            pair.close()
        self.host.stop()

    def pids(self) -> Sequence[int | None]:
        return [server.pid for server in self.servers()] + [self.host.pid]
