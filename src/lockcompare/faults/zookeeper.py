"""Which ZooKeeper servers a trial's schedule needs: one standalone server, or a three-server ensemble.

(:func:`zookeeper_servers_for`) One standalone server when there are no server faults, or only the
server restart (``restart nodes=0``), else a three-server ensemble: the catalogue's ``node-crash`` is
a *leader* crash (the ensemble's node 0 is its leader whenever a trial starts: infra/cluster.py
rebuilds one whose leader moved) and ``partition`` cuts the holder off from the whole ensemble (it
is the minority). The rule reads the schedule's fault kinds, so it lives here rather than in infra.

What ZooKeeper can and cannot take (clock jumps, failover) is its kind's word
(infra/zookeeper/kind.py); how session-kill ends the holder's session lives beside the client it
drives (infra/zookeeper/sessions.py), asked through the kind (:class:`~lockcompare.infra.kinds.SessionKind`).
"""

from __future__ import annotations

from lockcompare.scenario import faultkinds
from lockcompare.scenario.schedule import Schedule

#: Servers in the ensemble that a leader crash or a partition needs (a quorum that survives one down).
ENSEMBLE_SERVERS = 3


def zookeeper_servers_for(schedule: Schedule) -> int:
    """1 (standalone) without server faults or for restarts of node 0 only (the server restart); else
    an ensemble (a leader crash, a link cut or slowed, any step naming another server)."""
    steps = schedule.of_kind(*faultkinds.acting_on(faultkinds.NODES, faultkinds.LINKS))
    restarts_node_0 = all(
        s.kind == "restart" and s.nodes is not None and s.nodes.mode == "fixed" and s.nodes.indices == (0,)
        for s in steps
    )
    return 1 if restarts_node_0 else ENSEMBLE_SERVERS
