"""The protected resource on PostgreSQL: the balance in a table, every check in the statement itself.

The same interface and counters as :class:`lockcompare.runner.resource_redis.RedisResource` (the
:class:`~lockcompare.runner.resource.Resource` protocol), so a worker's critical section does not
know which it talks to. One row per trial in the table
``lockcompare_resource`` (created on first use), keyed by the trial's prefix — on a server
lockcompare does not own (``--postgres URL``) nothing else is touched, and the row carries an
``expires_at`` after which any later trial deletes it (a killed run leaves nothing for good).

Each step is one statement, atomic on the server (a row lock serialises concurrent updates, and
READ COMMITTED re-checks the WHERE clause on the newest row version):

- enter: ``occupancy + 1``, counting a conflict when it was already > 0;
- the fenced write (Kleppmann's "the storage checks the token"):
  ``update ... set balance = $v, fence = $token ... where prefix = $p and fence <= $token``;
  no row updated means rejected (then counted by a second statement: counting is not the check);
- the fenced read raises the fence the same way, or is refused; antirez's check-and-set stores the
  reader's owner token and accepts the write only while it is still there;
- lock-free: ``balance = balance + 1`` (atomic), or optimistic compare-and-set on the balance read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lockcompare.analysis.counters import ResourceCounters
from lockcompare.infra.postgres.client import PgSession, QueryFailed, SessionLost, is_postgres_url
from lockcompare.scenario.choices import Check

TABLE = "lockcompare_resource"

SCHEMA = f"""create table if not exists {TABLE} (
  prefix text primary key, occupancy bigint not null default 0, entries bigint not null default 0,
  conflicts bigint not null default 0, balance bigint not null default 0, fence bigint not null default 0,
  balance_owner text not null default '', writes_accepted bigint not null default 0,
  writes_rejected bigint not null default 0, reads_rejected bigint not null default 0,
  expires_at timestamptz not null)"""

COUNTER_COLUMNS = "entries, conflicts, writes_accepted, writes_rejected, balance, occupancy, reads_rejected"


class ResourceError(Exception):
    """The resource's server did not answer (a worker reports it as its error)."""


class SerializationFailure(ResourceError):
    """The transaction was rolled back by PostgreSQL (40001 serialization failure, 40P01 deadlock):
    the caller may run it again."""


#: SQLSTATEs after which a transaction is retried (PostgreSQL's manual, 13.2.3 and 13.4).
RETRYABLE = ("40001", "40P01")

#: How long ``pg-for-update`` waits for the row lock (a holder's section, pauses included).
ROW_LOCK_WAIT_S = 60.0


@dataclass
class PendingUpdate:
    """An optimistic update in progress: the balance it read (the compare of its compare-and-set)."""

    seen: int

    def reset(self) -> None:
        pass  # nothing is held on the server between the read and the write


