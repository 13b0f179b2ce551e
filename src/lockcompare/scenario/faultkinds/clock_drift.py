"""``clock-drift``: the nodes' wall clocks run at ``rate=`` times the real rate (libfaketime; the
monotonic clock is left alone) — antirez's "10 seconds counted as 9.5 or 11.2", the drift Redlock's
allowance (1 % of the TTL + 2 ms in the client libraries) is meant to absorb. A key set with PX 1000
on a node running at x1.12 expires after 893 real ms.

How: libfaketime's own rate (``FAKETIME="+0 x1.05"``) is measured from the library's start, and a
rate written into the timestamp file mid-run first moved the clock by an amount we could not predict
(+4.0 to +9.6 s for x1.5 and x2 in four runs here), which would be a clock jump, not a drift. So the
drift is the offset the harness already controls, moved in small steps: every
:data:`TICK_S` the nodes' offsets grow by ``(rate - 1)`` times the real time since the last step
(0.6 ms per 5 ms tick at x1.12). The offset stays where the drift left it when it heals (a clock
that ran fast does not run back); clocks reset when the trial ends.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from lockcompare.errors import InvalidValueError
from lockcompare.scenario.faultkinds.base import (
    CLOCK_CONTROL,
    NODES,
    FaultKind,
    Param,
    Runtime,
    Shape,
    nodes_and_when,
)
from lockcompare.scenario.faultkinds.crash import embedded

if TYPE_CHECKING:
    from lockcompare.infra.cluster import Cluster
    from lockcompare.infra.fakeclock import FakeClock
    from lockcompare.scenario.schedule import FaultStep, TrialStep

#: How often the offset moves: small against any TTL the harness runs (a node's clock is then at
#: most one tick's drift, 0.6 ms at x1.12, from where a smooth drift would have it).
TICK_S = 0.005
#: The rates a step may ask for: a clock at most twice as fast, or half as fast, as the real one.
LOWEST_RATE, HIGHEST_RATE = 0.5, 2.0


@dataclass
class Drift:
    """Move the nodes' wall-clock offsets by ``(rate - 1) x elapsed`` every tick until healed."""

    rate: float
    scope: ClassVar[str] = "nodes"
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    drifted_s: float = 0.0

    def inject(self, cluster: Cluster, nodes: list[int]) -> str:
        embedded(cluster, "clock-drift")
        clocks = [cluster.node_clock(i) for i in nodes]
        self._thread = threading.Thread(target=self._run, args=(clocks,), daemon=True, name="clock-drift")
        self._thread.start()
        return f"wall clock runs x{self.rate:g} (moved every {TICK_S * 1000:g} ms)"

    def _run(self, clocks: list[FakeClock]) -> None:
        last = time.monotonic()
        while not self._stop.wait(TICK_S):
            now = time.monotonic()
            step_s = (self.rate - 1) * (now - last)
            last = now
            for clock in clocks:
                clock.jump(seconds=step_s)
            self.drifted_s += step_s

    def heal(self, cluster: Cluster, nodes: list[int]) -> str:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return f"drift stopped {self.drifted_s * 1000:+.1f} ms off (reset after the trial)"


class ClockDrift(FaultKind):
    name = "clock-drift"
    order = 31
    summary = "the nodes' wall clocks run at rate= x real time (libfaketime offset moved every 5 ms)"
    acts_on = NODES
    params = (Param(name="rate", high=HIGHEST_RATE, help="the clocks' speed: 1.05 is 5 % fast, 0.95 5 % slow"),)
    until_the_end = True
    without_for = "until the end"
    needs = frozenset({CLOCK_CONTROL})
    loses_keys = True
    lasts = True
    explored_by_default = False  # opt-in (explore --faults): a new kind leaves the default search as it was

    def check(self, step: FaultStep) -> None:
        rate = step.number("rate")
        if not LOWEST_RATE <= rate <= HIGHEST_RATE or rate == 1:
            raise InvalidValueError(
                f"rate= is a clock's speed in [{LOWEST_RATE:g}, {HIGHEST_RATE:g}], not 1: got {rate:g}"
            )

    def runtime(self, step: TrialStep, *, ttl_ms: float, lock_key: str) -> Runtime:
        rate = step.number("rate")
        return Runtime(build=lambda _w: Drift(rate=rate), heal_after_ms=self.heal_after_ms(step))

    def draw(self, rng: random.Random, shape: Shape) -> tuple[str, ...]:
        nodes, at = nodes_and_when(rng, shape, start_ok=True)
        return (nodes, *at, f"rate={rng.choice(('0.9', '0.95', '1.05', '1.12', '1.25'))}")


KIND = ClockDrift()
