"""The ``postgres`` server kind: embedded PostgreSQL servers (server.py), a primary + streaming
replica per lock node for the failover fault (replication.py), and the sessions it ends under their
holder (sessions.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lockcompare.infra.kinds import POSTGRES_PROTOCOL, Capabilities, Capability, LockNodes, Roles, Server, UserServers
from lockcompare.infra.own_servers import OwnServersKind, start_all
from lockcompare.infra.postgres import sessions
from lockcompare.infra.postgres.client import (
    QueryFailed,
    SessionLost,
    answers,
    delete_own_rows,
    is_postgres_url,
    pg_server_version,
    postgres_url,
    require_psycopg,
    reset_database,
)
from lockcompare.infra.postgres.client import problem as pg_problem
from lockcompare.infra.postgres.replication import PgFailoverPair
from lockcompare.infra.postgres.server import PostgresServer, find_postgres_bin, is_primary
from lockcompare.infra.replication import ReplicatedNodes
from lockcompare.redaction import redact

if TYPE_CHECKING:
    from lockcompare.infra.cluster import Cluster


@dataclass(frozen=True, kw_only=True)
class PostgresKind(OwnServersKind):
    """PostgreSQL: independent servers, or a primary + streaming replica per lock node for the failover
    fault (replication.py), always persisting (committed rows survive a restart; sessions and
    their advisory locks do not), real clocks, and sessions the server can end under their holder
    (session-kill)."""

    name: str = "postgres"
    speaks: str = POSTGRES_PROTOCOL
    session_reopens: str = "the holder opens a new one at its next call"
    capabilities: Capabilities = field(
        default_factory=lambda: Capabilities(
            offers=frozenset({Capability.SESSION_CONTROL, Capability.REPLICATION, Capability.ROLES}),
            reasons={
                Capability.CLOCK_CONTROL: "PostgreSQL servers run with real clocks (libfaketime is applied to "
                "Redis-protocol servers only)",
                Capability.LEASE_HOLDERS: "lockcompare cannot read which PostgreSQL server holds a lock "
                "(nodes=holders:K and others:K never resolve; name the server, nodes=0)",
            },
            # One server (a failover makes it a primary + streaming replica).
            lock_nodes=LockNodes(default=1),
            # Set on each worker's lock session (runner/trial.py session_urls: client.py's
            # with_idle_session_timeout): the server ends a session idle this long.
            settings=frozenset({"idle_session_timeout_ms"}),
            user_servers=UserServers(
                alias="--postgres",
                use="the lock and the resource of the backends on it",
                parse=lambda texts, _flag: tuple(postgres_url(text) for text in texts),  # a URL or libpq keywords
                beside_shared=True,
                holds_resource=True,
                most=1,
            ),
        )
    )

    refuses_clocks = "PostgreSQL lock nodes run with real clocks and persist on their own"

    def require(self) -> None:
        find_postgres_bin()
        require_psycopg()

    def start_servers(self, *, count: int) -> Sequence[Server]:
        return start_all([PostgresServer(name=f"pg{i}") for i in range(count)])

    def new_server(self, *, name: str, binary: str | None = None) -> Server:
        return PostgresServer(name=name)

    def replicated_nodes(self, *, count: int, binary: str | None = None) -> ReplicatedNodes:
        return ReplicatedNodes(
            count=count, name="pg", make_pair=lambda name, host: PgFailoverPair(name=name, host=host)
        )

    def owns(self, url: str) -> bool:
        return is_postgres_url(url)

    def end_holder_sessions(
        self,
        urls: Sequence[str],
        *,
        nodes: Sequence[int],
        lock_key: str,
        lease_znodes: object = None,
        holds: Callable[[object], bool] | None = None,
    ) -> tuple[str, dict[str, object]]:
        """``pg_terminate_backend`` on the sessions holding the lock (sessions.py), node by node
        (the holder is read from the lock itself: no declaration of where a lease lives applies);
        ``holds`` confirms each session against the workers' current leases at kill time."""
        ended: list[int] = []
        spared: list[int] = []
        for index in nodes:
            url = urls[index]
            if not self.owns(url):
                return f"skipped: lock node {index} is not a PostgreSQL server", {"sessions_ended": ended}
            try:
                done, left = sessions.end_holder_sessions(url, lock_key=lock_key, holds=holds)
            except (SessionLost, QueryFailed) as exc:
                return f"skipped: lock node {index} did not answer ({exc})", {"sessions_ended": ended}
            ended, spared = ended + done, spared + left
        if not ended and spared:
            pids = ", ".join(map(str, spared))
            return (
                f"skipped: the session holding the lock (backend pid {pids}) was no worker's current lease at kill "
                "time (its holder had begun releasing it); not ended",
                {"sessions_ended": [], "sessions_spared": spared},
            )
        if not ended:
            return "skipped: no session held the lock", {"sessions_ended": []}
        detail = f"pg_terminate_backend: ended the holder's session (backend pid {', '.join(map(str, ended))})"
        return detail, {"sessions_ended": ended}

    def read_roles(self, cluster: Cluster, *, timeout_s: float = 0.5) -> Roles:
        """Each lock node's primary: a replicated node's is whichever of its two servers is out of
        recovery ("primary pg0-replica1" after a failover), a plain node is its own; the "leader" is
        node 0 (the node the PostgreSQL backends lock on) when it has a primary."""
        modes = []
        for i, url in enumerate(cluster.node_urls):
            servers = cluster.replication.pairs[i].servers() if cluster.replication is not None else ()
            primary = next((s.name for s in servers if is_primary(s.url, timeout_s=timeout_s)), None)
            if cluster.replication is None:
                primary = "" if answers(url, timeout_s=timeout_s) else None
            modes.append("no primary" if primary is None else f"primary {primary}".strip())
        return Roles(leader=0 if modes and modes[0] != "no primary" else None, modes=tuple(modes))

    def answers(self, url: str, *, timeout_s: float) -> bool:
        return answers(url, timeout_s=timeout_s)

    def unusable(self, url: str, *, timeout_s: float) -> str:
        found = pg_problem(url, timeout_s=timeout_s)  # a wrong password or database said as such
        return f"PostgreSQL server {redact(url)} cannot be used: {redact(found, passwords_of=(url,))}" if found else ""

    def version(self, url: str) -> str:
        return f"postgresql {pg_server_version(url)}"

    def empty(self, urls: Sequence[str]) -> str:
        for url in dict.fromkeys(urls):
            problem = reset_database(url)  # every other session ended, lockcompare's tables emptied
            if problem:
                return f"emptying {url} failed: {problem}"
        return ""

    def delete_keys(self, urls: Sequence[str], prefix: str) -> None:
        for url in dict.fromkeys(urls):
            delete_own_rows(url, prefix)  # only rows of lockcompare's own tables that name the prefix


POSTGRES = PostgresKind()
