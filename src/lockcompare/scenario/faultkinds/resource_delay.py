"""``resource-delay``: the requests one worker sends to the resource (the protected storage, not a lock
node) reach it ``delay=MS`` late — Kleppmann's delayed write: the write leaves the client while its
lease is valid and lands at the storage after the lease ended, over its successor's write.

The worker reaches the resource through a link of its own in such a trial (faults/network.py); every
byte it sends while the step lasts is held ``delay`` ms, in order (its reply comes late with it).
Requests sent after the heal go at once, behind any still held. A Redis resource only.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from lockcompare.errors import InvalidValueError
from lockcompare.scenario.faultkinds.base import (
    WORKER,
    FaultKind,
    Param,
    Runtime,
    Shape,
    World,
    any_worker,
    ms,
    when,
)
from lockcompare.scenario.faultkinds.cut import link_worker

if TYPE_CHECKING:
    from lockcompare.scenario.schedule import FaultStep, TrialStep


@dataclass(frozen=True)
class ResourceDelay:
    """Requests from ``worker`` to the resource arrive ``ms`` late while it lasts."""

    worker: int
    ms: float
    scope: ClassVar[str] = "links"

    def inject(self, world: World, nodes: list[int]) -> str:
        world.require_links().resource_link(worker=self.worker).delay_requests(ms=self.ms)
        return f"worker {self.worker}: requests to the resource {self.ms:g} ms late"

    def heal(self, world: World, nodes: list[int]) -> str:
        if not world.links_running():
            return f"worker {self.worker}: links already gone"
        world.require_links().resource_link(worker=self.worker).heal()
        return f"worker {self.worker}: requests to the resource on time again (those held still land late)"


class ResourceDelayKind(FaultKind):
    name = "resource-delay"
    order = 52
    summary = "requests from that worker to the resource arrive late (a write delayed on the wire)"
    acts_on = WORKER
    params = (Param(name="delay", time=True, shrink_floor=10.0, help="how late, ms"),)
    until_the_end = True
    without_for = "until the end"
    excuses_worker = True
    on_resource_link = True
    explored_by_default = False  # opt-in (explore --faults): a new kind leaves the default search as it was
    ttl_margin = ("request delay - TTL", "delay")  # a write landing after the lease is the experiment

    def check(self, step: FaultStep) -> None:
        if not step.number("delay") > 0:
            raise InvalidValueError("delay= must be > 0")

    def runtime(self, step: TrialStep, *, ttl_ms: float, lock_key: str) -> Runtime:
        delay_ms = step.time("delay")
        return Runtime(
            build=lambda w: ResourceDelay(worker=link_worker(w), ms=delay_ms), heal_after_ms=self.heal_after_ms(step)
        )

    def draw(self, rng: random.Random, shape: Shape) -> tuple[str, ...]:
        tokens = (f"worker={any_worker(rng, shape)}", *when(rng, shape, start_ok=False))
        return (*tokens, f"for={ms(shape.work_ms)}", f"delay={ms(rng.uniform(0.5, 2.0) * shape.ttl_ms)}")


KIND = ResourceDelayKind()
