"""``restart``: SIGKILL lock nodes and start them again on the same port after ``for=MS`` — empty,
unless ``persistence=aof-always`` (an AOF with ``appendfsync always``, kept across the restart):
antirez's answers to Kleppmann, delayed restarts and fsync.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from lockcompare.scenario.faultkinds.base import (
    NODES,
    PROCESS_CONTROL,
    FaultKind,
    Param,
    Runtime,
    Shape,
    ms,
    nodes_and_when,
)
from lockcompare.scenario.faultkinds.crash import NodeCrash

if TYPE_CHECKING:
    from lockcompare.scenario.schedule import TrialStep


@dataclass(frozen=True)
class NodeRestart(NodeCrash):
    """A crash whose heal (the restart) the runner schedules ``for`` after it."""

    persistence: str = "none"
    scope: ClassVar[str] = "nodes"

    def restarted(self, *, kept: bool = False) -> str:
        if self.persistence != "none":
            return "restarted on the same port (AOF, appendfsync always)"
        return "restarted on the same port" + (
            " (with its data: the server persists on its own)" if kept else " (empty)"
        )


class Restart(FaultKind):
    name = "restart"
    excuses_calls = True
    order = 20
    summary = "SIGKILL the nodes and start them again on the same port after `for`"
    acts_on = NODES
    params = (
        Param(
            name="persistence",
            default="none",
            choices=("none", "aof-always"),
            help="aof-always: the cluster keeps an AOF, fsync always",
        ),
    )
    without_for = "restarts at once"
    needs = frozenset({PROCESS_CONTROL})
    loses_keys = True
    former_event_names = ("node-restart",)

    def runtime(self, step: TrialStep, *, ttl_ms: float, lock_key: str) -> Runtime:
        persistence = step.param("persistence")
        return Runtime(
            build=lambda _w: NodeRestart(persistence=persistence),
            heal_after_ms=self.heal_after_ms(step),
        )

    def draw(self, rng: random.Random, shape: Shape) -> tuple[str, ...]:
        nodes, at = nodes_and_when(rng, shape, start_ok=False)
        downtime = ms(rng.uniform(0, 1.5) * shape.ttl_ms) if rng.random() < 0.5 else "0"
        persistence = "aof-always" if rng.random() < 0.25 else "none"
        return (nodes, *at, f"for={downtime}", f"persistence={persistence}")


KIND = Restart()
