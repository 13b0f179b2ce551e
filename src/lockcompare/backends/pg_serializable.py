"""``pg-serializable``: no lock service — a SERIALIZABLE PostgreSQL transaction, retried.

Read the balance, work, write and commit at isolation level SERIALIZABLE; when PostgreSQL
refuses the commit (SQLSTATE 40001 serialization failure, or 40P01) the section reads and works
again (runner/sections_tx.py). Nothing is lost; the price is repeated work, counted in the row's
``cs_retries`` as for ``optimistic``.
"""

from __future__ import annotations

from typing import ClassVar

from lockcompare.backends.no_lock import NoLock
from lockcompare.infra.pg_client import check_postgres_viable


class PgSerializable(NoLock):
    """Lock-free: a SERIALIZABLE transaction per section, redone on serialization failure."""

    in_default_matrix: ClassVar[bool] = (
        False  # the lock-free alternatives have their own comparison (docs/lock-free.md)
    )
    summary: ClassVar[str] = "lock-free: a SERIALIZABLE PostgreSQL transaction, retried on serialization failure"
    resource_check: ClassVar[str] = "pg-serializable"
    resource_kind: ClassVar[str] = "postgres"

    @classmethod
    def check_viable(cls) -> None:
        check_postgres_viable()  # the resource is a PostgreSQL server (embedded, or --postgres)
