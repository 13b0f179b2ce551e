"""Fencing's own guarantee, checked on a history: no write accepted below an earlier accepted token.

A fencing resource promises one thing: once it has accepted a write with token T, it accepts no
write with a lower token. It does not promise that no update is lost when it checks the token on
the write only: a paused holder (token 5) that wakes before its successor (token 6) has written
anything still has its stale read-modify-write accepted — no higher token has reached the
resource yet — and the successor then overwrites it from its own earlier read ("fencing
depth"; on a stalled machine this happened 1 time in 240 at ``--time-scale 0.1``).
Checking the token on every access (``--fence all``) closes that gap: there no update is lost.

"Earlier" means surely earlier: one write returned before the other was sent (``t1 < t0``);
writes whose calls overlap may have taken effect in either order, and are not judged.

>>> w = lambda t0, t1, fence, ok=True: {"kind": "write", "t0": t0, "t1": t1, "fence": fence, "accepted": ok}
>>> accepted_below_earlier_token([w(0, 1, 5), w(2, 3, 6), w(4, 5, 5)])  # token 5 accepted after 6
1
>>> accepted_below_earlier_token([w(0, 1, 5), w(2, 3, 6), w(4, 5, 5, ok=False)])  # rejected: as promised
0
"""

from __future__ import annotations

from collections.abc import Sequence

from lockcompare.analysis.history import Event


def accepted_below_earlier_token(history: Sequence[Event]) -> int:
    """Accepted writes whose token is below that of a write accepted surely before them."""
    accepted = sorted(
        (e for e in history if e["kind"] == "write" and e.get("accepted") and e.get("fence") is not None),
        key=lambda e: e["t0"],
    )
    by_end = sorted(accepted, key=lambda e: e["t1"])
    count, highest, i = 0, None, 0
    for write in accepted:
        while i < len(by_end) and by_end[i]["t1"] < write["t0"]:  # every write that returned before this one was sent
            token = by_end[i]["fence"]
            highest = token if highest is None else max(highest, token)
            i += 1
        if highest is not None and write["fence"] < highest:
            count += 1
    return count
