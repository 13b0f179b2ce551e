"""The experiment catalogue: named timings + faults applied to the same workload.

Defaults follow the lesson's lab: 2 workers x 40 rounds, 300 ms of work, TTL 1000 ms. Every time
is given at the lesson's scale and multiplied by ``time_scale``, so a quick run keeps the ratios.
"""

from __future__ import annotations

from dataclasses import dataclass

from lockcompare.errors import UnknownNameError


@dataclass(frozen=True, kw_only=True)
class Experiment:
    """A named setting: lesson-scale times and which faults apply."""

    name: str
    claim: str
    ttl_ms: float = 1000
    work_ms: float = 300
    pause_ms: float = 0  # > 0: the pausing workers freeze this long right after acquiring
    pause_probability: float = 1.0  # share of a pausing worker's rounds that pause
    rounds: int | None = None  # rounds per worker when --rounds is not given (None: the lesson's 40)
    fault: str | None = None  # a node fault (faults/node.py) following worker 0's leases
    #: How long a round may wait for the lock (None: DEFAULT_ACQUIRE_TIMEOUT_MS). Node faults make a
    #: lock unavailable on purpose: there a round gives up after 2 TTLs instead of a minute.
    acquire_timeout_ms: float | None = None
    #: Whether --fault-nodes K says how many nodes the fault hits (False: the experiment fixes them).
    takes_fault_nodes: bool = True


EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        Experiment(
            name="baseline",
            claim="TTL 1000 > work 300, no faults: a correct lock gives 0 conflicts; none gives ~half",
        ),
        Experiment(
            name="short-ttl",
            ttl_ms=200,
            claim="TTL 200 < work 300: a textbook-correct lock with too short a TTL is worse than none",
        ),
        Experiment(
            name="client-pause",
            pause_ms=1200,
            claim="worker 0 freezes 1200 ms after acquiring (TTL 1000): the lock lets a second worker in",
        ),
        Experiment(
            name="node-crash",
            fault="node-crash",
            acquire_timeout_ms=2000,
            claim="--fault-nodes K lock nodes die while worker 0 holds its first lease, and stay down: "
            "single becomes unavailable; redlock keeps granting with K < 3 of 5",
        ),
        Experiment(
            name="node-restart",
            fault="node-restart",
            acquire_timeout_ms=2000,
            claim="K nodes holding worker 0's lease are SIGKILLed and restart empty (every round): single "
            "loses the lock; redlock only with a majority restarted; --restart-delay-ms >= TTL or "
            "--persistence aof-always keeps it exclusive",
        ),
        Experiment(
            name="clock-jump",
            fault="clock-jump",
            acquire_timeout_ms=2000,
            claim="the wall clocks of K nodes jump 2 x TTL forward while worker 0 holds its lease (every "
            "round): single loses the lock; redlock only with a majority jumped",
        ),
        Experiment(
            name="failover",
            fault="failover",
            acquire_timeout_ms=2000,
            claim="each lock node is a master + async replica; the replication of --fault-nodes K nodes is "
            "held back, their masters die while worker 0 holds its first lease and the replicas are "
            "promoted: single loses the lock (--wait-replicas 1: refuses instead); redlock stays exclusive "
            "with K < 3 of 5; fenced tokens go backwards and the resource refuses the new holder's writes",
        ),
        Experiment(
            name="renewal-pause",
            work_ms=3000,
            pause_ms=1500,
            rounds=5,
            claim="work 3000 > TTL 1000 with a renewing lock, worker 0 paused 1500 ms: renewal survives "
            "--pause-how sleep (only one thread sleeps), not sigstop (the watchdog freezes too)",
        ),
        Experiment(
            name="session-kill",
            fault="session-kill",
            acquire_timeout_ms=2000,
            takes_fault_nodes=False,
            claim="50 ms into each of worker 0's leases the database ends the session holding the lock "
            "(pg_terminate_backend, as an administrator, idle_session_timeout or a pooler would): pg-advisory "
            "releases the lock under a holder that still runs (conflicts); pg-lease's row outlives the session "
            "(exclusive). PostgreSQL backends only",
        ),
        # Link experiments (faults/network.py): each worker reaches each lock node through a proxy.
        Experiment(
            name="slow-response",
            fault="slow-response",
            acquire_timeout_ms=2000,
            takes_fault_nodes=False,
            claim="every reply from the lock nodes reaches worker 0 TTL + work/2 late (its requests land on "
            "time): redlock refuses it (0 conflicts; its per-node timeout TTL/10 gives up first: no-quorum; "
            "pottery waits and refuses for validity); single enters anyway and conflicts",
        ),
        Experiment(
            name="partition",
            fault="partition",
            acquire_timeout_ms=2000,
            claim="worker 0 is cut off (blackhole) from lock nodes 0..K-1 for the whole trial: redlock keeps "
            "granting with K < 3 of 5 and refuses worker 0 (no-quorum) with K >= 3; single is unavailable "
            "to worker 0 (node 0 is cut); 0 conflicts either way",
        ),
        Experiment(
            name="partition-clock-jump",
            fault="partition-clock-jump",
            acquire_timeout_ms=2000,
            takes_fault_nodes=False,
            claim="Kleppmann's scenario: worker 0 reaches nodes 0,1,2, worker 1 reaches 0,3,4; node 0's clock "
            "jumps 2 x TTL while worker 0 holds its lease: both hold a majority at once (redlock conflicts); "
            "single (node 0) conflicts; fenced with --fence all loses nothing (checked on the write only it "
            "loses updates: the old holder, mid-section, writes before its successor does)",
        ),
    )
}


#: What ``matrix`` runs when --experiments is not given: the lesson's table. The fault experiments
#: are opt-in: each needs its own settings (--fault-nodes, ...) and the lesson's scale or 0.5.
DEFAULT_EXPERIMENTS = ("baseline", "short-ttl", "client-pause")

#: A node fault lands this long after worker 0 acquired (scaled): well inside its 300 ms of work.
FAULT_DELAY_MS = 50.0


def get_experiment(name: str) -> Experiment:
    try:
        return EXPERIMENTS[name]
    except KeyError:
        raise UnknownNameError(f"unknown experiment {name!r} (known: {', '.join(EXPERIMENTS)})") from None
