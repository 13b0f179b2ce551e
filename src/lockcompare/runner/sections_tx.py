"""Critical sections that are PostgreSQL transactions (``pg-for-update``, ``pg-serializable``).

The lesson's fourth lock-free alternative: let the database serialise the read-modify-write.

- ``pg-for-update``: BEGIN → ``SELECT balance … FOR UPDATE`` (a rival waits here, on the row lock)
  → enter → work → UPDATE → exit → COMMIT. Enter and exit run inside the transaction, on the row
  it has locked, so the resource's occupancy counts the section the row lock actually protects:
  a worker waiting for the lock is not "inside". The cost is the wait.
- ``pg-serializable``: enter (its own statement) → BEGIN ISOLATION LEVEL SERIALIZABLE → read →
  work → UPDATE + COMMIT; when PostgreSQL refuses (SQLSTATE 40001/40P01) roll back, record a
  ``retry`` (the row's ``cs_retries``), read and work again → exit. Like ``optimistic``, entries may
  overlap (conflicts are counted) but none is lost. The occupancy counters share the balance's
  row, so a rival's enter or exit landing inside a transaction also forces a retry: the retries
  count overlaps, and slightly overcount them.

Both need the PostgreSQL resource (runner/resource_pg.py): the backends say ``resource_kind``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from lockcompare.analysis.history import Recorder, now_ns
from lockcompare.errors import BackendLoadError
from lockcompare.runner.resource_pg import PgResource, ResourceError, SerializationFailure

#: Give up a serializable update after this many rolled-back attempts (recorded; no hung trial).
MAX_SERIALIZABLE_ATTEMPTS = 1000


def _pg(resource: Any, check: str) -> PgResource:
    if not isinstance(resource, PgResource):
        raise BackendLoadError(f"{check} runs on the PostgreSQL resource (--resource-kind auto or postgres)")
    return resource


def for_update_section(*, resource: Any, rec: Recorder, work_s: float, before_write: Callable[[], bool]) -> None:
    """One ``pg-for-update`` section: the transaction's row lock is the lock."""
    pg = _pg(resource, "pg-for-update")
    pg.begin()
    try:
        balance = rec.timed("read", pg.read_for_update, result_as="balance", how="for-update")
        rec.timed("enter", pg.enter, result_as="inside")
        try:
            time.sleep(work_s)
            if before_write():
                rec.timed("write", lambda: pg.write_balance(balance + 1), result_as="accepted", value=balance + 1)
        finally:
            rec.timed("exit", pg.exit)
        pg.commit()
    except BaseException:
        with contextlib.suppress(ResourceError):  # a lost session has rolled back already
            pg.rollback()
        raise


def serializable_section(*, resource: Any, rec: Recorder, work_s: float, before_write: Callable[[], bool]) -> None:
    """One ``pg-serializable`` section: read → work → write+commit, redone on serialization failure."""
    pg = _pg(resource, "pg-serializable")
    rec.timed("enter", pg.enter, result_as="inside")
    try:
        for attempt in range(MAX_SERIALIZABLE_ATTEMPTS):
            pg.begin(serializable=True)
            try:
                balance = pg.read_in_transaction()
            except SerializationFailure:
                pg.rollback()
                rec.add("retry", t0=now_ns(), attempt=attempt, at="read")
                continue
            rec.add("read", t0=now_ns(), balance=balance, attempt=attempt)
            time.sleep(work_s)
            if attempt == 0 and not before_write():  # the fault hits once per round, not on every retry
                pg.rollback()
                return
            committed = rec.timed(
                "write", partial(pg.write_and_commit, balance + 1), result_as="accepted", value=balance + 1
            )
            if committed:
                return
            rec.add("retry", t0=now_ns(), attempt=attempt)
        rec.add("error", t0=now_ns(), message=f"serializable update gave up after {MAX_SERIALIZABLE_ATTEMPTS} attempts")
    finally:
        rec.timed("exit", pg.exit)
