"""The session-ending fault: the database ends the lock holder's session while it holds the lock.

What an administrator's ``pg_terminate_backend``, ``idle_session_timeout`` or a connection pooler
does to a client that still runs: the server process serving the session exits, and with it every
session-level advisory lock it held. The holder is not told; it learns of it at its next call on
that connection (its release fails).

Whose session: the one holding the trial's lock, read on the server at injection time — the
``pg_locks`` row of the lock's advisory key (``pg-advisory``), or the session recorded in the
lease row (``pg-lease``: its lease survives, the row is not the session). Only that session is
ended, so the fault is safe on a server lockcompare does not own (``--postgres URL``); a step that
finds no holder says so and ends nothing.

Whom: ``worker=holder`` names, in the history, whose lease that was; the session is found from the
lock itself, on the one PostgreSQL lock node (node 0). The client module is imported when the
fault runs, not when the kind is read (spec stays free of client libraries).

The injection names what it ended: its event carries ``sessions_ended``, the backend pids of the
sessions the server ended (empty when it ended none), beside ``target_worker``, the holder it was
aimed at. That is how the checker knows a session lock's lease ended by the server's hand
(analysis/sessions.py): a grant after it is legal, and the old holder's writes after it are stale.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from lockcompare.spec.faultkinds.base import SESSION_CONTROL, WORKER, FaultKind, Runtime, Shape, any_worker, when

if TYPE_CHECKING:
    from lockcompare.infra.cluster import Cluster
    from lockcompare.infra.pg_client import PgSession
    from lockcompare.spec.schedule import TrialStep

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
    from lockcompare.infra.pg_client import QueryFailed, advisory_key, split_advisory_key

    classid, objid = split_advisory_key(advisory_key(lock_key))
    pids = {int(row[0]) for row in session.query(HOLDERS_ADVISORY, [classid, objid])}
    try:
        pids |= {int(row[0]) for row in session.query(HOLDERS_LEASE, [lock_key])}
    except QueryFailed as exc:
        if exc.sqlstate != _UNDEFINED_TABLE:  # no lease table: no pg-lease trial here
            raise
    return sorted(pids)


def end_holder_sessions(url: str, *, lock_key: str, timeout_s: float = 2.0) -> list[int]:
    """Find the sessions holding ``lock_key`` and ``pg_terminate_backend`` them, on one admin
    session (a connect costs more than both statements); the pids that were ended."""
    from lockcompare.infra.pg_client import PgSession

    session = PgSession(url, timeout_s=timeout_s, application_name="lockcompare-fault")
    try:
        pids = holder_pids(session, lock_key=lock_key)
        # With a timeout (PostgreSQL >= 14) the call returns only once the backend has exited, so the
        # injection's t1 is never before the lock was free (PostgreSQL polls for the exit: t1 lands up
        # to ~100 ms after the locks went, measured; the rival's grant in the history shows when).
        wait_ms = round(timeout_s * 500)
        ended = "select pg_terminate_backend($1::int, $2::bigint)"
        return [pid for pid in pids if session.value(ended, [pid, wait_ms]) == "t"]
    finally:
        session.close()


@dataclass(frozen=True)
class SessionKill:
    """End the session holding ``lock_key`` on the given PostgreSQL lock nodes (or ZooKeeper's).

    ``lease_znodes``: where a ZooKeeper backend's lease lives, as the backend declares it (its class
    attribute of that name; None: kazoo's Lock recipe under the key's lock path). The runner fills it
    in (runner/trial.py), so the spec stays free of backends."""

    lock_key: str
    lease_znodes: object = None
    scope: ClassVar[str] = "nodes"

    def inject(self, cluster: Cluster, nodes: list[int]) -> tuple[str, dict[str, object]]:
        """(detail, fields of the event): the sessions ended, by backend pid (see the module docstring)."""
        from lockcompare.infra.pg_client import QueryFailed, SessionLost, is_postgres_url
        from lockcompare.infra.zookeeper_server import is_zookeeper_url

        if cluster.node_urls and is_zookeeper_url(cluster.node_urls[0]):
            # At run time only: ZooKeeper's session expiry lives in faults/zookeeper.py (it should move
            # to infra, beside the client it drives; until then this is spec's one late import of faults).
            from lockcompare.faults.zookeeper import expire_holder_session

            detail, sessions, whose = expire_holder_session(
                list(cluster.node_urls),
                lock_key=self.lock_key,
                lease_znodes=self.lease_znodes,  # type: ignore[arg-type]  # checked by the backend loader
            )
            return detail, {"sessions_ended": sessions, **whose}  # ZooKeeper session ids (faults/zookeeper.py)
        ended: list[int] = []
        for index in nodes:
            url = cluster.node_urls[index]
            if not is_postgres_url(url):
                return f"skipped: lock node {index} is not a PostgreSQL server", {"sessions_ended": ended}
            try:
                ended += end_holder_sessions(url, lock_key=self.lock_key)
            except (SessionLost, QueryFailed) as exc:
                return f"skipped: lock node {index} did not answer ({exc})", {"sessions_ended": ended}
        if not ended:
            return "skipped: no session held the lock", {"sessions_ended": []}
        detail = f"pg_terminate_backend: ended the holder's session (backend pid {', '.join(map(str, ended))})"
        return detail, {"sessions_ended": ended}

    def heal(self, cluster: Cluster, nodes: list[int]) -> str:
        from lockcompare.infra.zookeeper_server import is_zookeeper_url

        if cluster.node_urls and is_zookeeper_url(cluster.node_urls[0]):
            return "the session stays ended (kazoo opens a new one at its next reconnect)"
        return "the session stays ended (the holder opens a new one at its next call)"


class SessionKillKind(FaultKind):
    name = "session-kill"
    order = 90
    summary = (
        "PostgreSQL backends: the server ends the session holding the lock, found from the lock itself "
        "(a Redis or etcd backend's cell is left out)"
    )
    acts_on = WORKER
    without_for = "–"
    needs = frozenset({SESSION_CONTROL})
    excuses_worker = True
    explored_by_default = False  # it needs PostgreSQL backends

    def runtime(self, step: TrialStep, *, ttl_ms: float, lock_key: str) -> Runtime:
        # The server finds the session holding the lock itself, on the one PostgreSQL lock node.
        return Runtime(build=lambda _w: SessionKill(lock_key=lock_key), heal_after_ms=0.0, fixed_nodes=(0,))

    def draw(self, rng: random.Random, shape: Shape) -> tuple[str, ...]:
        return (f"worker={any_worker(rng, shape)}", *when(rng, shape, start_ok=False))


KIND = SessionKillKind()
