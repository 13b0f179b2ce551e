"""``resource-cut``: one worker cut off from the resource (the protected storage, not a lock node) — a
blackhole on the worker→resource link: its requests vanish, their replies never come, new connects
hang; the lock nodes' links are left alone.

The worker reaches the resource through a link of its own in such a trial (faults/network.py), as
for ``resource-delay``. A request caught in the cut fails the worker's call: its client's timeout
(2 s) runs out, or the heal resets the connection that lost bytes. The runner counts that as the
resource failing under the worker (an unknown trial, with the reason: runner/resource.py
``failures``); a cut that no request crosses (the worker working or waiting meanwhile) leaves the
trial judged. The history says which link was cut (``link: resource``), when, and for how long (the
step's inject and heal). A Redis resource only.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from lockcompare.scenario.faultkinds.base import WORKER, FaultKind, Runtime, Shape, World, any_worker, ms, when
from lockcompare.scenario.faultkinds.cut import link_worker

if TYPE_CHECKING:
    from lockcompare.scenario.schedule import TrialStep


@dataclass(frozen=True)
class ResourceCut:
    """``worker`` cannot reach the resource while it lasts (a blackhole: see proxy.LinkProxy.blackhole)."""

    worker: int
    scope: ClassVar[str] = "links"

    def inject(self, world: World, nodes: list[int]) -> tuple[str, dict[str, object]]:
        world.require_links().resource_link(worker=self.worker).blackhole()
        return f"worker {self.worker} cut off from the resource (blackhole)", {"link": "resource"}

    def heal(self, world: World, nodes: list[int]) -> str:
        if not world.links_running():
            return f"worker {self.worker}: links already gone"
        world.require_links().resource_link(worker=self.worker).heal()
        return f"worker {self.worker}: the resource reachable again (connections that lost bytes reset)"


class ResourceCutKind(FaultKind):
    name = "resource-cut"
    order = 53
    summary = "a blackhole between that worker and the resource (not the lock nodes)"
    acts_on = WORKER
    until_the_end = True
    without_for = "until the end"
    excuses_worker = True
    on_resource_link = True
    lasts = True
    explored_by_default = False  # opt-in (explore --faults): a new kind leaves the default search as it was

    def runtime(self, step: TrialStep, *, ttl_ms: float, lock_key: str) -> Runtime:
        return Runtime(build=lambda w: ResourceCut(worker=link_worker(w)), heal_after_ms=self.heal_after_ms(step))

    def draw(self, rng: random.Random, shape: Shape) -> tuple[str, ...]:
        tokens = (f"worker={any_worker(rng, shape)}", *when(rng, shape, start_ok=False))
        return (*tokens, f"for={ms(rng.uniform(0.2, 1.0) * shape.work_ms)}")


KIND = ResourceCutKind()
