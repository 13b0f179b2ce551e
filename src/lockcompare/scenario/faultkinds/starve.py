"""``starve``: stop and continue one worker's client in a loop, letting it run ``duty`` of every
``period=MS`` (default 100) — a process starved of CPU, whose watchdog thread gets no time to renew.
The stop is the pause's (faults/freeze.py): the client's cgroup frozen and thawed where the machine
offers one (helpers that left the process group too), else SIGSTOP/SIGCONT of its process group.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from lockcompare.errors import InvalidValueError
from lockcompare.scenario.faultkinds.base import (
    WORKER,
    FaultKind,
    Param,
    Runtime,
    Shape,
    Stopper,
    World,
    any_worker,
    ms,
    when,
)

if TYPE_CHECKING:
    from lockcompare.scenario.schedule import FaultStep, TrialStep


@dataclass
class Strobe:
    """``starve``: stop/continue ``worker``'s client (its cgroup, else its process group) in a loop,
    letting it run ``duty`` of each ``period_s`` (helpers of its backend are starved with it)."""

    worker: int | None
    duty: float
    period_s: float
    name: ClassVar[str] = "starve"
    scope: ClassVar[str] = "world"
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    cycles: int = 0

    def inject(self, world: World, nodes: list[int]) -> str:
        assert self.worker is not None and world.freezer is not None
        pid, freezer = world.pids[self.worker], world.freezer
        self._thread = threading.Thread(target=self._run, args=(freezer, pid), daemon=True, name="strobe")
        self._thread.start()
        stopped_ms = (1 - self.duty) * self.period_s * 1000
        return f"worker {self.worker}: stopped {stopped_ms:g} ms of every {self.period_s * 1000:g} ms"

    def _run(self, freezer: Stopper, pid: int) -> None:
        while not self._stop.is_set():
            freezer.hold(pid)
            try:
                self._stop.wait((1 - self.duty) * self.period_s)
            finally:
                freezer.release(pid)
            self.cycles += 1
            self._stop.wait(self.duty * self.period_s)

    def heal(self, world: World, nodes: list[int]) -> str:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return f"worker {self.worker}: running again after {self.cycles} stop(s)"


class Starve(FaultKind):
    name = "starve"
    order = 80
    summary = "the worker may run only `duty` of each `period` (a SIGSTOP/SIGCONT strobe); needs `for=`"
    acts_on = WORKER
    params = (
        Param(name="duty", help="the share of each period the worker runs"),
        Param(name="period", time=True, default="100", help="ms"),
    )
    until_the_end = True
    without_for = "–"
    excuses_worker = True
    freezes_worker = True
    lasts = True

    def check(self, step: FaultStep) -> None:
        if not step.for_ms:
            raise InvalidValueError("starve needs for=MS > 0")
        if not 0 < step.number("duty") < 1:
            duty = step.param("duty")
            raise InvalidValueError(f"duty= is the share of each period the worker runs: in (0, 1), got {duty}")
        if not step.number("period") > 0:
            raise InvalidValueError("period= must be > 0")

    def runtime(self, step: TrialStep, *, ttl_ms: float, lock_key: str) -> Runtime:
        duty, period_s = step.number("duty"), step.time("period") / 1000
        return Runtime(
            build=lambda w: Strobe(worker=w, duty=duty, period_s=period_s),
            heal_after_ms=self.heal_after_ms(step),
        )

    def draw(self, rng: random.Random, shape: Shape) -> tuple[str, ...]:
        duty = rng.choice(("0.05", "0.1", "0.2"))
        tokens = (f"worker={any_worker(rng, shape)}", *when(rng, shape, start_ok=False))
        return (*tokens, f"for={ms(rng.uniform(1.0, 3.0) * shape.ttl_ms)}", f"duty={duty}")


KIND = Starve()
