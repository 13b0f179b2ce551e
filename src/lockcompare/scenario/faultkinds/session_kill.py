"""The session-ending fault: the server ends the lock holder's session while it holds the lock.

What an administrator's ``pg_terminate_backend``, ``idle_session_timeout`` or a connection pooler
does to a client that still runs: the server process serving the session exits, and with it every
session-level advisory lock it held. The holder is not told; it learns of it at its next call on
that connection (its release fails).

Whose session: the one holding the trial's lock, read on the server at injection time — the
``pg_locks`` row of the lock's advisory key (``pg-advisory``), or the session recorded in the
lease row (``pg-lease``: its lease survives, the row is not the session). Only that session is
ended, so the fault is safe on a server lockcompare does not own (``--postgres URL``); a step that
finds no holder says so and ends nothing.

At kill time: right before it ends a session, the kind asks the runner's guard (faults/aim.py)
whether that session is a worker's current lease by the worker's own account; one that is not (its
holder had begun releasing, and would wait on it as the next round's waiter) is left alone.

Whom: ``worker=holder`` names, in the history, whose lease that was; the session is found from the
lock itself, on the one PostgreSQL lock node (node 0). The lock nodes' kind ends it
(infra/kinds.py SessionKind: PostgreSQL's in infra/postgres/sessions.py; ZooKeeper's, which attaches to
the holder's session and closes it, in infra/zookeeper/sessions.py), asked when the fault runs, not
when the fault kind is read (the scenario stays free of client libraries).

The injection names what it ended: its event carries ``sessions_ended``, the backend pids of the
sessions the server ended (empty when it ended none), beside ``target_worker``, the holder it was
aimed at. That is how the checker knows a session lock's lease ended by the server's hand
(analysis/sessions.py): a grant after it is legal, and the old holder's writes after it are stale.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from lockcompare.scenario.faultkinds.base import SESSION_CONTROL, WORKER, FaultKind, Runtime, Shape, any_worker, when

if TYPE_CHECKING:
    from lockcompare.infra.cluster import Cluster
    from lockcompare.infra.kinds import ServerKind
    from lockcompare.scenario.schedule import TrialStep


def _nodes_kind(cluster: Cluster) -> ServerKind | None:
    """The kind of the cluster's lock nodes (None: it has none)."""
    return cluster.kind_of(cluster.node_urls[0]) if cluster.node_urls else None


@dataclass(frozen=True)
class SessionKill:
    """End the session holding ``lock_key`` on the given lock nodes (their kind ends it).

    ``lease_znodes``: where a ZooKeeper backend's lease lives, as the backend declares it (its class
    attribute of that name; None: kazoo's Lock recipe under the key's lock path). The runner fills it
    in (runner/trial.py), so the scenario stays free of backends."""

    lock_key: str
    lease_znodes: object = None
    scope: ClassVar[str] = "nodes"
    #: The runner hands inject its ``guard`` (faults/aim.py): asked at kill time whether the session
    #: found is a worker's current lease.
    takes_guard: ClassVar[bool] = True

    def inject(
        self, cluster: Cluster, nodes: list[int], *, guard: Callable[[object], bool] | None = None
    ) -> tuple[str, dict[str, object]]:
        """(detail, fields of the event): the sessions ended, by backend pid (see the module docstring)."""
        from lockcompare.infra.kinds import SessionKind

        kind = _nodes_kind(cluster)
        if isinstance(kind, SessionKind):  # the lock nodes' kind ends the holder's session itself
            return kind.end_holder_sessions(
                cluster.node_urls, nodes=nodes, lock_key=self.lock_key, lease_znodes=self.lease_znodes, holds=guard
            )
        if nodes:  # servers without sessions to end (the matrix leaves such cells out: a step run by hand)
            return f"skipped: lock node {nodes[0]} is not a PostgreSQL server", {"sessions_ended": []}
        return "skipped: no session held the lock", {"sessions_ended": []}

    def heal(self, cluster: Cluster, nodes: list[int]) -> str:
        from lockcompare.infra.kinds import SessionKind

        kind = _nodes_kind(cluster)
        reopens = (
            kind.session_reopens if isinstance(kind, SessionKind) else "the holder opens a new one at its next call"
        )
        return f"the session stays ended ({reopens})"


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
