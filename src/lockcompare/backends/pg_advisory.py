"""``pg-advisory``: PostgreSQL's session-level advisory lock, as teams take it on the database they run.

One non-blocking attempt is ``select pg_try_advisory_lock(key)`` on the worker's own session (the
harness retries, as for every backend); the release is ``pg_advisory_unlock(key)`` on the same
session. The key is the lock name hashed to a signed 64-bit integer (pg_client.advisory_key).

There is no TTL: the lock is held as long as the session lives, so a paused holder keeps it (the
rival waits) — but whatever ends the session while the holder still runs (``pg_terminate_backend``,
a server restart, ``idle_session_timeout``, a pooler or a partition that closes the connection)
releases it, and the holder learns of it only at its next call on that session. That is the
Kleppmann problem in another form, and what the ``session-kill`` experiment shows. A lease is
therefore returned without a deadline (``valid_until_ns=None``) and without a fencing token; the
conformance battery reports the TTL properties as NOT CLAIMED (``has_ttl = False``) once it has
checked that claim (a second client is still refused long past any TTL while the holder lives).
The checker judges such a lease as valid until its release or until the server is seen ending its
session (analysis/sessions.py).

The lock *is* the session, so it needs one: behind a transaction-pooling proxy (PgBouncer's
``pool_mode = transaction``) the unlock runs on another server session than the lock and the
session holding the lock is lent to the next client, whose ``pg_try_advisory_lock`` succeeds
(advisory locks are re-entrant per session). Nothing here can see a pooler (the backend pid it
reports is its own per-client number); the battery and the row's ``problem`` ("unlock released
nothing while held") do.

The owner token names the session that took the lock (its ``generation`` in this object): a
release in a later session — the old one ended — returns False without asking the server, which
would otherwise answer for a session that never held the lock.
"""

from __future__ import annotations

from typing import ClassVar

from lockcompare.backends.base import BackendConfig, Lease, Refusal, first_node
from lockcompare.backends.single import new_owner_token
from lockcompare.infra.postgres.client import PgSession, QueryFailed, SessionLost, advisory_key
from lockcompare.infra.postgres.server import check_postgres_viable


class PgAdvisoryLock:
    """``pg_try_advisory_lock`` / ``pg_advisory_unlock`` on one session of one PostgreSQL server."""

    summary: ClassVar[str] = (
        "PostgreSQL session advisory lock (pg_try_advisory_lock): no TTL, held while the session lives"
    )
    exclusive: ClassVar[bool] = True
    issues_fencing_tokens: ClassVar[bool] = False
    #: One server and no failover: when it crashes the lock has none left (analysis/exercised.py).
    unavailable_under: ClassVar[tuple[str, ...]] = ("crash",)
    libraries: ClassVar[tuple[str, ...]] = ("psycopg",)  # recorded with their versions in every row
    #: No lease deadline: held while the session lives (checked by the battery; the TTL properties
    #: are then NOT CLAIMED).
    has_ttl: ClassVar[bool] = False
    #: The lock nodes are PostgreSQL servers (the harness starts them, or --postgres names one).
    servers: ClassVar[str] = "postgres"
    #: The resource this design is naturally paired with (--resource-kind auto): the same database.
    resource_kind: ClassVar[str] = "postgres"

    @classmethod
    def check_viable(cls) -> None:
        check_postgres_viable()

    def __init__(self, *, config: BackendConfig) -> None:
        # No connection yet: a client made while its server is down must still be made.
        self._session = PgSession(
            first_node(config.node_urls), timeout_s=config.request_timeout_s, application_name="lockcompare-pg-advisory"
        )

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        try:
            got = self._session.value("select pg_try_advisory_lock($1::bigint)", [advisory_key(key)])
        except (SessionLost, QueryFailed) as exc:
            return Refusal.failed(exc)  # the next attempt opens a new session
        if got != "t":
            return Refusal("held")
        pid = self._session.backend_pid
        return Lease(key=key, owner=f"{new_owner_token()}.{pid}.{self._session.generation}", session=str(pid))

    def release(self, lease: Lease) -> bool:
        try:
            generation = int(lease.owner.rsplit(".", 1)[1])
        except (IndexError, ValueError):
            return False  # not a lease of ours
        if not self._session.connected or generation != self._session.generation:
            return False  # the session that held the lock has ended: the server released it then
        try:
            return self._session.value("select pg_advisory_unlock($1::bigint)", [advisory_key(lease.key)]) == "t"
        except (SessionLost, QueryFailed):
            return False  # ended under the holder: it learns only now

    def close(self) -> None:
        self._session.close()
