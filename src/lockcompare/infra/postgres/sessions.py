"""PostgreSQL's end of the session-kill fault: find the sessions holding a lock and end them.

What an administrator's ``pg_terminate_backend``, ``idle_session_timeout`` or a connection pooler
does to a client that still runs (scenario/faultkinds/session_kill.py says why and when). Whose session:
the one holding the trial's lock, read on the server at injection time — the ``pg_locks`` row of the
lock's advisory key (``pg-advisory``), or the session recorded in the lease row (``pg-lease``: its
lease survives, the row is not the session). Only that session is ended, so this is safe on a
server lockcompare does not own (``--postgres URL``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from lockcompare.infra.postgres.client import PgSession, QueryFailed, advisory_key, split_advisory_key

#: The sessions holding the lock ``$1`` (classid, objid of its advisory key) or its unexpired lease row.
HOLDERS_ADVISORY = """
select pid from pg_locks
where locktype = 'advisory' and granted and classid = $1::oid and objid = $2::oid and objsubid = 1
  and database = (select oid from pg_database where datname = current_database())
"""
HOLDERS_LEASE = (
    "select pid from lockcompare_leases where key = $1 and expires_at > clock_timestamp() and pid is not null"
)
_UNDEFINED_TABLE = "42P01"


def holder_pids(session: PgSession, *, lock_key: str) -> list[int]:
    """The backend pids of the sessions holding ``lock_key`` on ``session``'s server."""
    classid, objid = split_advisory_key(advisory_key(lock_key))
    pids = {int(row[0]) for row in session.query(HOLDERS_ADVISORY, [classid, objid])}
    try:
        pids |= {int(row[0]) for row in session.query(HOLDERS_LEASE, [lock_key])}
    except QueryFailed as exc:
        if exc.sqlstate != _UNDEFINED_TABLE:  # no lease table: no pg-lease trial here
            raise
    return sorted(pids)


def end_holder_sessions(
    url: str, *, lock_key: str, timeout_s: float = 2.0, holds: Callable[[object], bool] | None = None
) -> tuple[list[int], list[int]]:
    """Find the sessions holding ``lock_key`` and ``pg_terminate_backend`` them, on one admin
    session (a connect costs more than both statements): (the pids ended, the pids found but left
    alone). ``holds`` (the runner's, faults/aim.py): asked right before each termination whether that
    session is still a worker's current lease — the holder may have released between the lookup and
    the kill, and ending its session then would end a *waiting* worker's; one it denies is left alone."""
    session = PgSession(url, timeout_s=timeout_s, application_name="lockcompare-fault")
    try:
        found = holder_pids(session, lock_key=lock_key)
        pids = [pid for pid in found if holds is None or holds(pid)]
        ended = [pid for pid in pids if session.value("select pg_terminate_backend($1::int)", [pid]) == "t"]
        _wait_for_exit(session, ended, timeout_s=timeout_s / 2)
        return ended, sorted(set(found) - set(pids))
    finally:
        session.close()


#: A terminated backend that still holds a lock or still runs.
_STILL_THERE = "select 1 from pg_locks where pid = $1::int union all select 1 from pg_stat_activity where pid = $1::int"


def _wait_for_exit(session: PgSession, pids: list[int], *, timeout_s: float) -> None:
    """Return once every backend of ``pids`` has let go of its locks and exited (or ``timeout_s``
    passed), so the injection's t1 is never before the lock was free. Polled every millisecond here:
    ``pg_terminate_backend(pid, timeout)`` polls every 100 ms, so the kill ended up to ~100 ms after
    the locks went — and the runner, which lands every step from one thread, landed the next round's
    step that much late, after its lease had ended (half of a session-kill trial's steps missed)."""
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while session.query(_STILL_THERE, [pid]) and time.monotonic() < deadline:
            time.sleep(0.001)
