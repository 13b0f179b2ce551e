"""``pg-for-update``: no lock service — a PostgreSQL transaction locks the resource's row.

The lesson's fourth alternative, transactions: BEGIN, ``SELECT balance … FOR UPDATE``, work,
UPDATE, COMMIT (runner/sections_tx.py). The row lock lives in the same server as the data and
ends with the transaction, so a paused client cannot outlive it and let a second writer in: the
rival waits. The cost is that wait (and a client paused mid-transaction holds everyone up).
"""

from __future__ import annotations

from typing import ClassVar

from lockcompare.backends.pg_transaction import PgTransactionSection


class PgForUpdate(PgTransactionSection):
    """Lock-free: the critical section is a transaction holding the resource row's lock."""

    summary: ClassVar[str] = "lock-free: a PostgreSQL transaction, SELECT ... FOR UPDATE on the resource row"
    resource_check: ClassVar[str] = "pg-for-update"
