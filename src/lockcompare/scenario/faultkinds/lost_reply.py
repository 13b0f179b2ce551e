"""``lost-reply``: a worker's write lands at the resource, its reply never comes, the worker retries.

The lesson's closing question: "when a client receives a timeout, it cannot know whether the
request was processed". The worker lands it itself, on its increment (``atomic``,
``idempotent``: runner/sections.py): the resource applies the request, the answer is dropped, and
the client sends the same request again. Without an idempotency key the update is applied twice
(the row's ``double_applications``); with one the resource acknowledges the repeat without applying
it. ``every`` loses the reply of every round's write; ``once`` of the first round's. It takes no
``for=`` (a lost reply has no duration) and, like ``pause``, ``after-acquire=0`` only.

The timeout itself is not waited out: the retry follows at once, so the trial measures what the
retry does, not how long a client waits before it.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from lockcompare.errors import InvalidValueError
from lockcompare.scenario.faultkinds.base import FLAGS, WORKER, FaultKind, Shape

if TYPE_CHECKING:
    from lockcompare.scenario.schedule import FaultStep


class LostReply(FaultKind):
    name = "lost-reply"
    order = 45
    summary = "the reply to the worker's increment is lost after it landed; the worker sends it again (`worker=INDEX`)"
    acts_on = WORKER
    without_for = "–"
    in_worker = True
    loses_replies = True
    explored_by_default = False  # it acts on increments only (atomic, idempotent)
    #: A resent ``SET balance = v`` would count as a second accepted write of one increment (and lost
    #: updates, writes accepted − balance, would count it as lost): the other sections are left out.
    acts_on_checks = ("atomic", "idempotent")

    def check(self, step: FaultStep) -> None:
        if step.at != "after-acquire" or step.after_ms != 0 or step.worker is None or step.worker.index is None:
            raise InvalidValueError("lost-reply lands on the worker's own write: worker=INDEX after-acquire=0")
        if step.follow not in (0, step.worker.index):
            raise InvalidValueError("lost-reply follows the worker's own writes: drop follow=")
        if step.for_ms:
            raise InvalidValueError("lost-reply takes no for= (a lost reply has no duration)")

    def draw(self, rng: random.Random, shape: Shape) -> tuple[str, ...]:
        return (f"worker={rng.randrange(shape.workers)}", "after-acquire=0", rng.choice(FLAGS))


KIND = LostReply()