class PgResource:
    """A worker's (or the runner's) handle on one trial's row of the resource table."""

    #: What a call raises when the resource's server fails under it (every call translates its own).
    failures: ClassVar[tuple[type[Exception], ...]] = (ResourceError,)
    link_proxied: ClassVar[bool] = False  # no proxy is put on the workers' link to the database

    @classmethod
    def owns(cls, url: str) -> bool:
        return is_postgres_url(url)

    def __init__(self, *, url: str, prefix: str, timeout_s: float = 2.0) -> None:
        self.prefix = prefix
        self._session = PgSession(url, timeout_s=timeout_s, application_name="lockcompare-resource")

    def _rows(self, sql: str, *params: object) -> list[tuple]:
        try:
            return self._session.query(sql, [self.prefix, *params])
        except (SessionLost, QueryFailed) as exc:
            raise ResourceError(f"the PostgreSQL resource: {exc}") from None

    def _update(self, assignments: str, *params: object, where: str = "", returning: str = "1") -> str | None:
        rows = self._rows(f"update {TABLE} set {assignments} where prefix = $1 {where} returning {returning}", *params)
        return rows[0][0] if rows else None

    def enter(self) -> int:
        """Enter the critical section; returns how many workers are inside now (>1: a conflict)."""
        # In SET, columns are the row's old values: a conflict is an entry that found someone inside.
        inside = self._update(
            "occupancy = occupancy + 1, entries = entries + 1, conflicts = conflicts + (occupancy > 0)::int",
            returning="occupancy",
        )
        return int(inside or 0)

    def exit(self) -> None:
        self._update("occupancy = occupancy - 1")

    def read_balance(
        self, *, check: Check = Check.PLAIN, fencing_token: int | None = None, owner: str = ""
    ) -> int | None:
        if check is Check.FENCE_ALL and fencing_token is not None:
            value = self._update("fence = $2", fencing_token, where="and fence <= $2", returning="balance")
            if value is None:
                self._update("reads_rejected = reads_rejected + 1")
                return None
            return int(value)
        if check is Check.TOKEN_CAS:
            return int(self._update("balance_owner = $2", owner, returning="balance") or 0)
        rows = self._rows(f"select balance from {TABLE} where prefix = $1")
        return int(rows[0][0]) if rows else 0

    def write_balance(
        self, value: int, *, check: Check = Check.FENCE_WRITES, fencing_token: int | None = None, owner: str = ""
    ) -> bool:
        if check in (Check.FENCE_WRITES, Check.FENCE_ALL) and fencing_token is not None:
            done = self._update(
                "balance = $2, fence = $3, writes_accepted = writes_accepted + 1", value, fencing_token,
                where="and fence <= $3",
            )  # fmt: skip
        elif check is Check.TOKEN_CAS:
            done = self._update(
                "balance = $2, writes_accepted = writes_accepted + 1", value, owner, where="and balance_owner = $3"
            )
        else:
            done = self._update("balance = $2, writes_accepted = writes_accepted + 1", value)
        if done is None:
            self._update("writes_rejected = writes_rejected + 1")
            return False
        return True

    def increment(self) -> bool:
        return self._update("balance = balance + 1, writes_accepted = writes_accepted + 1") is not None

    def watch_balance(self) -> tuple[PendingUpdate, int]:
        balance = self.read_balance()
        assert balance is not None
        return PendingUpdate(seen=balance), balance

    def commit_balance(self, pending: PendingUpdate, value: int) -> bool:
        """The optimistic write: accepted only if the balance is still the one read."""
        done = self._update(
            "balance = $2, writes_accepted = writes_accepted + 1", value, pending.seen, where="and balance = $3"
        )
        return done is not None

    # --- what only the Redis resource does (partitions, request ids): one clear line, not an AttributeError

    def read_partition(self, partition: int) -> int:
        raise ResourceError("partitioned and partitioned-skew run on the Redis resource (--resource-kind redis)")

    def write_partition(self, partition: int, value: int) -> bool:
        raise ResourceError("partitioned and partitioned-skew run on the Redis resource (--resource-kind redis)")

    def increment_once(self, request_id: str, *, dedupe: bool) -> bool:
        raise ResourceError("idempotent runs on the Redis resource (--resource-kind redis)")

    # --- transactions (``pg-for-update``, ``pg-serializable``: runner/sections_tx.py) ---------------

    def _in_transaction(self, sql: str, *params: object, timeout_s: float | None = None) -> list[tuple]:
        try:
            return self._session.query(sql, list(params), timeout_s=timeout_s)
        except QueryFailed as exc:
            if exc.sqlstate in RETRYABLE:
                raise SerializationFailure(f"the PostgreSQL resource: {exc}") from None
            raise ResourceError(f"the PostgreSQL resource: {exc}") from None
        except SessionLost as exc:
            raise ResourceError(f"the PostgreSQL resource: {exc}") from None

    def begin(self, *, serializable: bool = False) -> None:
        self._in_transaction("begin isolation level serializable" if serializable else "begin")

    def commit(self) -> None:
        self._in_transaction("commit")

    def rollback(self) -> None:
        self._in_transaction("rollback")

    def read_for_update(self) -> int:
        """Inside a transaction: the balance, with the row locked until commit (others wait here)."""
        # Waiting for the row lock is the design working, not a hung server: a holder's whole section.
        sql = f"select balance from {TABLE} where prefix = $1 for update"
        rows = self._in_transaction(sql, self.prefix, timeout_s=ROW_LOCK_WAIT_S)
        return int(rows[0][0]) if rows else 0

    def read_in_transaction(self) -> int:
        rows = self._in_transaction(f"select balance from {TABLE} where prefix = $1", self.prefix)
        return int(rows[0][0]) if rows else 0

    def write_and_commit(self, value: int) -> bool:
        """Inside a transaction: write the balance and commit; False when PostgreSQL rolled the
        transaction back (serialization failure: the caller reads and works again)."""
        try:
            self._in_transaction(
                f"update {TABLE} set balance = $2, writes_accepted = writes_accepted + 1 where prefix = $1",
                self.prefix, value,
            )  # fmt: skip
            self.commit()
            return True
        except SerializationFailure:
            self.rollback()
            return False

    def prepare(self, *, expire_s: float) -> None:
        """Create this trial's row (and the table); delete rows of earlier runs past their expiry."""
        for attempt in range(3):
            try:
                self._session.query(SCHEMA)
                break
            except QueryFailed:
                if attempt == 2:  # two creators at once: the other one made it
                    raise
            except SessionLost as exc:
                raise ResourceError(f"the PostgreSQL resource: {exc}") from None
        self._rows(f"delete from {TABLE} where expires_at < clock_timestamp() or prefix = $1")
        self._rows(
            f"insert into {TABLE} (prefix, expires_at) values ($1, clock_timestamp() + make_interval(secs => $2))",
            max(1, round(expire_s)),
        )

    def reset(self) -> None:
        self._rows(f"delete from {TABLE} where prefix = $1")

    def counters(self) -> ResourceCounters:
        rows = self._rows(f"select {COUNTER_COLUMNS} from {TABLE} where prefix = $1")
        return ResourceCounters.from_values([int(v) for v in rows[0]] if rows else [0] * 7)

    def close(self) -> None:
        self._session.close()
