"""The ``failover`` fault: a lock node's master dies before its replica saw the lock, and the
replica is promoted in its place — why Redlock exists (antirez), and what WAIT does about it.

Each lock node of the trial's cluster is a master with one asynchronous replica behind a stable
address (cluster.ClusterShape.replicas=1, replication.ReplicatedNodes): a Redis pair behind a front
proxy (infra/redis/failover_pair.py), a PostgreSQL primary + streaming replica behind a multi-host URL
(infra/postgres/replication.py), or a Redis master + replica that three real Sentinels fail over
(infra/sentinel/nodes.py). The pair does the failover its own way; the fault's event records what it
read — ``failover``: per node, the master before and after, who promoted it (the harness, or
the Sentinel that won the election) and when. The fault, on fixed lock
nodes (the catalogue: ``failover nodes=0..K-1 after-acquire=50 once``, ``--fault-nodes K``; fixed
because the replication must be held back before any lease exists to read holders from):

- ``prepare`` (when the workers are released): the replication link is held back (blackholed in
  its proxy), so from now on the master acknowledges writes the replica never sees;
- ``inject`` (``after-acquire`` ms after worker 0's first lease — or one TTL after ``prepare`` if worker
  0 got none by then, e.g. because a backend with WAIT refuses every unreplicated lease): SIGKILL
  the master, ``REPLICAOF NO ONE`` on the replica (what Sentinel does), and move the node's
  address to it. The promoted node holds none of the trial's keys: no lock key, no fencing counter;
- ``heal`` (right after): the promoted node gets a fresh, unbroken replica (a diskless full sync,
  ~20 ms here), so the trial goes on with a healthy pair — and a backend that waits for a replica
  can be granted leases again.

Why the workers follow through a stable address (a proxy re-pointed at the promoted replica, as a
virtual IP is moved on failover) rather than each backend asking Sentinel: every backend, built-in
or plug-in, follows the failover unchanged, and the one moment the address moves is the fault's.

Why once per trial and not every round (a rebuild is cheap: ~20 ms): the link must be held back
*before* the lock key is written, and the only moment the runner can pick without racing the
workers is one that precedes every write of the trial — its start. Re-arming after a failover
would cut the link while the rival holds a (replicated) lease; its release would then be lost at
the next failover and its released key resurrected on the promoted node, blocking everyone until
its TTL ran out — a real effect of failovers, but one that turns every other round's conflict into
a wait and makes the count hang on timing. Once per trial, the failover is the same in every trial.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from lockcompare.errors import InvalidValueError, LockcompareError
from lockcompare.scenario.faultkinds.base import NODES, REPLICATION, FaultKind, Runtime, Shape, when, whom_nodes

if TYPE_CHECKING:
    from lockcompare.infra.cluster import Cluster
    from lockcompare.scenario.schedule import FaultStep, TrialStep


@dataclass(frozen=True)
class Failover:
    """Hold back the replication link, kill the master, promote the replica; heal with a new replica."""

    scope: ClassVar[str] = "nodes"

    def prepare(self, cluster: Cluster, nodes: list[int]) -> str:
        for i in nodes:
            cluster.node_pair(i).hold_back()
        return "replication link held back (the master acknowledges writes its replica never sees)"

    def inject(self, cluster: Cluster, nodes: list[int]) -> tuple[str, dict[str, object]]:
        records = []
        for i in nodes:
            pair = cluster.node_pair(i)
            pair.fail_over()
            records.append({"node": i, **pair.failover_record()})
        said = "; ".join(
            f"{r.get('master_before')}{_at(r, 'server_before')} down, "
            f"{r.get('master_after')}{_at(r, 'server_after')} promoted by {r.get('promoted_by')}"
            for r in records
        )
        return f"master crashed; {said}", {"failover": records}

    def heal(self, cluster: Cluster, nodes: list[int]) -> str:
        """A failed-over node gets a fresh replica; a node still held back gets its link back.

        Runs in the runner's ``finally`` too, so it never raises: a node that cannot be repaired
        marks the cluster broken (the pool replaces it) and says so in the history.
        """
        done, problems = [], []
        for i in nodes:
            pair = cluster.node_pair(i)
            try:
                if pair.failed_over:
                    pair.rebuild_replica()
                    done.append("fresh replica in sync")
                elif pair.held_back:
                    pair.let_through()
                    done.append("replication link let through")
            except LockcompareError as exc:
                cluster.mark_broken(f"failover heal on lock node {i}: {exc}")
                problems.append(f"node {i}: {exc}")
        return "; ".join(sorted(set(done)) + problems) or "nothing to heal"


class FailoverKind(FaultKind):
    name = "failover"
    excuses_calls = True
    order = 70
    summary = "fixed nodes only: replication held back from the start; the master dies, the replica is promoted"
    acts_on = NODES
    needs = frozenset({REPLICATION})
    # Not a loss of keys: the promoted replica answers on the same address, with or without the key.

    def check(self, step: FaultStep) -> None:
        if step.nodes is not None and step.nodes.from_lease:
            raise InvalidValueError(
                "failover holds the nodes' replication back from the start: give fixed nodes or all"
            )

    def runtime(self, step: TrialStep, *, ttl_ms: float, lock_key: str) -> Runtime:
        # Its master dies one TTL after the start at the latest, if no acquire triggered it sooner.
        return Runtime(
            build=lambda _w: Failover(),
            heal_after_ms=self.heal_after_ms(step),
            latest_ms=ttl_ms,
            prepares=True,
        )

    def draw(self, rng: random.Random, shape: Shape) -> tuple[str, ...]:
        at = when(rng, shape, start_ok=True)
        return (f"nodes={whom_nodes(rng, shape, lease=False)}", *at)  # fixed nodes: held back from the start


KIND = FailoverKind()


def _at(record: dict[str, object], field: str) -> str:
    """`` (host:port)`` of a server a failover record names (the Sentinel kind's do), else ""."""
    server = record.get(field)
    return f" ({server})" if server else ""
