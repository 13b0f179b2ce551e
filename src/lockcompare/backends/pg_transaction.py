"""The lock-free designs whose critical section is one PostgreSQL transaction at the resource.

``pg-for-update`` (a row lock) and ``pg-serializable`` (serialization failures, retried) differ only
in the transaction runner/sections_tx.py runs; what they need is the same, and said once here: the
balance on a PostgreSQL server, a PostgreSQL to start or reach, and no place in the default matrix.
"""

from __future__ import annotations

from typing import ClassVar

from lockcompare.backends.no_lock import NoLock
from lockcompare.infra.postgres.server import check_postgres_viable


class PgTransactionSection(NoLock):
    """Lock-free: the critical section is a transaction on the PostgreSQL resource (subclasses say which)."""

    in_default_matrix: ClassVar[bool] = (
        False  # the lock-free alternatives have their own comparison (docs/lock-free.md)
    )
    resource_kind: ClassVar[str] = "postgres"
    libraries: ClassVar[tuple[str, ...]] = ("psycopg",)  # recorded with their versions in every row

    @classmethod
    def check_viable(cls) -> None:
        check_postgres_viable()  # the resource is a PostgreSQL server (embedded, or --postgres)
