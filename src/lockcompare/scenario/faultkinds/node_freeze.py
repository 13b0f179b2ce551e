"""``node-freeze``: stop lock nodes' server processes (SIGSTOP) for ``for=MS``, then continue them.

Jepsen's pause nemesis: a server that stops answering without dying — a long GC, a stalled disk, a
migrated VM. Unlike a crash it loses nothing and its clients' connections stay open: their calls
wait for it (or time out), and when it continues, every key whose TTL ran out while it was frozen
expires at once. A lock holder whose release was in flight learns of its lease late; a rival
that reached the other nodes may already be inside.

The signal goes to the server's process group (every server lockcompare spawns leads its own), so
a server made of several processes (PostgreSQL's backends, a libfaketime wrapper) stops whole.
The heal reads the process's state before continuing it, so the history says the node was in
fact stopped (``T``) for the time it was frozen.
"""

from __future__ import annotations

import os
import random
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from lockcompare.errors import InvalidValueError
from lockcompare.scenario.faultkinds.base import NODES, PROCESS_CONTROL, FaultKind, Runtime, Shape, ms, nodes_and_when
from lockcompare.scenario.faultkinds.crash import embedded

if TYPE_CHECKING:
    from lockcompare.infra.cluster import Cluster
    from lockcompare.scenario.schedule import FaultStep, TrialStep


def process_state(pid: int) -> str:
    """The kernel's one-letter state of ``pid`` (``T``: stopped), ``?`` when it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "?"
    return stat.rpartition(")")[2].split()[0]  # the name in parentheses may hold spaces


@dataclass
class NodeFreeze:
    """SIGSTOP the nodes' process groups now; the heal SIGCONTs them."""

    scope: ClassVar[str] = "nodes"
    _stopped: dict[int, int] = field(default_factory=dict)  # node -> pid of its server, while stopped

    def inject(self, cluster: Cluster, nodes: list[int]) -> str:
        embedded(cluster, "node-freeze")
        for i in nodes:
            pid = cluster.node_server(i).pid
            if pid is None:
                raise InvalidValueError(f"node-freeze: lock node {i} has no running server to stop")
            os.killpg(pid, signal.SIGSTOP)
            self._stopped[i] = pid
        return "SIGSTOP (pid " + ", ".join(str(self._stopped[i]) for i in nodes) + ")"

    def heal(self, cluster: Cluster, nodes: list[int]) -> str:
        # Runs in the runner's finally too: a server that is gone has nothing to continue.
        states = []
        for i in nodes:
            pid = self._stopped.pop(i, None)
            if pid is None:
                continue
            states.append(f"node {i} was {process_state(pid)}")
            try:
                os.killpg(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        return "SIGCONT (" + "; ".join(states) + ")" if states else "nothing was stopped"


class Freeze(FaultKind):
    name = "node-freeze"
    excuses_calls = True
    order = 100
    summary = "SIGSTOP the nodes' servers, SIGCONT them after `for` (Jepsen's pause); needs `for=`"
    acts_on = NODES
    without_for = "–"
    needs = frozenset({PROCESS_CONTROL})
    # Every worker's calls to a frozen node wait for it on purpose: the sentinel does not count them.
    excuses_worker = True
    lasts = True

    def check(self, step: FaultStep) -> None:
        if not step.for_ms:
            raise InvalidValueError("node-freeze needs for=MS > 0 (how long the nodes stay stopped)")

    def runtime(self, step: TrialStep, *, ttl_ms: float, lock_key: str) -> Runtime:
        return Runtime(build=lambda _w: NodeFreeze(), heal_after_ms=self.heal_after_ms(step))

    def draw(self, rng: random.Random, shape: Shape) -> tuple[str, ...]:
        nodes, at = nodes_and_when(rng, shape, start_ok=True)
        return (nodes, *at, f"for={ms(rng.uniform(0.5, 2.5) * shape.ttl_ms)}")


KIND = Freeze()
