"""``crash``: SIGKILL lock nodes; they stay down until the trial ends (or ``for=MS``).

A single node is a single point of failure; a Redlock survives a minority. The heal starts the
nodes again on the same port and data directory (empty, unless the server persists on its own).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from lockcompare.errors import ConfigError
from lockcompare.scenario.faultkinds.base import NODES, PROCESS_CONTROL, FaultKind, Runtime, Shape, ms, nodes_and_when

if TYPE_CHECKING:
    from lockcompare.infra.cluster import Cluster
    from lockcompare.scenario.schedule import TrialStep


def embedded(cluster: Cluster, fault: str) -> None:
    if not cluster.embedded:
        raise ConfigError(f"{fault} needs the embedded cluster: lockcompare cannot kill or restart external servers")


@dataclass(frozen=True)
class NodeCrash:
    """SIGKILL now; the heal starts the nodes again (the runner heals a crash when the trial ends)."""

    scope: ClassVar[str] = "nodes"

    def inject(self, cluster: Cluster, nodes: list[int]) -> str:
        embedded(cluster, "crash")
        for i in nodes:
            cluster.node_server(i).crash()
        return "SIGKILL"

    def heal(self, cluster: Cluster, nodes: list[int]) -> str:
        kept = False
        for i in nodes:
            server = cluster.node_server(i)
            kept = kept or getattr(server, "keeps_data_across_restarts", False)
            if not server.is_running():
                server.start()  # same port, same data directory
        return self.restarted(kept=kept)

    def restarted(self, *, kept: bool = False) -> str:
        return "started again (with its data)" if kept else "started again (empty)"


class Crash(FaultKind):
    name = "crash"
    excuses_calls = True
    order = 10
    summary = "SIGKILL the nodes"
    acts_on = NODES
    until_the_end = True
    without_for = "down until the trial ends"
    needs = frozenset({PROCESS_CONTROL})
    loses_keys = True
    lasts = True
    former_event_names = ("node-crash",)

    def runtime(self, step: TrialStep, *, ttl_ms: float, lock_key: str) -> Runtime:
        return Runtime(build=lambda _w: NodeCrash(), heal_after_ms=self.heal_after_ms(step))

    def draw(self, rng: random.Random, shape: Shape) -> tuple[str, ...]:
        nodes, at = nodes_and_when(rng, shape, start_ok=True)
        down = () if at[0] == "at=start" or rng.random() < 0.5 else (f"for={ms(rng.uniform(0.5, 2.0) * shape.ttl_ms)}",)
        return (nodes, *at, *down)


KIND = Crash()
