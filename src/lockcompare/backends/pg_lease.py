"""``pg-lease``: a lease row in PostgreSQL, with a fencing token from a sequence.

The table ``lockcompare_leases`` (key, owner, token, expires_at, pid) is created on first use. One
non-blocking attempt is one statement::

    insert into lockcompare_leases as l (key, owner, token, expires_at, pid)
    values ($key, $owner, nextval('lockcompare_lease_token'), clock_timestamp() + $ttl, pg_backend_pid())
    on conflict (key) do update set owner = excluded.owner, token = excluded.token, ...
    where l.expires_at <= clock_timestamp()
    returning token

so the row is taken when it is absent or expired *by the server's clock*, atomically (the row lock
of ON CONFLICT serialises two takers). The token comes from a sequence: strictly increasing across
holders — a fencing token, which the resource checks (on the PostgreSQL resource in the same
statement as the write: ``update ... where fence <= $token``). A refused attempt also draws a
number (``nextval`` is evaluated before the conflict is known): tokens have gaps, and still only grow.

Unlike an advisory lock, the lease does not live in the session: a session that ends (a kill, a
restart) loses nothing, and a release on a new session still deletes the row (``where owner =
$owner``). The holder believes its lease ends TTL after it *sent* the acquire; the server ends it
TTL after it executed it, later — the belief is on the safe side. ``pid`` records the session that
took the lease (the ``session-kill`` fault ends that session).

With ``--wait-replicas`` N > 0 (the failover experiment on a primary + streaming replica,
infra/postgres/replication.py) every session runs with ``synchronous_commit=remote_apply``: a lease is
granted only once the replica has applied its row, PostgreSQL's counterpart of Redis's ``WAIT``. A
commit the replica never acknowledges never returns: the acquire runs out of its request timeout and
is an ``error``, never a grant. Without it the row replicates asynchronously and a failover can lose it.
"""

from __future__ import annotations

import time
from typing import ClassVar

from lockcompare.backends.base import BackendConfig, Lease, Refusal, first_node
from lockcompare.backends.single import new_owner_token
from lockcompare.infra.postgres.client import (
    PgSession,
    QueryFailed,
    SessionLost,
    with_session_settings,
)
from lockcompare.infra.postgres.server import check_postgres_viable

TABLE = "lockcompare_leases"
SEQUENCE = "lockcompare_lease_token"

SCHEMA = (
    f"create table if not exists {TABLE} (key text primary key, owner text not null, token bigint not null,"
    " expires_at timestamptz not null, pid integer)",
    f"create sequence if not exists {SEQUENCE}",
)

ACQUIRE = f"""
insert into {TABLE} as l (key, owner, token, expires_at, pid)
values ($1, $2, nextval('{SEQUENCE}'), clock_timestamp() + make_interval(secs => $3::float8 / 1000), pg_backend_pid())
on conflict (key) do update
  set owner = excluded.owner, token = excluded.token, expires_at = excluded.expires_at, pid = excluded.pid
  where l.expires_at <= clock_timestamp()
returning token
"""

RELEASE = f"delete from {TABLE} where key = $1 and owner = $2 returning 1"

#: "relation does not exist": a promoted replica that never received the table (its creation was held back).
_UNDEFINED_TABLE = "42P01"


class PgLeaseLock:
    """A lease row taken by one INSERT ... ON CONFLICT ... DO UPDATE ... WHERE expired; a sequence's token."""

    summary: ClassVar[str] = "PostgreSQL lease row (insert on conflict where expired), token from a sequence"
    exclusive: ClassVar[bool] = True
    issues_fencing_tokens: ClassVar[bool] = True
    #: One server and no failover: when it crashes the lock has none left (analysis/exercised.py).
    unavailable_under: ClassVar[tuple[str, ...]] = ("crash",)
    libraries: ClassVar[tuple[str, ...]] = ("psycopg",)  # recorded with their versions in every row
    servers: ClassVar[str] = "postgres"
    resource_kind: ClassVar[str] = "postgres"
    supports_wait_replicas: ClassVar[bool] = True  # as synchronous_commit=remote_apply

    @classmethod
    def check_viable(cls) -> None:
        check_postgres_viable()

    def __init__(self, *, config: BackendConfig) -> None:
        url = first_node(config.node_urls)
        if config.wait_replicas:
            url = with_session_settings(url, {"synchronous_commit": "remote_apply"})
        self._session = PgSession(url, timeout_s=config.request_timeout_s, application_name="lockcompare-pg-lease")
        self._schema_ready = False

    def _ensure_schema(self) -> None:
        if self._schema_ready:
            return
        for attempt in range(3):
            try:
                for statement in SCHEMA:
                    self._session.query(statement)
                break
            except QueryFailed:
                # Two workers creating the table at once: "if not exists" is not atomic in PostgreSQL
                # (a unique violation on the catalog); the other one made it.
                if attempt == 2:
                    raise
        self._schema_ready = True

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        owner = new_owner_token()
        # The lease starts no earlier than the first statement is sent: read before the schema step,
        # which the first acquire runs first (its time would otherwise push the lease's end past the TTL).
        started_ns = time.monotonic_ns()
        try:
            self._ensure_schema()
            token = self._session.value(ACQUIRE, [key, owner, ttl_ms])
        except QueryFailed as exc:
            if exc.sqlstate == _UNDEFINED_TABLE:
                self._schema_ready = False  # made again on the next attempt
            return Refusal.failed(exc)
        except SessionLost as exc:
            return Refusal.failed(exc)
        if token is None:
            return Refusal("held")
        return Lease(key=key, owner=owner, valid_until_ns=started_ns + ttl_ms * 1_000_000, fencing_token=int(token))

    def release(self, lease: Lease) -> bool:
        for _ in range(2):  # the row outlives the session: a release may go through on a new one
            try:
                return bool(self._session.query(RELEASE, [lease.key, lease.owner]))
            except SessionLost:
                continue
            except QueryFailed:
                return False
        return False

    def close(self) -> None:
        self._session.close()
