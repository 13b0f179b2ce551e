"""``split``: two sides of lock servers, ``minority=`` the one side and every other server the other, for ``for=MS``.

``split minority=holder-member for=2000``: the server the holder's client is connected to is cut
off from the rest of its cluster (the majority elects or keeps a leader; the holder's session is
on the side without a quorum). The side is any ``nodes=`` target (a role, indices); with three
servers it is one server, with five up to two. The event names both sides (``sides``).

The same peer-link blackhole as ``isolate`` (scenario/faultkinds/isolate.py), healed after ``for``.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from lockcompare.scenario.faultkinds.base import NODES, PEER_LINKS, FaultKind, Runtime, Shape, ms, when
from lockcompare.scenario.faultkinds.isolate import Partition

if TYPE_CHECKING:
    from lockcompare.scenario.schedule import TrialStep


class Split(FaultKind):
    name = "split"
    excuses_calls = True  # the minority side cannot commit: calls to it wait (sentinel, sessions)
    order = 63
    summary = "two sides of lock servers: the minority= nodes against the rest"
    acts_on = NODES
    target_alias = "minority"
    until_the_end = True
    without_for = "until the end"
    needs = frozenset({PEER_LINKS})
    lasts = True
    explored_by_default = False  # only servers with peer links take it (etcd, ZooKeeper): --faults asks for it

    def runtime(self, step: TrialStep, *, ttl_ms: float, lock_key: str) -> Runtime:
        return Runtime(build=lambda _w: Partition(split=True), heal_after_ms=self.heal_after_ms(step))

    def draw(self, rng: random.Random, shape: Shape) -> tuple[str, ...]:
        at = when(rng, shape, start_ok=False)
        side = rng.choice(["holder-member", "leader", "followers:1"])
        return (f"nodes={side}", *at, f"for={ms(rng.uniform(0.5, 3.0) * shape.ttl_ms)}")


KIND = Split()
