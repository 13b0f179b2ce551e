"""``slow``: replies from some lock nodes reach one worker ``delay=MS`` late (requests go through at
once, so a SET takes effect on time and only its answer is late).

Around an acquire (``at=acquire``) only grants are late: a late refusal only slowed the worker's
retries (measured: its rival then finished first and nothing could conflict; faults/network.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from lockcompare.errors import InvalidValueError
from lockcompare.scenario.faultkinds.base import (
    LINKS,
    PROXIED_LINKS,
    FaultKind,
    Param,
    Runtime,
    Shape,
    World,
    ms,
    nodes_and_when,
)
from lockcompare.scenario.faultkinds.cut import heal_links, link_worker

if TYPE_CHECKING:
    from lockcompare.scenario.schedule import FaultStep, TrialStep


@dataclass(frozen=True)
class LinkDelay:
    """Replies from ``nodes`` to ``worker`` arrive ``ms`` late (see proxy.LinkProxy.delay)."""

    worker: int
    ms: float
    nulls: bool = True  # False: refusals (null replies) are not delayed, only grants
    scope: ClassVar[str] = "links"

    def inject(self, world: World, nodes: list[int]) -> str:
        links = world.require_links()
        for node in nodes:
            links.proxy(worker=self.worker, node=node).delay(ms=self.ms, nulls=self.nulls)
        which = "replies" if self.nulls else "replies but refusals"
        return f"worker {self.worker}: {which} {self.ms:g} ms late"

    def heal(self, world: World, nodes: list[int]) -> str:
        return heal_links(world, worker=self.worker, nodes=nodes)


class Slow(FaultKind):
    name = "slow"
    order = 50
    summary = "replies from those nodes to that worker arrive late"
    acts_on = LINKS
    params = (Param(name="delay", time=True, shrink_floor=10.0, help="how late, ms"),)
    until_the_end = True
    without_for = "until the end"
    needs = frozenset({PROXIED_LINKS})
    excuses_worker = True
    around_acquire = True
    ttl_margin = ("reply delay - TTL", "delay")  # a reply later than the lease is the experiment
    former_event_names = ("slow-link",)

    def check(self, step: FaultStep) -> None:
        if not step.number("delay") > 0:
            raise InvalidValueError("delay= must be > 0")

    def runtime(self, step: TrialStep, *, ttl_ms: float, lock_key: str) -> Runtime:
        delay_ms = step.time("delay")
        nulls = step.at != "acquire"

        return Runtime(
            build=lambda w: LinkDelay(worker=link_worker(w), ms=delay_ms, nulls=nulls),
            heal_after_ms=self.heal_after_ms(step),
        )

    def draw(self, rng: random.Random, shape: Shape) -> tuple[str, ...]:
        nodes, at = nodes_and_when(rng, shape, start_ok=True, acquire_ok=True)
        link = f"worker={rng.randrange(shape.workers)}"
        return (nodes, link, *at, f"delay={ms(rng.uniform(0.5, 2.0) * shape.ttl_ms)}")


KIND = Slow()
