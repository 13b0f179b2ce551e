"""Link faults: what happens on the wire between one worker and some lock nodes.

In a trial whose schedule has a ``slow`` or ``cut`` step every worker reaches every lock node
through a link of its own — one :class:`~lockcompare.infra.proxy.ProxySet` per trial, started by
:func:`start_links` and stopped in the trial's ``finally``; the runner's admin connections (health
checks, key cleanup, node faults, the resource) go direct. Per trial rather than pooled with the
cluster: starting the proxy process and its 10 links took 123 ms (median of 8; stopping it 26 ms)
on the 2-core machine, a few per cent of a trial at ``--time-scale 0.1``, and a fresh set cannot
carry a fault or a half-reset connection from one trial into the next.

A link fault acts on the links of one worker (``worker``) to the lock nodes it is given:

- :class:`LinkDelay` (``slow``): replies from those nodes reach that worker ``ms`` late (requests
  go through at once, so a SET takes effect on time and only its answer is late);
- :class:`LinkCut` (``cut``): a partition (blackhole): bytes vanish both ways, new connects hang,
  the worker's calls time out after its client's own timeout.

Both have ``scope = "links"``: the schedule runner hands them the trial's FaultContext. The
catalogue's link experiments (spec/experiments.py) and why they are shaped so:

- ``slow-response``: ``slow nodes=all worker=0 at=acquire delay=TTL+work/2`` — the replies to
  worker 0's acquire requests arrive after its lease has expired at the nodes, while the next
  holder is inside its critical section. Only the acquire's: a delay on every reply (measured
  first) also slowed worker 0's release by as much, so worker 1 ran its rounds ~5x faster,
  finished first, and worker 0's late entries met nobody (0 conflicts: the workload, not the
  lock, decided that). Refusals (null replies) are not delayed either: a late "held" only slowed
  worker 0's retries, and worker 1 again finished first (measured: 0-2 conflicts in 10 rounds for
  single). Worker 0's first round is left clean: it opens the connections (a connect handshake is
  not an acquire).
- ``partition``: ``cut nodes=0..K-1 worker=0 at=start``.
- ``partition-clock-jump``: Kleppmann's scenario with C = node 0 (the node single-node backends
  use): worker 0 reaches C, A, B (nodes 3 and 4 cut), worker 1 reaches C, D, E (nodes 1 and 2
  cut), and C's wall clock jumps 2 x TTL forward 50 ms into each of worker 0's leases; C's key
  expires and worker 1 gets its own majority.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from lockcompare.errors import ConfigError
from lockcompare.infra.cluster import Cluster
from lockcompare.infra.proxy import ProxySet, port_of

if TYPE_CHECKING:
    from lockcompare.faults.schedule import FaultContext


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


def start_links(*, cluster: Cluster, workers: int, name: str) -> ProxySet:
    """A started :class:`ProxySet`: one link per worker and lock node."""
    if not cluster.embedded:
        raise ConfigError("a slow or cut step proxies the links to the lock nodes: it needs the embedded cluster")
    links = ProxySet(
        node_ports=[port_of(url) for url in cluster.node_urls],
        workers=workers,
        name=name,
        node_urls=cluster.node_urls,
    )
    links.start()  # stops what it started if it fails
    return links
