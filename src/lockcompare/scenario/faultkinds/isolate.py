"""``isolate``: cut each of the nodes off from every other lock server (its peers), for ``for=MS``.

Jepsen's partition nemesis between servers, not clients: ``isolate nodes=leader for=2000`` puts
the leader in a side of its own. Its clients still reach it (their links are untouched), so a
client attached to it is talking to a server without a quorum: etcd's old leader steps down
after an election timeout (CheckQuorum) and answers ``no leader``; a ZooKeeper leader that loses
its followers stops serving after ``syncLimit`` and its clients' sessions move or expire.

On the peer links' proxies (infra/peerlinks.py): every link between an isolated node and another
server is a blackhole (bytes vanish both ways, connections stay open) until the heal, which resets
the connections that lost bytes. Several nodes (``nodes=followers:2``) are each isolated alone.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from lockcompare.errors import ConfigError
from lockcompare.scenario.faultkinds.base import NODES, PEER_LINKS, FaultKind, Runtime, Shape, ms, when

if TYPE_CHECKING:
    from lockcompare.infra.cluster import Cluster
    from lockcompare.infra.peerlinks import PeerLinks
    from lockcompare.scenario.schedule import TrialStep


def peer_links(cluster: Cluster, fault: str) -> PeerLinks:
    from lockcompare.infra.peerlinks import peer_links_of  # late: spec imports no server module at import

    links = peer_links_of(cluster)
    if links is None:
        raise ConfigError(f"{fault} needs lock servers that reach each other through peer links (etcd, ZooKeeper)")
    return links


@dataclass(frozen=True)
class Partition:
    """Cut the peer links between ``sides`` (built from the nodes at injection); the heal joins them."""

    split: bool  # True: the nodes are one side (split); False: each node is a side of its own (isolate)
    scope: ClassVar[str] = "nodes"

    def sides(self, nodes: list[int], total: int) -> list[list[int]]:
        rest = [n for n in range(total) if n not in nodes]
        return [sorted(nodes), rest] if self.split else [*([n] for n in sorted(nodes)), rest]

    def inject(self, cluster: Cluster, nodes: list[int]) -> tuple[str, dict[str, object]]:
        links = peer_links(cluster, "split" if self.split else "isolate")
        sides = self.sides(nodes, len(cluster.node_urls))
        return links.partition(sides), {"sides": sides}

    def heal(self, cluster: Cluster, nodes: list[int]) -> str:
        return peer_links(cluster, "split" if self.split else "isolate").heal()


class PeerPartitionKind(FaultKind):
    """What ``isolate`` and ``split`` share: a :class:`Partition` of the peer links, until ``for`` or
    the end; the kinds differ in how the sides are made (:attr:`split`) and whom explore aims at."""

    #: True: the nodes are one side (split); False: each node is a side of its own (isolate).
    split: ClassVar[bool]
    excuses_calls = True  # a side cut from the quorum cannot commit: calls to it wait (sentinel, sessions)
    acts_on = NODES
    until_the_end = True
    without_for = "until the end"
    needs = frozenset({PEER_LINKS})
    lasts = True
    explored_by_default = False  # only servers with peer links take it (etcd, ZooKeeper): --faults asks for it

    def runtime(self, step: TrialStep, *, ttl_ms: float, lock_key: str) -> Runtime:
        split = self.split
        return Runtime(build=lambda _w: Partition(split=split), heal_after_ms=self.heal_after_ms(step))

    def draw(self, rng: random.Random, shape: Shape) -> tuple[str, ...]:
        at = when(rng, shape, start_ok=False)
        side = self.draw_side(rng)
        return (f"nodes={side}", *at, f"for={ms(rng.uniform(0.5, 3.0) * shape.ttl_ms)}")

    def draw_side(self, rng: random.Random) -> str:
        """The ``nodes=`` target explore draws for this kind."""
        raise NotImplementedError


class Isolate(PeerPartitionKind):
    name = "isolate"
    split = False
    order = 62
    summary = "cut each node off from its peers (the other lock servers): a side of its own"

    def draw_side(self, rng: random.Random) -> str:
        return "leader"


KIND = Isolate()
