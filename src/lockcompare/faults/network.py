"""Link faults: what happens on the wire between one worker and some lock nodes.

In a link experiment every worker reaches every lock node through a link of its own — one
:class:`~lockcompare.infra.proxy.ProxySet` per trial, started by :func:`start_links` and stopped in the
trial's ``finally``; the runner's admin connections (health checks, key cleanup, node faults, the
resource) go direct. Per trial rather than pooled with the cluster: starting the proxy process and
its 10 links took 123 ms (median of 8; stopping it 26 ms) on the 2-core machine, a few per cent of a
trial at ``--time-scale 0.1``, and a fresh set cannot carry a fault or a half-reset connection from
one trial into the next.

A link fault acts on the links of one worker (``worker``) to the lock nodes it is given:

- :class:`LinkDelay`: every reply from those nodes reaches that worker ``ms`` late (requests go
  through at once, so a SET takes effect on time and only its answer is late);
- :class:`LinkCut`: a partition (blackhole): bytes vanish both ways, new connects hang, the
  worker's calls time out after its request timeout.

Faults act on *nodes* (given the :class:`~lockcompare.infra.cluster.Cluster`) or on *links* (``scope =
"links"``: given the trial's :class:`FaultContext`, which holds the cluster and the links); the
scheduler hands each fault what it acts on. When (schedule.py): a partition is *standing*, in place
from the workers' first round to the end of the trial; the slow link is in place *around each
acquire* of worker 0 (the worker waits for the runner before and after it). Every one heals in the
runner's ``finally``. Experiments:

- ``slow-response``: the replies to worker 0's acquire requests, from every lock node, arrive
  ``TTL + work/2`` late — after its lease has expired at the nodes, while the next holder is inside
  its critical section. Only the acquire's: a delay on every reply (measured first) also slowed
  worker 0's release by as much, so worker 1 ran its rounds ~5x faster, finished first, and
  worker 0's late entries met nobody (0 conflicts: the workload, not the lock, decided that).
  Refusals (null replies) are not delayed either: a late "held" only slowed worker 0's retries, and
  worker 1 again finished first (measured: 0-2 conflicts in 10 rounds for single).
  Each call's request timeout is twice the delay, so the client waits for its reply. Worker 0's
  first round is left clean: it opens the connections (a connect handshake is not an acquire).
- ``partition``: worker 0 is cut off from lock nodes 0..K-1 (``--fault-nodes K``).
- ``partition-clock-jump``: Kleppmann's scenario with C = node 0 (the node single-node backends
  use): worker 0 reaches C, A, B (nodes 0, 1, 2: D and E, nodes 3 and 4, cut off), worker 1
  reaches C, D, E (A and B cut off), and C's wall clock jumps 2 x TTL forward 50 ms (scaled) into
  each of worker 0's leases; C's key expires and worker 1 gets its own majority.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lockcompare.errors import ConfigError, InvalidValueError
from lockcompare.faults.node import ClockJump
from lockcompare.faults.schedule import FaultContext, FaultPlan, StandingFault
from lockcompare.infra.cluster import Cluster
from lockcompare.infra.proxy import ProxySet, port_of
from lockcompare.spec.experiments import FAULT_DELAY_MS
from lockcompare.spec.trialspec import TrialSpec

SLOW_RESPONSE = "slow-response"
PARTITION = "partition"
PARTITION_CLOCK_JUMP = "partition-clock-jump"
#: The experiments (``Experiment.fault``) whose workers reach the lock nodes through proxied links.
LINK_EXPERIMENTS = (SLOW_RESPONSE, PARTITION, PARTITION_CLOCK_JUMP)

#: Kleppmann's scenario: five nodes, C = node 0 shared by both sides, each worker cut from two.
KLEPPMANN_NODES = 5
KLEPPMANN_CUTS = {0: (3, 4), 1: (1, 2)}  # worker -> the nodes it cannot reach
KLEPPMANN_JUMPED = (0,)


@dataclass(frozen=True)
class LinkDelay:
    """Replies from ``nodes`` to ``worker`` arrive ``ms`` late (see proxy.LinkProxy.delay)."""

    worker: int
    ms: float
    nulls: bool = True  # False: refusals (null replies) are not delayed, only grants
    name: ClassVar[str] = "slow-link"
    scope: ClassVar[str] = "links"

    def inject(self, world: FaultContext, nodes: list[int]) -> str:
        links = world.require_links()
        for node in nodes:
            links.proxy(worker=self.worker, node=node).delay(ms=self.ms, nulls=self.nulls)
        which = "replies" if self.nulls else "replies but refusals"
        return f"worker {self.worker}: {which} {self.ms:g} ms late"

    def heal(self, world: FaultContext, nodes: list[int]) -> str:
        return _heal(world, worker=self.worker, nodes=nodes)


@dataclass(frozen=True)
class LinkCut:
    """``worker`` cannot reach ``nodes``: a blackhole (see proxy.LinkProxy.blackhole)."""

    worker: int
    name: ClassVar[str] = "link-cut"
    scope: ClassVar[str] = "links"

    def inject(self, world: FaultContext, nodes: list[int]) -> str:
        links = world.require_links()
        for node in nodes:
            links.proxy(worker=self.worker, node=node).blackhole()
        return f"worker {self.worker} cut off (blackhole)"

    def heal(self, world: FaultContext, nodes: list[int]) -> str:
        return _heal(world, worker=self.worker, nodes=nodes)


def _heal(world: FaultContext, *, worker: int, nodes: list[int]) -> str:
    # Called from the runner's finally: a proxy process that already died has nothing to heal,
    # and raising here would hide what went wrong (the trial reports the dead proxy itself).
    if not world.links_running():
        return f"worker {worker}: links already gone"
    links = world.require_links()
    for node in nodes:
        links.proxy(worker=worker, node=node).heal()
    return f"worker {worker}: healed"


# --------------------------------------------------------------------------------------------
# What each link experiment does, from its trial spec
# --------------------------------------------------------------------------------------------


def needs_links(spec: TrialSpec) -> bool:
    return spec.fault in LINK_EXPERIMENTS


def slow_reply_ms(spec: TrialSpec) -> float:
    """``slow-response``'s delay: past the TTL, and halfway into the next holder's critical section."""
    return spec.ttl_ms + spec.work_ms / 2


def request_timeout_s(spec: TrialSpec) -> float | None:
    """The workers' per-call timeout in a link experiment (None: the runner's default).

    ``slow-response``: twice the delay, so that a client waits for its late reply (a client that
    gave up would only show that timeouts help). Partitions: the TTL, so that a call into a cut
    costs one lease's length, not the default 2 s (a real client's bound is its own choice; the
    lesson's TTL is the natural scale here). Redlock's per-node timeout is its own (TTL/10).
    """
    if spec.fault == SLOW_RESPONSE:
        return 2 * slow_reply_ms(spec) / 1000
    if spec.fault in (PARTITION, PARTITION_CLOCK_JUMP):
        return spec.ttl_ms / 1000
    return None


def check_shape(spec: TrialSpec, *, lock_nodes: int) -> None:
    """Refuse, before any server starts, a link trial that cannot run as its experiment says."""
    if spec.fault == PARTITION_CLOCK_JUMP and lock_nodes != KLEPPMANN_NODES:
        raise InvalidValueError(
            f"{PARTITION_CLOCK_JUMP} is Kleppmann's five-node scenario: "
            f"{spec.backend} would use {lock_nodes} lock nodes"
        )
    if spec.fault == PARTITION_CLOCK_JUMP and spec.workers < 2:
        raise InvalidValueError(f"{PARTITION_CLOCK_JUMP} needs two workers (one on each side of the partition)")


def start_links(spec: TrialSpec, *, cluster: Cluster) -> ProxySet | None:
    """A started :class:`ProxySet` (one link per worker and lock node) if ``spec`` needs links."""
    if not needs_links(spec):
        return None
    if not cluster.embedded:
        raise ConfigError(f"{spec.experiment} proxies the links to the lock nodes: it needs the embedded cluster")
    links = ProxySet(
        node_ports=[port_of(url) for url in cluster.node_urls],
        workers=spec.workers,
        name=f"links-{spec.trial_id}",
        node_urls=cluster.node_urls,
    )
    links.start()  # stops what it started if it fails
    return links


def around_acquire(spec: TrialSpec, *, node_count: int) -> tuple[StandingFault, ...]:
    """The link faults in place while worker 0 acquires (``node_count``: the cluster's lock nodes)."""
    if spec.fault == SLOW_RESPONSE:
        slow = LinkDelay(worker=0, ms=slow_reply_ms(spec), nulls=False)
        return (StandingFault(fault=slow, nodes=tuple(range(node_count))),)
    return ()


def on_postgres(spec: TrialSpec) -> bool:
    """Whether the trial's lock nodes are PostgreSQL servers (the backend's ``servers``)."""
    from lockcompare.backends import load_backend

    return getattr(load_backend(spec.backend), "servers", "redis") == "postgres"


def standing_faults(spec: TrialSpec) -> tuple[StandingFault, ...]:
    """The link faults in place for the whole trial."""
    if spec.fault == PARTITION and on_postgres(spec):
        return ()  # a session lock is cut under its holder instead: lease_plan
    if spec.fault == PARTITION:
        return (StandingFault(fault=LinkCut(worker=0), nodes=tuple(range(spec.fault_nodes))),)
    if spec.fault == PARTITION_CLOCK_JUMP:
        return tuple(StandingFault(fault=LinkCut(worker=w), nodes=nodes) for w, nodes in KLEPPMANN_CUTS.items())
    return ()


def lease_plan(spec: TrialSpec) -> FaultPlan | None:
    """The fault that follows worker 0's leases in a link experiment (None: only standing ones).

    ``partition`` on a PostgreSQL lock: a session lock cut off from the start is never taken, which
    shows nothing; the question is what the server does with a session cut *under its holder*. So
    worker 0's link is cut 50 ms (scaled) into each of its leases, for one TTL, then healed: the
    server ends the session only if a session-ending setting (``--idle-session-timeout-ms``) fires
    first (TCP keepalives cannot: the proxy keeps the server's side of the connection alive).
    """
    if spec.fault == PARTITION and on_postgres(spec):
        return FaultPlan(
            fault=LinkCut(worker=0),  # type: ignore[arg-type]  # scope "links": the scheduler hands it the links
            nodes=(0,), delay_ms=FAULT_DELAY_MS * spec.time_scale, heal_after_ms=spec.ttl_ms,
            every_round=True,
        )  # fmt: skip
    if spec.fault == PARTITION_CLOCK_JUMP:
        jump = ClockJump(jump_s=2 * spec.ttl_ms / 1000)
        return FaultPlan(
            fault=jump, nodes=KLEPPMANN_JUMPED, delay_ms=FAULT_DELAY_MS * spec.time_scale, heal_after_ms=0,
            every_round=True,
        )  # fmt: skip
    return None
