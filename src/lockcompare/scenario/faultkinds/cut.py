"""``cut``: a partition (blackhole) between one worker and some lock nodes: bytes vanish both ways,
new connects hang, the worker's calls time out after its client's own timeout.

Each worker reaches each lock node through a link of its own (faults/network.py starts them); the
runner's admin connections go direct. ``at=acquire`` cuts around each of the worker's acquires only.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from lockcompare.scenario.faultkinds.base import (
    LINKS,
    PROXIED_LINKS,
    FaultKind,
    Runtime,
    Shape,
    World,
    ms,
    nodes_and_when,
)

if TYPE_CHECKING:
    from lockcompare.scenario.schedule import TrialStep


@dataclass(frozen=True)
class LinkCut:
    """``worker`` cannot reach ``nodes``: a blackhole (see proxy.LinkProxy.blackhole)."""

    worker: int
    scope: ClassVar[str] = "links"

    def inject(self, world: World, nodes: list[int]) -> str:
        links = world.require_links()
        for node in nodes:
            links.proxy(worker=self.worker, node=node).blackhole()
        return f"worker {self.worker} cut off (blackhole)"

    def heal(self, world: World, nodes: list[int]) -> str:
        return heal_links(world, worker=self.worker, nodes=nodes)


def heal_links(world: World, *, worker: int, nodes: list[int]) -> str:
    # Called from the runner's finally: a proxy process that already died has nothing to heal,
    # and raising here would hide what went wrong (the trial reports the dead proxy itself).
    if not world.links_running():
        return f"worker {worker}: links already gone"
    links = world.require_links()
    for node in nodes:
        links.proxy(worker=worker, node=node).heal()
    return f"worker {worker}: healed"


class Cut(FaultKind):
    name = "cut"
    order = 60
    summary = "a blackhole between that worker and those nodes"
    acts_on = LINKS
    until_the_end = True
    without_for = "until the end"
    needs = frozenset({PROXIED_LINKS})
    excuses_worker = True
    around_acquire = True
    lasts = True
    former_event_names = ("link-cut",)

    def runtime(self, step: TrialStep, *, ttl_ms: float, lock_key: str) -> Runtime:
        return Runtime(build=lambda w: LinkCut(worker=link_worker(w)), heal_after_ms=self.heal_after_ms(step))

    def draw(self, rng: random.Random, shape: Shape) -> tuple[str, ...]:
        nodes, at = nodes_and_when(rng, shape, start_ok=True, acquire_ok=True)
        link = f"worker={rng.randrange(shape.workers)}"
        for_ = (f"for={ms(rng.uniform(0.5, 2.0) * shape.ttl_ms)}",) if at[0].startswith("after-acquire") else ()
        return (nodes, link, *at, *for_)


def link_worker(worker: int | None) -> int:
    """The worker a link step acts on (``cut``, ``slow``): a link step always names one."""
    assert worker is not None  # a link step names its worker (scenario/schedule.py checks it)
    return worker


KIND = Cut()
