"""Link faults: what happens on the wire between one worker and some lock nodes.

In a trial whose schedule has a ``slow`` or ``cut`` step every worker reaches every lock node
through a link of its own — one :class:`~lockcompare.infra.proxy.ProxySet` per trial, started by
:func:`start_links` and stopped in the trial's ``finally``; the runner's admin connections (health
checks, key cleanup, node faults, the resource) go direct. Per trial rather than pooled with the
cluster: starting the proxy process and its 10 links took 123 ms (median of 8; stopping it 26 ms)
on the 2-core machine, a few per cent of a trial at ``--time-scale 0.1``, and a fresh set cannot
carry a fault or a half-reset connection from one trial into the next.

A link fault acts on the links of one worker (``worker``) to the lock nodes it is given: ``slow``
(scenario/faultkinds/slow.py) delays the replies, ``cut`` (scenario/faultkinds/cut.py) blackholes them.
Both have ``scope = "links"``: the schedule runner hands them the trial's FaultContext.
``resource-delay`` (scenario/faultkinds/resource_delay.py) and ``resource-cut`` (resource_cut.py) act on
one worker's link to the resource (Kleppmann's delayed write; a cut): the set then holds that link
too, as its last "node". The
catalogue's link experiments (scenario/experiments.py) and why they are shaped so:

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

from lockcompare.errors import ConfigError
from lockcompare.infra.cluster import Cluster
from lockcompare.infra.proxy import ProxySet, port_of


def start_links(*, cluster: Cluster, workers: int, name: str, resource: bool = False) -> ProxySet:
    """A started :class:`ProxySet`: one link per worker and lock node, and with ``resource`` one per
    worker to the resource too, as the set's last "node" (:meth:`ProxySet.resource_link`)."""
    if not cluster.embedded:
        raise ConfigError("a link fault proxies the workers' links to the servers: it needs the embedded cluster")
    urls = (*cluster.node_urls, cluster.resource_url) if resource else tuple(cluster.node_urls)
    links = ProxySet(node_ports=[port_of(url) for url in urls], workers=workers, name=name, node_urls=urls)
    links.start()  # stops what it started if it fails
    return links


def worker_urls(links: ProxySet, *, worker: int, lock_nodes: int) -> tuple[tuple[str, ...], str | None]:
    """The URLs worker ``worker`` uses: its links to the ``lock_nodes`` lock nodes, and its link to the
    resource (None: the set has none, the worker reaches the resource directly)."""
    urls = links.node_urls(worker=worker)
    return urls[:lock_nodes], (urls[lock_nodes] if len(urls) > lock_nodes else None)
