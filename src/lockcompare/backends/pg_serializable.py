"""``pg-serializable``: no lock service — a SERIALIZABLE PostgreSQL transaction, retried.

Read the balance, work, write and commit at isolation level SERIALIZABLE; when PostgreSQL
refuses the commit (SQLSTATE 40001 serialization failure, or 40P01) the section reads and works
again (runner/sections_tx.py). Nothing is lost; the price is repeated work, counted in the row's
``cs_retries`` as for ``optimistic``.
"""

from __future__ import annotations

from typing import ClassVar

from lockcompare.backends.pg_transaction import PgTransactionSection


class PgSerializable(PgTransactionSection):
    """Lock-free: a SERIALIZABLE transaction per section, redone on serialization failure."""

    summary: ClassVar[str] = "lock-free: a SERIALIZABLE PostgreSQL transaction, retried on serialization failure"
    resource_check: ClassVar[str] = "pg-serializable"
