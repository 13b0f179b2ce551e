"""``split``: two sides of lock servers, ``minority=`` the one side and every other server the other, for ``for=MS``.

``split minority=holder-member for=2000``: the server the holder's client is connected to is cut
off from the rest of its cluster (the majority elects or keeps a leader; the holder's session is
on the side without a quorum). The side is any ``nodes=`` target (a role, indices); with three
servers it is one server, with five up to two. The event names both sides (``sides``).

The same peer-link blackhole as ``isolate`` (scenario/faultkinds/isolate.py), healed after ``for``.
"""

from __future__ import annotations

import random

from lockcompare.scenario.faultkinds.isolate import PeerPartitionKind


class Split(PeerPartitionKind):
    name = "split"
    split = True
    order = 63
    summary = "two sides of lock servers: the minority= nodes against the rest"
    target_alias = "minority"

    def draw_side(self, rng: random.Random) -> str:
        return rng.choice(["holder-member", "leader", "followers:1"])


KIND = Split()
