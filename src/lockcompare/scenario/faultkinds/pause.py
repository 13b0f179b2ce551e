"""``pause``: a worker stops at its own pause point for ``for=MS``.

It lands where the worker is (right after its acquire, between its read and its write, after
its lease check, or inside the acquire between its requests and their replies where the backend
offers that point — backends/pause_point.py: ``point=``), so the worker plans it (faults/plan.py's
``worker_pauses``), not the schedule runner, and it takes ``after-acquire=0`` only.
``how=sigstop`` (the default) stops the whole process from outside — every thread, as in a GC pause
or a migrated VM — and the runner records it as its own fault events (faults/freeze.py);
``how=sleep`` sleeps in the worker's own thread (a renewal watchdog keeps running).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from lockcompare.errors import InvalidValueError
from lockcompare.scenario.choices import PauseHow, PausePoint
from lockcompare.scenario.faultkinds.base import FLAGS, WORKER, FaultKind, Param, Shape, ms

if TYPE_CHECKING:
    from lockcompare.scenario.schedule import FaultStep


class Pause(FaultKind):
    name = "pause"
    order = 40
    summary = "the worker stops at its own pause point (`worker=INDEX after-acquire=0`); needs `for=`"
    acts_on = WORKER
    params = (
        Param(name="how", default=PauseHow.SIGSTOP.value, choices=tuple(h.value for h in PauseHow)),
        Param(name="point", default=PausePoint.AFTER_ACQUIRE.value, choices=tuple(p.value for p in PausePoint)),
    )
    without_for = "–"
    excuses_worker = True
    in_worker = True
    pauses_worker = True
    lasts = True

    def check(self, step: FaultStep) -> None:
        if step.at != "after-acquire" or step.after_ms != 0 or step.worker is None or step.worker.index is None:
            raise InvalidValueError("pause lands at the worker's own pause point: worker=INDEX after-acquire=0")
        if step.follow not in (0, step.worker.index):
            raise InvalidValueError("pause follows the paused worker's own acquires: drop follow=")
        if not step.for_ms:
            raise InvalidValueError("pause needs for=MS > 0")

    def draw(self, rng: random.Random, shape: Shape) -> tuple[str, ...]:
        # A pause lands at the worker's own pause point (right after its acquire): it follows that
        # worker, by index, at offset 0.
        how = "sigstop" if rng.random() < 0.75 else "sleep"  # the default pause is stop-the-world
        at_own_point = (f"worker={rng.randrange(shape.workers)}", "after-acquire=0", rng.choice(FLAGS))
        return (*at_own_point, f"for={ms(rng.uniform(0.5, 2.5) * shape.ttl_ms)}", f"how={how}")


KIND = Pause()
