"""``pg-for-update``: no lock service — a PostgreSQL transaction locks the resource's row.

The lesson's fourth alternative, transactions: BEGIN, ``SELECT balance … FOR UPDATE``, work,
UPDATE, COMMIT (runner/sections_tx.py). The row lock lives in the same server as the data and
ends with the transaction, so a paused client cannot outlive it and let a second writer in: the
rival waits. The cost is that wait (and a client paused mid-transaction holds everyone up).
"""

from __future__ import annotations

from typing import ClassVar

from lockcompare.backends.no_lock import NoLock
from lockcompare.infra.pg_client import check_postgres_viable


class PgForUpdate(NoLock):
    """Lock-free: the critical section is a transaction holding the resource row's lock."""

    in_default_matrix: ClassVar[bool] = (
        False  # the lock-free alternatives have their own comparison (docs/lock-free.md)
    )
    summary: ClassVar[str] = "lock-free: a PostgreSQL transaction, SELECT ... FOR UPDATE on the resource row"
    resource_check: ClassVar[str] = "pg-for-update"
    resource_kind: ClassVar[str] = "postgres"

    @classmethod
    def check_viable(cls) -> None:
        check_postgres_viable()  # the resource is a PostgreSQL server (embedded, or --postgres)
