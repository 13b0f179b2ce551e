"""``clock-jump``: move the nodes' wall clocks by ``by=+MS`` or ``by=-MS`` (libfaketime; the monotonic
clock is left alone). Forward, every key they hold may expire at once (Redlock assumes bounded
drift); backward, keys live longer. A jump is not undone mid-trial: clocks reset when it ends.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from lockcompare.errors import InvalidValueError
from lockcompare.scenario.faultkinds.base import (
    CLOCK_CONTROL,
    MAX_JUMP_MS,
    NODES,
    FaultKind,
    Param,
    Runtime,
    Shape,
    ms,
    nodes_and_when,
)
from lockcompare.scenario.faultkinds.crash import embedded

if TYPE_CHECKING:
    from lockcompare.infra.cluster import Cluster
    from lockcompare.scenario.schedule import FaultStep, TrialStep


@dataclass(frozen=True)
class ClockJump:
    """Jump forward by ``jump_s``; a jump is not undone mid-trial (clocks reset when the trial ends)."""

    jump_s: float
    scope: ClassVar[str] = "nodes"

    def inject(self, cluster: Cluster, nodes: list[int]) -> str:
        embedded(cluster, "clock-jump")
        for i in nodes:
            cluster.node_clock(i).jump(seconds=self.jump_s)
        return f"wall clock +{self.jump_s:g} s"

    def heal(self, cluster: Cluster, nodes: list[int]) -> str:
        return "clock stays ahead (reset after the trial)"


class Jump(FaultKind):
    name = "clock-jump"
    order = 30
    summary = "move the nodes' wall clocks (libfaketime; the monotonic clock is left alone)"
    acts_on = NODES
    params = (
        Param(
            name="by", time=True, signed=True, shrink_floor=10.0, high=MAX_JUMP_MS, help="forward (+) or backward (-)"
        ),
    )
    without_for = "(a jump is not undone mid-trial)"
    needs = frozenset({CLOCK_CONTROL})
    loses_keys = True

    def check(self, step: FaultStep) -> None:
        if step.for_ms is not None:
            raise InvalidValueError("a clock jump is not undone mid-trial: it takes no for=")

    def runtime(self, step: TrialStep, *, ttl_ms: float, lock_key: str) -> Runtime:
        jump_s = step.time("by") / 1000
        return Runtime(build=lambda _w: ClockJump(jump_s=jump_s), heal_after_ms=0.0)

    def draw(self, rng: random.Random, shape: Shape) -> tuple[str, ...]:
        nodes, at = nodes_and_when(rng, shape, start_ok=False)
        sign = "+" if rng.random() < 0.8 else "-"  # forward expires keys early; backward keeps them
        return (nodes, *at, f"by={sign}{ms(rng.uniform(0.5, 3.0) * shape.ttl_ms)}")


KIND = Jump()
