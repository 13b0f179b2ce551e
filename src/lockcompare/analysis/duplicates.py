"""Double applications: a request the resource applied more than once (the ``lost-reply`` experiment).

An increment carries its request id (``request``: worker and round). When its reply is lost the
client, which cannot know whether the request was processed, sends it again; the resource's answer
says whether it applied the repeat (``accepted``) or acknowledged it as done before (an idempotency
key). Every application of an id after its first is a double application: an update the system
made that nobody asked for. Writes without a request id (every other section) never count.

>>> w = lambda req, ok: {"kind": "write", "request": req, "accepted": ok}
>>> double_applications([w("w0r0", True), w("w0r0", True), w("w0r1", True), w("w0r1", False)])
1
>>> double_applications([{"kind": "write", "accepted": True}, {"kind": "write", "accepted": True}])
0
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from lockcompare.analysis.history import Event


def double_applications(history: Sequence[Event]) -> int:
    """How many writes applied a request id that an earlier write had already applied."""
    applied = Counter(
        str(e["request"]) for e in history if e.get("kind") == "write" and e.get("request") and e.get("accepted")
    )
    return sum(n - 1 for n in applied.values() if n > 1)
